//! No import circles between the files of any crate of the workspace (every
//! `crates/*/src`; issue 18: "rooms by concern ... no import cycle inside a
//! crate").
//!
//! The test reads each crate's `src/` as text: every `use` tree and every path in code
//! (`crate::a::B`, `super::B`, `child::B`, `alias::B` for a module brought in
//! by `use`) becomes an edge from the file that names it to the file that
//! defines the module named by the path's longest module prefix. Comments and
//! literals are skipped. An edge from a file to one of its own ancestors
//! (`use super::Pkt` in `sched/fifo.rs`) is not counted: a child sits inside
//! its parent and sees its items, and the parent re-exporting its children
//! (`pub use codel::CoDel` in `aqm/mod.rs`) is the facade every `mod.rs`
//! has. Every other edge is an import, and the file graph they form must have
//! no strongly connected component larger than one file. An inline test module
//! is part of its file: a test that reaches into a sibling file is an import.
//!
//! The facade rule means a child using what its parent defines, while the
//! parent calls the child, is not seen (`sched/fifo.rs` uses `super::Queues`,
//! defined in `sched/mod.rs`, which dispatches to `fifo`); counting those would
//! flag every scheduler of the core, so that shape is kept apart by review
//! (`bench/measure.rs` holds what `bench/mod.rs` and `bench/scenarios.rs` share).
//!
//! Run with `--nocapture` to see the graph's size and each file's imports.

mod source;

use source::{
    crate_sources, raw_string_hashes, rust_files, skip_block_comment, skip_char, skip_string,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// A module path from the crate root (`["sched", "words"]`); the root is `[]`.
type ModPath = Vec<String>;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Punct(char),
}

/// Splits Rust source into identifiers, `::` and single punctuation; comments,
/// strings, char literals, lifetimes and numbers are dropped.
fn lex(src: &str) -> Vec<Tok> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let ident_start = |c: u8| c.is_ascii_alphabetic() || c == b'_';
    let ident_char = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied().unwrap_or(0);
        if c == b'/' && next == b'/' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && next == b'*' {
            i = skip_block_comment(b, i);
        } else if c == b'"' {
            i = skip_string(b, i + 1);
        } else if (c == b'r' || (c == b'b' && next == b'r'))
            && raw_string_hashes(b, i + usize::from(c == b'b') + 1).is_some()
        {
            let start = i + usize::from(c == b'b') + 1;
            let hashes = raw_string_hashes(b, start).unwrap_or(0);
            let mut j = start + hashes + 1;
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            while j < b.len() && !b[j..].starts_with(&close) {
                j += 1;
            }
            i = j + close.len();
        } else if c == b'b' && next == b'"' {
            i = skip_string(b, i + 2);
        } else if c == b'b' && next == b'\'' {
            i = skip_char(b, i + 1).unwrap_or(i + 2);
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            i = skip_char(b, i).unwrap_or_else(|| {
                let mut j = i + 1;
                while j < b.len() && ident_char(b[j]) {
                    j += 1;
                }
                j
            });
        } else if c.is_ascii_digit() {
            while i < b.len()
                && (ident_char(b[i])
                    || b[i] == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
            {
                i += 1;
            }
        } else if ident_start(c) {
            let start = i;
            while i < b.len() && ident_char(b[i]) {
                i += 1;
            }
            let word = &src[start..i];
            // A raw identifier: r#type.
            if word == "r" && b.get(i) == Some(&b'#') {
                i += 1;
                continue;
            }
            out.push(Tok::Ident(word.to_string()));
        } else if c == b':' && next == b':' {
            out.push(Tok::PathSep);
            i += 2;
        } else {
            if !c.is_ascii_whitespace() {
                out.push(Tok::Punct(c as char));
            }
            i += 1;
        }
    }
    out
}

/// Expands a `use` tree starting at `toks[*i]` into full paths; `*` and
/// `self` stay as segments, `as` renames are returned alongside.
fn use_tree(
    toks: &[Tok],
    i: &mut usize,
    prefix: &[String],
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    let mut path = prefix.to_vec();
    while *i < toks.len() {
        match &toks[*i] {
            Tok::Ident(w) if w == "as" => {
                *i += 1;
                if let Some(Tok::Ident(alias)) = toks.get(*i) {
                    out.push((path.clone(), Some(alias.clone())));
                    *i += 1;
                }
                return;
            }
            Tok::Ident(w) => {
                path.push(w.clone());
                *i += 1;
            }
            Tok::PathSep => *i += 1,
            Tok::Punct('*') => {
                path.push("*".into());
                *i += 1;
            }
            Tok::Punct('{') => {
                *i += 1;
                loop {
                    match toks.get(*i) {
                        Some(Tok::Punct('}')) => {
                            *i += 1;
                            return;
                        }
                        Some(Tok::Punct(',')) => *i += 1,
                        None => return,
                        _ => use_tree(toks, i, &path, out),
                    }
                }
            }
            _ => break,
        }
    }
    out.push((path, None));
}

