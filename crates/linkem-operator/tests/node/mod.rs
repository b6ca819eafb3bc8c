//! One test node's data plane, as the kubelet would make it: per pod a
//! network namespace, a veth pair whose one end `host-device` moves into it
//! (Debian's containernetworking-plugins, through the CNI project's
//! `cnitool`), and `linkem-cni` chained after it with the node's own
//! `runDir`, called with the kubelet's `CNI_ARGS` (`K8S_POD_NAMESPACE`,
//! `K8S_POD_NAME`, `K8S_POD_UID`). Drop undoes everything, also after a
//! failed assertion.
//!
//! Root only; `skip_reason` says why a test cannot run (no root, no
//! plugins, no cnitool: `scripts/cnitool.sh` builds it).

#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const PLUGINS: &str = "/usr/lib/cni";

/// Where cargo put this test's sibling binaries (`linkem`, `linkem-cni`,
/// `linkem-operator`): the test runs from `target/PROFILE/deps/`.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

fn run(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"))
}

pub fn ok(cmd: &str, args: &[&str]) -> String {
    let o = run(cmd, args);
    assert!(
        o.status.success(),
        "{cmd} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Why the live test cannot run here, if it cannot; else cnitool's path.
pub fn prerequisites() -> Result<PathBuf, String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let euid = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2))
        .unwrap_or("");
    if euid != "0" {
        return Err("not root".into());
    }
    for p in ["host-device", "static"] {
        if !Path::new(PLUGINS).join(p).exists() {
            return Err(format!(
                "{PLUGINS}/{p} is missing (apt-get install containernetworking-plugins)"
            ));
        }
    }
    for b in ["linkem", "linkem-cni"] {
        if !bin_dir().join(b).is_file() {
            return Err(format!(
                "{} is missing: cargo build -p linkem-emu -p linkem-cni first",
                bin_dir().join(b).display()
            ));
        }
    }
    if let Some(p) = std::env::var_os("CNITOOL") {
        return Ok(p.into());
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/cnitool.sh");
    let o = Command::new(script)
        .env("CARGO_TARGET_DIR", bin_dir().parent().unwrap())
        .output()
        .map_err(|e| format!("cannot run scripts/cnitool.sh: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "scripts/cnitool.sh could not build cnitool: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
}

/// One pod's sandbox.
#[derive(Debug, Clone)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    /// The container's IPv4 address (the host reaches it through `host_dev`).
    pub addr: String,
    pub netns: String,
    pub network: String,
    /// The emulator's name and control socket.
    pub emulator: String,
    pub socket: PathBuf,
}

/// A node: its run dir and its pods' sandboxes.
pub struct Node {
    pub prefix: String,
    pub run_dir: PathBuf,
    conf_dir: PathBuf,
    cnitool: PathBuf,
    /// Second octet of the pods' subnets.
    octet: u32,
    netns: Vec<String>,
    links: Vec<String>,
    added: Vec<(String, String)>,
    pods: u32,
}

impl Node {
    /// `tag`: unique among the tests (names `lko{tag}PID...`); `octet`: the
    /// second octet of its pods' subnets (10.OCTET.X.0/24).
    pub fn new(cnitool: PathBuf, tag: &str, octet: u32) -> Node {
        let prefix = format!("lko{tag}{}", std::process::id() % 10_000);
        let base = std::env::temp_dir().join(&prefix);
        Node {
            run_dir: base.join("run"),
            conf_dir: base.join("net"),
            prefix,
            cnitool,
            octet,
            netns: vec![],
            links: vec![],
            added: vec![],
            pods: 0,
        }
    }

    fn cnitool(&self, command: &str, network: &str, netns: &str, args: &str) -> Output {
        Command::new(&self.cnitool)
            .args([command, network, netns])
            .env("NETCONFPATH", &self.conf_dir)
            .env("CNI_PATH", format!("{}:{PLUGINS}", bin_dir().display()))
            .env("CNI_ARGS", args)
            .output()
            .unwrap()
    }

    /// A pod's sandbox with linkem-cni's `base` words on its interface.
    pub fn add_pod(&mut self, namespace: &str, name: &str, uid: &str, base: &str) -> Pod {
        self.add_pod_with(namespace, name, uid, serde_json::json!({ "link": base }))
    }

    /// A pod's sandbox whose linkem-cni entry has `fields` (`link`,
    /// `rules`, ...) besides its type, options and runDir.
    pub fn add_pod_with(&mut self, namespace: &str, name: &str, uid: &str, fields: Value) -> Pod {
        let i = self.pods;
        self.pods += 1;
        std::fs::create_dir_all(&self.conf_dir).unwrap();
        let (dev, peer) = (
            format!("{}d{i}", self.prefix),
            format!("{}h{i}", self.prefix),
        );
        ok(
            "ip",
            &["link", "add", &dev, "type", "veth", "peer", "name", &peer],
        );
        self.links.push(peer.clone());
        let third = (std::process::id() % 40) * 6 + i;
        let net = format!("10.{}.{third}", self.octet);
        ok("ip", &["addr", "add", &format!("{net}.1/24"), "dev", &peer]);
        ok("ip", &["link", "set", &peer, "up"]);
        let network = format!("{}n{i}", self.prefix);
        let mut plugin = serde_json::json!({"type": "linkem-cni",
            "options": ["--max-lag", "off"], "runDir": self.run_dir});
        for (k, v) in fields.as_object().into_iter().flatten() {
            plugin[k] = v.clone();
        }
        let list = serde_json::json!({"cniVersion": "1.0.0", "name": network, "plugins": [
            {"type": "host-device", "device": dev,
             "ipam": {"type": "static", "addresses": [{"address": format!("{net}.2/24")}]}},
            plugin
        ]});
        std::fs::write(
            self.conf_dir.join(format!("{network}.conflist")),
            list.to_string(),
        )
        .unwrap();
        let ns = format!("{}p{i}", self.prefix);
        ok("ip", &["netns", "add", &ns]);
        self.netns.push(ns.clone());
        let netns = format!("/var/run/netns/{ns}");
        let args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name};K8S_POD_UID={uid}"
        );
        let o = self.cnitool("add", &network, &netns, &args);
        assert!(
            o.status.success(),
            "cnitool add {network}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        self.added.push((network.clone(), netns.clone()));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let addr = v["ips"][0]["address"].as_str().unwrap();
        let emulator = cnitool_emulator(&netns);
        Pod {
            namespace: namespace.into(),
            name: name.into(),
            addr: addr.split('/').next().unwrap().to_string(),
            netns,
            network,
            socket: self.run_dir.join(format!("{emulator}.sock")),
            emulator,
        }
    }

    /// DEL of the pod's sandbox (the emulator stops, the bump is undone).
    pub fn del_pod(&mut self, pod: &Pod) {
        let o = self.cnitool("del", &pod.network, &pod.netns, "");
        assert!(
            o.status.success(),
            "cnitool del {}: {}",
            pod.network,
            String::from_utf8_lossy(&o.stderr)
        );
        self.added
            .retain(|(n, s)| !(n == &pod.network && s == &pod.netns));
    }

    /// Median ping RTT from the host to `pod`, in ms, the first echo (ARP) left out.
    pub fn median_rtt_ms(&self, pod: &Pod) -> f64 {
        let o = run(
            "ping",
            &["-n", "-c", "12", "-i", "0.05", "-W", "2", &pod.addr],
        );
        let text = String::from_utf8_lossy(&o.stdout);
        let mut rtts: Vec<f64> = text
            .lines()
            .filter_map(|l| l.split("time=").nth(1))
            .filter_map(|t| t.split_whitespace().next()?.parse().ok())
            .skip(1)
            .collect();
        assert!(
            rtts.len() >= 8,
            "ping {}: too few replies:\n{text}",
            pod.addr
        );
        rtts.sort_by(f64::total_cmp);
        rtts[rtts.len() / 2]
    }

    /// The emulator's `list`: per direction its running words and change count.
    pub fn links(&self, pod: &Pod) -> Vec<(String, u64)> {
        emulator_links(&pod.socket)
    }
}

