//! The control socket: creation (mode, group, stale sockets), the accept
//! thread, one thread per client, and the request loop.
//!
//! A client that misbehaves harms only its own connection: a line longer than
//! [`MAX_LINE_BYTES`] is refused whole (and the rest of it skipped); a partial
//! line left unfinished for [`PARTIAL_LINE_TIMEOUT`] is refused and the
//! connection closed; a client that does not read its replies is cut off
//! after [`WRITE_TIMEOUT`]; a disconnect mid-line or mid-batch applies
//! nothing. Nothing a client sends reaches the model before it has parsed
//! and been checked completely. What a client can make linkem hold is
//! bounded when it asks: its connections ([`MAX_CLIENTS_PER_UID`] per user,
//! [`MAX_CLIENTS`] in all, [`RESERVED_CLIENTS`] kept for root and the
//! starter) and its batch ([`MAX_BATCH_LINES`] lines, [`MAX_BATCH_BYTES`]
//! bytes, each line checked for permission as it arrives, a refused one
//! never kept); each refusal names its bound.

use super::audit::Audit;
use super::metrics::Endpoint;
use super::sys::{self, PeerCred};
use super::{claims, is_audited, looks_like_change, ControlArgs, Failure, Model};
use anyhow::{anyhow, bail, Context, Result};
use linkem_ctl::{
    Request, HELP, MAX_BATCH_BYTES, MAX_BATCH_LINES, MAX_LINE_BYTES, PROTOCOL_VERSION,
};
use linkem_runtime::clock;
use serde_json::json;
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Connections served at once for users other than root and the starter;
/// more are told so and closed.
pub const MAX_CLIENTS: usize = 64;
/// Connections one such user may hold at once: a few users cannot fill
/// every slot alone.
pub const MAX_CLIENTS_PER_UID: usize = 8;
/// Connections kept beyond [`MAX_CLIENTS`] for root and the uid that started
/// linkem, so that they always get one, whoever holds the others.
pub const RESERVED_CLIENTS: usize = 8;
/// How long a started line may stay unfinished.
pub const PARTIAL_LINE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a connection may stay silent between requests.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(900);
/// How long a reply may wait for a client that does not read.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a waiting client thread looks at the stop flag.
const TICK: Duration = Duration::from_millis(100);

/// What is opened while linkem still holds its privileges (before the
/// bridge drops its capabilities): the socket, the audit file, the metrics port.
pub struct Prepared {
    listener: Option<(UnixListener, SocketFile)>,
    audit: Option<Audit>,
    metrics: Option<std::net::TcpListener>,
    pub name: String,
    /// Whether the socket's place was given (`--control PATH`), not named.
    given_path: bool,
}

