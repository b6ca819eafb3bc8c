//! The control socket: creation (mode, group, stale sockets), the accept
//! thread, one thread per client, each running its [`session`].
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
use super::http::Endpoint;
use super::sys::{self};
use super::web::{self, Topology, Web};
use super::{claims, ControlArgs, Model};
use anyhow::{anyhow, bail, Context, Result};
use linkem_runtime::clock;
use serde_json::json;
use std::collections::HashMap;
use std::io::ErrorKind;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

mod session;
use session::{write_line, Session};

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
/// bridge drops its capabilities): the socket, the audit file, the metrics and web ports.
pub struct Prepared {
    listener: Option<(UnixListener, SocketFile)>,
    audit: Option<Audit>,
    metrics: Option<std::net::TcpListener>,
    web: Option<web::Bound>,
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
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@'));
    if !ok {
        bail!("--name '{name}': use 1 to 64 of A-Z a-z 0-9 - _ . @ (not starting with '.')");
    }
    Ok(())
}

/// Opens the control socket, the audit log, the metrics and web ports.
pub fn prepare(args: &ControlArgs, if_a: &str, if_b: &str) -> Result<Prepared> {
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| linkem_ctl::default_name(if_a, if_b));
    check_name(&name)?;
    let gid = match &args.control_group {
        Some(g) => Some(sys::group_id(g).map_err(|e| anyhow!("--control-group {e}"))?),
        None => None,
    };
    // With claims, every local user may connect (what each may do there is
    // bounded by its claims and limits); a control group narrows it.
    let open = args.claims.claims && gid.is_none();
    // Checked before the socket is placed, so that a typo fails without one.
    if let Some(dir) = &args.control_files {
        super::files::set(dir).map_err(|e| anyhow!(e))?;
    }
    if let Some(a) = &args.metrics {
        super::http::parse_addr("--metrics", a)?;
    }
    if let Some(a) = &args.web {
        super::http::parse_addr("--web", a)?;
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
        Some(a) => Some(super::http::bind("--metrics", a)?),
        None => None,
    };
    let web = match &args.web {
        Some(a) => Some(web::Bound::bind(a)?),
        None => None,
    };
    Ok(Prepared {
        listener,
        audit,
        metrics,
        web,
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
    web: Option<Web>,
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
        for (c, result) in model.expire_claims(clock::now_ns()) {
            if let Some(a) = &audit {
                a.record_expiry(&c, &result);
            }
        }
    }
}

impl Prepared {
    /// `--web`'s port bound by the caller (in its network namespace).
    pub fn set_web(&mut self, web: web::Bound) {
        self.web = Some(web);
    }

    pub fn socket_path(&self) -> Option<&Path> {
        self.listener.as_ref().map(|l| l.1.path.as_path())
    }

    /// The lines that tell where to reach this emulator: the socket with the
    /// `linkem ctl` option that names it as it was given, the metrics URL
    /// and the web page's (with its token) with the ports actually bound
    /// (`--metrics 0` picks one).
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
        if let Some(url) = self.web.as_ref().and_then(web::Bound::url) {
            out.push(format!("linkem: web page on {url}"));
        }
        out
    }

    /// Starts serving `model`; the web page, if any, draws `topology`.
    pub fn start(self, model: Arc<Model>, topology: Topology) -> Server {
        let stop = Arc::new(AtomicBool::new(false));
        let clients: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let audit = self.audit.map(Arc::new);
        let metrics = self
            .metrics
            .map(|l| super::metrics::start(l, model.clone(), stop.clone()));
        let web = self.web.map(|b| {
            let (model, audit) = (model.clone(), audit.clone());
            Web::start(b, model, (audit, run_lines), topology, stop.clone())
        });
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
            web,
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
        if let Some(w) = self.web.take() {
            w.stop();
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
                let mut session = Session::new(&model, audit.as_deref(), cred);
                session.serve(stream, &stop);
            });
        if let Ok(h) = spawned {
            let mut list = clients.lock().unwrap_or_else(|p| p.into_inner());
            list.retain(|h| !h.is_finished());
            list.push(h);
        }
    }
}

/// Runs `lines` as a client of `cred` would through the control socket: a
/// [`Session`] over a socket pair, so the same parse, permission checks,
/// refusals, counts and audit lines (the web page's changes). Returns the
/// replies, one per line, in order. `uid`: whose change it is.
pub(crate) fn run_lines(
    model: &Model,
    audit: Option<&Audit>,
    uid: u32,
    lines: &[String],
) -> Result<Vec<serde_json::Value>> {
    use std::io::{Read, Write};
    let (mut ours, theirs) = UnixStream::pair().context("cannot make a socket pair")?;
    // This process's gid and pid, as the audit line names them; uid as asked.
    let cred = sys::PeerCred {
        uid,
        ..sys::peer_cred(&ours).context("cannot read a socket pair's credentials")?
    };
    let _ = ours.set_read_timeout(Some(WRITE_TIMEOUT + Duration::from_secs(5)));
    let stop = AtomicBool::new(false);
    let text = std::thread::scope(|s| {
        s.spawn(|| Session::new(model, audit, cred).serve(theirs, &stop));
        let mut sent = String::new();
        for l in lines {
            sent.push_str(l);
            sent.push('\n');
        }
        // The session ends at the end of what was sent, after its replies.
        ours.write_all(sent.as_bytes())?;
        ours.shutdown(std::net::Shutdown::Write)?;
        let mut text = String::new();
        let read = ours.read_to_string(&mut text);
        stop.store(true, Ordering::Release);
        read.map(|_| text)
    })
    .context("the control session over a socket pair")?;
    // The first line is the banner.
    text.lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).context("a control reply that is not JSON"))
        .collect()
}
