//! The emulator of one link: `linkem bridge lke-N lkc-N WORDS --name NAME
//! --control RUN/NAME.sock`, started inside the container's network namespace
//! as a daemon of its own (`setsid`, stdin from /dev/null, stdout and stderr
//! to `RUN/cni/NAME.log`, its pid in `RUN/cni/NAME.pid`), reachable from the
//! host through its control socket (a file: the daemon shares the host's
//! mount namespace). RUN is the configuration's `runDir` (default
//! `/run/linkem`, where `linkem ctl --name NAME` looks).
//!
//! It is ready when it has announced its control socket (after its
//! interfaces are open and the model started); it is identified by pid *and*
//! by its command line naming NAME, so a recycled pid is never signalled.

use crate::error::{CniError, EMULATOR_NOT_RUNNING, EMULATOR_START};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The run directory without a `runDir`: control sockets in it, the
/// plugin's files in its `cni/`.
pub const DEFAULT_RUN_DIR: &str = "/run/linkem";

/// How long the emulator may take to open its interfaces.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long DEL waits for SIGTERM before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The files of the link named `name` under a run directory.
pub struct Files {
    /// `RUN/cni`: pid files, logs, rule files and states.
    pub dir: PathBuf,
    pub pid: PathBuf,
    pub log: PathBuf,
    pub rules: PathBuf,
    pub state: PathBuf,
    /// `RUN/NAME.sock`: the emulator's control socket.
    pub socket: PathBuf,
    /// `RUN/files/NAME/` (0700): the files the emulator's control requests
    /// may name (`--control-files`), the node agent's traces.
    pub control_files: PathBuf,
}

impl Files {
    pub fn new(run_dir: &Path, name: &str) -> Files {
        let dir = run_dir.join("cni");
        Files {
            pid: dir.join(format!("{name}.pid")),
            log: dir.join(format!("{name}.log")),
            rules: dir.join(format!("{name}.rules")),
            state: dir.join(format!("{name}.json")),
            socket: run_dir.join(format!("{name}.sock")),
            control_files: run_dir.join("files").join(name),
            dir,
        }
    }

    pub fn remove(&self) {
        for p in [&self.pid, &self.log, &self.rules, &self.state] {
            let _ = fs::remove_file(p);
        }
        let _ = fs::remove_dir_all(&self.control_files);
    }

    /// Makes [`Files::control_files`] (and `RUN/files`), root's alone: what
    /// is in it a root emulator reads on request.
    pub fn make_control_files(&self) -> std::io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let mut b = fs::DirBuilder::new();
        b.recursive(true).mode(0o700);
        b.create(&self.control_files)?;
        fs::set_permissions(&self.control_files, fs::Permissions::from_mode(0o700))?;
        if let Some(parent) = self.control_files.parent() {
            fs::set_permissions(parent, fs::Permissions::from_mode(0o700))?;
        }
        Ok(())
    }
}

/// Where `linkem` is looked for when the runtime gives the plugin no PATH: the
/// search path glibc's execvp uses then, which is also where `setsid`,
/// `nsenter` and `ip` are found, so the package's /usr/bin/linkem is found
/// from /usr/lib/cni (or a link in /opt/cni/bin) with or without PATH.
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// The `linkem` binary: `LINKEM_BIN`, else the one beside this plugin, else
/// `linkem` on PATH (or [`DEFAULT_PATH`] without one).
pub fn linkem_bin() -> Result<PathBuf, CniError> {
    find_linkem(
        std::env::var_os("LINKEM_BIN"),
        std::env::current_exe().ok(),
        std::env::var_os("PATH"),
    )
}

/// [`linkem_bin`] with its inputs given: `exe` is this plugin's own path
/// (its links resolved, as /proc/self/exe gives it).
fn find_linkem(
    linkem_bin: Option<std::ffi::OsString>,
    exe: Option<PathBuf>,
    path: Option<std::ffi::OsString>,
) -> Result<PathBuf, CniError> {
    if let Some(p) = linkem_bin.filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(CniError::config(format!(
                "LINKEM_BIN={}: no such file",
                p.display()
            )))
        };
    }
    if let Some(beside) = exe
        .and_then(|e| e.parent().map(|d| d.join("linkem")))
        .filter(|p| p.is_file())
    {
        return Ok(beside);
    }
    let path = path.unwrap_or_else(|| DEFAULT_PATH.into());
    std::env::split_paths(&path)
        .map(|d| d.join("linkem"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            CniError::config(format!(
                "the linkem binary is neither beside linkem-cni nor on PATH ({}; set LINKEM_BIN)",
                path.to_string_lossy()
            ))
        })
}

