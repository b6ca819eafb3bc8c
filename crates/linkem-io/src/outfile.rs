//! Every file linkem writes goes through here, so every writer follows one rule.
//!
//! - A regular file (or a path that does not exist yet) is written to a temporary file in
//!   the same directory and renamed over the target only by [`OutputFile::commit`], i.e.
//!   when the run succeeded. An existing file keeps its mode and, where the process may
//!   set it, its owner and group. Dropping an uncommitted output deletes the temporary
//!   file, so a failed or interrupted run leaves the old file as it was and no debris.
//! - A character or block device, a FIFO or a socket is opened and written directly: it
//!   is not a file that can be replaced, and replacing `/dev/null` with a regular file is
//!   harm. `/dev/null`, `/dev/stdout` and a pipe stay what they are.
//! - A symbolic link is followed (also a dangling one, which then names the file to create):
//!   the target is replaced, the link stays a link.
//! - An output that is the same file (device and inode) as an input or as another output
//!   is refused by [`check_distinct`] before anything is opened for writing; only
//!   character devices (`/dev/null`, a terminal) may be shared, as writing one does not
//!   destroy what another reads. The inputs are every file the run reads (the capture,
//!   configs, rule files, and the distribution tables and profiles those name), each
//!   with its use ([`FileUse`]), so the refusal names both uses.
//!
//! A regular file's hard links are cut by the rename: that is the price of never leaving
//! a half-written result under the name the user asked for.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Symbolic links followed before giving up (the kernel's own limit, ELOOP).
const MAX_LINK_DEPTH: usize = 40;

/// Why an output cannot be written. The message names the file and the reason.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// A system call on the output or its temporary file failed. If it happened before
    /// [`OutputFile::commit`] renamed the temporary file, the old file is untouched.
    #[error("{file}: {action}: {source}")]
    Io {
        /// The output's path as the user gave it.
        file: String,
        /// What was being done, as a phrase for the message ("cannot write",
        /// "cannot move the finished file into place").
        action: &'static str,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// [`check_distinct`] found the output to be the same file as an input or an
    /// earlier output; nothing was opened for writing.
    #[error(
        "{output_use} {output} is the same file as {other_use} {other}: refusing to \
         overwrite it (choose another output)"
    )]
    SameFile {
        /// The refused output, as given.
        output: String,
        /// What the output is for ("output capture", "--events").
        output_use: String,
        /// The input or earlier output it coincides with, as given.
        other: String,
        /// What that file is for ("input capture", "distribution table named in the
        /// link words").
        other_use: String,
    },
    /// The output path (after following links) is a directory.
    #[error("{file}: is a directory; give a file name")]
    Directory {
        /// The output's path as the user gave it.
        file: String,
    },
}

/// Follows `path` through symbolic links (up to 40, the kernel's limit) to the name that will
/// really be written, which need not exist yet.
///
/// # Errors
/// An I/O error reading a link or its metadata, or more than 40 links in a row (a loop).
pub fn resolve(path: &Path) -> io::Result<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..MAX_LINK_DEPTH {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&p)?;
                p = match p.parent() {
                    Some(dir) if target.is_relative() => dir.join(target),
                    _ => target,
                };
            }
            Ok(_) => return Ok(p),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(p),
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other(format!(
        "more than {MAX_LINK_DEPTH} symbolic links"
    )))
}

fn is_special(m: &Metadata) -> bool {
    let t = m.file_type();
    t.is_char_device() || t.is_block_device() || t.is_fifo() || t.is_socket()
}

/// What makes two paths the same file: device and inode if it exists, else the
/// directory it would be created in (resolved) and its name.
#[derive(PartialEq, Eq)]
enum FileId {
    Inode {
        dev: u64,
        ino: u64,
        chr: bool,
    },
    New {
        dir: PathBuf,
        name: std::ffi::OsString,
    },
}

fn file_id(path: &Path) -> Option<FileId> {
    if let Ok(m) = std::fs::metadata(path) {
        return Some(FileId::Inode {
            dev: m.dev(),
            ino: m.ino(),
            chr: m.file_type().is_char_device(),
        });
    }
    let real = resolve(path).ok()?;
    let dir = match real.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Some(FileId::New {
        dir: std::fs::canonicalize(dir).ok()?,
        name: real.file_name()?.to_os_string(),
    })
}

