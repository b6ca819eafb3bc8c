//! Capture files: any bytes must give packets or an error that can be displayed.

#![no_main]

use libfuzzer_sys::fuzz_target;
use linkem_io::capture::read_capture_bytes;

fuzz_target!(|data: &[u8]| {
    match read_capture_bytes("fuzz", data) {
        Ok((_, packets)) => {
            for p in &packets {
                assert!(
                    p.data.len() <= p.orig_len as usize,
                    "caplen > orig_len slipped through"
                );
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
