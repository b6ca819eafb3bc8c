//! The audit log: one JSON line per request that asks for a change (refused
//! ones too): `{"time":"2026-11-23T15:30:00.123456789Z","time_ns":...,"uid":0,
//! "gid":0,"pid":123,"command":"link both delay 20ms","result":"ok","at_ns":...}`.
//!
//! The file is opened once at start, append-only (O_APPEND: each line is one
//! write, so lines of concurrent clients never interleave), created 0600, and
//! never truncated. It must be a regular file (or `/dev/null`, to discard):
//! a FIFO would block start-up until a reader came (and every later write
//! while it is full), and a device or socket is no log. The type is checked
//! with `lstat` before opening and with `fstat` on the descriptor, which is
//! opened `O_NONBLOCK` so that a FIFO swapped in between cannot block
//! either. A symbolic link in its place is refused with that reason
//! (`O_NOFOLLOW`): linkem often runs privileged, and a link planted where the
//! log goes would make it append to a file of the planter's choosing.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Mutex;

use super::sys::PeerCred;

/// Longest command kept in a line (the rest is cut, marked with "...").
const MAX_COMMAND_CHARS: usize = 512;

pub struct Audit {
    file: Mutex<File>,
}

/// Why [`Audit::open`] refuses a path, as a phrase after the path; `None` for
/// a file the log may be: a regular file or `/dev/null`.
fn refusal(m: &std::fs::Metadata) -> Option<&'static str> {
    let t = m.file_type();
    if t.is_file() {
        return None;
    }
    if t.is_char_device() && std::fs::metadata("/dev/null").is_ok_and(|n| n.rdev() == m.rdev()) {
        return None;
    }
    Some(if t.is_symlink() {
        "is a symbolic link; give the log file itself (a link could send root's log anywhere)"
    } else if t.is_dir() {
        "is a directory; give a file name"
    } else if t.is_fifo() {
        "is a FIFO; the audit log must be a regular file (or /dev/null)"
    } else {
        "is not a regular file; the audit log must be a regular file (or /dev/null)"
    })
}

impl Audit {
    /// Opens (creating, 0600) the log at `path` for appending, under the rules
    /// in the module doc; never blocks.
    pub fn open(path: &Path) -> Result<Audit, String> {
        let refused = |why: &str| format!("--audit {}: {why}", path.display());
        match std::fs::symlink_metadata(path) {
            Ok(m) => {
                if let Some(why) = refusal(&m) {
                    return Err(refused(why));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(refused(&e.to_string())),
        }
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            // O_NONBLOCK only matters for a FIFO swapped in after the check
            // (opening one for writing without a reader then fails with ENXIO
            // instead of waiting); appends to a regular file never block on it.
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| match e.raw_os_error() {
                // O_NOFOLLOW's answer when a link appeared after the check.
                Some(libc::ELOOP) => refused(
                    "is a symbolic link; give the log file itself (a link could send root's log anywhere)",
                ),
                Some(libc::ENXIO) => refused("is a FIFO; the audit log must be a regular file (or /dev/null)"),
                _ => refused(&e.to_string()),
            })?;
        let m = file.metadata().map_err(|e| refused(&e.to_string()))?;
        if let Some(why) = refusal(&m) {
            return Err(refused(why));
        }
        Ok(Audit {
            file: Mutex::new(file),
        })
    }

    /// Appends one line. A failed write is reported on stderr: the change it
    /// records has already happened (or been refused) and must not be undone.
    pub fn record(&self, cred: &PeerCred, command: &str, result: &str, at_ns: Option<u64>) {
        self.record_with(cred, command, result, at_ns, serde_json::Map::new());
    }

    /// [`Audit::record`] with more fields (a claim's `claim`, `event`,
    /// `expires_ns`): one line still, the fields after `result`.
    pub fn record_with(
        &self,
        cred: &PeerCred,
        command: &str,
        result: &str,
        at_ns: Option<u64>,
        extra: serde_json::Map<String, serde_json::Value>,
    ) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let mut cmd: String = command.chars().take(MAX_COMMAND_CHARS).collect();
        if cmd.len() < command.len() {
            cmd.push_str("...");
        }
        let mut v = serde_json::json!({
            "time": rfc3339(now.as_secs(), now.subsec_nanos()),
            "time_ns": now.as_nanos() as u64,
            "uid": cred.uid,
            "gid": cred.gid,
            "pid": cred.pid,
            "command": cmd,
            "result": result,
        });
        if let Some(at) = at_ns {
            v["at_ns"] = at.into();
        }
        for (k, x) in extra {
            v[k] = x;
        }
        let mut line = v.to_string();
        line.push('\n');
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = f.write_all(line.as_bytes()) {
            eprintln!("linkem: audit log: {e}");
        }
    }
}

/// UTC time as `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ` (days to civil date: Howard
/// Hinnant's algorithm).
pub fn rfc3339(secs: u64, nanos: u32) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn cred() -> PeerCred {
        PeerCred {
            uid: 0,
            gid: 0,
            pid: 1,
        }
    }

    #[test]
    fn appends_to_a_regular_file_and_accepts_dev_null() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("audit.jsonl");
        std::fs::write(&p, "earlier\n").unwrap();
        Audit::open(&p)
            .unwrap()
            .record(&cred(), "link both delay 1ms", "ok", None);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            text.starts_with("earlier\n") && text.contains("link both delay 1ms"),
            "{text}"
        );
        Audit::open(Path::new("/dev/null"))
            .unwrap()
            .record(&cred(), "zero", "ok", None);
    }

    #[test]
    fn a_fifo_is_refused_at_once_with_or_without_a_reader() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        // This crate forbids unsafe code: the mkfifo command, not the call.
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success());
        // Without a reader, a blocking open would wait here for ever: run it on a
        // thread so that a regression fails the test instead of hanging it.
        let (tx, rx) = std::sync::mpsc::channel();
        let f = fifo.clone();
        std::thread::spawn(move || {
            let _ = tx.send(Audit::open(&f).err());
        });
        let e = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("--audit FIFO blocked start-up")
            .expect("a FIFO is refused");
        assert!(e.contains("is a FIFO") && e.contains("regular file"), "{e}");
        // With a reader holding it open, it is refused all the same.
        let _reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let t = Instant::now();
        let e = Audit::open(&fifo).err().unwrap();
        assert!(e.contains("is a FIFO"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_symlink_is_refused_by_name_not_a_bare_eloop() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::write(&real, "").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        for p in [&link, &dangling] {
            let e = Audit::open(p).err().unwrap();
            assert!(e.contains("is a symbolic link"), "{e}");
            assert!(!e.contains("os error"), "{e}");
        }
        assert!(!dir.path().join("nowhere").exists());
        assert_eq!(std::fs::read(&real).unwrap(), b"");
    }

    #[test]
    fn a_directory_or_other_device_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = Audit::open(dir.path()).err().unwrap();
        assert!(e.contains("directory"), "{e}");
        let e = Audit::open(Path::new("/dev/zero")).err().unwrap();
        assert!(e.contains("not a regular file"), "{e}");
    }

    #[test]
    fn civil_dates() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000000000Z");
        // date -u -d @1795441800
        assert_eq!(rfc3339(1_795_441_800, 5), "2026-11-23T13:50:00.000000005Z");
        assert_eq!(rfc3339(951_782_400, 0), "2000-02-29T00:00:00.000000000Z");
    }
}
