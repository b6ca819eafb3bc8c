//! Link words as users type them: parsing must refuse bad words with an error, never a
//! panic, and a link that parses must run packets and print words that parse again.
//!
//! Input: text, optionally followed by a NUL byte and bytes that drive the packets
//! (without the NUL, the text's own bytes drive them).

#![no_main]

use libfuzzer_sys::fuzz_target;
use linkem_core::config::no_files;
use linkem_core::{Dialect, Link, LinkSpec, PacketMeta};

/// Enough packets to fill small queues and cross several loss-model states.
const MAX_PACKETS: usize = 256;

fuzz_target!(|data: &[u8]| {
    let (text, drive) = match data.iter().position(|&b| b == 0) {
        Some(nul) => (&data[..nul], &data[nul + 1..]),
        None => (data, data),
    };
    let text = String::from_utf8_lossy(text);
    let words: Vec<&str> = text.split_whitespace().collect();
    // The Dummynet dialect reads the same text: it must never panic either, and
    // a link it accepts must print linkem words that parse again.
    let dummynet = LinkSpec::parse_dialect(&words, Dialect::Dummynet);
    let Ok(spec) = LinkSpec::parse_words(&words, &mut no_files).or(dummynet) else {
        return;
    };

    let mut link = Link::new(spec.link.clone(), spec.seed.unwrap_or(1), 0);
    let mut t: u64 = 0;
    for chunk in drive.chunks_exact(4).take(MAX_PACKETS) {
        // Gaps from 0 to ~33 ms, or to ~33 s when the top bit asks for a long idle.
        let gap = u64::from(u16::from_le_bytes([chunk[0], chunk[1] & 0x7f]));
        t += if chunk[1] & 0x80 != 0 {
            gap * 1_000_000
        } else {
            gap * 1_000
        };
        let len_bytes = u32::from(u16::from_le_bytes([chunk[2], chunk[3]]));
        let _ = link.on_arrival(t, PacketMeta { len_bytes });
    }

    let shown = spec.link.to_string();
    let again = match LinkSpec::parse(&shown) {
        Ok(again) => again,
        Err(e) => panic!("the Display form of {words:?} does not parse: {shown:?}: {e}"),
    };
    // Canonical words are a fixed point: printing what they parse to gives them back.
    let shown_again = again.link.to_string();
    assert_eq!(
        shown, shown_again,
        "the Display form of {words:?} is not canonical"
    );
});