/// The socket file this run placed, removed when dropped: by the server at
/// the end, or by a start-up that fails after placing it (a bad `--audit`,
/// a port in use, a signal), so no failed start leaves a socket behind.
/// Only this run's own file goes (same device and inode): a later run may
/// have replaced it.
struct SocketFile {
    path: PathBuf,
    id: (u64, u64),
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if let Ok(m) = std::fs::symlink_metadata(&self.path) {
            if (m.dev(), m.ino()) == self.id {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// A valid emulator name: it becomes a file name.
fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !ok {
        bail!("--name '{name}': use 1 to 64 of A-Z a-z 0-9 - _ . (not starting with '.')");
    }
    Ok(())
}

/// Opens the control socket, the audit log and the metrics port.
pub fn prepare(args: &ControlArgs, if_a: &str, if_b: &str) -> Result<Prepared> {
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| format!("{if_a}-{if_b}"));
    check_name(&name)?;
    let gid = match &args.control_group {
        Some(g) => Some(sys::group_id(g).map_err(|e| anyhow!("--control-group {e}"))?),
        None => None,
    };
    // With claims, every local user may connect (what each may do there is
    // bounded by its claims and limits); a control group narrows it.
    let open = args.claims.claims && gid.is_none();
    // Checked before the socket is placed, so that a typo fails without one.
    if let Some(a) = &args.metrics {
        super::metrics::parse_addr(a)?;
    }
    let listener = match args.control.as_deref() {
        Some("none") => {
            if gid.is_some() {
                bail!("--control-group needs a control socket (not --control none)");
            }
            None
        }
        Some(p) => Some(bind(Path::new(p), gid, open)?),
        // The default place may be out of reach of a user running linkem with
        // capabilities instead of root: the emulation still runs, without a socket.
        None => match default_socket(&name, gid, open) {
            Ok(l) => Some(l),
            Err(e) if gid.is_none() && !sys::is_root() => {
                eprintln!("linkem: warning: no control socket: {e:#}");
                None
            }
            Err(e) => return Err(e),
        },
    };
    let audit = match &args.audit {
        Some(p) => Some(Audit::open(p).map_err(|e| anyhow!(e))?),
        None => None,
    };
    let metrics = match &args.metrics {
        Some(a) => Some(super::metrics::bind(a)?),
        None => None,
    };
    Ok(Prepared {
        listener,
        audit,
        metrics,
        name,
        given_path: matches!(args.control.as_deref(), Some(p) if p != "none"),
    })
}

fn default_socket(name: &str, gid: Option<u32>, open: bool) -> Result<(UnixListener, SocketFile)> {
    let dir = Path::new(linkem_ctl::SOCKET_DIR);
    if !dir.exists() {
        std::fs::create_dir_all(dir)
            .and_then(|_| std::fs::set_permissions(dir, PermissionsExt::from_mode(0o755)))
            .with_context(|| {
                format!(
                    "cannot create {} (give --control PATH, or --control none)",
                    dir.display()
                )
            })?;
    }
    bind(&linkem_ctl::default_socket_path(name), gid, open)
}

/// Binds the socket under a temporary name, gives it its mode and group, and
/// only then renames it into place, so it is never reachable with a wider
/// mode; a stale socket of a killed run is replaced, a live one refused.
/// `open`: mode 0666, every local user (claims).
fn bind(path: &Path, gid: Option<u32>, open: bool) -> Result<(UnixListener, SocketFile)> {
    if path.as_os_str().len() >= 100 {
        bail!(
            "--control {}: a socket path must be shorter than 100 bytes",
            path.display()
        );
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            bail!(
                "{} exists and is not a socket: not touching it",
                path.display()
            );
        }
        match UnixStream::connect(path) {
            Ok(_) => bail!(
                "another emulator listens on {} (choose another --name or --control)",
                path.display()
            ),
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                eprintln!(
                    "linkem: replacing the stale control socket {}",
                    path.display()
                );
            }
            Err(e) => bail!("{}: {e}", path.display()),
        }
    }
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let file = path
        .file_name()
        .ok_or_else(|| anyhow!("--control {}: not a file path", path.display()))?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        file.to_string_lossy(),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp)
        .with_context(|| format!("cannot create the control socket {}", path.display()))?;
    let placed = (|| -> std::io::Result<(u64, u64)> {
        if let Some(g) = gid {
            std::os::unix::fs::chown(&tmp, None, Some(g))?;
        }
        let mode = match (gid, open) {
            (Some(_), _) => 0o660,
            (None, true) => 0o666,
            (None, false) => 0o600,
        };
        std::fs::set_permissions(&tmp, PermissionsExt::from_mode(mode))?;
        std::fs::rename(&tmp, path)?;
        let m = std::fs::symlink_metadata(path)?;
        Ok((m.dev(), m.ino()))
    })();
    match placed {
        Ok(id) => Ok((
            listener,
            SocketFile {
                path: path.to_path_buf(),
                id,
            },
        )),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(anyhow!(
                "cannot set up the control socket {}: {e}",
                path.display()
            ))
        }
    }
}

/// The running control threads. Dropping it stops them (within `TICK`
/// plus any reply still being written) and removes the socket.
pub struct Server {
    stop: Arc<AtomicBool>,
    socket: Option<SocketFile>,
    accept: Option<JoinHandle<()>>,
    clients: Arc<Mutex<Vec<JoinHandle<()>>>>,
    metrics: Option<Endpoint>,
    expiry: Option<JoinHandle<()>>,
}

