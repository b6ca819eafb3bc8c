//! docs/architecture.md is the map of the tree: every path it names exists, and
//! every crate and every folder of a crate's `src/` is named there, so a room
//! added, moved or removed without its row fails here.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the workspace root above crates/linkem")
        .to_path_buf()
}

fn architecture() -> String {
    let path = repo().join("docs/architecture.md");
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every code span of `text` that names a path of the workspace (`crates/...`).
fn named_paths(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| span.starts_with("crates/"))
        .map(String::from)
        .collect()
}

/// The workspace's crates (`crates/NAME/`) and the folders of their `src/`
/// (`crates/NAME/src/DIR/`), as the document spells them.
fn rooms() -> Vec<String> {
    let mut out = Vec::new();
    let crates = repo().join("crates");
    let mut names: Vec<_> = fs::read_dir(&crates)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    names.sort();
    for c in names {
        let name = c.file_name().unwrap().to_string_lossy().to_string();
        out.push(format!("crates/{name}/"));
        let Ok(entries) = fs::read_dir(c.join("src")) else {
            continue;
        };
        let mut dirs: Vec<_> = entries
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        for d in dirs {
            let dir = d.file_name().unwrap().to_string_lossy().to_string();
            out.push(format!("crates/{name}/src/{dir}/"));
        }
    }
    out
}

#[test]
fn every_path_the_architecture_names_exists() {
    let text = architecture();
    let named = named_paths(&text);
    assert!(
        named.len() >= 20,
        "only {} paths named: {named:?}",
        named.len()
    );
    let missing: Vec<&String> = named
        .iter()
        .filter(|p| {
            let path = repo().join(p.trim_end_matches('/'));
            if p.ends_with('/') {
                !path.is_dir()
            } else {
                !path.exists()
            }
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md names paths the tree lacks: {missing:?}"
    );
}

#[test]
fn every_crate_and_folder_of_the_tree_has_its_row() {
    let text = architecture();
    let named = named_paths(&text);
    let unnamed: Vec<String> = rooms()
        .into_iter()
        .filter(|room| !named.contains(room))
        .collect();
    assert!(
        unnamed.is_empty(),
        "docs/architecture.md names no row for: {unnamed:?} (name each as `crates/NAME/src/DIR/`)"
    );
}

#[test]
fn a_new_front_end_port_and_sink_each_have_one_folder() {
    let text = architecture();
    for what in ["A new front end", "A new port", "A new sink"] {
        let line = text
            .lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("docs/architecture.md does not say where '{what}' goes"));
        let folders: Vec<String> = named_paths(line)
            .into_iter()
            .filter(|p| p.ends_with('/'))
            .collect();
        assert!(!folders.is_empty(), "'{what}' names no folder: {line}");
    }
}
