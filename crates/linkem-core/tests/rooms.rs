//! Every source file of the workspace keeps to the room limits of issue 35: no file
//! under `crates/*/src` over 900 lines, no function over 120 lines, and every module's
//! first doc paragraph at most 10 lines (the reasoning goes onto the items it explains).
//!
//! The scan reads the files as text. Functions are found by the `fn` keyword and
//! measured from that line to the line of the brace that closes their body, with
//! comments, strings and char literals blanked first so that their braces do not
//! count. A module's first paragraph is its leading `//!` lines up to the first
//! empty `//!` line, or the `///` lines above its `mod` declaration up to the first
//! empty one. A failure lists every violation at once.

mod source;

use source::{
    crate_sources, raw_string_hashes, rust_files, skip_block_comment, skip_char, skip_string,
};
use std::fs;
use std::path::Path;

/// The most lines a source file may have.
const FILE_LINES_MAX: usize = 900;
/// The most lines a function may have, from its `fn` line to its closing brace.
const FN_LINES_MAX: usize = 120;
/// The most lines a module doc's first paragraph may have.
const DOC_PARAGRAPH_LINES_MAX: usize = 10;

/// The source with comments, string and char literals replaced by spaces (newlines
/// kept), so that braces and `fn` inside them are not seen.
fn blank(src: &str) -> Vec<u8> {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let wipe = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let ident_char = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied().unwrap_or(0);
        let prev = if i > 0 { b[i - 1] } else { b' ' };
        if c == b'/' && next == b'/' {
            let start = i;
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            wipe(&mut out, start, i);
        } else if c == b'/' && next == b'*' {
            let start = i;
            i = skip_block_comment(b, i);
            wipe(&mut out, start, i);
        } else if (c == b'r' || (c == b'b' && next == b'r'))
            && !ident_char(prev)
            && raw_string_hashes(b, i + usize::from(c == b'b') + 1).is_some()
        {
            let start = i + usize::from(c == b'b') + 1;
            let hashes = raw_string_hashes(b, start).unwrap_or(0);
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let mut j = start + hashes + 1;
            while j < b.len() && !b[j..].starts_with(&close) {
                j += 1;
            }
            let end = j + close.len();
            wipe(&mut out, i, end);
            i = end;
        } else if c == b'"' {
            let end = skip_string(b, i + 1);
            wipe(&mut out, i, end);
            i = end;
        } else if c == b'\'' {
            match skip_char(b, i) {
                Some(end) => {
                    wipe(&mut out, i, end);
                    i = end;
                }
                None => i += 1,
            }
        } else if ident_char(c) {
            while i < b.len() && ident_char(b[i]) {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Each function with a body: its name, first line (1-based) and length in lines.
fn functions(src: &str) -> Vec<(String, usize, usize)> {
    let b = blank(src);
    let line_at = |pos: usize| b[..pos].iter().filter(|&&c| c == b'\n').count() + 1;
    let ident_char = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i + 3 <= b.len() {
        let before_ok = i == 0 || !ident_char(b[i - 1]);
        if !(before_ok && b[i..].starts_with(b"fn") && b[i + 2].is_ascii_whitespace()) {
            i += 1;
            continue;
        }
        let start_line = line_at(i);
        let mut j = i + 2;
        while j < b.len() && b[j].is_ascii_whitespace() {
            j += 1;
        }
        let name_start = j;
        while j < b.len() && ident_char(b[j]) {
            j += 1;
        }
        let name = String::from_utf8_lossy(&b[name_start..j]).into_owned();
        // The body opens at the first `{` outside the signature's brackets; a `;`
        // first means a declaration without a body.
        let mut depth = 0i32;
        let mut open = None;
        while j < b.len() {
            match b[j] {
                b'(' | b'[' | b'<' => depth += 1,
                b')' | b']' => depth -= 1,
                b'>' if b[j - 1] != b'-' && b[j - 1] != b'=' => depth -= 1,
                b'{' if depth <= 0 => {
                    open = Some(j);
                    break;
                }
                b';' if depth <= 0 => break,
                _ => {}
            }
            j += 1;
        }
        let Some(open) = open else {
            i = j;
            continue;
        };
        let mut braces = 0i32;
        let mut k = open;
        while k < b.len() {
            match b[k] {
                b'{' => braces += 1,
                b'}' => {
                    braces -= 1;
                    if braces == 0 {
                        break;
                    }
                }
                _ => {}
            }
            k += 1;
        }
        out.push((name, start_line, line_at(k.min(b.len())) - start_line + 1));
        i += 2;
    }
    out
}

/// The number of lines of the file's first module-doc paragraph (its leading `//!`
/// lines up to the first empty one).
fn first_doc_paragraph_lines(src: &str) -> usize {
    src.lines()
        .map(str::trim_start)
        .skip_while(|l| !l.starts_with("//!"))
        .take_while(|l| l.starts_with("//!") && !l.trim_start_matches("//!").trim().is_empty())
        .count()
}

/// Each inline or out-of-line module documented where it is declared (`/// ...` above
/// `mod name`): the declaration's line (1-based) and its doc's first paragraph's lines.
fn declared_module_docs(src: &str) -> Vec<(usize, usize)> {
    let lines: Vec<&str> = src.lines().map(str::trim_start).collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let item = l
            .strip_prefix("pub(crate) ")
            .or_else(|| l.strip_prefix("pub(super) "))
            .or_else(|| l.strip_prefix("pub "))
            .unwrap_or(l);
        if !item.starts_with("mod ") {
            continue;
        }
        let mut j = i;
        while j > 0 && lines[j - 1].starts_with("#[") {
            j -= 1;
        }
        let doc_start = (0..j)
            .rev()
            .take_while(|&k| lines[k].starts_with("///"))
            .last();
        if let Some(start) = doc_start {
            let first = lines[start..j]
                .iter()
                .take_while(|l| !l.trim_start_matches("///").trim().is_empty())
                .count();
            out.push((i + 1, first));
        }
    }
    out
}

/// Every violation of the limits in the workspace, one line each.
fn violations() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("the crate lies in crates/ of the workspace");
    let mut files = Vec::new();
    for src in crate_sources() {
        rust_files(&src, &mut files);
    }
    let mut out = Vec::new();
    for f in &files {
        let text = fs::read_to_string(f).unwrap_or_else(|e| panic!("read {}: {e}", f.display()));
        let rel = f.strip_prefix(root).unwrap_or(f).display().to_string();
        let lines = text.lines().count();
        if lines > FILE_LINES_MAX {
            out.push(format!("{rel}: {lines} lines (at most {FILE_LINES_MAX})"));
        }
        for (name, line, len) in functions(&text) {
            if len > FN_LINES_MAX {
                out.push(format!(
                    "{rel}:{line}: fn {name} has {len} lines (at most {FN_LINES_MAX})"
                ));
            }
        }
        for (line, doc) in declared_module_docs(&text) {
            if doc > DOC_PARAGRAPH_LINES_MAX {
                out.push(format!(
                    "{rel}:{line}: the module's first doc paragraph has {doc} lines (at most {DOC_PARAGRAPH_LINES_MAX})"
                ));
            }
        }
        let doc = first_doc_paragraph_lines(&text);
        if doc > DOC_PARAGRAPH_LINES_MAX {
            out.push(format!(
                "{rel}: first module-doc paragraph has {doc} lines (at most {DOC_PARAGRAPH_LINES_MAX})"
            ));
        }
    }
    out
}

#[test]
fn every_source_file_function_and_module_doc_keeps_to_its_room() {
    let found = violations();
    assert!(
        found.is_empty(),
        "{} violations of the room limits:\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn the_scan_measures_bodies_and_skips_braces_in_literals() {
    let src = "//! One.\n//! Two.\n//!\n//! Three.\nfn a() {\n    let s = \"{\";\n    let c = '{';\n    // {\n}\nfn b<T: Into<u8>>(x: T) -> u8 where T: Copy {\n    x.into()\n}\ntrait T { fn c(&self); }\n";
    assert_eq!(
        functions(src),
        vec![("a".to_string(), 5, 5), ("b".to_string(), 10, 3)]
    );
    assert_eq!(first_doc_paragraph_lines(src), 2);
    let declared = "/// One\n/// two.\n///\n/// Three.\n#[cfg(test)]\npub mod a;\nmod b;\n";
    assert_eq!(declared_module_docs(declared), vec![(6, 2)]);
}
