//! Recordings: what a live run (`linkem bridge ... --record DIR`) fed its emulator core,
//! kept so that `linkem replay DIR OUT` can feed the same core the same inputs in the same
//! order and so reach the same decisions. The core is deterministic given its seed, its
//! start configuration, and the sequence of (frame, stamp) and (change, instant) inputs;
//! a recording holds exactly those.
//!
//! # The directory (format version 3)
//!
//! ```text
//! DIR/recording.json    what the run was: seed, link type, sides, start, options, counts
//! DIR/frames.pcapng     every frame the core was fed, in the order it was fed
//! DIR/changes.jsonl     every configuration change, with how many frames came before it
//! DIR/start.rules       the rule file's text at start (only for a run with rules)
//! DIR/change-NNNN.rules the whole new rule set of change NNNN (a reload)
//! DIR/files/K-BASENAME  a copy of a file the run read (a table, trace, schedule, profile)
//! ```
//!
//! - `recording.json`: `{"format":"linkem-recording","version":1,"linkem":"<version>",
//!   "seed":<u64>,"link_type":<DLT>,"snaplen":<u32>,"sides":["<if a>","<if b>"],
//!   "start":{"link":"<link words>"} | {"links":["<a->b words>","<b->a words>"]} |
//!   {"rules":"start.rules"},"start_ns":<u64>,"options":{...},
//!   "complete":<bool>,"frames":<u64>,"changes":<u64>,"skipped":<u64>,
//!   "stopped":null | "<why>","files":{"<name>":{"copy":"files/K-BASENAME",
//!   "sha256":"<hex>","bytes":N}, ...}}`; `files` (version 2, left out when empty) maps
//!   each name the start's words or rules gave a file to its copy; `start_ns`
//!   (version 3, left out when unknown) the instant the core started, on the
//!   frames' clock, written as soon as it is known ([`Recorder::record_start`]). Written when recording starts with `complete: false` and
//!   rewritten (temporary file and rename) when it finishes, so a run that was killed
//!   leaves `complete: false` and counts of 0, never a half-written file.
//! - `frames.pcapng`: a little-endian section; interface 0 is side a and interface 1
//!   side b (`if_name` the interface's name, `if_tsresol` 9, i.e. nanosecond units, the
//!   link type and snap length of `recording.json`); then one enhanced packet block per
//!   frame in the order the core was fed (not sorted by time), stamped with the
//!   nanoseconds the core was given, `orig_len` the frame's length on the wire.
//! - `changes.jsonl`: one JSON object per line, in the order the changes were applied:
//!   `{"frames":N,"at_ns":T,"lines":["pipe 1 config bw 1Mbit/s", ...]}` for control lines
//!   applied at one instant as typed, or `{"frames":N,"at_ns":T,"rules":"change-0003.rules"}`
//!   for a whole rule set replaced (the file is in DIR; its number is the change's line).
//!   `frames` is how many frames of `frames.pcapng` the core had been fed before the
//!   change, `at_ns` the instant it took effect, on the frames' clock. A `rules` line
//!   may carry `"files":{...}` as `recording.json` does: the files the new set read.
//! - `files/`: one copy per distinct content (by sha256), `K` counting from 0 and
//!   BASENAME the name's last component cut to `[A-Za-z0-9._-]`. A reader reads every
//!   copy at open and refuses one missing, of another size or another sha256. The copies
//!   count toward the size limit with `frames.pcapng`.
//! - Version 1 (no `files`) is still read: its replay reads the named files from where
//!   they are now, as it always did.
//!
//! # Invariants
//!
//! - Inputs come back ([`Recording::inputs`]) in the order they were given to the
//!   [`Recorder`]: a change recorded after the k-th recorded frame and before the
//!   (k+1)-th has `frames = k`, and is returned between those two frames.
//! - The recorder never blocks the packet path: [`Recorder::frame`] copies the frame into
//!   a bounded queue drained by a writer thread; with the queue full the frame is not
//!   recorded and counted in `skipped`. Changes are never skipped: one that finds the
//!   queue full waits in the recorder and goes before any later frame.
//! - `complete` is true exactly when every input given to the recorder is in the
//!   recording: nothing skipped, the size limit not reached, no write failed, and
//!   [`Recorder::finish`] ran. A recording stopped by its limit or a write error is an
//!   exact prefix of the run's inputs; one with skipped frames is not (frames are missing
//!   and replaying it gives other decisions from the first gap on).
//! - `frames.pcapng` and `files/` together never exceed the size limit given to
//!   [`Recorder::create`]: start files beyond it are refused at create, a reload's files
//!   beyond it stop the recording as a frame beyond it does.
//! - In a version-2 recording every file the start and each reload read is in its map,
//!   by the name as written: a replay resolves names through the maps only.
//!
//! Readers trust nothing: every error names the file (and line, or byte offset) and
//! what is wrong, and no input makes them panic or allocate beyond the file's size.