/// One file of the crate.
struct File {
    rel: String,
    module: ModPath,
    toks: Vec<Tok>,
}

fn module_of(rel: &Path) -> ModPath {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

/// Edges between files: (from, to) -> the names used.
type Graph = BTreeMap<(String, String), BTreeSet<String>>;

fn import_graph(src: &Path) -> Graph {
    let mut paths = Vec::new();
    rust_files(src, &mut paths);
    let files: Vec<File> = paths
        .iter()
        .map(|p| {
            let rel = p.strip_prefix(src).expect("under src");
            let text =
                fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
            File {
                rel: rel.to_string_lossy().into_owned(),
                module: module_of(rel),
                toks: lex(&text),
            }
        })
        .collect();
    let file_of: BTreeMap<ModPath, String> = files
        .iter()
        .map(|f| (f.module.clone(), f.rel.clone()))
        .collect();

    // Inline modules (`mod tests { .. }`) count as modules of their file.
    let mut modules: BTreeSet<ModPath> = file_of.keys().cloned().collect();
    for f in &files {
        for w in f.toks.windows(3) {
            if let [Tok::Ident(m), Tok::Ident(name), Tok::Punct('{')] = w {
                if m == "mod" {
                    let mut p = f.module.clone();
                    p.push(name.clone());
                    modules.insert(p);
                }
            }
        }
    }

    let mut graph = Graph::new();
    for f in &files {
        let mut aliases: BTreeMap<String, ModPath> = BTreeMap::new();
        // Stack of inline modules: (name, brace depth inside it).
        let mut inline: Vec<(String, usize)> = Vec::new();
        let mut depth = 0usize;
        let mut i = 0;
        let toks = &f.toks;
        while i < toks.len() {
            let mut cur = f.module.clone();
            cur.extend(inline.iter().map(|(n, _)| n.clone()));
            match &toks[i] {
                Tok::Punct('{') => {
                    depth += 1;
                    i += 1;
                }
                Tok::Punct('}') => {
                    if inline.last().is_some_and(|&(_, d)| d == depth) {
                        inline.pop();
                    }
                    depth = depth.saturating_sub(1);
                    i += 1;
                }
                Tok::Ident(m) if m == "mod" => {
                    if let (Some(Tok::Ident(name)), Some(Tok::Punct('{'))) =
                        (toks.get(i + 1), toks.get(i + 2))
                    {
                        depth += 1;
                        inline.push((name.clone(), depth));
                        i += 3;
                    } else {
                        i += 1;
                    }
                }
                Tok::Ident(u) if u == "use" => {
                    i += 1;
                    let mut trees = Vec::new();
                    use_tree(toks, &mut i, &[], &mut trees);
                    for (path, alias) in trees {
                        let Some(abs) = resolve(&path, &cur, &modules, &aliases) else {
                            continue;
                        };
                        add_edge(&mut graph, f, &abs, &file_of);
                        let (abs, name) = match abs.last().map(String::as_str) {
                            Some("self") => (
                                abs[..abs.len() - 1].to_vec(),
                                abs.get(abs.len().wrapping_sub(2)).cloned(),
                            ),
                            _ => (abs.clone(), abs.last().cloned()),
                        };
                        if modules.contains(&abs) {
                            if let Some(name) = alias.or(name) {
                                aliases.insert(name, abs);
                            }
                        }
                    }
                }
                Tok::Ident(first) => {
                    // A path in code: ident (:: ident)+, not preceded by `::`.
                    let after_sep = i > 0 && toks[i - 1] == Tok::PathSep;
                    let mut path = vec![first.clone()];
                    let mut j = i + 1;
                    while toks.get(j) == Some(&Tok::PathSep) {
                        match toks.get(j + 1) {
                            Some(Tok::Ident(w)) => path.push(w.clone()),
                            _ => break,
                        }
                        j += 2;
                    }
                    if !after_sep && path.len() > 1 {
                        if let Some(abs) = resolve(&path, &cur, &modules, &aliases) {
                            add_edge(&mut graph, f, &abs, &file_of);
                        }
                    }
                    i = j.max(i + 1);
                }
                _ => i += 1,
            }
        }
    }
    graph
}

/// The absolute module path a path names, or `None` for other crates and
/// local items.
fn resolve(
    path: &[String],
    cur: &ModPath,
    modules: &BTreeSet<ModPath>,
    aliases: &BTreeMap<String, ModPath>,
) -> Option<ModPath> {
    let first = path.first()?;
    let mut abs: ModPath;
    let mut rest = &path[1..];
    match first.as_str() {
        "crate" => abs = Vec::new(),
        "self" => abs = cur.clone(),
        "super" => {
            abs = cur.clone();
            abs.pop();
            while rest.first().is_some_and(|s| s == "super") {
                abs.pop();
                rest = &rest[1..];
            }
        }
        name => {
            let mut child = cur.clone();
            child.push(name.to_string());
            if modules.contains(&child) {
                abs = child;
            } else if let Some(m) = aliases.get(name) {
                abs = m.clone();
            } else {
                return None;
            }
        }
    }
    abs.extend(rest.iter().cloned());
    Some(abs)
}

/// Records `f -> the file holding the longest module prefix of abs`, with the
/// name that follows that prefix.
fn add_edge(graph: &mut Graph, f: &File, abs: &ModPath, file_of: &BTreeMap<ModPath, String>) {
    let Some(k) = (0..=abs.len())
        .rev()
        .find(|&k| file_of.contains_key(&abs[..k]))
    else {
        return;
    };
    let target = &abs[..k];
    // Same file, or the file's own ancestor (the child sits inside it).
    if f.module.starts_with(target) {
        return;
    }
    let name = abs.get(k).cloned().unwrap_or_else(|| "self".into());
    graph
        .entry((f.rel.clone(), file_of[target].clone()))
        .or_default()
        .insert(name);
}

/// Strongly connected components with more than one file (Tarjan).
fn circles(graph: &Graph) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = graph.keys().flat_map(|(a, b)| [a, b]).collect();
    let nodes: Vec<&String> = nodes.into_iter().collect();
    let index_of: BTreeMap<&String, usize> =
        nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let mut succ = vec![Vec::new(); nodes.len()];
    for (a, b) in graph.keys() {
        succ[index_of[a]].push(index_of[b]);
    }
    struct T {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(v: usize, succ: &[Vec<usize>], t: &mut T) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on_stack[v] = true;
        for &w in &succ[v] {
            match t.index[w] {
                None => {
                    visit(w, succ, t);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(iw) if t.on_stack[w] => t.low[v] = t.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on_stack[w] = false;
                comp.push(w);
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                t.out.push(comp);
            }
        }
    }
    let n = nodes.len();
    let mut t = T {
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            visit(v, &succ, &mut t);
        }
    }
    t.out
        .into_iter()
        .map(|c| {
            let mut c: Vec<String> = c.into_iter().map(|i| nodes[i].clone()).collect();
            c.sort();
            c
        })
        .collect()
}

