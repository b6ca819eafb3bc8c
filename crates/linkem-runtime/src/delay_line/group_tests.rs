use super::*;

#[test]
fn records_carry_their_group_and_copy_flag() {
    let (mut p, mut c) = delay_line(1 << 16).unwrap();
    assert!(p.push(5, b"plain", false));
    assert!(p.push_with_group(6, 3, true, MAX_GROUP, |s| s.copy_from_slice(b"abc")));
    assert!(p.push_with_group(7, 1, false, 42, |s| s[0] = 9));
    assert!(p.push_checksummed(8, 2, 41, |s| s.copy_from_slice(b"ok")));
    let mut got = Vec::new();
    while let Some(h) = c.peek() {
        got.push((
            h.release_ns,
            h.frame.to_vec(),
            h.copy,
            h.group,
            h.checksummed,
        ));
        c.pop();
    }
    assert_eq!(
        got,
        vec![
            (5, b"plain".to_vec(), false, 0, false),
            (6, b"abc".to_vec(), true, MAX_GROUP, false),
            (7, vec![9], false, 42, false),
            (8, b"ok".to_vec(), false, 41, true),
        ]
    );
}
