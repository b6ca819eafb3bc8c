//! Dummynet profile files: parsing must refuse bad lines with an error naming the
//! line, never a panic; a profile that parses draws only table entries or a loss.

#![no_main]

use libfuzzer_sys::fuzz_target;
use linkem_core::pipe::Profile;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match Profile::parse(&text) {
        Ok(p) => {
            assert!(p.table_ns.len() >= 2 && p.table_ns.len() <= linkem_core::pipe::profile::MAX_SAMPLES);
            for r in [0u64, 1, u64::MAX / 3, u64::MAX / 2, u64::MAX] {
                if let Some(ns) = p.draw(r) {
                    assert!(p.table_ns.contains(&ns));
                }
            }
        }
        Err(e) => assert!(e.line <= text.lines().count().max(1), "{e}"),
    }
});
