//! Link files: any text must give words or an error, and the words parse or fail cleanly.

#![no_main]

use libfuzzer_sys::fuzz_target;
use linkem_core::config::no_files;
use linkem_core::{LinkSpec, TomlWords};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(words) = TomlWords::parse(&text) else {
        return;
    };
    let both: Vec<&str> = words.both.iter().map(String::as_str).collect();
    let _ = LinkSpec::parse_words(&both, &mut no_files);
    // Each direction is the shared words followed by its own, as the binary builds them.
    for own in [&words.a_to_b, &words.b_to_a] {
        let all: Vec<&str> = both
            .iter()
            .copied()
            .chain(own.iter().map(String::as_str))
            .collect();
        let _ = LinkSpec::parse_words(&all, &mut no_files);
    }
});
