//! The files a control request may make the emulator read: by bare name,
//! from the one directory `--control-files DIR` names (tried first), then the
//! system's netem tables ([`linkem_ctl::system_tables`]). A client can so
//! hand a root emulator a trace or a table written by whoever may write in
//! DIR (linkem-cni makes it 0700, for the node agent), and nothing else.
//!
//! A name is 1 to 255 of `A-Z a-z 0-9 . _ -`, not `.` or `..`: no `/`, so
//! it stays in DIR. DIR must be a directory, not a symlink, at start; each
//! file is opened with `O_NOFOLLOW | O_NONBLOCK`: a symlink planted in DIR
//! is refused, as is a FIFO, a directory or a device (`fstat` on the opened
//! file), and a file over [`linkem_io::infile::MAX_TEXT_BYTES`] is not read
//! past it.

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The directory of `--control-files`.
pub struct ControlFiles {
    path: PathBuf,
}

static FILES: OnceLock<ControlFiles> = OnceLock::new();

/// Whether `name` is a bare file name a request may give.
pub fn bare_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl ControlFiles {
    /// Checks `dir` is a directory, not a symlink to one.
    pub fn open(dir: &Path) -> Result<ControlFiles, String> {
        match std::fs::symlink_metadata(dir) {
            Ok(m) if m.file_type().is_dir() => Ok(ControlFiles {
                path: dir.to_path_buf(),
            }),
            Ok(_) => Err(format!(
                "--control-files {}: not a directory (a directory, not a symlink)",
                dir.display()
            )),
            Err(e) => Err(format!("--control-files {}: {e}", dir.display())),
        }
    }

    /// `name`'s text from the directory; `Ok(None)` when no such file is there.
    pub fn read(&self, name: &str) -> Result<Option<String>, String> {
        if !bare_name(name) {
            return Err(format!(
                "'{name}': a file of {} is named by its bare name (A-Z a-z 0-9 . _ -)",
                self.path.display()
            ));
        }
        let path = self.path.join(name);
        let shown = path.display().to_string();
        let opened = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
            .open(&path);
        let file = match opened {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(format!("{shown}: a symlink, not read"))
            }
            Err(e) => return Err(format!("{shown}: {e}")),
        };
        let meta = file.metadata().map_err(|e| format!("{shown}: {e}"))?;
        if !meta.file_type().is_file() {
            return Err(format!("{shown}: not a regular file, not read"));
        }
        let max = linkem_io::infile::MAX_TEXT_BYTES;
        if meta.len() > max {
            return Err(format!(
                "{shown}: {} bytes is more than the {max}-byte limit",
                meta.len()
            ));
        }
        let mut bytes = Vec::new();
        file.take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("{shown}: {e}"))?;
        if bytes.len() as u64 > max {
            return Err(format!("{shown}: more than the {max}-byte limit"));
        }
        linkem_io::infile::utf8_text(Path::new(&shown), bytes)
            .map(Some)
            .map_err(|e| e.to_string())
    }
}

/// Sets the directory of this process's control requests (at start; each
/// socket of several pairs sets the same one).
pub fn set(dir: &Path) -> Result<(), String> {
    if let Some(f) = FILES.get() {
        if f.path == dir {
            return Ok(());
        }
        return Err(format!(
            "--control-files {}: this process already reads {}",
            dir.display(),
            f.path.display()
        ));
    }
    let files = ControlFiles::open(dir)?;
    let _ = FILES.set(files);
    Ok(())
}

/// The file loader of control requests: DIR's file of that name when there
/// is one, else the system's table.
pub fn read(name: &str) -> Result<String, String> {
    if let Some(files) = FILES.get() {
        if let Some(text) = files.read(name)? {
            return Ok(text);
        }
        return linkem_ctl::system_tables(name).map_err(|_| {
            format!(
                "'{name}': no such file in {} (--control-files), nor a system table \
                 (/usr/lib/tc/{name}.dist)",
                files.path.display()
            )
        });
    }
    linkem_ctl::system_tables(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with_trace() -> (tempfile::TempDir, ControlFiles) {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("up.trace"), "1\n2\n").unwrap();
        let f = ControlFiles::open(d.path()).unwrap();
        (d, f)
    }

    #[test]
    fn a_bare_name_is_read_from_the_directory() {
        let (_d, f) = dir_with_trace();
        assert_eq!(f.read("up.trace").unwrap().as_deref(), Some("1\n2\n"));
        assert_eq!(f.read("absent").unwrap(), None);
    }

    #[test]
    fn paths_dots_symlinks_and_non_files_are_refused() {
        let (d, f) = dir_with_trace();
        for bad in ["../x", "/etc/passwd", ".", "..", "a/b", ""] {
            let e = f.read(bad).unwrap_err();
            assert!(e.contains("bare name"), "{bad}: {e}");
        }
        std::os::unix::fs::symlink("/etc/passwd", d.path().join("pw")).unwrap();
        let e = f.read("pw").unwrap_err();
        assert!(e.contains("symlink"), "{e}");
        std::fs::create_dir(d.path().join("sub")).unwrap();
        let e = f.read("sub").unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let made = std::process::Command::new("mkfifo")
            .arg(d.path().join("fifo"))
            .status()
            .unwrap();
        assert!(made.success());
        let e = f.read("fifo").unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
    }

    #[test]
    fn a_file_over_the_limit_is_not_read() {
        let (d, f) = dir_with_trace();
        let big = std::fs::File::create(d.path().join("big.trace")).unwrap();
        big.set_len(linkem_io::infile::MAX_TEXT_BYTES + 1).unwrap();
        let e = f.read("big.trace").unwrap_err();
        assert!(e.contains("limit"), "{e}");
    }

    #[test]
    fn the_directory_itself_may_not_be_a_symlink() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("real")).unwrap();
        std::os::unix::fs::symlink(d.path().join("real"), d.path().join("link")).unwrap();
        assert!(ControlFiles::open(&d.path().join("real")).is_ok());
        let e = ControlFiles::open(&d.path().join("link")).err().unwrap();
        assert!(e.contains("not a symlink"), "{e}");
    }
}
