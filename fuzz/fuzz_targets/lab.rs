//! Lab files: any text must give a lab or an error, never a panic; a lab must
//! plan (or be refused) on every machine it names. No file is read.

#![no_main]

use libfuzzer_sys::fuzz_target;
use linkem::lab::{plan, Lab};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(lab) = Lab::parse_without_files(&text, "fuzz.clab.yml") else {
        return;
    };
    let _ = plan(&lab, None);
    for m in &lab.machines {
        let _ = plan(&lab, Some(&m.name));
    }
});
