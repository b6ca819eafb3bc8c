//! The recorder: the caller's side only copies an input into a bounded queue; one writer
//! thread owns the files and drains it.
//!
//! ```text
//!  packet path ── frame() ──► sync_channel (≤ queue_frames, ≤ QUEUE_BYTES) ──► writer thread
//!  control     ── change() ─┘      (full: frame skipped and counted;          frames.pcapng
//!                                   change held back, sent before the          changes.jsonl
//!                                   next frame)                                change-NNNN.rules
//!                 ◄── spent buffers (reused, so a steady run allocates nothing) ──┘
//! ```
//!
//! The writer numbers changes itself: a change's `frames` is the count of frames it has
//! written before it, so `changes.jsonl` agrees with `frames.pcapng` by construction,
//! whatever was skipped.

use super::wire::FileEntry;
use super::{RecordedChange, RecordedInput, RecordingError, RecordingMeta};
use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

mod disk;

pub(super) use disk::sha256_hex;
use disk::{make_dir, open_files, remove_debris, write_meta, Copies, CopyError, FileWriter};

/// Frames the queue holds at most. At 1 Mpps that is 16 ms of traffic, enough to ride out
/// a writer that waits on the disk for a few milliseconds; more only delays the moment a
/// disk that cannot keep up shows as skipped frames.
pub const DEFAULT_QUEUE_FRAMES: usize = 16 * 1024;

/// Bytes of frame data the queue holds at most (64 MiB): with GRO frames of 64 KiB, the
/// frame bound alone would let the queue reach a gigabyte.
pub const QUEUE_BYTES: u64 = 64 << 20;

/// Spent frame buffers kept for reuse, and the largest kept: together at most 64 MiB held
/// while idle (typically 1.5 MB of 1514-byte frames), yet enough that a steady run at
/// hundreds of thousands of frames a second allocates nothing.
const SPENT_BUFFERS: usize = 1024;
const SPENT_BUFFER_MAX_BYTES: usize = 64 << 10;

/// Size of the writer's buffers: system calls once per megabyte.
const WRITE_BUFFER_BYTES: usize = 1 << 20;

/// An enhanced packet block without options: type, length, interface, two timestamp
/// words, captured and original length, data padded to 4 bytes, length again.
fn epb_len_bytes(caplen: usize) -> u64 {
    32 + caplen.next_multiple_of(4) as u64
}

/// What a finished recording holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordingSummary {
    /// Frames in `frames.pcapng`.
    pub frames: u64,
    /// Changes in `changes.jsonl`.
    pub changes: u64,
    /// Frames not recorded because the queue was full.
    pub skipped: u64,
    /// Size of `frames.pcapng` in bytes.
    pub bytes: u64,
    /// Whether every input given to the recorder is in the recording.
    pub complete: bool,
    /// Why recording stopped early, if it did.
    pub stopped: Option<String>,
}

/// State both sides read: why recording stopped (set once, by whichever side stops it).
struct Shared {
    stopped_flag: AtomicBool,
    stopped: Mutex<Option<String>>,
    /// Frame bytes queued and not yet written (for [`QUEUE_BYTES`]).
    queued_bytes: AtomicU64,
}

impl Shared {
    fn stop(&self, reason: String) {
        let mut stopped = self.stopped.lock().unwrap_or_else(|e| e.into_inner());
        if stopped.is_none() {
            *stopped = Some(reason);
        }
        self.stopped_flag.store(true, Ordering::Release);
    }

