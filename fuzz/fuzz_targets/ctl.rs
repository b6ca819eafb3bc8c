//! Control protocol lines as clients send them: parsing must refuse bad lines
//! with an error naming a word inside the line, never panic; a line that
//! parses must parse the same when its words are re-joined with single spaces,
//! and the typed change a rule request makes must render as a line that parses
//! back to the same change.

#![no_main]

use libfuzzer_sys::fuzz_target;
use linkem_core::config::no_files;
use linkem_ctl::{parse_line, Request};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for line in text.split('\n') {
        match parse_line(line, &mut no_files) {
            Ok(parsed) => {
                let joined = line.split_whitespace().collect::<Vec<_>>().join(" ");
                let again = parse_line(&joined, &mut no_files).expect("re-joined words parse");
                assert_eq!(parsed, again);
                if let Request::Rule(r) = &parsed.request {
                    if let Some(change) = r.change() {
                        let shown = change.to_string();
                        let back = parse_line(&shown, &mut no_files).expect("a change's line parses");
                        let Request::Rule(back) = back.request else {
                            panic!("{shown}: not a rule request")
                        };
                        assert_eq!(back.change(), Some(change));
                    }
                }
            }
            Err(e) => {
                if let Some(p) = e.position {
                    assert!(p >= 1 && p <= line.split_whitespace().count().max(1));
                }
                let _ = e.reply(Some("x")).to_string();
            }
        }
    }
});
