//! A real Kubernetes control plane for the tests: etcd and kube-apiserver,
//! the binaries `scripts/k8s.sh build` caches, started on free ports of
//! 127.0.0.1 in a directory of their own, with token auth (the token is in
//! `system:masters`), a self-signed serving certificate, RBAC and
//! service-account keys. No kubelet, no controller-manager: a test creates the
//! Pods and Nodes it needs, as envtest does.
//!
//! Use from a test file with `mod common;`, then [`ControlPlane::shared`] (one
//! control plane per test binary, the cheap default) or [`ControlPlane::start`]
//! (one of its own, stopped on drop).
//!
//! Lifetime: the processes are spawned by a keeper thread that lives as long as
//! the `ControlPlane` (for [`ControlPlane::shared`], as long as the process), and
//! get SIGKILL by `PR_SET_PDEATHSIG` when that thread ends, so neither outlives
//! `cargo test`, also when the test binary is killed. The kernel signals when
//! the spawning *thread* ends, hence the keeper thread rather than a test's own.
//! The directory (in the temp dir, named after the test process's pid) is
//! removed about a second after the process ends, by a cleaner process that
//! waits for it (and otherwise by the next start, once that pid is gone).
//!
//! Namespaces exist but are never finalized (no namespace controller): a deleted
//! one stays `Terminating`. Use `default` or a fresh name per test.

#![allow(dead_code)]

use anyhow::{anyhow, bail, Context, Result};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The apiserver's `/readyz` takes 3-4 s on an idle machine; a loaded CI box
/// building the workspace beside it takes several times that.
const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// A custom resource's endpoint may answer 404 for a moment after its CRD is
/// Established (`/work/shared/K8S.md`), and Established itself takes a moment.
const CRD_TIMEOUT: Duration = Duration::from_secs(30);
/// What a test's failure says when the binaries are not there.
pub const MISSING_HINT: &str = "run scripts/k8s.sh build";

/// A running etcd + kube-apiserver.
pub struct ControlPlane {
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// A bearer token of a `system:masters` user.
    pub token: String,
    /// The control plane's own directory (certificates, etcd's data, logs,
    /// `kubeconfig`).
    pub dir: PathBuf,
    stop: Option<mpsc::Sender<()>>,
    keeper: Option<JoinHandle<()>>,
    cleaner: Child,
}

/// The directory holding `etcd` and `kube-apiserver`: `$LINKEM_K8S_BIN`, else
/// `scripts/k8s.sh path`'s (`${K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/linkem-k8s}/bin`).
pub fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("LINKEM_K8S_BIN").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let cache = var("K8S_CACHE").unwrap_or_else(|| {
        var("XDG_CACHE_HOME")
            .or_else(|| var("HOME").map(|h| h.join(".cache")))
            .unwrap_or_else(|| PathBuf::from("/root/.cache"))
            .join("linkem-k8s")
    });
    cache.join("bin")
}