/// Starts the emulator and waits until it serves; its pid.
pub fn start(
    run_dir: &Path,
    netns: &str,
    name: &str,
    if_a: &str,
    if_b: &str,
    args: &[String],
) -> Result<u32, CniError> {
    let linkem = linkem_bin()?;
    let files = Files::new(run_dir, name);
    fs::create_dir_all(&files.dir).map_err(|e| {
        CniError::new(
            EMULATOR_START,
            format!("cannot create {}: {e}", files.dir.display()),
        )
    })?;
    let log = fs::File::create(&files.log).map_err(|e| {
        CniError::new(
            EMULATOR_START,
            format!("cannot create {}: {e}", files.log.display()),
        )
    })?;
    let log2 = log
        .try_clone()
        .map_err(|e| CniError::new(EMULATOR_START, format!("{}: {e}", files.log.display())))?;
    // setsid: a session of its own, so no terminal or process group of the
    // runtime's reaches it; nsenter: the container's network namespace only.
    let mut child = Command::new("setsid")
        .arg("nsenter")
        .arg(format!("--net={netns}"))
        .arg(&linkem)
        .args(["bridge", if_a, if_b])
        .args(args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .spawn()
        .map_err(|e| {
            CniError::new(
                EMULATOR_START,
                format!("cannot run setsid nsenter {} ({e})", linkem.display()),
            )
        })?;
    let pid = child.id();
    fs::write(&files.pid, format!("{pid}\n")).map_err(|e| {
        CniError::new(
            EMULATOR_START,
            format!("cannot write {}: {e}", files.pid.display()),
        )
    })?;
    let t = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(CniError::new(
                EMULATOR_START,
                format!(
                    "linkem bridge {if_a} {if_b} {} exited at start ({status})",
                    args.join(" ")
                ),
            )
            .with_details(log_tail(&files.log)));
        }
        if fs::read_to_string(&files.log).is_ok_and(|l| l.contains("control socket")) {
            // The child is not waited for: it outlives the plugin, and init reaps it.
            return Ok(pid);
        }
        if t.elapsed() > START_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(CniError::new(
                EMULATOR_START,
                format!("linkem bridge did not start within {START_TIMEOUT:?}"),
            )
            .with_details(log_tail(&files.log)));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

/// The emulator's pid if it runs: the pid file's process, alive (not a
/// zombie) and `linkem ... --name NAME`.
pub fn running(run_dir: &Path, name: &str) -> Option<i32> {
    let pid: i32 = fs::read_to_string(Files::new(run_dir, name).pid)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the command name's closing parenthesis.
    let state = stat.rsplit_once(')')?.1.split_whitespace().next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let words: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let named = words
        .windows(2)
        .any(|w| w[0] == b"--name" && w[1] == name.as_bytes());
    named.then_some(pid)
}

/// SIGTERM, then SIGKILL if it lingers; its files go. Not running is no error.
pub fn stop(run_dir: &Path, name: &str) -> Result<(), CniError> {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    if let Some(pid) = running(run_dir, name) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        let t = Instant::now();
        while running(run_dir, name).is_some() {
            if t.elapsed() > STOP_TIMEOUT {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                std::thread::sleep(Duration::from_millis(100));
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if running(run_dir, name).is_some() {
            return Err(CniError::new(
                EMULATOR_NOT_RUNNING,
                format!("linkem bridge --name {name} (pid {pid}) does not stop"),
            ));
        }
    }
    let files = Files::new(run_dir, name);
    files.remove();
    remove_stale_socket(&files.socket);
    Ok(())
}

/// An emulator that was killed (SIGKILL, OOM) leaves its control socket
/// behind; the socket goes with the link, unless something answers on it.
fn remove_stale_socket(path: &Path) {
    use std::os::unix::fs::FileTypeExt;
    let is_socket = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket());
    if is_socket && std::os::unix::net::UnixStream::connect(path).is_err() {
        let _ = fs::remove_file(path);
    }
}

/// CHECK: the emulator runs.
pub fn check(run_dir: &Path, name: &str) -> Result<(), CniError> {
    if running(run_dir, name).is_none() {
        let files = Files::new(run_dir, name);
        return Err(CniError::new(
            EMULATOR_NOT_RUNNING,
            format!(
                "the emulator of this link (linkem bridge --name {name}, pid file {}) is not running",
                files.pid.display()
            ),
        )
        .with_details(log_tail(&files.log)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The package's layout: the plugin in /usr/lib/cni, linkem in /usr/bin.
    #[test]
    fn linkem_is_found_on_path_from_the_plugin_directory() {
        let root = std::env::temp_dir().join(format!("lkg-cni-bin-{}", std::process::id()));
        let (cni, bin) = (root.join("usr/lib/cni"), root.join("usr/bin"));
        fs::create_dir_all(&cni).unwrap();
        fs::create_dir_all(&bin).unwrap();
        fs::write(cni.join("linkem-cni"), "").unwrap();
        fs::write(bin.join("linkem"), "").unwrap();
        let exe = Some(cni.join("linkem-cni"));
        let path = std::env::join_paths([root.join("nowhere"), bin.clone()]).unwrap();
        let found = find_linkem(None, exe.clone(), Some(path)).map_err(|e| e.to_string());
        // Nothing beside it and no PATH: the default path, named in the error.
        let empty = find_linkem(None, exe.clone(), Some("".into())).map_err(|e| e.to_string());
        // linkem beside the plugin wins over PATH.
        fs::write(cni.join("linkem"), "").unwrap();
        let beside = find_linkem(None, exe, Some(bin.clone().into())).map_err(|e| e.to_string());
        fs::remove_dir_all(&root).unwrap();
        assert_eq!(found, Ok(bin.join("linkem")));
        assert!(empty
            .unwrap_err()
            .contains("neither beside linkem-cni nor on PATH"));
        assert_eq!(beside, Ok(cni.join("linkem")));
    }

    #[test]
    fn without_path_the_default_search_path_is_used() {
        let searched = find_linkem(None, None, None);
        let on_default = DEFAULT_PATH
            .split(':')
            .map(|d| Path::new(d).join("linkem"))
            .find(|p| p.is_file());
        match (searched, on_default) {
            (Ok(p), Some(d)) => assert_eq!(p, d),
            (Err(e), None) => assert!(e.to_string().contains(DEFAULT_PATH), "{e}"),
            (got, want) => panic!(
                "found {:?}, /bin:/usr/bin has {want:?}",
                got.map_err(|e| e.to_string())
            ),
        }
    }
}
