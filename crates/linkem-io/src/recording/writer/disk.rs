//! The writer thread's side of a recording: it makes the directory, opens the files,
//! copies the files a run read and writes each input the queue brings.

use super::{epb_len_bytes, Shared, Written, SPENT_BUFFER_MAX_BYTES, WRITE_BUFFER_BYTES};
use crate::capture::MAX_CAPLEN;
use crate::outfile;
use crate::recording::wire::{ChangeLine, FileEntry, MetaFile, FILES_DIR};
use crate::recording::{
    NamedFiles, RecordedChange, RecordedInput, RecordingError, RecordingMeta, Start, CHANGES_FILE,
    FILES_DIR_NAME, FRAMES_FILE, MAX_CHANGES_BYTES, META_FILE, START_RULES_FILE,
};
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::{DataLink, Endianness};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::time::Duration;

/// Makes `dir`, or accepts it if it is an empty directory; whether it was made here.
pub(super) fn make_dir(dir: &Path) -> Result<bool, RecordingError> {
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

pub(super) fn parent_name(dir: &Path) -> String {
    match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.display().to_string(),
        _ => ".".to_string(),
    }
}

/// Removes what a failed [`Recorder::create`] made: the known files, and the directory
/// if it made it (only if empty then; anything else in it is not ours).
pub(super) fn remove_debris(dir: &Path, made_dir: bool) {
    for name in [META_FILE, FRAMES_FILE, CHANGES_FILE, START_RULES_FILE] {
        let _ = std::fs::remove_file(dir.join(name));
    }
    // The directory was new or empty, so `files/` holds only the recorder's copies.
    let _ = std::fs::remove_dir_all(dir.join(FILES_DIR_NAME));
    if made_dir {
        let _ = std::fs::remove_dir(dir);
    }
}

pub(super) fn write_meta(
    dir: &Path,
    meta: &RecordingMeta,
    files: &BTreeMap<String, FileEntry>,
) -> Result<(), RecordingError> {
    let text = MetaFile::from_meta(meta, START_RULES_FILE, files).to_text();
    outfile::write_all(&dir.join(META_FILE), text.as_bytes())?;
    Ok(())
}

/// Creates a file that must not exist yet (the directory is new or was empty).
pub(super) fn create_new(path: &Path) -> Result<BufWriter<File>, RecordingError> {
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
pub(super) struct Counting<W> {
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

pub(super) struct Files {
    pcap: PcapNgWriter<Counting<BufWriter<File>>>,
    /// Counted: it may not pass [`MAX_CHANGES_BYTES`], what a replay reads.
    changes: Counting<BufWriter<File>>,
}

pub(super) fn open_files(
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
pub(super) struct FileWriter {
    pub(super) dir: PathBuf,
    pub(super) files: Files,
    pub(super) frames: u64,
    pub(super) changes: u64,
    pub(super) limit_bytes: u64,
    pub(super) copies: Copies,
    pub(super) shared: Arc<Shared>,
    pub(super) spent: SyncSender<Vec<u8>>,
}

/// How long the writer waits for input before flushing what it buffered, so that a
/// quiet run's recording is on disk within a second of its last frame.
pub(super) const IDLE_FLUSH: Duration = Duration::from_millis(500);

impl FileWriter {
    pub(super) fn run(&mut self, rx: Receiver<RecordedInput>) -> Written {
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
pub(super) struct Copies {
    /// The copy (`files/K-BASENAME`) of each content copied, by its sha256.
    by_sha256: HashMap<String, String>,
    bytes: u64,
}

pub(super) enum CopyError {
    /// The copies would take more than the room left; what and how much.
    Room(String),
    Write(RecordingError),
}

impl Copies {
    /// Copies each of `files` whose content is not copied yet and gives the map entry of
    /// every one. Nothing is written when the new copies would take more than
    /// `room_bytes` with those already made.
    pub(super) fn copy(
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
pub(in crate::recording) fn sha256_hex(bytes: &[u8]) -> String {
    let mut hex = String::with_capacity(64);
    for b in Sha256::digest(bytes) {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// The last component of a name as written, cut to `[A-Za-z0-9._-]` and 64 bytes, so
/// a copy's name says which file it is and is always a plain name.
pub(super) fn copy_base_name(name: &str) -> String {
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
