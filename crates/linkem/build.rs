//! Stamps the binary with the commit it was built from, for `linkem --version`
//! (`LINKEM_BUILD_COMMIT`, read by `linkem::build_info`).
//!
//! The commit is, in this order: the `LINKEM_COMMIT` environment variable (a
//! build from a tarball, or a packager who knows better); `git rev-parse
//! --short HEAD` of the workspace this crate sits in, with `-dirty` when the
//! files the binary is built from differ from that commit; else `unknown`.
//! Nothing here fails the build: a missing git or a broken repository gives
//! `unknown` and a warning.
//!
//! "The files the binary is built from" are the manifests and lock file and
//! each crate's `src/`, `build.rs` and `assets/`; an edit to a test, a script
//! or README changes no byte of the binary and so does not make it dirty. The
//! script re-runs when HEAD moves (HEAD, or the branch ref it names) or when
//! one of those files changes, which rebuilds this crate anyway: stamping costs
//! no extra rebuild.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=LINKEM_COMMIT");
    let commit = match env::var("LINKEM_COMMIT") {
        Ok(given) if !given.trim().is_empty() => {
            let given = given.trim();
            if given.chars().all(|c| c.is_ascii_graphic()) {
                given.to_string()
            } else {
                println!("cargo:warning=LINKEM_COMMIT holds spaces or control characters; the version says 'unknown'");
                "unknown".to_string()
            }
        }
        _ => from_git().unwrap_or_else(|| "unknown".to_string()),
    };
    println!("cargo:rustc-env=LINKEM_BUILD_COMMIT={commit}");
}

/// The commit of the workspace this crate is part of, or None when it is not
/// in a git checkout of linkem (a published crate unpacked anywhere).
fn from_git() -> Option<String> {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR")?);
    let root = manifest_dir.parent()?.parent()?.to_path_buf();
    // Only our own workspace: two levels above a crate unpacked from a
    // registry may be someone else's repository.
    let ours =
        root.join("crates").join("linkem").canonicalize().ok() == manifest_dir.canonicalize().ok();
    if !ours || !root.join(".git").exists() {
        return None;
    }
    let built_from = built_from(&root);
    for path in git_paths(&root) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    for path in &built_from {
        println!("cargo:rerun-if-changed={}", root.join(path).display());
    }
    let hash = match git(&root, &["rev-parse", "--short", "HEAD"]) {
        Some(h) if !h.is_empty() => h,
        _ => {
            println!(
                "cargo:warning=git rev-parse HEAD failed in {}; the version says 'unknown'",
                root.display()
            );
            return None;
        }
    };
    let mut status = vec!["status", "--porcelain", "--"];
    status.extend(built_from.iter().map(String::as_str));
    match git(&root, &status) {
        Some(changes) if changes.is_empty() => Some(hash),
        Some(_) => Some(format!("{hash}-dirty")),
        None => {
            println!(
                "cargo:warning=git status failed in {}; the version may lack '-dirty'",
                root.display()
            );
            Some(hash)
        }
    }
}

/// What the binary is built from, relative to the workspace root (existing
/// paths only: cargo re-runs a script on every build while a path it watches
/// is missing).
fn built_from(root: &Path) -> Vec<String> {
    let mut paths: Vec<String> = vec!["Cargo.toml".into(), "Cargo.lock".into()];
    let mut crates: Vec<_> = std::fs::read_dir(root.join("crates"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    crates.sort();
    for name in crates {
        let name = name.to_string_lossy();
        for part in ["Cargo.toml", "build.rs", "src", "assets"] {
            paths.push(format!("crates/{name}/{part}"));
        }
    }
    paths.retain(|p| root.join(p).exists());
    paths
}

/// The files whose change means HEAD moved: HEAD itself (a checkout), and
/// the ref it names (a commit on the branch), loose or packed. Asked of git
/// because in a worktree they live in different directories.
fn git_paths(root: &Path) -> Vec<PathBuf> {
    let mut names = vec!["HEAD".to_string()];
    if let Some(branch) = git(root, &["symbolic-ref", "-q", "HEAD"]) {
        if !branch.is_empty() {
            names.push(branch);
            names.push("packed-refs".to_string());
        }
    }
    names
        .iter()
        .filter_map(|name| git(root, &["rev-parse", "--git-path", name]))
        .map(|p| root.join(p))
        .filter(|p| p.exists())
        .collect()
}

/// Runs git in `root`; its trimmed output, or None if it could not run or failed.
fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        // `git status` would otherwise refresh and rewrite the index, racing
        // with whatever git command the user runs meanwhile.
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