impl ControlPlane {
    /// Starts a control plane of its own; it stops when dropped.
    pub fn start() -> Result<ControlPlane> {
        let bin = bin_dir();
        for name in ["etcd", "kube-apiserver"] {
            if !bin.join(name).is_file() {
                bail!(
                    "{} is missing: {MISSING_HINT} (or point LINKEM_K8S_BIN at a directory \
                     holding etcd and kube-apiserver)",
                    bin.join(name).display()
                );
            }
        }
        sweep_stale_dirs();
        let dir = fresh_dir()?;
        let mut cleaner = spawn_cleaner(&dir)?;
        let token = random_hex(16)?;
        let (ready_tx, ready_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let keeper = {
            let (dir, token) = (dir.clone(), token.clone());
            std::thread::Builder::new()
                .name("k8s-keeper".into())
                .spawn(move || keep(&bin, &dir, &token, ready_tx, stop_rx))?
        };
        let url = match ready_rx.recv() {
            Ok(Ok(url)) => url,
            Ok(Err(e)) => {
                let _ = keeper.join();
                let _ = cleaner.kill();
                let _ = cleaner.wait();
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
            Err(_) => bail!("the control plane's keeper thread ended without a word"),
        };
        let cp = ControlPlane {
            url,
            token,
            dir,
            stop: Some(stop_tx),
            keeper: Some(keeper),
            cleaner,
        };
        Ok(cp)
    }

    /// One control plane for the whole test binary, started by the first
    /// caller; it dies with the process. Panics (failing the test) with the
    /// reason when it cannot start, e.g. "run scripts/k8s.sh build".
    pub fn shared() -> &'static ControlPlane {
        static SHARED: OnceLock<std::result::Result<ControlPlane, String>> = OnceLock::new();
        let cp = SHARED.get_or_init(|| ControlPlane::start().map_err(|e| format!("{e:#}")));
        match cp {
            Ok(cp) => cp,
            Err(e) => panic!("no Kubernetes control plane: {e}"),
        }
    }

    /// The kubeconfig `start` wrote into [`ControlPlane::dir`] (the keeper
    /// writes it before polling `/readyz` with it).
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// Writes a kubeconfig (server, token, the self-signed certificate
    /// accepted) for a subprocess: `KUBECONFIG=path linkem-operator ...`.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<()> {
        write_kubeconfig(&self.url, &self.token, path)
    }

