//! Reading a recording back: `recording.json`, `changes.jsonl` and the rule files are
//! read and checked at [`Recording::open`]; frames are read one at a time as
//! [`Recording::inputs`] reaches them, so a recording larger than memory replays.
//!
//! A recording its run did not finish (`complete: false`: killed, or stopped by a
//! full disk) may end inside a record: `frames.pcapng` inside a packet block,
//! `changes.jsonl` inside its last line. Such a recording replays up to its last
//! whole record, and [`Recording::cut_short`] says where it was cut and what was not
//! replayed; the changes recorded after the last whole frame are left out with it.
//! A complete recording cut anywhere is an error naming the file and the offset.

use super::wire::{self, FileEntry, NumberedChange, StartFile};
use super::{
    NamedFiles, RecordedChange, RecordedInput, RecordingError, RecordingMeta, CHANGES_FILE,
    FRAMES_FILE, MAX_CHANGES_BYTES, META_FILE,
};
use crate::capture::{CaptureError, CaptureReader, IO_BUFFER_BYTES};
use crate::infile::{self, MAX_TEXT_BYTES};
use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

/// Whether `path` is a recording's directory (a directory holding `recording.json`),
/// for commands that take either a capture or a recording.
pub fn is_recording(path: &Path) -> bool {
    path.is_dir() && path.join(META_FILE).exists()
}

/// A change read from `changes.jsonl`, its rule text loaded.
struct PendingChange {
    /// Where it is, for errors.
    line: usize,
    frames: u64,
    at_ns: u64,
    change: RecordedChange,
}

/// An opened recording: its description, then its inputs in order.
pub struct Recording {
    /// What `recording.json` says, the start rules' text loaded. `complete` false means
    /// the run's inputs are not all here (see [`RecordingMeta::complete`]).
    pub meta: RecordingMeta,
    dir: PathBuf,
    frames: CaptureReader<BufReader<File>>,
    changes: VecDeque<PendingChange>,
    /// Frames returned so far.
    frames_read: u64,
    done: bool,
    /// Where an incomplete recording was cut, in words (see [`Recording::cut_short`]).
    cut_short: Vec<String>,
}