/// A file a run reads or writes, and what for, as a refusal names it.
#[derive(Debug, Clone)]
pub struct FileUse {
    /// What the file is for, as a phrase: "input capture", "--config",
    /// "distribution table named in the link words", "output capture", "--events".
    pub role: String,
    /// The path as the user (or the file that named it) gave it.
    pub path: PathBuf,
}

impl FileUse {
    /// `path`, used as `role`.
    pub fn new(role: impl Into<String>, path: impl Into<PathBuf>) -> FileUse {
        FileUse {
            role: role.into(),
            path: path.into(),
        }
    }
}

/// Refuses outputs that are the same file as an input or as each other (compared by
/// device and inode after following links; a file not yet created by where it would
/// be), before anything is opened for writing. Character devices may repeat.
pub fn check_distinct(inputs: &[FileUse], outputs: &[FileUse]) -> Result<(), OutputError> {
    for (k, out) in outputs.iter().enumerate() {
        let Some(id) = file_id(&out.path) else {
            continue;
        };
        if matches!(id, FileId::Inode { chr: true, .. }) {
            continue;
        }
        let others = inputs.iter().chain(&outputs[..k]);
        for other in others {
            if file_id(&other.path).is_some_and(|o| o == id) {
                return Err(OutputError::SameFile {
                    output: out.path.display().to_string(),
                    output_use: out.role.clone(),
                    other: other.path.display().to_string(),
                    other_use: other.role.clone(),
                });
            }
        }
    }
    Ok(())
}

enum Target {
    /// Written in place: a device, FIFO or socket.
    Direct,
    /// Written beside the target and renamed over it on commit.
    Replace {
        temp: tempfile::TempPath,
        target: PathBuf,
    },
}

/// A file being written under the rule in the module doc. Implements [`Write`] (buffered).
pub struct OutputFile {
    name: String,
    // Declared before `target`: fields drop in order, so the buffer is flushed (harmlessly)
    // before the temporary file is deleted.
    out: BufWriter<File>,
    target: Target,
}

