//! `claim`/`release` lines as a user sends them: parsing never panics, an
//! error names a word inside the line, a claim's ports run low to high, and
//! each direction's words are a `pipe N config` line's words that the rule
//! file's parser takes (what the emulator will parse again for the pipe it
//! gives the claim).

#![no_main]

use libfuzzer_sys::fuzz_target;
use linkem_core::config::no_files;
use linkem_core::rules::{parse_object, ObjectKind};
use linkem_ctl::{parse_line, ClaimAction, Request};

const HEADS: [&str; 4] = ["claim udp 5678 ", "claim tcp 1-65535 ", "release ", "claim "];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    for body in text.split('\n') {
        let line = format!("{}{body}", HEADS[pick as usize % HEADS.len()]);
        match parse_line(&line, &mut no_files) {
            Ok(parsed) => {
                let joined = line.split_whitespace().collect::<Vec<_>>().join(" ");
                let again = parse_line(&joined, &mut no_files).expect("re-joined words parse");
                assert_eq!(parsed, again);
                if let Request::Claim(c) = &parsed.request {
                    assert!(c.ports.0 >= 1 && c.ports.0 <= c.ports.1);
                    if let ClaimAction::Set { words } = &c.action {
                        for w in words.iter().flatten() {
                            let w: Vec<&str> = w.iter().map(String::as_str).collect();
                            parse_object(ObjectKind::Pipe, 40000, &w, 1, &mut no_files)
                                .expect("a claim's words make a pipe");
                        }
                    }
                }
            }
            Err(e) => {
                if let Some(p) = e.position {
                    assert!(p >= 1 && p <= line.split_whitespace().count().max(1));
                }
            }
        }
    }
});