impl Recording {
    /// Opens the recording in `dir`: reads and checks `recording.json`, `changes.jsonl`
    /// and every rule file they name, and the header of `frames.pcapng`. An incomplete
    /// recording opens (check `meta.complete`).
    ///
    /// # Errors
    /// A missing or unreadable file, or content the format does not allow; the message
    /// names the file, and the line for `changes.jsonl`.
    pub fn open(dir: &Path) -> Result<Recording, RecordingError> {
        let meta_path = dir.join(META_FILE);
        let meta_name = meta_path.display().to_string();
        if !dir.is_dir() {
            return Err(RecordingError::Directory {
                dir: dir.display().to_string(),
                reason: "is not a directory holding a recording".into(),
            });
        }
        let text = infile::read_text(&meta_path, MAX_TEXT_BYTES).map_err(|e| {
            if e.is_not_found() {
                RecordingError::invalid(
                    &meta_name,
                    None,
                    format!(
                        "missing: {} is not a linkem recording (or not a whole one)",
                        dir.display()
                    ),
                )
            } else {
                e.into()
            }
        })?;
        let file = wire::parse_meta(&meta_name, &text)?;
        let start_rules = match &file.start {
            StartFile::Rules(name) => Some(infile::read_text(&dir.join(name), MAX_TEXT_BYTES)?),
            StartFile::Link(_) | StartFile::Links(_) => None,
        };
        let start_files = read_copies(dir, &meta_name, &file.files)?;
        let meta = file.into_meta(start_rules, start_files);

        let changes_path = dir.join(CHANGES_FILE);
        let changes_name = changes_path.display().to_string();
        let mut bytes = infile::read_bytes(&changes_path, MAX_CHANGES_BYTES)?;
        let mut cut_short = Vec::new();
        if let Some(cut) = cut_last_line(&meta, &changes_name, &bytes) {
            let line = bytes[..cut].iter().filter(|&&b| b == b'\n').count() + 1;
            cut_short.push(format!(
                "{changes_name} is cut short in line {line} (byte offset {cut}): the change \
                 it was writing is not replayed"
            ));
            bytes.truncate(cut);
        }
        let text = infile::utf8_text(&changes_path, bytes)?;
        let numbered = wire::parse_changes(&changes_name, &text)?;
        if meta.complete && numbered.len() as u64 != meta.changes {
            return Err(RecordingError::invalid(
                &meta_name,
                None,
                format!(
                    "says {} changes but {} holds {}",
                    meta.changes,
                    changes_name,
                    numbered.len()
                ),
            ));
        }
        let mut changes = VecDeque::with_capacity(numbered.len());
        for NumberedChange { line, change } in numbered {
            let recorded = match (change.lines, change.rules) {
                (Some(lines), _) => RecordedChange::Lines(lines),
                (None, Some(name)) => RecordedChange::Rules(
                    infile::read_text(&dir.join(name), MAX_TEXT_BYTES)?,
                    read_copies(dir, &format!("{changes_name} line {line}"), &change.files)?,
                ),
                // parse_changes refuses a line with neither.
                (None, None) => RecordedChange::Lines(Vec::new()),
            };
            changes.push_back(PendingChange {
                line,
                frames: change.frames,
                at_ns: change.at_ns,
                change: recorded,
            });
        }

        // A regular file, opened without blocking: a FIFO put there would make the
        // open wait for a writer for ever. Its size is not bounded (frames are read
        // one at a time).
        let frames_path = dir.join(FRAMES_FILE);
        let frames_file = infile::open_regular(&frames_path, u64::MAX)?;
        let frames = CaptureReader::from_reader(
            &frames_path.display().to_string(),
            BufReader::with_capacity(IO_BUFFER_BYTES, frames_file),
        )?;
        if frames.link_type().0 != meta.link_type {
            return Err(RecordingError::invalid(
                &dir.join(FRAMES_FILE).display().to_string(),
                None,
                format!(
                    "link type {} but {} says {}",
                    frames.link_type().0,
                    META_FILE,
                    meta.link_type
                ),
            ));
        }
        Ok(Recording {
            meta,
            dir: dir.to_path_buf(),
            frames,
            changes,
            frames_read: 0,
            done: false,
            cut_short,
        })
    }

    /// Where this incomplete recording was found cut inside a record, and what
    /// is not replayed for it, one sentence each; empty when every record was
    /// whole. Complete once [`Recording::inputs`] has ended.
    pub fn cut_short(&self) -> &[String] {
        &self.cut_short
    }

    /// Every input in the order the core saw it; an error ends the sequence.
    pub fn inputs(&mut self) -> impl Iterator<Item = Result<RecordedInput, RecordingError>> + '_ {
        std::iter::from_fn(move || self.next_input())
    }

    /// The next input; `None` at the end and after an error.
    pub fn next_input(&mut self) -> Option<Result<RecordedInput, RecordingError>> {
        if self.done {
            return None;
        }
        let result = self.read_next();
        if !matches!(result, Some(Ok(_))) {
            self.done = true;
        }
        result
    }

    fn frames_name(&self) -> String {
        self.dir.join(FRAMES_FILE).display().to_string()
    }

    fn read_next(&mut self) -> Option<Result<RecordedInput, RecordingError>> {
        // parse_changes keeps `frames` non-decreasing, so the first change is the next.
        if self
            .changes
            .front()
            .is_some_and(|c| c.frames <= self.frames_read)
        {
            let c = self.changes.pop_front()?;
            return Some(Ok(RecordedInput::Change {
                at_ns: c.at_ns,
                change: c.change,
            }));
        }
        match self.frames.next_packet() {
            Some(Ok(packet)) => {
                let side = self.frames.last_interface().unwrap_or(0);
                if side > 1 {
                    return Some(Err(RecordingError::invalid(
                        &self.frames_name(),
                        None,
                        format!(
                            "frame {} is on interface {side}; a recording has interfaces 0 \
                             (side a) and 1 (side b)",
                            self.frames_read + 1
                        ),
                    )));
                }
                self.frames_read += 1;
                Some(Ok(RecordedInput::Frame {
                    side: side as usize,
                    ts_ns: packet.ts_ns,
                    orig_len: packet.orig_len,
                    data: packet.data,
                }))
            }
            Some(Err(e @ CaptureError::Truncated { .. })) if !self.meta.complete => {
                self.cut_short.push(format!(
                    "{e}: the recording was cut short there; {} frames before it are replayed",
                    self.frames_read
                ));
                self.changes_after_the_cut();
                None
            }
            Some(Err(e)) => Some(Err(e.into())),
            None => {
                if !self.meta.complete && !self.changes.is_empty() {
                    self.changes_after_the_cut();
                    return None;
                }
                if let Some(c) = self.changes.front() {
                    let changes_name = self.dir.join(CHANGES_FILE).display().to_string();
                    return Some(Err(RecordingError::invalid(
                        &changes_name,
                        Some(c.line),
                        format!(
                            "the change comes after {} frames, but {} holds only {}",
                            c.frames, FRAMES_FILE, self.frames_read
                        ),
                    )));
                }
                if self.meta.complete && self.frames_read != self.meta.frames {
                    let meta_name = self.dir.join(META_FILE).display().to_string();
                    return Some(Err(RecordingError::invalid(
                        &meta_name,
                        None,
                        format!(
                            "says {} frames but {} holds {}",
                            self.meta.frames, FRAMES_FILE, self.frames_read
                        ),
                    )));
                }
                None
            }
        }
    }
}

