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
//!
//! # Bounds
//! With claims the socket is open to every local user, so what one user's
//! requests (refused ones above all) write is bounded twice:
//! - each line: the command is quoted to at most [`MAX_COMMAND_BYTES`] and
//!   the result (which may quote a word of the request) to at most
//!   [`MAX_RESULT_BYTES`], both counted as written (JSON-escaped), the rest
//!   replaced by a marker ` [... N bytes cut]` (N of the original text);
//!   so a line is at most [`MAX_LINE_BYTES`];
//! - each user (uid; root is never limited, nor claim expiries, which the
//!   number of claims bounds): a token bucket of [`BURST_LINES`] lines
//!   refilled at [`LINES_PER_S`] lines/s; a line without a token is dropped
//!   and counted, and at most every [`REPORT_INTERVAL`] (and at exit) one
//!   line per user says how many were dropped and between which instants:
//!   `{"time":...,"uid":1001,"event":"dropped","dropped":4242,
//!   "first_ns":...,"last_ns":...,"result":"..."}`.
//!
//! One user's requests over T seconds thus write at most
//! (BURST_LINES + LINES_PER_S × T) × MAX_LINE_BYTES bytes plus one report
//! line per REPORT_INTERVAL: 200 lines of at most 2 KiB, then 100 KiB/s.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::claims::{Claim, ClaimDone};
use super::sys::PeerCred;
use super::Failure;

/// Bytes of the request's text a line quotes (JSON-escaped).
pub const MAX_COMMAND_BYTES: usize = 200;
/// Bytes of the result a line quotes (JSON-escaped): our words, but a
/// refusal may quote a word of the request.
pub const MAX_RESULT_BYTES: usize = 320;
/// The longest line: the two quoted texts with their markers and every
/// other field at its widest (a claim's line), with room to spare.
pub const MAX_LINE_BYTES: usize = 2048;
/// Lines a user may write at once before its rate counts.
pub const BURST_LINES: f64 = 200.0;
/// Lines per second a user may write on average.
pub const LINES_PER_S: f64 = 50.0;
/// How often, at most, a user's dropped lines are reported.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(1);
/// Users whose state is kept at most; beyond it, users with a full bucket
/// and nothing to report are forgotten (they would start full anyway).
const MAX_USERS: usize = 4096;

/// One user's token bucket and the lines it dropped since the last report.
struct Bucket {
    tokens: f64,
    at: Instant,
    dropped: u64,
    /// Wall clock (ns) of the first and last line dropped since the report.
    first_ns: u64,
    last_ns: u64,
}

struct State {
    file: File,
    buckets: HashMap<u32, Bucket>,
    last_report: Instant,
}

pub struct Audit {
    state: Mutex<State>,
}

/// Whether a line of `uid` may be written at `now`, taking its token; a
/// line refused is counted for the report. The bucket starts full.
fn admit(buckets: &mut HashMap<u32, Bucket>, uid: u32, now: Instant, now_ns: u64) -> bool {
    if buckets.len() >= MAX_USERS && !buckets.contains_key(&uid) {
        buckets.retain(|_, b| {
            b.dropped > 0
                || b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * LINES_PER_S
                    < BURST_LINES
        });
    }
    let b = buckets.entry(uid).or_insert(Bucket {
        tokens: BURST_LINES,
        at: now,
        dropped: 0,
        first_ns: 0,
        last_ns: 0,
    });
    let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
    b.tokens = (b.tokens + elapsed * LINES_PER_S).min(BURST_LINES);
    b.at = now;
    if b.tokens >= 1.0 {
        b.tokens -= 1.0;
        return true;
    }
    if b.dropped == 0 {
        b.first_ns = now_ns;
    }
    b.dropped += 1;
    b.last_ns = now_ns;
    false
}

