//! `linkem --version` names the commit; `linkem generate` makes a man page per
//! command and completions that offer the commands but not `generate` itself.
//! (scripts/package-test.sh renders and loads what the package installs.)

use std::path::Path;
use std::process::{Command, Output};

fn linkem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(args)
        .output()
        .expect("linkem runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let o = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// The commands `linkem --help` lists (not `help`).
fn commands() -> Vec<String> {
    let help = stdout(&linkem(&["--help"]));
    let list: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    assert!(list.len() >= 6, "commands in --help: {list:?}\n{help}");
    list
}

#[test]
fn version_names_the_commit_it_was_built_from() {
    let o = linkem(&["--version"]);
    assert!(o.status.success());
    let said = stdout(&o);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let Some(hash) = git(&root, &["rev-parse", "--short", "HEAD"]) else {
        assert!(said.starts_with("linkem "), "{said}");
        return;
    };
    // build.rs's "built from": manifests, lock file, each crate's sources.
    let mut paths = vec!["Cargo.toml".to_string(), "Cargo.lock".to_string()];
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        for part in ["Cargo.toml", "build.rs", "src", "assets"] {
            paths.push(format!("crates/{name}/{part}"));
        }
    }
    paths.retain(|p| root.join(p).exists());
    let mut status = vec!["status", "--porcelain", "--"];
    status.extend(paths.iter().map(String::as_str));
    let dirty = !git(&root, &status).unwrap().is_empty();
    let expected = format!(
        "linkem {} ({hash}{})\n",
        env!("CARGO_PKG_VERSION"),
        if dirty { "-dirty" } else { "" }
    );
    assert_eq!(said, expected, "built from {hash}, dirty: {dirty}");
}

#[test]
fn man_pages_for_the_command_and_each_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let mandir = dir.path().join("man1");
    let o = linkem(&["generate", "man", mandir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut made: Vec<String> = std::fs::read_dir(&mandir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    made.sort();
    let mut expected: Vec<String> = commands().iter().map(|c| format!("linkem-{c}.1")).collect();
    expected.push("linkem.1".into());
    // A page for each command under `lab` (and under its `netem`) too.
    for sub in [
        "up",
        "down",
        "list",
        "show",
        "exec",
        "netem",
        "netem-set",
        "netem-show",
    ] {
        expected.push(format!("linkem-lab-{sub}.1"));
    }
    expected.sort();
    assert_eq!(made, expected);
    let top = std::fs::read_to_string(mandir.join("linkem.1")).unwrap();
    assert!(
        !top.contains("generate"),
        "the hidden command is documented:\n{top}"
    );
    let bridge = std::fs::read_to_string(mandir.join("linkem-bridge.1")).unwrap();
    let version = stdout(&linkem(&["--version"]));
    assert!(
        bridge.contains(version.trim()),
        "the page names the version it documents ({version}):\n{bridge}"
    );
    // The link words keep their columns: unfilled, one word per line.
    let notes = bridge
        .split(".SH NOTES\n.nf\n")
        .nth(1)
        .expect("a NOTES section, unfilled");
    assert!(
        notes
            .lines()
            .any(|l| l.starts_with("  rate R | bw R | rate unlimited  ")),
        "{notes}"
    );
    assert!(
        bridge.contains(".SH \"SEE ALSO\"\n.BR linkem (1)"),
        "{bridge}"
    );
}

#[test]
fn completions_offer_the_commands_but_not_generate() {
    for shell in ["bash", "zsh", "fish"] {
        let o = linkem(&["generate", shell]);
        assert!(o.status.success(), "{shell}");
        let script = stdout(&o);
        for c in commands() {
            assert!(script.contains(&c), "{shell} lacks {c}");
        }
        assert!(!script.contains("generate"), "{shell} offers generate");
    }
}

#[test]
fn generate_names_what_is_wrong() {
    let o = linkem(&["generate", "man", "/dev/null/man1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot make the directory /dev/null/man1"),
        "{err}"
    );
    let o = linkem(&["generate", "powershell"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("unrecognized subcommand 'powershell'"),
        "{err}"
    );
}