/// Every [`claims::EXPIRY_TICK`] until `stop`: removes expired claims
/// (with claims on), each expiry audited under its claimant's uid and pid
/// with the instant its rules and pipes went, and lets the audit log say
/// which users' lines it dropped.
fn expiry_loop(model: Arc<Model>, audit: Option<Arc<Audit>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(claims::EXPIRY_TICK);
        if let Some(a) = &audit {
            a.tick();
        }
        let Some(rules) = model.rules().filter(|r| r.claims_on()) else {
            continue;
        };
        for (c, result) in rules.expire_claims(clock::now_ns()) {
            let cred = PeerCred {
                uid: c.uid,
                gid: c.uid,
                pid: c.pid,
            };
            if let Some(a) = &audit {
                let (result, at) = match &result {
                    Ok(at) => ("ok".to_string(), Some(*at)),
                    Err(f) => (f.audit_result(), None),
                };
                a.record_expiry(
                    &cred,
                    &format!("expire {}", c.name()),
                    &result,
                    at,
                    claim_fields(&c, "expired"),
                );
            }
        }
    }
}

/// The audit fields of a claim event.
pub(super) fn claim_fields(
    c: &claims::Claim,
    event: &str,
) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    m.insert("claim".into(), c.name().into());
    m.insert("claim_uid".into(), c.uid.into());
    m.insert("event".into(), event.into());
    m.insert("pipes".into(), json!(c.numbers()));
    m.insert("expires_ns".into(), c.expires_ns.into());
    m
}

impl Prepared {
    pub fn socket_path(&self) -> Option<&Path> {
        self.listener.as_ref().map(|l| l.1.path.as_path())
    }

    /// The lines that tell where to reach this emulator: the socket with the
    /// `linkem ctl` option that names it as it was given, and the metrics URL
    /// with the port actually bound (`--metrics 0` picks one).
    pub fn announce(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(p) = self.socket_path() {
            let how = if self.given_path {
                format!("--socket {}", p.display())
            } else {
                format!("--name {}", self.name)
            };
            out.push(format!(
                "linkem: control socket {} (linkem ctl {how})",
                p.display()
            ));
        }
        if let Some(addr) = self.metrics.as_ref().and_then(|l| l.local_addr().ok()) {
            out.push(format!("linkem: metrics on http://{addr}/metrics"));
        }
        out
    }