mod reader;
#[cfg(test)]
mod tests;
pub mod wire;
mod writer;

pub use reader::{is_recording, Recording};
pub use writer::{Recorder, RecordingSummary, RecordingWatch};

use crate::capture::CaptureError;
use crate::infile::ReadError;
use crate::outfile::OutputError;
use serde_json::Value;
use std::io;

/// The value of `format` in `recording.json`.
pub const FORMAT_NAME: &str = "linkem-recording";
/// The most `changes.jsonl` may hold (64 MiB): some hundred thousand changes, far more
/// than a run has. The reader reads it whole at open; the writer stops the recording
/// before passing it, so that every recording it writes can be replayed.
pub const MAX_CHANGES_BYTES: u64 = 64 << 20;

/// The format version this linkem writes and reads.
pub const FORMAT_VERSION: u32 = 3;

/// Files a configuration read, by the name its words or rules gave each, with the text
/// read (a table, a trace, a schedule, a profile).
pub type NamedFiles = std::collections::BTreeMap<String, String>;

/// The files of a recording, by name inside its directory.
pub const META_FILE: &str = "recording.json";
/// See [`META_FILE`].
pub const FRAMES_FILE: &str = "frames.pcapng";
/// See [`META_FILE`].
pub const CHANGES_FILE: &str = "changes.jsonl";
/// See [`META_FILE`].
pub const START_RULES_FILE: &str = "start.rules";
/// See [`META_FILE`]: the folder of the copies of the files the run read.
pub const FILES_DIR_NAME: &str = wire::FILES_DIR;

/// What the run was, as `recording.json` holds it (the start rules as their text, not
/// the file name).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordingMeta {
    /// The format version of the recording (read), or [`FORMAT_VERSION`] (written).
    pub version: u32,
    /// The files the start configuration read; copied into `files/` by the recorder,
    /// read back from the copies by the reader.
    pub files: NamedFiles,
    /// The core's seed.
    pub seed: u64,
    /// The link type (DLT) of the frames; at most 65535, as pcapng stores it in 16 bits.
    pub link_type: u32,
    /// The snap length the frames were captured with (0: no limit).
    pub snaplen: u32,
    /// The interface names of side a (0) and side b (1).
    pub sides: [String; 2],
    /// The configuration the core started with.
    pub start: Start,
    /// Version 3: the instant the core started, on the frames' clock (a live
    /// link's start: the origin of its traces and schedules). `None`: they
    /// start at each link's first frame, as in a replay of a capture.
    pub start_ns: Option<u64>,
    /// The run's options that change decisions (`max_flows`, `max_flow_memory`,
    /// `one_pass`, ...), as the bridge names them; kept as given.
    pub options: serde_json::Map<String, Value>,
    /// The linkem version that wrote the recording. Set by [`Recorder::create`].
    pub linkem: String,
    /// Whether every input of the run is in the recording (see the module doc). Set by
    /// the recorder; false in the file until [`Recorder::finish`].
    pub complete: bool,
    /// Frames in `frames.pcapng`, as counted at finish (0 while recording).
    pub frames: u64,
    /// Lines in `changes.jsonl`, as counted at finish (0 while recording).
    pub changes: u64,
    /// Frames the run fed its core but the recorder had no room for.
    pub skipped: u64,
    /// Why recording stopped before the run ended, if it did.
    pub stopped: Option<String>,
}

