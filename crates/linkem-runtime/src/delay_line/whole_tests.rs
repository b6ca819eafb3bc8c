use super::*;
use linkem_core::wire::{CsumPartial, Gso, GsoKind};

#[test]
fn a_whole_record_gives_back_its_frame_offload_and_wire_frames_across_wraps() {
    let (mut p, mut c) = delay_line(1).unwrap();
    let whole = Whole {
        offload: Offload {
            csum: Some(CsumPartial {
                start: 34,
                offset: 16,
            }),
            gso: Some(Gso {
                kind: GsoKind::TcpV6,
                size: 1448,
            }),
        },
        wire_frames: 45,
    };
    // 64 KiB super-frames between plain frames, past several wraps of a
    // 2 MiB line: the record never splits and its frame is what went in.
    let big: Vec<u8> = (0..65_535u32).map(|i| (i * 7) as u8).collect();
    for i in 0..200u64 {
        assert!(p.push(2 * i, b"wire", false), "plain record {i}");
        assert!(p.push_whole(2 * i + 1, 9, whole, &big), "whole record {i}");
        let h = c.peek().unwrap();
        assert_eq!(
            (h.release_ns, h.frame, h.whole),
            (2 * i, &b"wire"[..], None)
        );
        c.pop();
        let h = c.peek().unwrap();
        assert_eq!((h.release_ns, h.group, h.copy), (2 * i + 1, 9, false));
        assert_eq!(h.whole, Some(whole));
        assert!(h.frame == &big[..], "record {i}: the frame without prefix");
        c.pop();
    }
    assert!(c.peek().is_none());
    assert_eq!(
        record_bytes(WHOLE_PREFIX_BYTES + 65_535),
        65_536 + 64,
        "a whole record of 64 KiB takes one cache line more"
    );
}
