//! A lab's run state, `/run/linkem/labs/LAB/`: `state.json` lists every
//! object the lab made (written before each is made, so that `down` or the
//! next `up` removes them after a SIGKILL), and `lock`, which the emulator
//! holds locked while it lives (the kernel drops the lock with the process,
//! so a lock that can be taken means the lab is stale, whatever its pid).
//!
//! `state.json` is replaced whole (written beside it, then renamed), so a
//! reader never sees half of it.

pub use super::net::Object;
use super::net::Record;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

/// Where labs keep their run state.
pub const LABS_DIR: &str = "/run/linkem/labs";

/// A node as the state file keeps it (for `exec`, `show`, `netem`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct NodeState {
    pub name: String,
    pub kind: String,
    /// Its namespace (`None`: it has none, e.g. a bridge in the lab's).
    pub netns: Option<String>,
}

/// A link as the state file keeps it: its name (`NODE:IF--NODE:IF`) and its
/// words at start, per direction.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct LinkState {
    pub name: String,
    pub a_to_b: String,
    pub b_to_a: String,
}

/// The content of `state.json`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    pub name: String,
    /// The lab file, absolute.
    pub file: PathBuf,
    /// `--host`: this machine's part of the lab.
    pub host: Option<String>,
    /// The emulator's process.
    pub pid: u32,
    /// Seconds since the epoch when `up` began.
    pub started_unix_s: u64,
    /// Set once every link forwards.
    pub ready: bool,
    /// The control socket of the lab's links.
    pub control: Option<PathBuf>,
    pub nodes: Vec<NodeState>,
    pub links: Vec<LinkState>,
    /// In the order made; removed in reverse.
    pub objects: Vec<Object>,
}

/// The run state directory of lab `name`.
pub fn lab_dir(name: &str) -> PathBuf {
    Path::new(LABS_DIR).join(name)
}

/// The state of lab `name` as its file says, if it has one.
pub fn read(name: &str) -> Result<Option<State>> {
    let path = lab_dir(name).join("state.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let state = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a lab's state file", path.display()))?;
    Ok(Some(state))
}

/// Whether lab `name`'s emulator lives (holds its lock).
pub fn running(name: &str) -> bool {
    let Ok(file) = File::open(lab_dir(name).join("lock")) else {
        return false;
    };
    matches!(linkem_io::sys::try_flock(&file, false), Ok(false))
}

/// The names of the labs that have a state directory, sorted.
pub fn names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(LABS_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// A lab's state held by its emulator: the lock taken, every object
/// recorded before it is made.
pub struct Recorder {
    dir: PathBuf,
    /// Held locked while this process lives.
    _lock: File,
    pub state: State,
}

impl Recorder {
    /// Takes lab `state.name`'s lock and writes its state; refuses a lab
    /// that runs, naming it. A stale lab (its emulator gone) is cleaned
    /// first, saying so.
    pub fn take(state: State) -> Result<Recorder> {
        let dir = lab_dir(&state.name);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("lock"))
            .with_context(|| format!("cannot open {}", dir.join("lock").display()))?;
        match linkem_io::sys::try_flock(&lock, true) {
            Ok(true) => {}
            Ok(false) => {
                let pid = read(&state.name).ok().flatten().map(|s| s.pid);
                bail!(
                    "lab '{}' is running already (emulator pid {}): `linkem lab down {}` first",
                    state.name,
                    pid.map_or("unknown".into(), |p| p.to_string()),
                    state.name
                );
            }
            Err(e) => return Err(e).with_context(|| format!("cannot lock {}", dir.display())),
        }
        if let Some(old) = read(&state.name)? {
            eprintln!(
                "linkem: lab {}: its emulator (pid {}) is gone without cleaning up: removing \
                 what it left ({} objects)",
                old.name,
                old.pid,
                old.objects.len()
            );
            super::net::remove_all(&old.objects);
        }
        let recorder = Recorder {
            dir,
            _lock: lock,
            state,
        };
        recorder.save()?;
        Ok(recorder)
    }

    /// Writes the state file whole.
    pub fn save(&self) -> Result<()> {
        write_state(&self.dir, &self.state)
    }

    /// The lab's state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Removes every object recorded, newest first, then the state directory.
    pub fn remove_everything(self) {
        super::net::remove_all(&self.state.objects);
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!(
                "linkem: lab {}: cannot remove {}: {e}",
                self.state.name,
                self.dir.display()
            );
        }
    }
}

impl Record for Recorder {
    /// Adds `object` to the state file before the caller makes it.
    fn record(&mut self, object: Object) -> Result<()> {
        self.state.objects.push(object);
        self.save()
    }

    /// Adds every one of `objects` with one write of the state file.
    fn record_all(&mut self, objects: Vec<Object>) -> Result<()> {
        self.state.objects.extend(objects);
        self.save()
    }
}

/// Writes `state` to `dir/state.json` whole.
pub fn write_state(dir: &Path, state: &State) -> Result<()> {
    let tmp = dir.join("state.json.new");
    let text = serde_json::to_string_pretty(state).context("cannot encode the lab's state")?;
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, dir.join("state.json"))
        .with_context(|| format!("cannot write {}", dir.join("state.json").display()))
}

/// Cleans lab `name` whose emulator is gone: removes what its state file
/// lists and its directory. Returns false when there was nothing.
pub fn clean_stale(name: &str) -> Result<bool> {
    let dir = lab_dir(name);
    if !dir.exists() {
        return Ok(false);
    }
    if let Some(old) = read(name)? {
        super::net::remove_all(&old.objects);
    }
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("cannot remove {}", dir.display()))
        }
        _ => Ok(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_keep_their_kind_and_place_through_the_file() {
        let state = State {
            name: "t".into(),
            objects: vec![
                Object::Netns {
                    name: "lk-t".into(),
                },
                Object::Link {
                    name: "br0".into(),
                    netns: None,
                    what: "bridge".into(),
                },
                Object::File {
                    path: "/run/linkem/t.sock".into(),
                },
            ],
            ..State::default()
        };
        let text = serde_json::to_string(&state).unwrap();
        assert!(text.contains(r#""kind":"netns""#), "{text}");
        let back: State = serde_json::from_str(&text).unwrap();
        assert_eq!(back, state);
    }
}