    /// A client of this control plane (default namespace `default`). Make one
    /// per tokio runtime: a client's connection pool lives on the runtime that
    /// made it, and each `#[tokio::test]` has its own.
    pub async fn client(&self) -> Result<Client> {
        client_for(&self.kubeconfig_path()).await
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // The keeper kills the processes once its channel is closed.
        self.stop.take();
        if let Some(k) = self.keeper.take() {
            let _ = k.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = self.cleaner.kill();
        let _ = self.cleaner.wait();
    }
}

/// A process that removes `dir` once this test process has ended, however it
/// ends: it reads a pipe only this process holds (close-on-exec, so no child
/// inherits it) and gets end-of-file when the kernel closes it. A shared control
/// plane is never dropped, and etcd's directory holds 120 MB of preallocated
/// log. Its own process group keeps a Ctrl-C meant for the tests off it.
fn spawn_cleaner(dir: &Path) -> Result<Child> {
    use std::os::unix::process::CommandExt;
    Command::new("sh")
        .arg("-c")
        // The pause lets the SIGKILLed etcd go before its directory does.
        .arg(r#"cat >/dev/null; sleep 1; exec rm -rf "$0""#)
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .context("starting sh (the control plane directory's cleaner)")
}

fn write_kubeconfig(url: &str, token: &str, path: &Path) -> Result<()> {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    \
         server: \"{url}\"\n    insecure-skip-tls-verify: true\nusers:\n- name: admin\n  \
         user:\n    token: \"{token}\"\ncontexts:\n- name: local\n  context:\n    \
         cluster: local\n    user: admin\n    namespace: default\ncurrent-context: local\n"
    );
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// A client from a kubeconfig file.
pub async fn client_for(kubeconfig: &Path) -> Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// Applies `deploy/crd.yaml` (server-side apply: idempotent, so every test may
/// call it), waits until the CRD is Established and its endpoint answers.
pub async fn install_crd(client: &Client) -> Result<()> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crd.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let crd: CustomResourceDefinition =
        serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let name = crd.metadata.name.clone().context("the CRD has no name")?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pp = PatchParams::apply("linkem-tests").force();
    crds.patch(&name, &pp, &Patch::Apply(&crd))
        .await
        .context("applying deploy/crd.yaml")?;
    let deadline = Instant::now() + CRD_TIMEOUT;
    loop {
        let got = crds.get(&name).await?;
        let established = got
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
        if established {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "CRD {name} not Established after {CRD_TIMEOUT:?}: {:?}",
                got.status
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let chaos: Api<linkem_operator::chaos::LinkChaos> = Api::default_namespaced(client.clone());
    loop {
        match chaos.list(&ListParams::default().limit(1)).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => return Err(anyhow!(e).context("listing LinkChaos after the CRD")),
        }
    }
}

/// The keeper thread: spawns the processes (so their parent-death signal is
/// tied to this thread), reports readiness, then waits for the stop.
fn keep(
    bin: &Path,
    dir: &Path,
    token: &str,
    ready: mpsc::Sender<Result<String>>,
    stop: mpsc::Receiver<()>,
) {
    let mut children: Vec<Child> = Vec::new();
    let mut started = launch(bin, dir, token, &mut children);
    if started.is_err() {
        // Most likely a port taken between free_ports and the bind (other
        // tests start control planes too): once more with new ports.
        stop_all(&mut children);
        let _ = std::fs::remove_dir_all(dir.join("etcd"));
        started = launch(bin, dir, token, &mut children);
    }
    let failed = started.is_err();
    let _ = ready.send(started);
    if !failed {
        // Returns when the ControlPlane is dropped (its sender with it); a
        // shared one never is, and the process's exit ends this thread.
        let _ = stop.recv();
    }
    stop_all(&mut children);
}

fn stop_all(children: &mut Vec<Child>) {
    for mut c in children.drain(..).rev() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Starts etcd, then the apiserver, and waits for `/readyz`; returns the URL.
fn launch(bin: &Path, dir: &Path, token: &str, children: &mut Vec<Child>) -> Result<String> {
    let [etcd_port, peer_port, api_port] = free_ports()?;
    let pki = dir.join("pki");
    std::fs::create_dir_all(&pki)?;
    std::fs::write(
        pki.join("tokens.csv"),
        format!("{token},admin,admin-uid,system:masters\n"),
    )?;
    openssl(&["genrsa", "-out", &path_str(&pki.join("sa.key"))?, "2048"])?;
    openssl(&[
        "rsa",
        "-in",
        &path_str(&pki.join("sa.key"))?,
        "-pubout",
        "-out",
        &path_str(&pki.join("sa.pub"))?,
    ])?;
    let etcd_url = format!("http://127.0.0.1:{etcd_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    let mut etcd = Command::new(bin.join("etcd"));
    etcd.arg("--name=linkem-test")
        .arg(format!("--data-dir={}", dir.join("etcd").display()))
        .arg(format!("--listen-client-urls={etcd_url}"))
        .arg(format!("--advertise-client-urls={etcd_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=linkem-test={peer_url}"))
        .args(["--unsafe-no-fsync", "--log-level=warn"]);
    children.push(spawn_logged(etcd, &dir.join("etcd.log"))?);
    wait_port(etcd_port, &dir.join("etcd.log"), &mut children[0])?;
    let mut api = Command::new(bin.join("kube-apiserver"));
    api.arg(format!("--etcd-servers={etcd_url}"))
        .args(["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"])
        .arg(format!("--secure-port={api_port}"))
        .arg(format!("--cert-dir={}", dir.join("certs").display()))
        .arg(format!(
            "--token-auth-file={}",
            pki.join("tokens.csv").display()
        ))
        .arg("--authorization-mode=RBAC")
        .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
        .arg(format!(
            "--service-account-key-file={}",
            pki.join("sa.pub").display()
        ))
        .arg(format!(
            "--service-account-signing-key-file={}",
            pki.join("sa.key").display()
        ))
        .args([
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            // No controller-manager makes the default ServiceAccount a Pod would need.
            "--disable-admission-plugins=ServiceAccount",
            "--enable-priority-and-fairness=false",
            "--endpoint-reconciler-type=none",
            "--profiling=false",
        ]);
    children.push(spawn_logged(api, &dir.join("apiserver.log"))?);
    let url = format!("https://127.0.0.1:{api_port}");
    wait_ready(&url, token, dir, children)?;
    Ok(url)
}

fn spawn_logged(mut cmd: Command, log: &Path) -> Result<Child> {
    let out = std::fs::File::create(log)?;
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    // SIGKILL: their state is a throwaway directory.
    linkem_io::shellns::die_with_parent(&mut cmd, libc::SIGKILL);
    cmd.spawn()
        .with_context(|| format!("starting {:?}", cmd.get_program()))
}

fn wait_port(port: u16, log: &Path, child: &mut Child) -> Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = child.try_wait()? {
            bail!("etcd exited ({status}):\n{}", tail(log));
        }
        if Instant::now() > deadline {
            bail!("etcd not listening after {READY_TIMEOUT:?}:\n{}", tail(log));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Polls `/readyz` with a client of the control plane itself.
fn wait_ready(url: &str, token: &str, dir: &Path, children: &mut [Child]) -> Result<()> {
    let kubeconfig = dir.join("kubeconfig");
    write_kubeconfig(url, token, &kubeconfig)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = rt.block_on(client_for(&kubeconfig))?;
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let req = http::Request::get("/readyz").body(Vec::new())?;
        let last = match rt.block_on(client.request_text(req)) {
            Ok(body) if body.trim() == "ok" => return Ok(()),
            Ok(body) => body,
            Err(e) => e.to_string(),
        };
        for (c, name) in children.iter_mut().zip(["etcd", "apiserver"]) {
            if let Some(status) = c.try_wait()? {
                bail!(
                    "{name} exited ({status}):\n{}",
                    tail(&dir.join(format!("{name}.log")))
                );
            }
        }
        if Instant::now() > deadline {
            bail!(
                "kube-apiserver not ready after {READY_TIMEOUT:?} (last answer: {last}):\n{}",
                tail(&dir.join("apiserver.log"))
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Three ports the kernel deems free now (bound together, so distinct).
fn free_ports() -> Result<[u16; 3]> {
    let ls = [
        TcpListener::bind("127.0.0.1:0")?,
        TcpListener::bind("127.0.0.1:0")?,
        TcpListener::bind("127.0.0.1:0")?,
    ];
    Ok([
        ls[0].local_addr()?.port(),
        ls[1].local_addr()?.port(),
        ls[2].local_addr()?.port(),
    ])
}

fn openssl(args: &[&str]) -> Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .context("running openssl (apt-get install openssl) for the service-account keys")?;
    if !out.status.success() {
        bail!(
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn path_str(p: &Path) -> Result<String> {
    p.to_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("{} is not UTF-8", p.display()))
}

fn random_hex(bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// The last lines of a log, for an error message.
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(25)..].join("\n")
}

const DIR_PREFIX: &str = "linkem-k8s-test-";

fn fresh_dir() -> Result<PathBuf> {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("{DIR_PREFIX}{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Removes the directories of control planes whose test process is gone.
fn sweep_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(DIR_PREFIX)
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !linkem_io::shellns::process_alive(pid) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// A Pod object as the scheduler leaves it: bound to `node`, with `labels`
/// (`app=web` ...), a container that never runs (no kubelet). Its uid.
pub async fn create_pod(
    pods: &Api<k8s_openapi::api::core::v1::Pod>,
    name: &str,
    labels: &[(&str, &str)],
    node: &str,
) -> Result<String> {
    let labels: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
        .collect();
    let p = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "none"}]}}))?;
    let created = pods
        .create(&kube::api::PostParams::default(), &p)
        .await
        .with_context(|| format!("creating pod {name}"))?;
    created.metadata.uid.context("a created pod without a uid")
}

/// What the kubelet writes once the sandbox is up: phase Running and the
/// pod's address (a merge patch of the status subresource).
pub async fn set_pod_running(
    pods: &Api<k8s_openapi::api::core::v1::Pod>,
    name: &str,
    ip: &str,
) -> Result<()> {
    let status = serde_json::json!({"status": {"phase": "Running", "podIP": ip,
        "podIPs": [{"ip": ip}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .with_context(|| format!("patching pod {name}'s status"))?;
    Ok(())
}
