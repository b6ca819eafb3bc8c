//! The link words are listed once (linkem_core::config::WORDS): `--help` and
//! README.md must show exactly the list generated from that table.

use linkem_core::config::link_words_help;
use std::process::Command;

#[test]
fn readme_lists_the_words_of_the_table() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md readable");
    let block = format!("```text\n{}\n```", link_words_help());
    assert!(
        readme.contains(&block),
        "README.md's list of link words differs from the table; replace its block with:\n{block}"
    );
}

#[test]
fn help_lists_the_words_of_the_table() {
    for sub in [
        &["--help"][..],
        &["replay", "--help"],
        &["bridge", "--help"],
        &["shell", "--help"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_linkem"))
            .args(sub)
            .output()
            .expect("linkem runs");
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&link_words_help()),
            "linkem {sub:?} does not show the table's words:\n{text}"
        );
    }
}
