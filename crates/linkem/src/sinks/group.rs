//! The recording of a group of pairs (`linkem bridge --pair ... --pair ...
//! --record DIR`, a lab): `DIR/group.json` names each link and the folder
//! that holds its recording, and each folder is a one-pair recording
//! (`linkem_io::recording`), written and read by the code of one pair. Every
//! link's recording starts at the group's one start instant. Also the rule
//! that gives each link a file of its own when one path is given for all
//! ([`per_link`]).
//!
//! `group.json`: `{"format": "linkem-group", "version": 1, "links":
//! [{"name": NAME, "dir": NAME, "if_a": IF_A, "if_b": IF_B}, ...]}`, the
//! links in the order of the pairs.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The index file of a group recording.
pub const INDEX_FILE: &str = "group.json";
const FORMAT: &str = "linkem-group";
const VERSION: u32 = 1;

/// A group recording's index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupIndex {
    pub format: String,
    pub version: u32,
    pub links: Vec<GroupLink>,
}

/// One link of a group recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupLink {
    /// The pair's name (IF_A-IF_B, or a lab's NODE:IF--NODE:IF).
    pub name: String,
    /// Its recording's folder, relative to the group's.
    pub dir: String,
    pub if_a: String,
    pub if_b: String,
}

impl GroupIndex {
    /// The index of links `(name, if_a, if_b)`; each link's folder is its
    /// name, refused when it cannot be one.
    pub fn new<'a>(links: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>) -> Result<Self> {
        let mut out = Vec::new();
        for (name, if_a, if_b) in links {
            check_name(name)?;
            out.push(GroupLink {
                name: name.into(),
                dir: name.into(),
                if_a: if_a.into(),
                if_b: if_b.into(),
            });
        }
        Ok(GroupIndex {
            format: FORMAT.into(),
            version: VERSION,
            links: out,
        })
    }

    /// Reads `DIR/group.json`, checking what it names.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join(INDEX_FILE);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let index: GroupIndex = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a group recording's index", path.display()))?;
        if index.format != FORMAT || index.version != VERSION {
            bail!(
                "{}: format '{}' version {} (this linkem reads '{FORMAT}' version {VERSION})",
                path.display(),
                index.format,
                index.version
            );
        }
        for l in &index.links {
            check_name(&l.dir).with_context(|| format!("{}: link '{}'", path.display(), l.name))?;
        }
        Ok(index)
    }

    /// Writes the index into `dir`.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self)? + "\n";
        let path = dir.join(INDEX_FILE);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
    }
}

/// Whether `dir` holds a group recording (its index).
pub fn is_group_recording(dir: &Path) -> bool {
    dir.join(INDEX_FILE).is_file()
}

/// A link's name as a folder name: one path component, not hidden.
fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') || name == INDEX_FILE {
        bail!(
            "link '{name}' cannot name a folder of the recording (a name has no '/', \
             does not start with '.' and is not '{INDEX_FILE}')"
        );
    }
    Ok(())
}

/// What a link's own file is called when `path` is given for every link of
/// a group: `{link}` in `path` replaced by the link's name. A path without
/// `{link}` would be written by every link, and is refused naming `option`.
pub fn per_link(path: &Path, link: &str, option: &str) -> Result<PathBuf> {
    let text = path.to_string_lossy();
    if !text.contains("{link}") {
        bail!(
            "{option} {text}: with several pairs each link writes a file of its own: put \
             {{link}} in the path where the link's name goes (as in 'logs/{{link}}.log')"
        );
    }
    Ok(PathBuf::from(text.replace("{link}", link)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_reads_back_and_refuses_names_that_are_no_folder() {
        let dir = tempfile::tempdir().unwrap();
        let index =
            GroupIndex::new([("a1-b1", "a1", "b1"), ("r1:eth1--r2:eth1", "x", "y")]).unwrap();
        index.write(dir.path()).unwrap();
        assert!(is_group_recording(dir.path()));
        assert_eq!(GroupIndex::read(dir.path()).unwrap(), index);
        for bad in ["", "a/b", ".hidden", INDEX_FILE] {
            let e = GroupIndex::new([(bad, "a", "b")]).expect_err("refused");
            assert!(
                format!("{e:#}").contains("cannot name a folder"),
                "{bad}: {e:#}"
            );
        }
        std::fs::write(
            dir.path().join(INDEX_FILE),
            r#"{"format":"x","version":9,"links":[]}"#,
        )
        .unwrap();
        let e = GroupIndex::read(dir.path()).expect_err("refused");
        assert!(format!("{e:#}").contains("version 9"), "{e:#}");
    }

    #[test]
    fn a_path_for_every_link_needs_the_link_placeholder() {
        let p = per_link(Path::new("logs/{link}.up.log"), "a1-b1", "--log-a-to-b").unwrap();
        assert_eq!(p, PathBuf::from("logs/a1-b1.up.log"));
        let e = per_link(Path::new("up.log"), "a1-b1", "--log-a-to-b")
            .err()
            .unwrap();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("--log-a-to-b up.log") && msg.contains("{link}"),
            "{msg}"
        );
    }
}