/// Bytes `c` takes in a JSON string as serde_json writes it.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// `text` cut so that it takes at most `max_bytes` JSON-escaped, the cut
/// marked with how many of its bytes were left out.
fn quoted(text: &str, max_bytes: usize) -> String {
    let mut used = 0;
    for (i, c) in text.char_indices() {
        used += escaped_len(c);
        if used > max_bytes {
            return format!("{} [... {} bytes cut]", &text[..i], text.len() - i);
        }
    }
    text.to_string()
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
            state: Mutex::new(State {
                file,
                buckets: HashMap::new(),
                last_report: Instant::now(),
            }),
        })
    }

    /// Appends one line, unless its user is over its rate (module doc). A
    /// failed write is reported on stderr: the change it records has
    /// already happened (or been refused) and must not be undone.
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
        self.write(cred, command, result, at_ns, extra, true, Instant::now());
    }

    /// A claim request that was applied: what it did to which claim.
    pub fn record_claim(&self, cred: &PeerCred, command: &str, done: &ClaimDone) {
        let extra = claim_fields(&done.claim, done.what);
        self.record_with(cred, command, "ok", Some(done.at_ns), extra);
    }

    /// A claim's expiry, under its claimant's uid and pid, with the instant
    /// its rules and pipes went: never rate-limited (the claims held bound
    /// them), so that a user's flood cannot hide when its claims went.
    pub fn record_expiry(&self, c: &Claim, result: &Result<u64, Failure>) {
        let cred = PeerCred {
            uid: c.uid,
            gid: c.uid,
            pid: c.pid,
        };
        let (result, at_ns) = match result {
            Ok(at) => ("ok".to_string(), Some(*at)),
            Err(f) => (f.audit_result(), None),
        };
        let command = format!("expire {}", c.name());
        let extra = claim_fields(c, "expired");
        self.write(
            &cred,
            &command,
            &result,
            at_ns,
            extra,
            false,
            Instant::now(),
        );
    }

    /// Writes the reports of dropped lines due (at most every
    /// [`REPORT_INTERVAL`]); called by the control side's periodic thread.
    pub fn tick(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        report_due(&mut st, Instant::now(), false);
    }

    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        cred: &PeerCred,
        command: &str,
        result: &str,
        at_ns: Option<u64>,
        extra: serde_json::Map<String, serde_json::Value>,
        limited: bool,
        now: Instant,
    ) {
        let wall = wall_now();
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        report_due(&mut st, now, false);
        if limited
            && cred.uid != 0
            && !admit(&mut st.buckets, cred.uid, now, wall.as_nanos() as u64)
        {
            return;
        }
        let mut v = serde_json::json!({
            "time": rfc3339(wall.as_secs(), wall.subsec_nanos()),
            "time_ns": wall.as_nanos() as u64,
            "uid": cred.uid,
            "gid": cred.gid,
            "pid": cred.pid,
            "command": quoted(command, MAX_COMMAND_BYTES),
            "result": quoted(result, MAX_RESULT_BYTES),
        });
        if let Some(at) = at_ns {
            v["at_ns"] = at.into();
        }
        for (k, x) in extra {
            v[k] = x;
        }
        append(&mut st.file, v);
    }
}

impl Drop for Audit {
    /// What was dropped since the last report is said before the log closes.
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        report_due(st, Instant::now(), true);
    }
}

/// The audit fields of a claim event.
fn claim_fields(c: &Claim, event: &str) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    m.insert("claim".into(), c.name().into());
    m.insert("claim_uid".into(), c.uid.into());
    m.insert("event".into(), event.into());
    m.insert("pipes".into(), serde_json::json!(c.numbers()));
    m.insert("expires_ns".into(), c.expires_ns.into());
    m
}

fn wall_now() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

fn append(file: &mut File, v: serde_json::Value) {
    let mut line = v.to_string();
    line.push('\n');
    if let Err(e) = file.write_all(line.as_bytes()) {
        eprintln!("linkem: audit log: {e}");
    }
}

