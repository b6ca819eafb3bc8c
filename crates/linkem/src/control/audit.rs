//! The audit log: one JSON line per request that asks for a change (refused
//! ones too): `{"time":"2026-11-23T15:30:00.123456789Z","time_ns":...,"uid":0,
//! "gid":0,"pid":123,"command":"link both delay 20ms","result":"ok","at_ns":...}`.
//!
//! The file is opened once at start, append-only (O_APPEND: each line is one
//! write, so lines of concurrent clients never interleave), created 0600, and
//! never truncated; a symlink in its place is refused.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Mutex;

use super::sys::PeerCred;

/// Longest command kept in a line (the rest is cut, marked with "...").
const MAX_COMMAND_CHARS: usize = 512;

pub struct Audit {
    file: Mutex<File>,
}

impl Audit {
    pub fn open(path: &Path) -> Result<Audit, String> {
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| format!("--audit {}: {e}", path.display()))?;
        Ok(Audit {
            file: Mutex::new(file),
        })
    }

    /// Appends one line. A failed write is reported on stderr: the change it
    /// records has already happened (or been refused) and must not be undone.
    pub fn record(&self, cred: &PeerCred, command: &str, result: &str, at_ns: Option<u64>) {
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

    #[test]
    fn civil_dates() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000000000Z");
        // date -u -d @1795441800
        assert_eq!(rfc3339(1_795_441_800, 5), "2026-11-23T13:50:00.000000005Z");
        assert_eq!(rfc3339(951_782_400, 0), "2000-02-29T00:00:00.000000000Z");
    }
}
