//! Schedule files: parsing must refuse a bad file with an error naming the file
//! (and a line within it), never a panic or a hang; a schedule that parses
//! runs packets, its changes applied at their instants, and prints back.

#![no_main]

use libfuzzer_sys::fuzz_target;
use linkem_core::{Link, LinkSpec, PacketMeta};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut files = |name: &str| match name {
        "f" => Ok(text.to_string()),
        _ => Err(format!("'{name}': no such file")),
    };
    match LinkSpec::parse_words(&["rate", "10mbit", "schedule", "f"], &mut files) {
        Ok(spec) => {
            let s = spec.link.schedule.clone().expect("a schedule");
            assert!(!s.changes.is_empty());
            assert!(s.changes.windows(2).all(|w| w[0].0 <= w[1].0));
            assert!(spec.link.to_string().contains("schedule f"));
            let mut link = Link::new(spec.link, 1, 0);
            let mut now = 0u64;
            for (i, b) in data.iter().take(64).enumerate() {
                now += u64::from(*b) * 3_900_017;
                let _ = link.on_arrival(now, PacketMeta { len_bytes: 60 + 23 * i as u32 });
            }
        }
        // The error names the file as the user gave it; the rest of the message
        // may be hidden as the file's text (a file can hold linkem's own words).
        Err(e) => assert!(e.to_string().contains("'f'"), "{e}"),
    }
});