/// One line per user with lines dropped since its last report, when
/// [`REPORT_INTERVAL`] has passed since the last reports (or `now_anyway`).
fn report_due(st: &mut State, now: Instant, now_anyway: bool) {
    if !now_anyway && now.saturating_duration_since(st.last_report) < REPORT_INTERVAL {
        return;
    }
    st.last_report = now;
    let wall = wall_now();
    let mut due: Vec<(u32, u64, u64, u64)> = Vec::new();
    for (&uid, b) in st.buckets.iter_mut().filter(|(_, b)| b.dropped > 0) {
        due.push((uid, b.dropped, b.first_ns, b.last_ns));
        b.dropped = 0;
    }
    due.sort_unstable();
    for (uid, dropped, first_ns, last_ns) in due {
        append(
            &mut st.file,
            serde_json::json!({
                "time": rfc3339(wall.as_secs(), wall.subsec_nanos()),
                "time_ns": wall.as_nanos() as u64,
                "uid": uid,
                "event": "dropped",
                "dropped": dropped,
                "first_ns": first_ns,
                "last_ns": last_ns,
                "result": format!(
                    "{dropped} lines of uid {uid} dropped: over {LINES_PER_S} lines/s \
                     (bursts of {BURST_LINES})"
                ),
            }),
        );
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

    fn user(uid: u32) -> PeerCred {
        PeerCred {
            uid,
            gid: uid,
            pid: 4242,
        }
    }

    /// The refusal of a line with a 60 KiB word, as the server words it.
    fn flood_line(i: usize) -> (String, String) {
        let word = format!("{i}{}", "A".repeat(60 << 10));
        let command = format!("claim udp 5678 -- {word}");
        let result = format!("error: '{word}': unknown word");
        (command, result)
    }

    /// uid 1001 sends 20 000 refused requests of 60 KiB each within 2 s (by
    /// the bucket's clock); uid 1002 sends 20 in between. The log stays
    /// under (BURST_LINES + LINES_PER_S × 2 s + 2 reports) × MAX_LINE_BYTES,
    /// says how many of 1001's lines it dropped, and keeps all of 1002's.
    #[test]
    fn a_flood_of_long_refused_requests_is_bounded_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("audit.jsonl");
        let audit = Audit::open(&p).unwrap();
        let t0 = Instant::now();
        let n = 20_000;
        let span = Duration::from_secs(2);
        for i in 0..n {
            let now = t0 + span * i as u32 / n as u32;
            let (command, result) = flood_line(i);
            audit.write(
                &user(1001),
                &command,
                &result,
                None,
                Default::default(),
                true,
                now,
            );
            if i % 1000 == 0 {
                let c = format!("claim udp 6000 -- delay {i}ms");
                audit.write(
                    &user(1002),
                    &c,
                    "ok",
                    Some(1),
                    Default::default(),
                    true,
                    now,
                );
            }
        }
        drop(audit);
        let text = std::fs::read_to_string(&p).unwrap();
        let bound = (BURST_LINES as usize + LINES_PER_S as usize * 2 + 4) * MAX_LINE_BYTES;
        assert!(
            text.len() <= bound,
            "{} bytes in {} lines, over the bound {bound}",
            text.len(),
            text.lines().count()
        );
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let longest = text.lines().map(str::len).max().unwrap();
        assert!(longest <= MAX_LINE_BYTES, "a line of {longest} bytes");
        let written = lines
            .iter()
            .filter(|l| l["uid"] == 1001 && l["command"].is_string())
            .count();
        let dropped: u64 = lines
            .iter()
            .filter(|l| l["uid"] == 1001 && l["event"] == "dropped")
            .map(|l| l["dropped"].as_u64().unwrap())
            .sum();
        // The burst, then the rate over 2 s (one token of rounding).
        assert!(
            (298..=302).contains(&written),
            "{written} lines of uid 1001 written"
        );
        assert_eq!(
            written as u64 + dropped,
            n as u64,
            "every line of uid 1001 is written or counted as dropped"
        );
        let report = lines.iter().find(|l| l["event"] == "dropped").unwrap();
        assert!(
            report["result"]
                .as_str()
                .unwrap()
                .contains("lines of uid 1001 dropped: over 50 lines/s (bursts of 200)"),
            "{report}"
        );
        // The quoted word is cut, saying by how much.
        let first = lines.iter().find(|l| l["uid"] == 1001).unwrap();
        let command = first["command"].as_str().unwrap();
        assert!(command.len() <= MAX_COMMAND_BYTES + 40, "{command}");
        assert!(
            command.ends_with(&format!(" [... {} bytes cut]", flood_line(0).0.len() - 200)),
            "{command}"
        );
        assert!(
            first["result"].as_str().unwrap().contains("bytes cut]"),
            "{first}"
        );
        // Another user's lines all appear.
        let other = lines.iter().filter(|l| l["uid"] == 1002).count();
        assert_eq!(other, 20, "uid 1002's lines");
    }

    #[test]
    fn quoting_cuts_on_a_character_and_counts_escapes() {
        assert_eq!(quoted("short", 200), "short");
        let q = quoted(&"é".repeat(150), 200);
        assert_eq!(q, format!("{} [... 100 bytes cut]", "é".repeat(100)));
        // A control byte takes 6 bytes escaped, a quote 2.
        let q = quoted(&"\u{1}".repeat(100), 200);
        assert_eq!(q, format!("{} [... 67 bytes cut]", "\u{1}".repeat(33)));
        let q = quoted(&"\"".repeat(300), 200);
        assert_eq!(q, format!("{} [... 200 bytes cut]", "\"".repeat(100)));
        // The widest line stays within MAX_LINE_BYTES.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("audit.jsonl");
        let audit = Audit::open(&p).unwrap();
        let mut extra = serde_json::Map::new();
        extra.insert("claim".into(), "tcp 65535-65535".into());
        extra.insert("claim_uid".into(), u32::MAX.into());
        extra.insert("event".into(), "released".into());
        extra.insert("pipes".into(), serde_json::json!([49_998, 49_999]));
        extra.insert("expires_ns".into(), u64::MAX.into());
        let cred = PeerCred {
            uid: u32::MAX,
            gid: u32::MAX,
            pid: i32::MIN,
        };
        let worst = "\u{1}".repeat(10_000);
        audit.record_with(&cred, &worst, &worst, Some(u64::MAX), extra);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.len() <= MAX_LINE_BYTES, "{} bytes: {text}", text.len());
    }

    #[test]
    fn civil_dates() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000000000Z");
        // date -u -d @1795441800
        assert_eq!(rfc3339(1_795_441_800, 5), "2026-11-23T13:50:00.000000005Z");
        assert_eq!(rfc3339(951_782_400, 0), "2000-02-29T00:00:00.000000000Z");
    }
}