impl OutputFile {
    /// Opens `path` for writing with a buffer of `buffer_bytes` bytes. A device, FIFO or
    /// socket is opened directly (a FIFO without a reader blocks here, as `cmd > fifo`
    /// does); anything else gets a temporary file in the target's directory, with the
    /// existing file's mode (and owner where permitted), that only
    /// [`OutputFile::commit`] puts in place. Call [`check_distinct`] first.
    ///
    /// # Errors
    /// [`OutputError::Directory`] for a directory, [`OutputError::Io`] if the link
    /// cannot be followed or the file or temporary file cannot be created.
    pub fn create(path: &Path, buffer_bytes: usize) -> Result<OutputFile, OutputError> {
        let name = path.display().to_string();
        let io_err = |action, source| OutputError::Io {
            file: name.clone(),
            action,
            source,
        };
        let real = resolve(path).map_err(|e| io_err("cannot follow the link", e))?;
        let existing = match std::fs::metadata(&real) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err("cannot inspect", e)),
        };
        if existing.as_ref().is_some_and(Metadata::is_dir) {
            return Err(OutputError::Directory { file: name });
        }
        if existing.as_ref().is_some_and(is_special) {
            // O_NONBLOCK is not used: a FIFO without a reader should wait for one, as
            // `cmd > fifo` does; the user asked for exactly that file.
            let file = OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_CLOEXEC | libc::O_NOCTTY)
                .open(&real)
                .map_err(|e| io_err("cannot open for writing", e))?;
            return Ok(OutputFile {
                name,
                out: BufWriter::with_capacity(buffer_bytes, file),
                target: Target::Direct,
            });
        }
        let dir = match real.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let prefix = format!(
            ".{}.",
            real.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        );
        // A new file gets what a plain create gives (0666 less the umask); tempfile's
        // default 0600 would survive the rename.
        let mode = existing.as_ref().map_or(0o666, |m| m.mode() & 0o7777);
        let temp = tempfile::Builder::new()
            .prefix(&prefix)
            .suffix(".tmp")
            .permissions(std::fs::Permissions::from_mode(mode))
            .tempfile_in(&dir)
            .map_err(|e| io_err("cannot create a temporary file next to it", e))?;
        let (file, temp) = temp.into_parts();
        if let Some(m) = &existing {
            // Keeping the owner needs CAP_CHOWN unless it is ours already; without it the
            // file belongs to whoever wrote it, as with any editor that saves by rename.
            let _ = std::os::unix::fs::fchown(&file, Some(m.uid()), Some(m.gid()));
            // After chown (which clears set-id bits), and past the umask that applied at
            // creation: the existing mode exactly.
            file.set_permissions(std::fs::Permissions::from_mode(mode))
                .map_err(|e| io_err("cannot set the mode of the temporary file", e))?;
        }
        Ok(OutputFile {
            name,
            out: BufWriter::with_capacity(buffer_bytes, file),
            target: Target::Replace { temp, target: real },
        })
    }

    /// The name the user gave, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the output is written in place (a device, FIFO or socket).
    pub fn is_direct(&self) -> bool {
        matches!(self.target, Target::Direct)
    }

    /// Puts a regular file in place now, before the run ends: for an output written as
    /// the run goes (a live link log) that must stay readable up to its last flushed
    /// write if the process is killed, rather than vanish with a hidden temporary file.
    /// From here on the output is written in place; [`OutputFile::commit`] only
    /// flushes, and dropping it no longer restores the old file. A device, FIFO or
    /// socket is in place already.
    ///
    /// # Errors
    /// [`OutputError::Io`] if the rename fails; the output is then unchanged (still
    /// temporary).
    pub fn publish(&mut self) -> Result<(), OutputError> {
        let Target::Replace { target, .. } = &self.target else {
            return Ok(());
        };
        let target = target.clone();
        let Target::Replace { temp, .. } = std::mem::replace(&mut self.target, Target::Direct)
        else {
            unreachable!("matched above");
        };
        match temp.persist(&target) {
            Ok(()) => Ok(()),
            Err(e) => {
                let source = e.error;
                self.target = Target::Replace {
                    temp: e.path,
                    target,
                };
                Err(OutputError::Io {
                    file: self.name.clone(),
                    action: "cannot move the file into place",
                    source,
                })
            }
        }
    }

    /// Flushes and, for a regular file, renames it into place. Call only when the run
    /// succeeded; dropping the output instead leaves the old file untouched (unless it
    /// was [published](OutputFile::publish)).
    pub fn commit(self) -> Result<(), OutputError> {
        let OutputFile { name, out, target } = self;
        let io_err = |action, source| OutputError::Io {
            file: name.clone(),
            action,
            source,
        };
        let file = out
            .into_inner()
            .map_err(|e| io_err("cannot write", e.into_error()))?;
        match target {
            Target::Direct => Ok(()),
            Target::Replace { temp, target } => {
                drop(file);
                temp.persist(&target)
                    .map_err(|e| io_err("cannot move the finished file into place", e.error))?;
                Ok(())
            }
        }
    }
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.out.write_all(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Writes `bytes` to `path` under the rule in the module doc, in one go: create, write,
/// commit. On error the old file is untouched.
pub fn write_all(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    let mut out = OutputFile::create(path, 64 << 10)?;
    out.write_all(bytes).map_err(|source| OutputError::Io {
        file: path.display().to_string(),
        action: "cannot write",
        source,
    })?;
    out.commit()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    #[test]
    fn regular_file_is_replaced_on_commit_only_and_keeps_its_mode() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out");
        std::fs::write(&p, b"old").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        let mut o = OutputFile::create(&p, 16).unwrap();
        assert!(!o.is_direct());
        o.write_all(b"new").unwrap();
        drop(o);
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert!(leftovers(dir.path()).is_empty());
        let mut o = OutputFile::create(&p, 16).unwrap();
        o.write_all(b"new").unwrap();
        o.commit().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o640);
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn a_new_file_gets_the_usual_mode_not_0600() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("new");
        write_all(&p, b"x").unwrap();
        // 0666 less any umask: at least the owner reads and writes, and it is not 0600
        // unless the umask says so.
        let mode = std::fs::metadata(&p).unwrap().mode() & 0o777;
        let umask = {
            // What a plain create with 0666 gives under this process's umask.
            let q = dir.path().join("probe");
            File::create(&q).unwrap();
            std::fs::metadata(&q).unwrap().mode() & 0o777
        };
        assert_eq!(mode, umask);
    }

    #[test]
    fn symlink_is_followed_and_stays_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        let link = dir.path().join("link");
        std::fs::write(&real, b"old").unwrap();
        symlink("real", &link).unwrap();
        write_all(&link, b"new").unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&real).unwrap(), b"new");
        // A dangling link names the file to create.
        let dangling = dir.path().join("dangling");
        symlink("created", &dangling).unwrap();
        write_all(&dangling, b"made").unwrap();
        assert!(std::fs::symlink_metadata(&dangling)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(dir.path().join("created")).unwrap(), b"made");
    }

    #[test]
    fn dev_null_is_written_in_place_and_stays_a_device() {
        let mut o = OutputFile::create(Path::new("/dev/null"), 16).unwrap();
        assert!(o.is_direct());
        o.write_all(b"discarded").unwrap();
        o.commit().unwrap();
        assert!(std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device());
    }

    #[test]
    fn fifo_is_written_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // Safety: mkfifo reads a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap())
        };
        write_all(&fifo, b"through the pipe").unwrap();
        assert_eq!(reader.join().unwrap(), b"through the pipe");
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn a_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = OutputFile::create(dir.path(), 16).err().unwrap();
        assert!(e.to_string().contains("directory"), "{e}");
    }

    #[test]
    fn same_file_as_an_input_is_refused_through_links() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in");
        std::fs::write(&input, b"data").unwrap();
        let hard = dir.path().join("hard");
        std::fs::hard_link(&input, &hard).unwrap();
        let soft = dir.path().join("soft");
        symlink(&input, &soft).unwrap();
        let other = dir.path().join("other");
        let ins = |p: &Path| vec![FileUse::new("input", p)];
        let outs = |ps: &[&Path]| -> Vec<FileUse> {
            ps.iter().map(|p| FileUse::new("output", *p)).collect()
        };
        for out in [&input, &hard, &soft] {
            let e = check_distinct(&ins(&input), &outs(&[out])).unwrap_err();
            let e = e.to_string();
            assert!(e.contains("same file"), "{e}");
            assert!(e.starts_with("output ") && e.contains("as input "), "{e}");
        }
        // Two outputs naming one file.
        std::fs::write(&other, b"").unwrap();
        assert!(check_distinct(&ins(&input), &outs(&[&other, &other])).is_err());
        // New files and character devices pass, unless one new name is given twice.
        let new = dir.path().join("new");
        check_distinct(&ins(&input), &outs(&[&new])).unwrap();
        let again = dir.path().join(".").join("new");
        assert!(check_distinct(&ins(&input), &outs(&[&new, &again])).is_err());
        check_distinct(&ins(&input), &outs(&[&new, &other])).unwrap();
        let null = Path::new("/dev/null");
        check_distinct(&ins(null), &outs(&[null, null])).unwrap();
    }

    /// A published output is at its name from the start: what was flushed before the
    /// process died (here: forgotten, as SIGKILL runs no destructor) is readable there,
    /// and no temporary file is left beside it.
    #[test]
    fn a_published_output_keeps_what_was_flushed_when_the_writer_dies() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("up.log");
        std::fs::write(&p, "old").unwrap();
        let mut out = OutputFile::create(&p, 1 << 20).unwrap();
        out.publish().unwrap();
        out.write_all(b"# header\n1 + 100\n").unwrap();
        out.flush().unwrap();
        out.write_all(b"2 + 100\n").unwrap();
        std::mem::forget(out);
        assert_eq!(std::fs::read(&p).unwrap(), b"# header\n1 + 100\n");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file beside it");
        // Published then committed: the whole file.
        let mut out = OutputFile::create(&p, 1 << 20).unwrap();
        out.publish().unwrap();
        out.write_all(b"all\n").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"all\n");
    }
}