impl Recording {
    /// Leaves out the changes recorded after the last whole frame of an
    /// incomplete recording (their frames are not there), saying how many.
    fn changes_after_the_cut(&mut self) {
        if let Some(first) = self.changes.front() {
            let changes_name = self.dir.join(CHANGES_FILE).display().to_string();
            self.cut_short.push(format!(
                "{} changes from {changes_name} line {} on come after frame {}, the last in \
                 {FRAMES_FILE}: not replayed",
                self.changes.len(),
                first.line,
                self.frames_read
            ));
            self.changes.clear();
        }
    }
}

/// Where to cut `changes.jsonl`'s `bytes` before reading them: after the last
/// newline, when the recording is incomplete and its last line has no newline and
/// is not a whole change (cut inside its JSON, or inside a character); the writer
/// ends every line it finishes with one. `None`: read it all.
fn cut_last_line(meta: &RecordingMeta, name: &str, bytes: &[u8]) -> Option<usize> {
    if meta.complete || bytes.is_empty() || bytes.ends_with(b"\n") {
        return None;
    }
    let cut = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let line = bytes[..cut].iter().filter(|&&b| b == b'\n').count() + 1;
    let whole = std::str::from_utf8(&bytes[cut..])
        .is_ok_and(|tail| wire::parse_change_line(name, line, tail).is_ok());
    (!whole).then_some(cut)
}

/// The files a map of `recording.json` or of a change names, each read from its copy,
/// which must be there with the size and sha256 the map gives: a replay that read
/// other bytes would not be the run's. `whose`: the file holding the map, for errors.
fn read_copies(
    dir: &Path,
    whose: &str,
    files: &BTreeMap<String, FileEntry>,
) -> Result<NamedFiles, RecordingError> {
    let mut texts = NamedFiles::new();
    for (name, entry) in files {
        let path = dir.join(&entry.copy);
        let path_name = path.display().to_string();
        let text = infile::read_text(&path, MAX_TEXT_BYTES).map_err(|e| {
            RecordingError::invalid(
                &path_name,
                None,
                format!(
                    "the copy of {name:?} that {whose} names cannot be read: {e}; the recording \
                     is not whole"
                ),
            )
        })?;
        let sha = super::writer::sha256_hex(text.as_bytes());
        if text.len() as u64 != entry.bytes || sha != entry.sha256 {
            return Err(RecordingError::invalid(
                &path_name,
                None,
                format!(
                    "the copy of {name:?} has been altered: {} bytes, sha256 {sha}, where {whose} \
                     says {} bytes, sha256 {}",
                    text.len(),
                    entry.bytes,
                    entry.sha256
                ),
            ));
        }
        texts.insert(name.clone(), text);
    }
    Ok(texts)
}
