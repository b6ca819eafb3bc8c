//! Every small file linkem reads (TOML configs, distribution tables, and rule files,
//! profiles and traces as they come) is read through [`read_text`], so that a bad path
//! is a clear error at once and never a hang or a memory blow-up:
//!
//! - it must be a regular file: checked with `stat` before opening (a FIFO would block
//!   in `open`), and again with `fstat` on the opened descriptor, which is opened with
//!   `O_NONBLOCK` so that a file swapped for a FIFO between the two cannot block;
//! - it must be at most [`MAX_TEXT_BYTES`] (16 MiB) long: checked from the metadata, and
//!   the read itself stops one byte past the limit, so a file that grows meanwhile (or a
//!   `/proc` file that claims size 0) cannot be read without bound;
//! - it must be UTF-8; the error names the line, never its content.
//!
//! An error about a file's *content* (what a parser found wrong in it) never quotes
//! it either: that rule is `linkem_core::filetext`'s, for every file kind.
//!
//! 16 MiB is far above any real config or table (netem's tables are about 20 KiB, a
//! Dummynet profile a few KiB) and small enough to read in well under a second.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The most a config, table, profile or trace may hold, in bytes (16 MiB); the usual
/// `max_bytes` for [`read_text`].
pub const MAX_TEXT_BYTES: u64 = 16 << 20;

/// Why a file could not be read. The message names the file and the reason, never the
/// file's content.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// `stat`, `open`, `fstat` or `read` failed (missing file, no permission, I/O
    /// error); [`ReadError::is_not_found`] tells a missing file apart.
    #[error("{file}: {source}")]
    Io {
        /// The path as the caller gave it.
        file: String,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// The path names a directory, FIFO, device or socket, found either before
    /// opening or on the opened descriptor; nothing was read.
    #[error("{file}: is {kind}, not a regular file")]
    NotRegular {
        /// The path as the caller gave it.
        file: String,
        /// What it is instead, as a phrase for the message ("a FIFO", "a directory").
        kind: &'static str,
    },
    /// The file is longer than the caller's limit, by its metadata or by what the
    /// read actually returned.
    #[error("{file}: {size} bytes is more than the {limit}-byte limit for this kind of file")]
    TooLarge {
        /// The path as the caller gave it.
        file: String,
        /// Size in bytes: from the metadata, or `limit + 1` when the read ran past
        /// the limit (the file grew, or claimed a smaller size).
        size: u64,
        /// The caller's limit in bytes (`max_bytes`).
        limit: u64,
    },
    /// The content is not valid UTF-8.
    #[error("{file}: line {line} is not UTF-8 text")]
    NotText {
        /// The path as the caller gave it.
        file: String,
        /// The 1-based line holding the first invalid byte.
        line: usize,
    },
}

impl ReadError {
    /// Whether the file does not exist (callers that search several places go on).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

fn kind(t: std::fs::FileType) -> Option<&'static str> {
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        Some("not a file")
    }
}

/// Opens `path` for reading after checking it is a regular file of at most `max_bytes`,
/// both before opening (`stat`) and on the opened descriptor (`fstat`). The descriptor
/// is non-blocking and close-on-exec. Callers that read it themselves must still bound
/// the read, as the file may grow after the check.
///
/// # Errors
/// [`ReadError::Io`], [`ReadError::NotRegular`] or [`ReadError::TooLarge`].
pub fn open_regular(path: &Path, max_bytes: u64) -> Result<File, ReadError> {
    let file_name = || path.display().to_string();
    let io_err = |source| ReadError::Io {
        file: file_name(),
        source,
    };
    let check = |m: &std::fs::Metadata| {
        if let Some(kind) = kind(m.file_type()) {
            return Err(ReadError::NotRegular {
                file: file_name(),
                kind,
            });
        }
        if m.len() > max_bytes {
            return Err(ReadError::TooLarge {
                file: file_name(),
                size: m.len(),
                limit: max_bytes,
            });
        }
        Ok(())
    };
    check(&std::fs::metadata(path).map_err(io_err)?)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(io_err)?;
    check(&file.metadata().map_err(io_err)?)?;
    Ok(file)
}

/// Reads `path`'s bytes under the rules in the module doc: a regular file of at most
/// `max_bytes` bytes, read at most `max_bytes + 1` bytes far.
///
/// # Errors
/// [`ReadError::Io`], [`ReadError::NotRegular`] or [`ReadError::TooLarge`].
pub fn read_bytes(path: &Path, max_bytes: u64) -> Result<Vec<u8>, ReadError> {
    let file = open_regular(path, max_bytes)?;
    let mut bytes = Vec::new();
    file.take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| ReadError::Io {
            file: path.display().to_string(),
            source,
        })?;
    if bytes.len() as u64 > max_bytes {
        return Err(ReadError::TooLarge {
            file: path.display().to_string(),
            size: bytes.len() as u64,
            limit: max_bytes,
        });
    }
    Ok(bytes)
}

/// `bytes` read from `path` as UTF-8 text; the error names the line of the first
/// invalid byte, never the content.
///
/// # Errors
/// [`ReadError::NotText`].
pub fn utf8_text(path: &Path, bytes: Vec<u8>) -> Result<String, ReadError> {
    String::from_utf8(bytes).map_err(|e| {
        let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        ReadError::NotText {
            file: path.display().to_string(),
            line: 1 + good.iter().filter(|&&b| b == b'\n').count(),
        }
    })
}

/// Reads `path` as UTF-8 text under the rules in the module doc: a regular file of at
/// most `max_bytes` bytes (usually [`MAX_TEXT_BYTES`]), read at most `max_bytes + 1`
/// bytes far.
///
/// # Errors
/// Any [`ReadError`]; none of them carries the file's content.
pub fn read_text(path: &Path, max_bytes: u64) -> Result<String, ReadError> {
    utf8_text(path, read_bytes(path, max_bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn reads_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        std::fs::write(&p, "rate = \"1mbit\"\n").unwrap();
        assert_eq!(read_text(&p, 100).unwrap(), "rate = \"1mbit\"\n");
    }

    #[test]
    fn devices_directories_and_fifos_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // Safety: mkfifo reads a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let t = Instant::now();
        for (p, what) in [
            (Path::new("/dev/zero"), "character device"),
            (dir.path(), "directory"),
            (fifo.as_path(), "FIFO"),
        ] {
            let e = read_text(p, MAX_TEXT_BYTES).unwrap_err().to_string();
            assert!(e.contains(what) && e.contains("not a regular file"), "{e}");
        }
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn too_large_is_refused_from_the_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big");
        let f = File::create(&p).unwrap();
        // Sparse: no disk used.
        f.set_len(MAX_TEXT_BYTES + 1).unwrap();
        let e = read_text(&p, MAX_TEXT_BYTES).unwrap_err().to_string();
        assert!(e.contains("limit"), "{e}");
    }

    #[test]
    fn not_utf8_names_the_line_not_the_content() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bin");
        std::fs::write(&p, b"secret-one\nsecret-two \xff\n").unwrap();
        let e = read_text(&p, 100).unwrap_err().to_string();
        assert!(e.contains("line 2") && !e.contains("secret"), "{e}");
    }

    #[test]
    fn missing_is_reported_as_not_found() {
        let e = read_text(Path::new("/nonexistent/linkem"), 10).unwrap_err();
        assert!(e.is_not_found());
    }
}
