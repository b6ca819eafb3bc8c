//! What the agent last applied to each emulator, persisted in
//! `RUN/agent/applied.json` so that a restarted agent sends nothing it
//! already sent (the emulators keep running, and keep their links, while the
//! agent is away). Written whole to a temporary file in the same folder,
//! flushed, then renamed over the old one: a crash leaves the old record or
//! the new, never half of one.
//!
//! Keyed by the emulator's instance (`NAME@PID`): a new sandbox is a new
//! name, an emulator restarted under the same name a new pid, and either
//! starts from its base link again.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The format [`Record::save`] writes.
pub const RECORD_VERSION: u32 = 1;

/// One emulator's link as the agent last left it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// `NAMESPACE/NAME` of the pod.
    pub pod: String,
    /// The words running per emulator direction.
    pub a_to_b: String,
    pub b_to_a: String,
    /// The resources (`NAMESPACE/NAME`) those words carry, in creation order;
    /// empty: the base link.
    pub resources: Vec<String>,
    /// When the emulator applied them (its reply's `at_ns`); None: the base
    /// the emulator started with, never sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ns: Option<u64>,
    /// Words the emulator refused since (not sent again until they change);
    /// for an emulator running a rule set, `(RULES, "rules")`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<(String, String)>,
    /// The rule set running, for an emulator started with one (its
    /// `a_to_b` and `b_to_a` are then empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<String>,
}

/// Every emulator's entry.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub version: u32,
    /// By instance, `NAME@PID`.
    pub emulators: BTreeMap<String, Entry>,
}

impl Record {
    /// `RUN/agent/applied.json`.
    pub fn path(run_dir: &Path) -> PathBuf {
        run_dir.join("agent").join("applied.json")
    }

    /// The record at `path`; none yet is an empty record.
    pub fn load(path: &Path) -> anyhow::Result<Record> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Record {
                    version: RECORD_VERSION,
                    ..Record::default()
                })
            }
            Err(e) => anyhow::bail!("cannot read {}: {e}", path.display()),
        };
        let r: Record = serde_json::from_slice(&bytes)
            .map_err(|e| anyhow::anyhow!("{} is not an applied record: {e}", path.display()))?;
        if r.version > RECORD_VERSION {
            anyhow::bail!(
                "{}: version {} (this agent reads up to {RECORD_VERSION})",
                path.display(),
                r.version
            );
        }
        Ok(r)
    }

    /// Writes the record atomically (temporary file, fsync, rename).
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
        let tmp = dir.join(format!(".applied.{}.tmp", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&serde_json::to_vec_pretty(self)?)?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            anyhow::anyhow!("cannot write {}: {e}", path.display())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_through_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = Record::path(dir.path());
        let empty = Record::load(&path).unwrap();
        assert_eq!(empty.version, RECORD_VERSION);
        assert!(empty.emulators.is_empty());
        let mut r = empty.clone();
        r.emulators.insert(
            "cni-c1-eth0@42".into(),
            Entry {
                pod: "ns/web-0".into(),
                a_to_b: "delay 20ms".into(),
                b_to_a: "delay 0ms".into(),
                resources: vec!["ns/slow".into()],
                at_ns: Some(1_764_000_000_123_456_789),
                refused: Some(("delay 20xs".into(), "delay 0ms".into())),
                rules: None,
            },
        );
        r.save(&path).unwrap();
        assert_eq!(Record::load(&path).unwrap(), r);
        // Saved again over itself, nothing else is left in the folder.
        r.save(&path).unwrap();
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("applied.json")]);
    }

    #[test]
    fn a_broken_or_newer_record_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("applied.json");
        std::fs::write(&path, "{\"version\":1,").unwrap();
        let e = Record::load(&path).unwrap_err().to_string();
        assert!(
            e.contains("applied.json") && e.contains("not an applied record"),
            "{e}"
        );
        std::fs::write(&path, r#"{"version":9,"emulators":{}}"#).unwrap();
        let e = Record::load(&path).unwrap_err().to_string();
        assert!(e.contains("version 9"), "{e}");
    }
}
