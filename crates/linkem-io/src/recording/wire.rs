//! The JSON of `recording.json` and `changes.jsonl`, parsed from text without touching
//! files, so the fuzz target can drive exactly what [`super::Recording::open`] runs.
//!
//! Unknown fields are refused, not ignored: a field this version does not know may change
//! decisions, and a replay that silently ignored it would not be a replay. The format
//! grows by its `version`.

use super::{RecordingError, RecordingMeta, Start, FORMAT_NAME, FORMAT_VERSION};
use linkem_core::filetext::hide_content;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// `recording.json` as stored: the start rules by file name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetaFile {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// Always [`FORMAT_VERSION`] for what this linkem reads.
    pub version: u32,
    /// [`RecordingMeta::linkem`].
    pub linkem: String,
    /// [`RecordingMeta::seed`].
    pub seed: u64,
    /// [`RecordingMeta::link_type`].
    pub link_type: u32,
    /// [`RecordingMeta::snaplen`].
    pub snaplen: u32,
    /// [`RecordingMeta::sides`].
    pub sides: [String; 2],
    /// [`RecordingMeta::start`], the rules by file name.
    pub start: StartFile,
    /// [`RecordingMeta::start_ns`] (version 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ns: Option<u64>,
    /// [`RecordingMeta::options`].
    pub options: Map<String, Value>,
    /// [`RecordingMeta::complete`].
    pub complete: bool,
    /// [`RecordingMeta::frames`].
    pub frames: u64,
    /// [`RecordingMeta::changes`].
    pub changes: u64,
    /// [`RecordingMeta::skipped`].
    pub skipped: u64,
    /// [`RecordingMeta::stopped`].
    pub stopped: Option<String>,
    /// Version 2: the files the start configuration read, by the name the words or
    /// rules gave each.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, FileEntry>,
}

/// One copied file: where the copy is (`files/NAME` inside the directory), and the
/// sha256 (lower-case hex) and size of the bytes the run read, which the copy must have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// `files/K-BASENAME`, relative to the recording's directory.
    pub copy: String,
    /// The sha256 of the bytes read, lower-case hex.
    pub sha256: String,
    /// The size of the bytes read.
    pub bytes: u64,
}

/// The folder of a recording that holds the copies of the files the run read.
pub const FILES_DIR: &str = "files";

/// `start` as stored: `{"link":"<words>"}` (both sides' link), `{"links":["<a->b
/// words>","<b->a words>"]}` (sides that differ) or `{"rules":"<file in the directory>"}`.
/// `links` came after version 1's first readers, which refuse it as an unknown variant
/// rather than replay both sides with side a's link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum StartFile {
    /// The link words themselves, for both sides.
    Link(String),
    /// Side a's link words, then side b's.
    Links([String; 2]),
    /// The name of the file holding the rule text.
    Rules(String),
}

/// One line of `changes.jsonl`: exactly one of `lines` and `rules`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeLine {
    /// Frames of `frames.pcapng` fed to the core before the change.
    pub frames: u64,
    /// The instant the change took effect, in nanoseconds on the frames' clock.
    pub at_ns: u64,
    /// Control lines as typed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<Vec<String>>,
    /// The name of the file (in the directory) holding the whole new rule set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<String>,
    /// Version 2, with `rules`: the files the new rule set read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, FileEntry>,
}

/// A [`ChangeLine`] and the line of `changes.jsonl` it came from (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumberedChange {
    /// The 1-based line number.
    pub line: usize,
    /// What the line says.
    pub change: ChangeLine,
}

impl MetaFile {
    /// What `recording.json` says of `meta`, the start rules stored in `rules_file`.
    pub fn from_meta(
        meta: &RecordingMeta,
        rules_file: &str,
        files: &BTreeMap<String, FileEntry>,
    ) -> MetaFile {
        MetaFile {
            format: FORMAT_NAME.to_string(),
            version: FORMAT_VERSION,
            linkem: meta.linkem.clone(),
            seed: meta.seed,
            link_type: meta.link_type,
            snaplen: meta.snaplen,
            sides: meta.sides.clone(),
            start: match &meta.start {
                Start::Link(words) => StartFile::Link(words.clone()),
                Start::Links(words) => StartFile::Links(words.clone()),
                Start::Rules(_) => StartFile::Rules(rules_file.to_string()),
            },
            start_ns: meta.start_ns,
            options: meta.options.clone(),
            complete: meta.complete,
            frames: meta.frames,
            changes: meta.changes,
            skipped: meta.skipped,
            stopped: meta.stopped.clone(),
            files: files.clone(),
        }
    }

