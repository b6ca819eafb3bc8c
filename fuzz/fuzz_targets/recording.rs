//! A recording's metadata and change list as replay reads them: any bytes must give a
//! description and changes or an error naming the file (and, for changes.jsonl, a line
//! that exists), never a panic; what parses must write back to text that parses to the
//! same thing.
//!
//! Input: recording.json's text, then a NUL byte and changes.jsonl's text.

#![no_main]

use libfuzzer_sys::fuzz_target;
use linkem_io::recording::wire::{parse_changes, parse_meta, ChangeLine};
use linkem_io::recording::RecordingError;

fuzz_target!(|data: &[u8]| {
    let (meta, changes) = match data.iter().position(|&b| b == 0) {
        Some(nul) => (&data[..nul], &data[nul + 1..]),
        None => (data, &[][..]),
    };
    let meta = String::from_utf8_lossy(meta);
    let changes = String::from_utf8_lossy(changes);
    match parse_meta("recording.json", &meta) {
        Ok(m) => {
            let again = parse_meta("recording.json", &m.to_text()).expect("written back");
            assert_eq!(again, m);
        }
        Err(e) => assert!(e.to_string().starts_with("recording.json: "), "{e}"),
    }
    match parse_changes("changes.jsonl", &changes) {
        Ok(list) => {
            let mut frames = 0;
            for c in &list {
                assert!(c.change.frames >= frames, "frames out of order");
                frames = c.change.frames;
                assert!(c.change.lines.is_some() != c.change.rules.is_some());
                let again: ChangeLine = reparse(&c.change);
                assert_eq!(again, c.change);
            }
        }
        Err(RecordingError::Invalid { file, line, .. }) => {
            assert_eq!(file, "changes.jsonl");
            let line = line.expect("a changes.jsonl error names its line");
            assert!(
                line >= 1 && line <= changes.split('\n').count(),
                "line {line}"
            );
        }
        Err(e) => panic!("unexpected kind of error: {e}"),
    }
});

/// A change written back as a line and parsed again.
fn reparse(c: &ChangeLine) -> ChangeLine {
    linkem_io::recording::wire::parse_change_line("changes.jsonl", 1, &c.to_text())
        .expect("a parsed change writes back as a valid line")
}
