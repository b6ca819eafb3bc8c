//! Reading the workspace's sources as text, shared by the tests that check every crate
//! (`module_cycles`, `rooms`): where they are, and how a literal ends.
// Each test binary includes this module and uses part of it.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

/// The `src/` folders of the workspace's crates (`crates/*/src`).
pub fn crate_sources() -> Vec<PathBuf> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate lies in crates/");
    let mut out: Vec<PathBuf> = fs::read_dir(crates)
        .unwrap_or_else(|e| panic!("read {}: {e}", crates.display()))
        .map(|e| e.expect("directory entry").path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    out.sort();
    out
}

/// Every `.rs` file below `dir`, sorted.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The index after a string body that starts at `i` (after its opening quote).
pub fn skip_string(b: &[u8], mut i: usize) -> usize {
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// `r#"`, `r"`: the number of hashes when `b[i..]` opens a raw string.
pub fn raw_string_hashes(b: &[u8], i: usize) -> Option<usize> {
    let hashes = b[i.min(b.len())..]
        .iter()
        .take_while(|&&c| c == b'#')
        .count();
    (b.get(i + hashes) == Some(&b'"')).then_some(hashes)
}

/// The index after a char literal opening at `i` (`'`), or `None` for a lifetime.
pub fn skip_char(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i + 1) == Some(&b'\\') {
        let mut j = i + 2;
        while j < b.len() && b[j] != b'\'' {
            j += 1;
        }
        return Some(j + 1);
    }
    // One UTF-8 character, then a closing quote.
    let s = std::str::from_utf8(&b[i + 1..]).ok()?;
    let ch = s.chars().next()?;
    (b.get(i + 1 + ch.len_utf8()) == Some(&b'\'')).then_some(i + 2 + ch.len_utf8())
}

/// The index after a block comment opening at `i` (`/*`), nested ones included.
pub fn skip_block_comment(b: &[u8], mut i: usize) -> usize {
    let mut depth = 0;
    while i < b.len() {
        if b[i..].starts_with(b"/*") {
            depth += 1;
            i += 2;
        } else if b[i..].starts_with(b"*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                break;
            }
        } else {
            i += 1;
        }
    }
    i
}
