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

use super::wire::{ChangeLine, FileEntry, MetaFile, FILES_DIR};
use super::{
    NamedFiles, RecordedChange, RecordedInput, RecordingError, RecordingMeta, Start, CHANGES_FILE,
    FILES_DIR_NAME, FRAMES_FILE, MAX_CHANGES_BYTES, META_FILE, START_RULES_FILE,
};
use crate::capture::MAX_CAPLEN;
use crate::outfile;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::{DataLink, Endianness};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::VecDeque;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

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

/// Makes `dir`, or accepts it if it is an empty directory; whether it was made here.
fn make_dir(dir: &Path) -> Result<bool, RecordingError> {
    let name = dir.display().to_string();
    let refuse = |reason: String| RecordingError::Directory {
        dir: name.clone(),
        reason,
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {
            let mut entries = std::fs::read_dir(dir).map_err(|source| RecordingError::Io {
                file: name.clone(),
                action: "cannot list",
                source,
            })?;
            if let Some(entry) = entries.next() {
                let first = entry
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .unwrap_or_default();
                return Err(refuse(format!(
                    "the directory is not empty (it holds '{first}'); a recording goes into a \
                     new or empty directory, so that no file of yours is overwritten"
                )));
            }
            Ok(false)
        }
        Ok(_) => Err(refuse(
            "is a file, not a directory; give a directory for the recording".into(),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => match std::fs::create_dir(dir) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(refuse(format!(
                "cannot create the directory: its parent {} does not exist",
                parent_name(dir)
            ))),
            Err(source) => Err(RecordingError::Io {
                file: name,
                action: "cannot create the directory",
                source,
            }),
        },
        Err(source) => Err(RecordingError::Io {
            file: name,
            action: "cannot inspect",
            source,
        }),
    }
}

fn parent_name(dir: &Path) -> String {
    match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.display().to_string(),
        _ => ".".to_string(),
    }
}

/// Removes what a failed [`Recorder::create`] made: the known files, and the directory
/// if it made it (only if empty then; anything else in it is not ours).
fn remove_debris(dir: &Path, made_dir: bool) {
    for name in [META_FILE, FRAMES_FILE, CHANGES_FILE, START_RULES_FILE] {
        let _ = std::fs::remove_file(dir.join(name));
    }
    // The directory was new or empty, so `files/` holds only the recorder's copies.
    let _ = std::fs::remove_dir_all(dir.join(FILES_DIR_NAME));
    if made_dir {
        let _ = std::fs::remove_dir(dir);
    }
}

fn write_meta(
    dir: &Path,
    meta: &RecordingMeta,
    files: &BTreeMap<String, FileEntry>,
) -> Result<(), RecordingError> {
    let text = MetaFile::from_meta(meta, START_RULES_FILE, files).to_text();
    outfile::write_all(&dir.join(META_FILE), text.as_bytes())?;
    Ok(())
}

/// Creates a file that must not exist yet (the directory is new or was empty).
fn create_new(path: &Path) -> Result<BufWriter<File>, RecordingError> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|source| RecordingError::Io {
            file: path.display().to_string(),
            action: "cannot create",
            source,
        })?;
    Ok(BufWriter::with_capacity(WRITE_BUFFER_BYTES, file))
}

/// Counts the bytes written through it: the size of `frames.pcapng` so far.
struct Counting<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

struct Files {
    pcap: PcapNgWriter<Counting<BufWriter<File>>>,
    /// Counted: it may not pass [`MAX_CHANGES_BYTES`], what a replay reads.
    changes: Counting<BufWriter<File>>,
}

fn open_files(
    dir: &Path,
    meta: &RecordingMeta,
    start_files: &BTreeMap<String, FileEntry>,
) -> Result<Files, RecordingError> {
    write_meta(dir, meta, start_files)?;
    if let Start::Rules(text) = &meta.start {
        outfile::write_all(&dir.join(START_RULES_FILE), text.as_bytes())?;
    }
    let frames_path = dir.join(FRAMES_FILE);
    let io_err = |source: io::Error| RecordingError::Io {
        file: frames_path.display().to_string(),
        action: "cannot write",
        source,
    };
    let pcap_err = |e: pcap_file::PcapError| match e {
        pcap_file::PcapError::IoError(source) => io_err(source),
        other => io_err(io::Error::other(other.to_string())),
    };
    let out = Counting {
        inner: create_new(&frames_path)?,
        bytes: 0,
    };
    // Little-endian whatever the machine: the same run gives the same bytes anywhere.
    let mut pcap = PcapNgWriter::with_endianness(out, Endianness::Little).map_err(pcap_err)?;
    for side in &meta.sides {
        let interface = InterfaceDescriptionBlock {
            linktype: DataLink::from(meta.link_type),
            snaplen: meta.snaplen,
            options: vec![
                InterfaceDescriptionOption::IfName(Cow::Owned(side.clone())),
                InterfaceDescriptionOption::IfTsResol(9),
            ],
        };
        pcap.write_pcapng_block(interface).map_err(pcap_err)?;
    }
    // The header is on disk at once: a run killed before its first flush still leaves a
    // capture Wireshark opens.
    pcap.get_mut().flush().map_err(io_err)?;
    let changes = Counting {
        inner: create_new(&dir.join(CHANGES_FILE))?,
        bytes: 0,
    };
    Ok(Files { pcap, changes })
}