    fn reason(&self) -> Option<String> {
        self.stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Records a live run's inputs into a directory (see the module doc). `frame` and
/// `change` never block and never fail: problems stop the recording, which
/// [`Recorder::stopped`] and the summary report, and the run goes on.
pub struct Recorder {
    dir: PathBuf,
    /// Whether [`Recorder::create`] made `dir` (so [`Recorder::discard`] removes it).
    made_dir: bool,
    meta: RecordingMeta,
    /// The map of `recording.json`'s `files`: the start's files and their copies.
    start_files: BTreeMap<String, FileEntry>,
    tx: Option<SyncSender<RecordedInput>>,
    /// Buffers the writer is done with, for the next frames.
    spent: Receiver<Vec<u8>>,
    /// Changes that found the queue full, oldest first; they go before any later frame.
    held: VecDeque<RecordedInput>,
    skipped: u64,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<Written>>,
}

/// What the writer thread did, returned when it ends.
struct Written {
    frames: u64,
    changes: u64,
    bytes: u64,
}

impl Recorder {
    /// Creates the recording directory `dir` (its parent must exist; if it exists it must
    /// be an empty directory), writes `recording.json` (not yet complete), `start.rules`
    /// for a run with rules, the pcapng header, and starts the writer thread.
    /// `frames.pcapng` will not grow beyond `limit_bytes` (`u64::MAX`: no limit).
    ///
    /// # Errors
    /// [`RecordingError::Directory`] if `dir` is a file, a non-empty directory or has no
    /// parent; [`RecordingError::Unrecordable`] for a link type beyond 16 bits; an I/O
    /// error creating a file. Whatever was created is removed again.
    pub fn create(
        dir: &Path,
        meta: RecordingMeta,
        limit_bytes: u64,
    ) -> Result<Recorder, RecordingError> {
        Self::with_queue(dir, meta, limit_bytes, DEFAULT_QUEUE_FRAMES)
    }

    /// [`Recorder::create`] with a queue of `queue_frames` frames (at least 1).
    pub fn with_queue(
        dir: &Path,
        meta: RecordingMeta,
        limit_bytes: u64,
        queue_frames: usize,
    ) -> Result<Recorder, RecordingError> {
        Self::start(dir, meta, limit_bytes, queue_frames, None)
    }

    /// `gate`: the writer thread waits for it before writing anything (tests fill the
    /// queue with it).
    fn start(
        dir: &Path,
        mut meta: RecordingMeta,
        limit_bytes: u64,
        queue_frames: usize,
        gate: Option<Receiver<()>>,
    ) -> Result<Recorder, RecordingError> {
        if meta.link_type > u32::from(u16::MAX) {
            return Err(RecordingError::Unrecordable {
                what: format!(
                    "link type {}: pcapng stores link types in 16 bits",
                    meta.link_type
                ),
            });
        }
        meta.linkem = env!("CARGO_PKG_VERSION").to_string();
        meta.version = super::FORMAT_VERSION;
        meta.complete = false;
        meta.frames = 0;
        meta.changes = 0;
        meta.skipped = 0;
        meta.stopped = None;
        let made_dir = make_dir(dir)?;
        let mut copies = Copies::default();
        let start_files = match copies.copy(dir, &meta.files, limit_bytes) {
            Ok(entries) => entries,
            Err(CopyError::Room(what)) => {
                remove_debris(dir, made_dir);
                return Err(RecordingError::Unrecordable { what });
            }
            Err(CopyError::Write(e)) => {
                remove_debris(dir, made_dir);
                return Err(e);
            }
        };
        let files = match open_files(dir, &meta, &start_files) {
            Ok(files) => files,
            Err(e) => {
                remove_debris(dir, made_dir);
                return Err(e);
            }
        };
        let (tx, rx) = mpsc::sync_channel(queue_frames.max(1));
        let (spent_tx, spent) = mpsc::sync_channel(SPENT_BUFFERS);
        let shared = Arc::new(Shared {
            stopped_flag: AtomicBool::new(false),
            stopped: Mutex::new(None),
            queued_bytes: AtomicU64::new(0),
        });
        let mut writer = FileWriter {
            dir: dir.to_path_buf(),
            files,
            frames: 0,
            changes: 0,
            limit_bytes,
            copies,
            shared: Arc::clone(&shared),
            spent: spent_tx,
        };
        let thread = std::thread::Builder::new()
            .name("linkem-record".into())
            .spawn(move || {
                if let Some(gate) = gate {
                    let _ = gate.recv();
                }
                writer.run(rx)
            })
            .map_err(|source| RecordingError::Io {
                file: dir.display().to_string(),
                action: "cannot start the recording thread",
                source,
            });
        let thread = match thread {
            Ok(thread) => thread,
            Err(e) => {
                remove_debris(dir, made_dir);
                return Err(e);
            }
        };
        Ok(Recorder {
            dir: dir.to_path_buf(),
            made_dir,
            meta,
            start_files,
            tx: Some(tx),
            spent,
            held: VecDeque::new(),
            skipped: 0,
            shared,
            thread: Some(thread),
        })
    }

    /// Records the instant the core started (a live link's start, the origin of
    /// its traces and schedules): rewrites `recording.json` with it at once, so a
    /// run killed later still leaves it. Called before the first frame; a write
    /// that fails stops the recording, as any failed write does.
    pub fn record_start(&mut self, start_ns: u64) {
        self.meta.start_ns = Some(start_ns);
        if let Err(e) = write_meta(&self.dir, &self.meta, &self.start_files) {
            self.shared
                .stop(format!("cannot write the start instant: {e}"));
        }
    }

    /// Records a frame the core is fed on `side` (0 = a, 1 = b), stamped `ts_ns`, with
    /// `orig_len` bytes on the wire of which `data` were captured. Copies `data` and
    /// returns; with the queue full the frame is skipped and counted.
    pub fn frame(&mut self, side: usize, ts_ns: u64, orig_len: u32, data: &[u8]) {
        if self.shared.stopped_flag.load(Ordering::Acquire) {
            return;
        }
        if !self.send_held() {
            self.skipped += 1;
            return;
        }
        let len = data.len() as u64;
        if self.shared.queued_bytes.load(Ordering::Relaxed) + len > QUEUE_BYTES {
            self.skipped += 1;
            return;
        }
        let mut buf = self.spent.try_recv().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(data);
        let input = RecordedInput::Frame {
            side,
            ts_ns,
            orig_len,
            data: buf,
        };
        let Some(tx) = &self.tx else { return };
        self.shared.queued_bytes.fetch_add(len, Ordering::Relaxed);
        match tx.try_send(input) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.shared.queued_bytes.fetch_sub(len, Ordering::Relaxed);
                self.skipped += 1;
            }
            // The writer ended, which it does only after stopping the recording.
            Err(TrySendError::Disconnected(_)) => {
                self.shared.queued_bytes.fetch_sub(len, Ordering::Relaxed);
            }
        }
    }