/// The emulator cnitool's ADD on `netns_path` names (interface eth0): cnitool's
/// container id is "cnitool-" and 20 hex digits of SHA-512 of the path.
pub fn cnitool_emulator(netns_path: &str) -> String {
    let sum = ok(
        "sh",
        &["-c", &format!("printf %s '{netns_path}' | sha512sum")],
    );
    format!("cni-cnitool-{}-eth0", &sum[..20])
}

/// An emulator's `list` over its control socket: per direction its running
/// words and change count.
pub fn emulator_links(socket: &Path) -> Vec<(String, u64)> {
    let mut c = linkem_ctl::Client::connect(socket, std::time::Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("{}: {e}", socket.display()));
    let v = c.request_json("list").unwrap();
    v["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["words"].as_str().unwrap_or("").to_string(),
                l["changes"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

impl Drop for Node {
    fn drop(&mut self) {
        for (network, netns) in std::mem::take(&mut self.added) {
            let _ = self.cnitool("del", &network, &netns, "");
        }
        // An emulator a failed DEL left keeps its namespace alive: stop it by its pid.
        for path in std::fs::read_dir(self.run_dir.join("cni"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let p = path.path();
            if p.extension().is_some_and(|e| e == "pid") {
                if let Ok(pid) = std::fs::read_to_string(&p) {
                    let _ = run("kill", &[pid.trim()]);
                }
            }
        }
        for ns in &self.netns {
            let _ = run("ip", &["netns", "del", ns]);
        }
        for l in &self.links {
            let _ = run("ip", &["link", "del", l]);
        }
        let _ = std::fs::remove_dir_all(std::env::temp_dir().join(&self.prefix));
    }
}

/// A `linkem-operator` process (an agent, the controller); killed on drop
/// (and by the kernel when the test's thread ends).
pub struct AgentProc {
    child: Child,
    log: std::path::PathBuf,
}

impl AgentProc {
    /// The agent of `node` over `run_dir`, metrics on 127.0.0.1:`metrics_port`.
    pub fn start(run_dir: &Path, kubeconfig: &Path, metrics_port: u16, log: &Path) -> AgentProc {
        Self::start_node("node-a", run_dir, kubeconfig, metrics_port, log)
    }

    pub fn start_node(
        node: &str,
        run_dir: &Path,
        kubeconfig: &Path,
        metrics_port: u16,
        log: &Path,
    ) -> AgentProc {
        let mut args: Vec<String> = ["agent", "--node", node, "--run-dir"]
            .map(String::from)
            .into();
        args.push(run_dir.display().to_string());
        args.extend(["--metrics".to_string(), format!("127.0.0.1:{metrics_port}")]);
        Self::operator(&args, kubeconfig, log)
    }

    /// `linkem-operator ARGS --kubeconfig KUBECONFIG`, its output appended to `log`.
    pub fn operator(args: &[String], kubeconfig: &Path, log: &Path) -> AgentProc {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_linkem-operator"));
        cmd.args(args)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        linkem_io::shellns::die_with_parent(&mut cmd, libc::SIGKILL);
        AgentProc {
            child: cmd.spawn().unwrap(),
            log: log.to_path_buf(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET /metrics` on 127.0.0.1:`port`.
pub fn scrape(port: u16) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    Some(text)
}

/// Polls `f` every 20 ms until it holds or `limit` passes; the time it took.
pub fn until(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let t = Instant::now();
    loop {
        if f() {
            return Some(t.elapsed());
        }
        if t.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