impl RecordingMeta {
    /// A run's description with no options, to be recorded from its start; the counts
    /// and `complete` are the recorder's to fill in.
    pub fn new(seed: u64, link_type: u32, snaplen: u32, sides: [String; 2], start: Start) -> Self {
        RecordingMeta {
            version: FORMAT_VERSION,
            files: NamedFiles::new(),
            seed,
            link_type,
            snaplen,
            sides,
            start,
            start_ns: None,
            options: serde_json::Map::new(),
            linkem: env!("CARGO_PKG_VERSION").to_string(),
            complete: false,
            frames: 0,
            changes: 0,
            skipped: 0,
            stopped: None,
        }
    }
}

/// The configuration a run started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// Link words (`rate 10mbit delay 20ms ...`) of both sides' links.
    Link(String),
    /// Link words of side a's link (frames received on side a, `a->b`) and of side
    /// b's, when the two differ.
    Links([String; 2]),
    /// A rule file's whole text (kept in `start.rules`).
    Rules(String),
}

/// A configuration change applied to the core at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordedChange {
    /// Control lines (a `linkem ctl` request or a batch), as the user typed them.
    Lines(Vec<String>),
    /// The whole rule set replaced by this text (a reload on SIGHUP), and the files
    /// that text read (empty for a control batch, which reads none anew).
    Rules(String, NamedFiles),
}

/// One input to the core, as [`Recording::inputs`] returns them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordedInput {
    /// A frame received on `side` (0 = a, 1 = b).
    Frame {
        /// 0 for side a, 1 for side b.
        side: usize,
        /// The stamp the core was given, in nanoseconds.
        ts_ns: u64,
        /// The frame's length on the wire.
        orig_len: u32,
        /// The frame's captured bytes (at most `orig_len`).
        data: Vec<u8>,
    },
    /// A configuration change, taking effect at `at_ns` (the frames' clock).
    Change {
        /// The instant the change took effect, in nanoseconds.
        at_ns: u64,
        /// What changed.
        change: RecordedChange,
    },
}

/// Why a recording could not be written or read. Every message names the file or
/// directory and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    /// The directory given for a new recording cannot hold one: it is a file, it is not
    /// empty, or its parent does not exist.
    #[error("{dir}: {reason}")]
    Directory {
        /// The directory as given.
        dir: String,
        /// What is wrong, as a phrase.
        reason: String,
    },
    /// A system call on one of the recording's files failed.
    #[error("{file}: {action}: {source}")]
    Io {
        /// The file's path.
        file: String,
        /// What was being done ("cannot create", "cannot write").
        action: &'static str,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// A file's content is not what the format says: wrong JSON, a missing or extra
    /// field, a count that disagrees with another file.
    #[error("{file}{}: {reason}", line_suffix(*.line))]
    Invalid {
        /// The file's path.
        file: String,
        /// The 1-based line the problem is on, for line-oriented files.
        line: Option<usize>,
        /// What is wrong, with the offending value.
        reason: String,
    },
    /// What the caller asked to record cannot be written in the format (a link type
    /// beyond 16 bits, ...); nothing was created.
    #[error("cannot record {what}")]
    Unrecordable {
        /// What and why, as a phrase.
        what: String,
    },
    /// `frames.pcapng` is not a readable capture.
    #[error(transparent)]
    Capture(#[from] CaptureError),
    /// A file could not be read ([`crate::infile`]).
    #[error(transparent)]
    Read(#[from] ReadError),
    /// A file could not be written ([`crate::outfile`]).
    #[error(transparent)]
    Output(#[from] OutputError),
}

fn line_suffix(line: Option<usize>) -> String {
    line.map(|n| format!(" line {n}")).unwrap_or_default()
}

impl RecordingError {
    fn invalid(file: &str, line: Option<usize>, reason: impl Into<String>) -> RecordingError {
        RecordingError::Invalid {
            file: file.to_string(),
            line,
            reason: reason.into(),
        }
    }
}