    /// Records a change that took effect at `at_ns`, after the frames recorded so far.
    /// Never skipped: with the queue full it is held and sent before the next frame.
    pub fn change(&mut self, at_ns: u64, change: RecordedChange) {
        if self.shared.stopped_flag.load(Ordering::Acquire) {
            return;
        }
        self.held.push_back(RecordedInput::Change { at_ns, change });
        self.send_held();
    }

    /// Sends held changes while the queue has room; whether none is left.
    fn send_held(&mut self) -> bool {
        let Some(tx) = &self.tx else {
            return self.held.is_empty();
        };
        while let Some(input) = self.held.pop_front() {
            match tx.try_send(input) {
                Ok(()) => {}
                Err(TrySendError::Full(input)) => {
                    self.held.push_front(input);
                    return false;
                }
                Err(TrySendError::Disconnected(_)) => {
                    self.held.clear();
                    return true;
                }
            }
        }
        true
    }

    /// Why recording stopped (the size limit was reached, or a write failed), if it did.
    pub fn stopped(&self) -> Option<String> {
        if self.shared.stopped_flag.load(Ordering::Acquire) {
            self.shared.reason()
        } else {
            None
        }
    }

    /// A handle another thread keeps to learn when recording stops, while the recorder
    /// itself is fed on the packet path.
    pub fn watch(&self) -> RecordingWatch {
        RecordingWatch {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Frames skipped so far because the queue was full.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// The recording's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Sends what is held (waiting for room: the run is over), lets the writer drain the
    /// queue and close its files, and rewrites `recording.json` with the counts and
    /// `complete`. A recording that stopped early is still finished: its summary says why.
    ///
    /// # Errors
    /// `recording.json` cannot be rewritten (the old one, saying incomplete, stays).
    pub fn finish(mut self) -> Result<RecordingSummary, RecordingError> {
        let written = self.end_writer();
        let stopped = self.stopped();
        let complete = stopped.is_none() && self.skipped == 0;
        self.meta.complete = complete;
        self.meta.frames = written.frames;
        self.meta.changes = written.changes;
        self.meta.skipped = self.skipped;
        self.meta.stopped = stopped.clone();
        write_meta(&self.dir, &self.meta, &self.start_files)?;
        Ok(RecordingSummary {
            frames: written.frames,
            changes: written.changes,
            skipped: self.skipped,
            bytes: written.bytes,
            complete,
            stopped,
        })
    }

    /// Ends a recording that never got its run (the run failed to start): stops the
    /// writer and removes what [`Recorder::create`] made, the directory too if it made
    /// it, so the same directory can be given again.
    pub fn discard(mut self) {
        self.end_writer();
        let rules: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("change-") && n.ends_with(".rules"))
            })
            .collect();
        for p in rules {
            let _ = std::fs::remove_file(p);
        }
        remove_debris(&self.dir, self.made_dir);
    }

    fn end_writer(&mut self) -> Written {
        if let Some(tx) = self.tx.take() {
            for input in self.held.drain(..) {
                if tx.send(input).is_err() {
                    break;
                }
            }
        }
        let thread = self.thread.take();
        match thread.map(JoinHandle::join) {
            Some(Ok(written)) => written,
            Some(Err(_)) => {
                self.shared
                    .stop("the recording thread panicked".to_string());
                Written {
                    frames: 0,
                    changes: 0,
                    bytes: 0,
                }
            }
            None => Written {
                frames: 0,
                changes: 0,
                bytes: 0,
            },
        }
    }
}

/// See [`Recorder::watch`].
#[derive(Clone)]
pub struct RecordingWatch {
    shared: Arc<Shared>,
}

impl RecordingWatch {
    /// Why recording stopped (the size limit was reached, or a write failed), if it did.
    pub fn stopped(&self) -> Option<String> {
        if self.shared.stopped_flag.load(Ordering::Acquire) {
            self.shared.reason()
        } else {
            None
        }
    }
}

impl Drop for Recorder {
    /// A recorder dropped without [`Recorder::finish`] (the run failed) still flushes
    /// what it has; `recording.json` keeps saying incomplete.
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.end_writer();
        }
    }
}

#[cfg(test)]
impl Recorder {
    /// A recorder whose writer waits for `gate` before writing anything.
    pub(super) fn gated(
        dir: &Path,
        meta: RecordingMeta,
        limit_bytes: u64,
        queue_frames: usize,
        gate: Receiver<()>,
    ) -> Result<Recorder, RecordingError> {
        Self::start(dir, meta, limit_bytes, queue_frames, Some(gate))
    }
}