/// The writer thread's state.
struct FileWriter {
    dir: PathBuf,
    files: Files,
    frames: u64,
    changes: u64,
    limit_bytes: u64,
    copies: Copies,
    shared: Arc<Shared>,
    spent: SyncSender<Vec<u8>>,
}

/// How long the writer waits for input before flushing what it buffered, so that a
/// quiet run's recording is on disk within a second of its last frame.
const IDLE_FLUSH: Duration = Duration::from_millis(500);

impl FileWriter {
    fn run(&mut self, rx: Receiver<RecordedInput>) -> Written {
        loop {
            let input = match rx.recv_timeout(IDLE_FLUSH) {
                Ok(input) => input,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Err(reason) = self.flush() {
                        self.shared.stop(reason);
                        break;
                    }
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
            if let Err(reason) = self.write(input) {
                self.shared.stop(reason);
                break;
            }
        }
        if let Err(reason) = self.flush() {
            self.shared.stop(reason);
        }
        Written {
            frames: self.frames,
            changes: self.changes,
            bytes: self.files.pcap.get_ref().bytes,
        }
    }

    fn file_name(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    fn flush(&mut self) -> Result<(), String> {
        self.files
            .pcap
            .get_mut()
            .flush()
            .map_err(|e| format!("cannot write {}: {e}", self.file_name(FRAMES_FILE)))?;
        self.files
            .changes
            .flush()
            .map_err(|e| format!("cannot write {}: {e}", self.file_name(CHANGES_FILE)))
    }

    /// Writes one input; the reason recording must stop, if it must.
    fn write(&mut self, input: RecordedInput) -> Result<(), String> {
        match input {
            RecordedInput::Frame {
                side,
                ts_ns,
                orig_len,
                data,
            } => {
                self.shared
                    .queued_bytes
                    .fetch_sub(data.len() as u64, Ordering::Relaxed);
                let result = self.write_frame(side, ts_ns, orig_len, &data);
                if data.capacity() <= SPENT_BUFFER_MAX_BYTES {
                    let _ = self.spent.try_send(data);
                }
                result
            }
            RecordedInput::Change { at_ns, change } => self.write_change(at_ns, change),
        }
    }

    fn write_frame(
        &mut self,
        side: usize,
        ts_ns: u64,
        orig_len: u32,
        data: &[u8],
    ) -> Result<(), String> {
        let n = self.frames + 1;
        // Refused here rather than written: the reader would refuse the file. Checked
        // here, not in `frame`, so that the first problem in input order is the reason.
        if side > 1 {
            return Err(format!(
                "frame {n} is on side {side}; a recording has sides 0 (a) and 1 (b)"
            ));
        }
        if data.len() > orig_len as usize {
            return Err(format!(
                "frame {n} has {} captured bytes, more than its length on the wire ({orig_len})",
                data.len()
            ));
        }
        if data.len() > MAX_CAPLEN as usize {
            return Err(format!(
                "frame {n} has {} captured bytes, more than the {MAX_CAPLEN} a capture holds",
                data.len()
            ));
        }
        let bytes = self.files.pcap.get_ref().bytes;
        if bytes
            .saturating_add(self.copies.bytes)
            .saturating_add(epb_len_bytes(data.len()))
            > self.limit_bytes
        {
            return Err(format!(
                "reached the record limit of {} bytes after {} frames",
                self.limit_bytes, self.frames
            ));
        }
        let block = EnhancedPacketBlock {
            interface_id: side as u32,
            timestamp: Duration::from_nanos(ts_ns),
            original_len: orig_len,
            data: Cow::Borrowed(data),
            options: Vec::new(),
        };
        self.files
            .pcap
            .write_pcapng_block(block)
            .map_err(|e| format!("cannot write {}: {e}", self.file_name(FRAMES_FILE)))?;
        debug_assert_eq!(
            self.files.pcap.get_ref().bytes,
            bytes + epb_len_bytes(data.len())
        );
        self.frames += 1;
        Ok(())
    }

    fn write_change(&mut self, at_ns: u64, change: RecordedChange) -> Result<(), String> {
        let number = self.changes + 1;
        let (lines, rules, files) = match change {
            RecordedChange::Lines(lines) => (Some(lines), None, BTreeMap::new()),
            RecordedChange::Rules(text, read) => {
                let room = self
                    .limit_bytes
                    .saturating_sub(self.files.pcap.get_ref().bytes);
                let files = self
                    .copies
                    .copy(&self.dir, &read, room)
                    .map_err(|e| match e {
                        CopyError::Room(what) => format!(
                            "reached the record limit of {} bytes after {} frames: {what}",
                            self.limit_bytes, self.frames
                        ),
                        CopyError::Write(e) => e.to_string(),
                    })?;
                let name = format!("change-{number:04}.rules");
                outfile::write_all(&self.dir.join(&name), text.as_bytes())
                    .map_err(|e| e.to_string())?;
                (None, Some(name), files)
            }
        };
        let line = ChangeLine {
            frames: self.frames,
            at_ns,
            lines,
            rules,
            files,
        };
        let mut text = line.to_text();
        text.push('\n');
        if self.files.changes.bytes + text.len() as u64 > MAX_CHANGES_BYTES {
            if let Some(name) = &line.rules {
                // Not referenced by any line: no debris beside the recording.
                let _ = std::fs::remove_file(self.dir.join(name));
            }
            return Err(format!(
                "{} reached {MAX_CHANGES_BYTES} bytes, the most a replay reads, after {} \
                 changes",
                self.file_name(CHANGES_FILE),
                self.changes
            ));
        }
        self.files
            .changes
            .write_all(text.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", self.file_name(CHANGES_FILE)))?;
        self.changes += 1;
        Ok(())
    }
}

/// The copies in `files/`: one per distinct content, and the bytes they hold (which
/// count toward the size limit with `frames.pcapng`).
#[derive(Default)]
struct Copies {
    /// The copy (`files/K-BASENAME`) of each content copied, by its sha256.
    by_sha256: HashMap<String, String>,
    bytes: u64,
}

enum CopyError {
    /// The copies would take more than the room left; what and how much.
    Room(String),
    Write(RecordingError),
}

impl Copies {
    /// Copies each of `files` whose content is not copied yet and gives the map entry of
    /// every one. Nothing is written when the new copies would take more than
    /// `room_bytes` with those already made.
    fn copy(
        &mut self,
        dir: &Path,
        files: &NamedFiles,
        room_bytes: u64,
    ) -> Result<BTreeMap<String, FileEntry>, CopyError> {
        let hashed: Vec<(&String, &String, String)> = files
            .iter()
            .map(|(name, text)| (name, text, sha256_hex(text.as_bytes())))
            .collect();
        let mut new: HashMap<&str, u64> = HashMap::new();
        for (_, text, sha) in &hashed {
            if !self.by_sha256.contains_key(sha) {
                new.insert(sha, text.len() as u64);
            }
        }
        let new_bytes: u64 = new.values().sum();
        if self.bytes.saturating_add(new_bytes) > room_bytes {
            let names: Vec<&str> = hashed.iter().map(|(n, _, _)| n.as_str()).collect();
            return Err(CopyError::Room(format!(
                "the files the run read ({}) take {new_bytes} bytes, beyond the record \
                 limit of {room_bytes} bytes (with {} bytes copied before)",
                names.join(", "),
                self.bytes
            )));
        }
        let mut entries = BTreeMap::new();
        for (name, text, sha) in hashed {
            let copy = match self.by_sha256.get(&sha) {
                Some(copy) => copy.clone(),
                None => {
                    let folder = dir.join(FILES_DIR);
                    if self.by_sha256.is_empty() {
                        std::fs::create_dir_all(&folder).map_err(|source| {
                            CopyError::Write(RecordingError::Io {
                                file: folder.display().to_string(),
                                action: "cannot create the directory",
                                source,
                            })
                        })?;
                    }
                    let copy = format!(
                        "{FILES_DIR}/{}-{}",
                        self.by_sha256.len(),
                        copy_base_name(name)
                    );
                    outfile::write_all(&dir.join(&copy), text.as_bytes())
                        .map_err(|e| CopyError::Write(e.into()))?;
                    self.bytes += text.len() as u64;
                    self.by_sha256.insert(sha.clone(), copy.clone());
                    copy
                }
            };
            entries.insert(
                name.clone(),
                FileEntry {
                    copy,
                    sha256: sha,
                    bytes: text.len() as u64,
                },
            );
        }
        Ok(entries)
    }
}

/// The sha256 of `bytes` in lower-case hex.
pub(super) fn sha256_hex(bytes: &[u8]) -> String {
    let mut hex = String::with_capacity(64);
    for b in Sha256::digest(bytes) {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// The last component of a name as written, cut to `[A-Za-z0-9._-]` and 64 bytes, so
/// a copy's name says which file it is and is always a plain name.
fn copy_base_name(name: &str) -> String {
    let last = name.rsplit('/').next().unwrap_or(name);
    let base: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if base.is_empty() {
        "file".into()
    } else {
        base
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