    /// The file's text: pretty JSON (people read it), ending in a newline.
    pub fn to_text(&self) -> String {
        // Serialising strings, numbers and a map of JSON values cannot fail.
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// The meta with `start` taken from `start_rules` when the run started from rules.
    pub fn into_meta(
        self,
        start_rules: Option<String>,
        files: BTreeMap<String, String>,
    ) -> RecordingMeta {
        RecordingMeta {
            version: self.version,
            files,
            seed: self.seed,
            link_type: self.link_type,
            snaplen: self.snaplen,
            sides: self.sides,
            start: match self.start {
                StartFile::Link(words) => Start::Link(words),
                StartFile::Links(words) => Start::Links(words),
                StartFile::Rules(_) => Start::Rules(start_rules.unwrap_or_default()),
            },
            start_ns: self.start_ns,
            options: self.options,
            linkem: self.linkem,
            complete: self.complete,
            frames: self.frames,
            changes: self.changes,
            skipped: self.skipped,
            stopped: self.stopped,
        }
    }
}

impl ChangeLine {
    /// The line's text (compact JSON, no newline).
    pub fn to_text(&self) -> String {
        // Serialising strings and numbers cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Whether `name` may be a file a recording refers to: a plain name inside the
/// directory. A crafted recording must not make replay read `/etc/shadow` or `../x`.
pub fn check_file_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the file name is empty".into());
    }
    if name.starts_with('.') || name.contains(['/', '\0']) {
        return Err(format!(
            "{name:?} is not a plain file name inside the recording's directory"
        ));
    }
    Ok(())
}

/// Parses `recording.json`'s text; `file` is what errors call it.
///
/// # Errors
/// Not JSON, not an object, `format` other than [`FORMAT_NAME`], `version` other than
/// [`FORMAT_VERSION`], a field missing, of the wrong type or unknown, a link type beyond
/// 16 bits, a start rules name that leaves the directory, or counts that contradict
/// `complete`.
pub fn parse_meta(file: &str, text: &str) -> Result<MetaFile, RecordingError> {
    let bad = |reason: String| RecordingError::invalid(file, None, reason);
    let serde_bad = |e: serde_json::Error| bad(serde_message(&e, file, text));
    let value: Value = serde_json::from_str(text)
        .map_err(|e| bad(format!("not JSON: {}", serde_message(&e, file, text))))?;
    let Some(object) = value.as_object() else {
        return Err(bad("not a JSON object".into()));
    };
    match object.get("format") {
        Some(Value::String(f)) if f == FORMAT_NAME => {}
        Some(_) => {
            return Err(bad(format!(
                "\"format\" is not \"{FORMAT_NAME}\": not a linkem recording"
            )))
        }
        None => {
            return Err(bad(format!(
                "no \"format\" field: not a linkem recording (want \"format\":\"{FORMAT_NAME}\")"
            )))
        }
    }
    match object.get("version") {
        Some(v)
            if v.as_u64()
                .is_some_and(|v| (1..=u64::from(FORMAT_VERSION)).contains(&v)) => {}
        Some(_) => {
            return Err(bad(format!(
                "\"version\" is not a format version this linkem ({}) reads: 1 to \
                 {FORMAT_VERSION}",
                env!("CARGO_PKG_VERSION")
            )))
        }
        None => return Err(bad("no \"version\" field".into())),
    }
    let meta: MetaFile = serde_json::from_value(value).map_err(serde_bad)?;
    if meta.link_type > u32::from(u16::MAX) {
        return Err(bad(format!(
            "link type {} does not fit pcapng's 16 bits",
            meta.link_type
        )));
    }
    if let StartFile::Rules(name) = &meta.start {
        check_file_name(name).map_err(|e| bad(format!("start rules: {e}")))?;
    }
    check_files(meta.version, &meta.files).map_err(bad)?;
    if meta.version < 3 && meta.start_ns.is_some() {
        return Err(bad(format!(
            "\"start_ns\" in a version {} recording (the start instant came with version 3)",
            meta.version
        )));
    }
    if meta.complete && (meta.skipped > 0 || meta.stopped.is_some()) {
        return Err(bad(format!(
            "says complete but also {} skipped frames and stopped {:?}",
            meta.skipped, meta.stopped
        )));
    }
    Ok(meta)
}

/// serde's message about `text` under `linkem_core::filetext`'s rule: what it
/// quotes of the file is hidden; what it says was expected (`expected one of
/// ...`, from the format's own field names) is kept.
fn serde_message(e: &serde_json::Error, file: &str, text: &str) -> String {
    let message = e.to_string();
    match message.find(", expected") {
        Some(at) => format!(
            "{}{}",
            hide_content(&message[..at], file, text),
            &message[at..]
        ),
        None => hide_content(&message, file, text),
    }
}

/// Parses one line of `changes.jsonl` (1-based `line`); `file` is what errors call it.
///
/// # Errors
/// Not a JSON object of the [`ChangeLine`] form, neither or both of `lines` and
/// `rules`, or a rules name that leaves the directory.
pub fn parse_change_line(
    file: &str,
    line: usize,
    text: &str,
) -> Result<ChangeLine, RecordingError> {
    let bad = |reason: String| RecordingError::invalid(file, Some(line), reason);
    let change: ChangeLine = serde_json::from_str(text)
        .map_err(|e| bad(format!("not a change: {}", serde_message(&e, file, text))))?;
    match (&change.lines, &change.rules) {
        (None, Some(name)) => check_file_name(name).map_err(|e| bad(format!("rules: {e}")))?,
        (Some(_), None) if !change.files.is_empty() => {
            return Err(bad(
                "has \"files\" beside \"lines\" (only a rule set names files)".into(),
            ))
        }
        (Some(_), Some(_)) => return Err(bad("has both \"lines\" and \"rules\"".into())),
        (None, None) => return Err(bad("has neither \"lines\" nor \"rules\"".into())),
        (Some(_), None) => {}
    }
    check_files(FORMAT_VERSION, &change.files).map_err(bad)?;
    Ok(change)
}

/// Parses all of `changes.jsonl`; empty lines are skipped (the last newline makes one).
///
/// # Errors
/// Any line [`parse_change_line`] refuses, or a line whose `frames` is below the line
/// before's: changes are stored in the order they were applied, after frames that were.
pub fn parse_changes(file: &str, text: &str) -> Result<Vec<NumberedChange>, RecordingError> {
    let mut changes: Vec<NumberedChange> = Vec::new();
    for (k, line_text) in text.split('\n').enumerate() {
        let line = k + 1;
        if line_text.is_empty() {
            continue;
        }
        let change = parse_change_line(file, line, line_text)?;
        if let Some(before) = changes.last() {
            if change.frames < before.change.frames {
                return Err(RecordingError::invalid(
                    file,
                    Some(line),
                    format!(
                        "\"frames\" is {} but line {} before it says {}; changes are stored \
                         in the order they were applied",
                        change.frames, before.line, before.change.frames
                    ),
                ));
            }
        }
        changes.push(NumberedChange { line, change });
    }
    Ok(changes)
}

/// Refuses a file map a version-1 recording cannot have, and an entry whose copy is
/// not a plain file inside `files/` or whose sha256 is not 64 hex digits.
fn check_files(version: u32, files: &BTreeMap<String, FileEntry>) -> Result<(), String> {
    if version < 2 && !files.is_empty() {
        return Err("\"files\" in a version 1 recording (files came with version 2)".into());
    }
    for (name, entry) in files {
        let plain = entry
            .copy
            .strip_prefix(FILES_DIR)
            .and_then(|rest| rest.strip_prefix('/'))
            .ok_or_else(|| {
                format!(
                    "file {name:?}: its copy {:?} is not in {FILES_DIR}/",
                    entry.copy
                )
            })?;
        check_file_name(plain).map_err(|e| format!("file {name:?}: {e}"))?;
        if entry.sha256.len() != 64 || !entry.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "file {name:?}: sha256 {:?} is not 64 hex digits",
                entry.sha256
            ));
        }
    }
    Ok(())
}
