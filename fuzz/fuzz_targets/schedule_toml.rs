//! `[[schedule]]` rows of a TOML link config: any text gives words and the
//! inline schedule's text, or an error, never a panic; the words then parse
//! or fail cleanly with the inline text served by name, as the binary does.

#![no_main]

use libfuzzer_sys::fuzz_target;
use linkem_core::{Link, LinkSpec, PacketMeta, TomlWords};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(words) = TomlWords::parse(&text) else {
        return;
    };
    let mut files = |name: &str| match words.file(name) {
        Some(t) => Ok(t.to_string()),
        None => Err(format!("'{name}': no such file")),
    };
    let both: Vec<&str> = words.both.iter().map(String::as_str).collect();
    if let Ok(spec) = LinkSpec::parse_words(&both, &mut files) {
        if let Some(s) = &spec.link.schedule {
            assert!(s.changes.windows(2).all(|w| w[0].0 <= w[1].0));
        }
        let mut link = Link::new(spec.link, 1, 0);
        for i in 0..16u64 {
            let _ = link.on_arrival(i * 7_000_001, PacketMeta { len_bytes: 100 });
        }
    }
});
