//! mahimahi trace files: parsing must refuse a bad file with an error naming the
//! file and a line within it, never a panic; a trace that parses gives
//! opportunities that never go backwards, and a link running it never releases
//! a packet before its arrival.

#![no_main]

use libfuzzer_sys::fuzz_target;
use linkem_core::trace::Trace;
use linkem_core::{Link, LinkSpec, PacketMeta};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let once = data.first().is_some_and(|b| b & 1 == 1);
    match Trace::parse("f", &text, once) {
        Ok(t) => {
            let mut last = 0;
            for k in 0..(2 * t.len() as u64).min(4096) {
                let Some(ns) = t.opportunity_ns(k) else { break };
                assert!(ns >= last);
                last = ns;
            }
            let word = if once { "trace-once" } else { "trace" };
            let mut files = |_: &str| Ok(text.to_string());
            let spec = LinkSpec::parse_words(&[word, "f"], &mut files).unwrap();
            let mut link = Link::new(spec.link, 1, 0);
            let mut now = 0u64;
            for (i, b) in data.iter().take(64).enumerate() {
                now += u64::from(*b) * 97_001;
                let v = link.on_arrival(now, PacketMeta { len_bytes: 40 + 37 * i as u32 });
                assert!(v.release_ns >= now || v.fate != linkem_core::Fate::Delivered);
            }
        }
        Err(e) => {
            assert!(e.starts_with("trace"), "{e}");
            if let Some(rest) = e.split(" line ").nth(1) {
                let n: usize = rest.split(':').next().unwrap().parse().unwrap();
                assert!(n >= 1 && n <= text.lines().count().max(1), "{e}");
            }
        }
    }
});