    pub fn start(self, model: Arc<Model>) -> Server {
        let stop = Arc::new(AtomicBool::new(false));
        let clients: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let audit = self.audit.map(Arc::new);
        let metrics = self
            .metrics
            .map(|l| Endpoint::start(l, model.clone(), stop.clone()));
        let expiry = (model.claims_on() || audit.is_some()).then(|| {
            let (model, audit, stop) = (model.clone(), audit.clone(), stop.clone());
            std::thread::Builder::new()
                .name("linkem-claims".into())
                .spawn(move || expiry_loop(model, audit, stop))
                .expect("a thread can be started")
        });
        let mut socket = None;
        let accept = self.listener.map(|(listener, file)| {
            socket = Some(file);
            let stop = stop.clone();
            let clients = clients.clone();
            std::thread::Builder::new()
                .name("linkem-ctl".into())
                .spawn(move || accept_loop(listener, model, audit, stop, clients))
                .expect("a thread can be started")
        });
        Server {
            stop,
            socket,
            accept,
            clients,
            metrics,
            expiry,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(file) = self.socket.take() {
            // Wakes the accept thread from accept().
            let _ = UnixStream::connect(&file.path);
            if let Some(t) = self.accept.take() {
                let _ = t.join();
            }
            drop(file);
        }
        let clients: Vec<JoinHandle<()>> = self
            .clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        for c in clients {
            let _ = c.join();
        }
        if let Some(m) = self.metrics.take() {
            m.stop();
        }
        if let Some(t) = self.expiry.take() {
            let _ = t.join();
        }
    }
}

/// The connections held, by kind: what [`Slots::take`] checks.
#[derive(Default)]
struct Held {
    /// Of users other than root and the starter, all together and by uid.
    ordinary: usize,
    by_uid: HashMap<u32, usize>,
    /// Of root and the starter: ordinary slots first, then the reserve.
    privileged: usize,
}

/// Counts connections against [`MAX_CLIENTS`], [`MAX_CLIENTS_PER_UID`] and
/// [`RESERVED_CLIENTS`]; a [`Slot`] gives its place back when dropped.
#[derive(Clone)]
struct Slots {
    held: Arc<Mutex<Held>>,
    owner_uid: u32,
}

struct Slot {
    held: Arc<Mutex<Held>>,
    uid: Option<u32>,
}

impl Slots {
    /// A place for a connection of `uid`, or why there is none (naming the bound).
    fn take(&self, uid: u32) -> Result<Slot, String> {
        let mut h = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if uid == 0 || uid == self.owner_uid {
            if h.ordinary + h.privileged >= MAX_CLIENTS + RESERVED_CLIENTS {
                return Err(format!(
                    "too many clients ({MAX_CLIENTS} and {RESERVED_CLIENTS} kept for root \
                     and uid {} are all in use)",
                    self.owner_uid
                ));
            }
            h.privileged += 1;
            return Ok(Slot {
                held: self.held.clone(),
                uid: None,
            });
        }
        let mine = h.by_uid.get(&uid).copied().unwrap_or(0);
        if mine >= MAX_CLIENTS_PER_UID {
            return Err(format!(
                "too many clients of uid {uid} (at most {MAX_CLIENTS_PER_UID} at once per user)"
            ));
        }
        // Root's and the starter's connections beyond the reserve use ordinary slots.
        let privileged_over = h.privileged.saturating_sub(RESERVED_CLIENTS);
        if h.ordinary + privileged_over >= MAX_CLIENTS {
            return Err(format!(
                "too many clients (at most {MAX_CLIENTS} at once; \
                 {RESERVED_CLIENTS} more are kept for root and uid {})",
                self.owner_uid
            ));
        }
        h.ordinary += 1;
        *h.by_uid.entry(uid).or_default() += 1;
        Ok(Slot {
            held: self.held.clone(),
            uid: Some(uid),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut h = self.held.lock().unwrap_or_else(|p| p.into_inner());
        match self.uid {
            None => h.privileged -= 1,
            Some(uid) => {
                h.ordinary -= 1;
                if let Some(n) = h.by_uid.get_mut(&uid) {
                    *n -= 1;
                    if *n == 0 {
                        h.by_uid.remove(&uid);
                    }
                }
            }
        }
    }
}

fn accept_loop(
    listener: UnixListener,
    model: Arc<Model>,
    audit: Option<Arc<Audit>>,
    stop: Arc<AtomicBool>,
    clients: Arc<Mutex<Vec<JoinHandle<()>>>>,
) {
    let slots = Slots {
        held: Arc::default(),
        owner_uid: model.owner_uid(),
    };
    for conn in listener.incoming() {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let Ok(mut stream) = conn else { continue };
        let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
        let cred = match sys::peer_cred(&stream) {
            Ok(c) => c,
            Err(_) => continue,
        };
        let slot = match slots.take(cred.uid) {
            Ok(s) => s,
            Err(why) => {
                // Said in the banner's place, so that the client can tell it
                // from a socket that is not linkem's.
                let _ = write_line(
                    &mut stream,
                    &json!({"linkem": "ctl", "ok": false, "error": why}).to_string(),
                );
                continue;
            }
        };
        let (model, audit, stop) = (model.clone(), audit.clone(), stop.clone());
        let spawned = std::thread::Builder::new()
            .name("linkem-ctl-client".into())
            .spawn(move || {
                let _slot = slot;
                let mut session = Session {
                    model: &model,
                    audit: audit.as_deref(),
                    cred,
                    batch: None,
                };
                session.serve(stream, &stop);
            });
        if let Ok(h) = spawned {
            let mut list = clients.lock().unwrap_or_else(|p| p.into_inner());
            list.retain(|h| !h.is_finished());
            list.push(h);
        }
    }
}

/// A batch being collected: the lines as typed, checked for permission as
/// they came and parsed again at `commit` (a parsed line may hold a
/// distribution table: the text is what [`MAX_BATCH_BYTES`] bounds).
struct Batch {
    lines: Vec<String>,
    /// Bytes of `lines`.
    bytes: usize,
    /// What earlier lines create ([`super::rules::Made`]).
    made: super::rules::Made,
    /// The first line that failed, with why: the commit then fails, and
    /// later lines are answered but no longer kept.
    failed: Option<String>,
}

struct Session<'a> {
    model: &'a Model,
    audit: Option<&'a Audit>,
    cred: PeerCred,
    batch: Option<Batch>,
}

/// What to do with the connection after a line.
enum Next {
    Continue,
    Close,
}

impl Session<'_> {
    fn serve(&mut self, mut stream: UnixStream, stop: &AtomicBool) {
        let banner = json!({
            "linkem": "ctl",
            "front": self.model.front.word(),
            "protocol": PROTOCOL_VERSION,
            "version": env!("CARGO_PKG_VERSION"),
            "commit": crate::build_info::COMMIT,
            "name": self.model.name,
        });
        if write_line(&mut stream, &banner.to_string()).is_err() {
            return;
        }
        let _ = stream.set_read_timeout(Some(TICK));
        let mut buf: Vec<u8> = Vec::with_capacity(1024);
        let mut chunk = [0u8; 4096];
        let mut discarding = false;
        let mut last_byte = Instant::now();
        loop {
            // Every complete line in the buffer.
            while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=nl).collect();
                if std::mem::take(&mut discarding) {
                    continue;
                }
                let line = &line[..line.len() - 1];
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                match self.line(&mut stream, line, &mut buf, stop) {
                    Next::Continue => {}
                    Next::Close => return,
                }
            }
            if discarding {
                buf.clear();
            } else if buf.len() >= MAX_LINE_BYTES {
                buf.clear();
                discarding = true;
                self.count(&Err(Failure::Error(String::new())));
                let r = json!({"ok": false, "error": format!("line longer than {} bytes: refused whole", MAX_LINE_BYTES - 1)});
                if write_line(&mut stream, &r.to_string()).is_err() {
                    return;
                }
            }
            if stop.load(Ordering::Acquire) {
                return;
            }
            match stream.read(&mut chunk) {
                Ok(0) => return,
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    last_byte = Instant::now();
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) =>
                {
                    let quiet = last_byte.elapsed();
                    if (!buf.is_empty() || discarding) && quiet >= PARTIAL_LINE_TIMEOUT {
                        let r = json!({"ok": false, "error": format!("an unfinished line for {} s: closing (nothing applied)", PARTIAL_LINE_TIMEOUT.as_secs())});
                        let _ = write_line(&mut stream, &r.to_string());
                        return;
                    }
                    if quiet >= IDLE_TIMEOUT {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    }

    fn count(&self, r: &Result<u64, Failure>) {
        let c = &self.model.counters;
        match r {
            Ok(_) => c.ok.fetch_add(1, Ordering::Relaxed),
            Err(Failure::Error(_) | Failure::Word { .. }) => {
                c.error.fetch_add(1, Ordering::Relaxed)
            }
            Err(Failure::Refused(_)) => c.refused.fetch_add(1, Ordering::Relaxed),
        };
    }

    fn audit(&self, command: &str, result: &Result<u64, Failure>) {
        if let Some(a) = self.audit {
            match result {
                Ok(at) => a.record(&self.cred, command, "ok", Some(*at)),
                Err(f) => a.record(&self.cred, command, &f.audit_result(), None),
            }
        }
    }

    /// Handles one line; writes its reply (or, for `watch`, its stream).
    // Kept whole: the protocol's dispatcher, one short arm per request, read as its reference.
    fn line(
        &mut self,
        stream: &mut UnixStream,
        raw: &[u8],
        buf: &mut Vec<u8>,
        stop: &AtomicBool,
    ) -> Next {
        let text = match std::str::from_utf8(raw) {
            Ok(t) => t,
            Err(e) => {
                self.count(&Err(Failure::Error(String::new())));
                let r =
                    json!({"ok": false, "error": format!("not UTF-8 (byte {})", e.valid_up_to())});
                return reply(stream, &r);
            }
        };
        let parsed = match self.model.parse_line(text) {
            Ok(p) => p,
            Err(e) => {
                // Who may add what is decided before the rule's words.
                if let Some(r) = self.model.refused_before_parse(&self.cred, text) {
                    let f = Err(r);
                    self.count(&f);
                    self.audit(text, &f);
                    if let Some(b) = &mut self.batch {
                        b.failed
                            .get_or_insert_with(|| format!("'{text}': {}", f_message(&f)));
                    }
                    return reply(stream, &with_id(result_json(&f), id_of(text)));
                }
                let f = Err(Failure::Error(e.to_string()));
                self.count(&f);
                if looks_like_change(text) {
                    self.audit(text, &f);
                }
                if let Some(b) = &mut self.batch {
                    b.failed.get_or_insert_with(|| format!("'{text}': {e}"));
                }
                return reply(stream, &with_id(e.reply(None), id_of(text)));
            }
        };
        let id = parsed.id.as_deref();
        let request = parsed.request;
        // With claims on, the socket is open to all: what an ordinary user
        // may ask is decided before anything else.
        if let Err(f) = self.model.gate(&self.cred, &request) {
            let f = Err(f);
            self.count(&f);
            self.audit(text, &f);
            if let Some(b) = &mut self.batch {
                b.failed
                    .get_or_insert_with(|| format!("'{text}': {}", f_message(&f)));
            }
            return reply(stream, &with_id(result_json(&f), id));
        }
        // Inside a batch: changes are collected, commit/abort end it.
        if self.batch.is_some() {
            match request {
                Request::Commit => return self.commit(stream, text, id),
                Request::Abort => {
                    self.batch = None;
                    self.count(&Ok(0));
                    return reply(stream, &with_id(json!({"ok": true, "aborted": true}), id));
                }
                Request::Ping => {}
                r if r.is_change() && !matches!(r, Request::Begin) => {
                    return self.batch_line(stream, text, &r, id);
                }
                _ => {
                    let b = self.batch.as_mut().expect("checked above");
                    b.failed
                        .get_or_insert_with(|| format!("'{text}' is not allowed in a batch"));
                    self.count(&Err(Failure::Error(String::new())));
                    return reply(
                        stream,
                        &with_id(
                            json!({"ok": false, "error": "only changes (link, zero, pipe..., add, delete, flush, set) and ping are allowed in a batch; send commit or abort"}),
                            id,
                        ),
                    );
                }
            }
        }
        let body = match &request {
            Request::Ping => json!({"ok": true, "pong": true}),
            Request::Version => {
                json!({"ok": true, "version": env!("CARGO_PKG_VERSION"), "commit": crate::build_info::COMMIT, "protocol": PROTOCOL_VERSION, "name": self.model.name})
            }
            Request::Help => json!({"ok": true, "help": HELP}),
            Request::Show => match self.model.rules() {
                Some(r) => {
                    let mut v = r.list_json();
                    v["ok"] = true.into();
                    v["rule_set"] = true.into();
                    v["stats"] = self.model.stats_json();
                    v
                }
                None => {
                    json!({"ok": true, "links": self.model.links_json(), "stats": self.model.stats_json(), "rule_set": false})
                }
            },
            Request::Stats => {
                let mut v = self.model.stats_json();
                v["ok"] = true.into();
                v
            }
            Request::List => match self.model.rules() {
                Some(r) => {
                    let mut v = r.list_json();
                    v["ok"] = true.into();
                    v["rule_set"] = true.into();
                    v
                }
                None => json!({"ok": true, "links": self.model.links_json(), "rule_set": false}),
            },
            Request::Begin => {
                self.batch = Some(Batch {
                    lines: Vec::new(),
                    bytes: 0,
                    made: Default::default(),
                    failed: None,
                });
                json!({"ok": true, "batch": "begun"})
            }
            Request::Commit | Request::Abort => {
                let f: Result<u64, Failure> =
                    Err(Failure::Error("no batch (send begin first)".into()));
                self.count(&f);
                return reply(
                    stream,
                    &with_id(
                        json!({"ok": false, "error": "no batch: send begin first"}),
                        id,
                    ),
                );
            }
            Request::Watch { interval_ns } => {
                self.count(&Ok(0));
                return self.watch(stream, *interval_ns, id, buf, stop);
            }
            Request::Rule(linkem_ctl::RuleRequest::Show { kind, number })
                if self.model.rules().is_some() =>
            {
                let r = self.model.rules().expect("checked");
                match r.show_json(*kind, *number) {
                    Ok(mut v) => {
                        v["ok"] = true.into();
                        v
                    }
                    Err(f) => {
                        let f = Err(f);
                        self.count(&f);
                        return reply(stream, &with_id(result_json(&f), id));
                    }
                }
            }
            // `pipe show` and the like: nothing to read without a rule set.
            Request::Rule(_) if !is_audited(&request) => {
                let f: Result<u64, Failure> = Err(Failure::Error(linkem_ctl::NO_RULE_SET.into()));
                self.count(&f);
                return reply(
                    stream,
                    &with_id(json!({"ok": false, "error": linkem_ctl::NO_RULE_SET}), id),
                );
            }
            Request::Claims => match self.model.rules() {
                Some(r) => {
                    let mut v = r.claims_json(self.cred.uid, clock::now_ns());
                    v["ok"] = true.into();
                    v
                }
                None => json!({"ok": true, "on": false, "claims": []}),
            },
            Request::Claim(c) => return self.claim(stream, text, c, id),
            Request::Link { .. } | Request::Zero | Request::Rule(_) => {
                let result = self.model.apply(&self.cred, &[&request], &[text]);
                self.count(&result);
                self.audit(text, &result);
                return reply(stream, &with_id(result_json(&result), id));
            }
        };
        self.count(&Ok(0));
        reply(stream, &with_id(body, id))
    }

    /// `claim ...`/`release ...`: applied at once (never in a batch), audited
    /// with what it did to which claim.
    fn claim(
        &mut self,
        stream: &mut UnixStream,
        text: &str,
        c: &linkem_ctl::ClaimRequest,
        id: Option<&str>,
    ) -> Next {
        let done = match self.model.rules() {
            Some(r) => r.claim(&self.cred, c, clock::now_ns()),
            None => Err(Failure::Error(
                "claims are off in this emulator (start it with --rules and --claims)".into(),
            )),
        };
        let result = done.as_ref().map(|d| d.at_ns).map_err(Clone::clone);
        self.count(&result);
        if result.is_ok() {
            self.model.counters.changes.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(a) = self.audit {
            match &done {
                Ok(d) => a.record_with(
                    &self.cred,
                    text,
                    "ok",
                    Some(d.at_ns),
                    claim_fields(&d.claim, d.what),
                ),
                Err(f) => a.record(&self.cred, text, &f.audit_result(), None),
            }
        }
        let mut v = result_json(&result);
        if let Ok(d) = &done {
            v["claim"] = d.claim.name().into();
            v["event"] = d.what.into();
            v["pipes"] = json!(d.claim.numbers());
            v["expires_ns"] = d.claim.expires_ns.into();
        }
        reply(stream, &with_id(v, id))
    }

    /// A change inside a batch: refused at once if the peer may not make it
    /// or the batch is full (the reply names the bound), else kept.
    fn batch_line(
        &mut self,
        stream: &mut UnixStream,
        text: &str,
        request: &Request,
        id: Option<&str>,
    ) -> Next {
        let b = self.batch.as_mut().expect("called inside a batch");
        let checked = if b.lines.len() >= MAX_BATCH_LINES {
            Err(Failure::Refused(format!(
                "a batch holds at most {MAX_BATCH_LINES} lines: send commit, then the rest in another batch"
            )))
        } else if b.bytes + text.len() > MAX_BATCH_BYTES {
            Err(Failure::Refused(format!(
                "a batch holds at most {MAX_BATCH_BYTES} bytes of requests: send commit, then the rest in another batch"
            )))
        } else {
            self.model.check_line(&self.cred, request, &mut b.made)
        };
        match checked {
            Ok(()) => {
                if b.failed.is_none() {
                    b.lines.push(text.to_string());
                    b.bytes += text.len();
                }
                let n = b.lines.len();
                self.count(&Ok(0));
                reply(stream, &with_id(json!({"ok": true, "batched": n}), id))
            }
            Err(f) => {
                b.failed
                    .get_or_insert_with(|| format!("'{text}': {}", f.message()));
                let f = Err(f);
                self.count(&f);
                self.audit(text, &f);
                reply(stream, &with_id(result_json(&f), id))
            }
        }
    }

    fn commit(&mut self, stream: &mut UnixStream, text: &str, id: Option<&str>) -> Next {
        let batch = self.batch.take().expect("called inside a batch");
        let command = format!("{text}: {}", batch.lines.join("; "));
        let result = match batch.failed {
            Some(why) => Err(Failure::Error(format!("batch not applied: {why}"))),
            None => {
                // Each line parsed when it came: parsing it again gives the same request.
                let parsed: Result<Vec<Request>, Failure> = batch
                    .lines
                    .iter()
                    .map(|l| {
                        self.model
                            .parse_line(l)
                            .map(|p| p.request)
                            .map_err(|e| Failure::Error(format!("batch not applied: '{l}': {e}")))
                    })
                    .collect();
                parsed.and_then(|reqs| {
                    let reqs: Vec<&Request> = reqs.iter().collect();
                    let lines: Vec<&str> = batch.lines.iter().map(String::as_str).collect();
                    self.model.apply(&self.cred, &reqs, &lines)
                })
            }
        };
        self.count(&result);
        self.audit(&command, &result);
        let mut v = result_json(&result);
        if result.is_ok() {
            v["applied"] = batch.lines.len().into();
        }
        reply(stream, &with_id(v, id))
    }

    fn watch(
        &mut self,
        stream: &mut UnixStream,
        interval_ns: u64,
        id: Option<&str>,
        buf: &mut Vec<u8>,
        stop: &AtomicBool,
    ) -> Next {
        let interval = Duration::from_nanos(interval_ns);
        let mut next = Instant::now();
        let mut seq: u64 = 0;
        let mut chunk = [0u8; 1024];
        loop {
            let mut v = self.model.stats_json();
            v["ok"] = true.into();
            v["watch"] = seq.into();
            if write_line(stream, &with_id(v, id).to_string()).is_err() {
                return Next::Close;
            }
            seq += 1;
            next += interval;
            // Wait for the next tick, ending at any line from the client.
            loop {
                if stop.load(Ordering::Acquire) {
                    return Next::Close;
                }
                let now = Instant::now();
                if now >= next {
                    break;
                }
                let _ = stream.set_read_timeout(Some((next - now).min(TICK)));
                match stream.read(&mut chunk) {
                    Ok(0) => return Next::Close,
                    Ok(n) => {
                        // The line that ended the watch is consumed, not run.
                        let _ = stream.set_read_timeout(Some(TICK));
                        buf.extend_from_slice(&chunk[..n]);
                        match buf.iter().position(|&b| b == b'\n') {
                            Some(nl) => {
                                buf.drain(..=nl);
                            }
                            None => buf.clear(),
                        }
                        return reply(
                            stream,
                            &with_id(json!({"ok": true, "watch": "ended", "lines": seq}), id),
                        );
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                        ) => {}
                    Err(_) => return Next::Close,
                }
            }
        }
    }
}

fn f_message(r: &Result<u64, Failure>) -> &str {
    r.as_ref().err().map_or("", Failure::message)
}

fn result_json(r: &Result<u64, Failure>) -> serde_json::Value {
    match r {
        Ok(at) => json!({"ok": true, "at_ns": at}),
        Err(Failure::Error(m)) => json!({"ok": false, "error": m}),
        Err(Failure::Refused(m)) => json!({"ok": false, "refused": true, "error": m}),
        Err(Failure::Word {
            message,
            position,
            word,
        }) => json!({"ok": false, "error": message, "position": position, "word": word}),
    }
}

fn id_of(text: &str) -> Option<&str> {
    text.split_whitespace()
        .next()
        .and_then(|w| w.strip_prefix('@'))
        .filter(|id| {
            linkem_ctl::parse_line(&format!("@{id} ping"), &mut linkem_core::config::no_files)
                .is_ok()
        })
}

fn with_id(mut v: serde_json::Value, id: Option<&str>) -> serde_json::Value {
    if let Some(id) = id {
        v["id"] = id.into();
    }
    v
}

fn reply(stream: &mut UnixStream, v: &serde_json::Value) -> Next {
    match write_line(stream, &v.to_string()) {
        Ok(()) => Next::Continue,
        Err(_) => Next::Close,
    }
}

fn write_line(stream: &mut UnixStream, line: &str) -> std::io::Result<()> {
    let mut b = Vec::with_capacity(line.len() + 1);
    b.extend_from_slice(line.as_bytes());
    b.push(b'\n');
    stream.write_all(&b)
}