#[test]
fn no_file_of_any_crate_imports_itself_through_others() {
    let sources = crate_sources();
    let names: Vec<String> = sources
        .iter()
        .map(|s| {
            s.parent()
                .unwrap()
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    for want in ["linkem", "linkem-core", "linkem-runtime"] {
        assert!(
            names.iter().any(|n| n == want),
            "{want} not found among {names:?}"
        );
    }
    let mut report = String::new();
    for src in &sources {
        let graph = import_graph(src);
        println!(
            "{} import edges between files of {}",
            graph.len(),
            src.display()
        );
        for ((a, b), names) in &graph {
            println!(
                "  {a} -> {b}: {}",
                names.iter().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        for c in &circles(&graph) {
            report.push_str(&format!(
                "circle of {} files in {}:\n",
                c.len(),
                src.display()
            ));
            for ((a, b), names) in &graph {
                if c.contains(a) && c.contains(b) {
                    let names: Vec<_> = names.iter().cloned().collect();
                    report.push_str(&format!("  {a} -> {b}: {}\n", names.join(", ")));
                }
            }
        }
    }
    assert!(report.is_empty(), "import circles:\n{report}");
}

#[test]
fn the_reader_sees_use_trees_code_paths_and_skips_literals() {
    let toks = lex("use super::{a::B, c as d}; // crate::x::Y\nlet s = \"crate::z\"; let c = '{'; crate::e::F;");
    let mut i = 1;
    let mut trees = Vec::new();
    use_tree(&toks, &mut i, &[], &mut trees);
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        trees,
        vec![
            (s(&["super", "a", "B"]), None),
            (s(&["super", "c"]), Some("d".into()))
        ]
    );
    let idents: Vec<_> = toks
        .iter()
        .filter_map(|t| match t {
            Tok::Ident(w) => Some(w.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        !idents.contains(&"x") && !idents.contains(&"z"),
        "{idents:?}"
    );
    assert!(idents.contains(&"e"), "{idents:?}");
    assert!(
        !toks.contains(&Tok::Punct('{'))
            || toks.iter().filter(|t| **t == Tok::Punct('{')).count() == 1
    );
}
