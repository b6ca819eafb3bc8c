//! A two-node cluster's data plane and processes, as a kubelet and its CNI
//! would make them: one Linux bridge, per node a CNI network list (Debian's
//! `bridge` + `host-local`, then `linkem-cni` with the node's own `runDir`),
//! per pod a sandbox namespace through cnitool ADD with the kubelet's
//! `CNI_ARGS`, a probe namespace on the same bridge to measure from, and the
//! controller and one agent per node as `linkem-operator` processes. Drop
//! undoes everything (CNI DEL per pod, processes, namespaces, bridge), also
//! after a failed assertion.
//!
//! Use from a test file with `mod common; mod node; mod cluster;`.
//!
//! Addresses: 10.OCTET.0.0/16; the probe is 10.OCTET.0.2, node i's pods
//! are drawn from 10.OCTET.(i+1).1-254 (one host-local range per node).

#![allow(dead_code)]

use crate::node::{bin_dir, cnitool_emulator, emulator_links, free_port, ok, scrape, until};
use crate::node::{AgentProc, PLUGINS};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

pub const NODES: [&str; 2] = ["node-a", "node-b"];

/// One pod's sandbox.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub namespace: String,
    pub name: String,
    /// Index into [`NODES`].
    pub node: usize,
    pub netns: String,
    pub netns_path: String,
    pub addr: String,
    pub emulator: String,
    pub socket: PathBuf,
}

impl Sandbox {
    /// The emulator's per-direction words and change counts.
    pub fn links(&self) -> Vec<(String, u64)> {
        emulator_links(&self.socket)
    }

    /// The pod's egress words (what it sends: a-to-b).
    pub fn egress(&self) -> String {
        self.links()
            .first()
            .map(|l| l.0.clone())
            .unwrap_or_default()
    }

    pub fn changes(&self) -> u64 {
        self.links().iter().map(|l| l.1).sum()
    }
}

pub struct Cluster {
    pub prefix: String,
    pub base: PathBuf,
    pub bridge: String,
    /// The probe's namespace name (ping and iperf3 run there).
    pub probe: String,
    pub run_dirs: Vec<PathBuf>,
    pub kubeconfig: PathBuf,
    /// The controller's and the agents' output.
    pub log: PathBuf,
    pub metrics_ports: Vec<u16>,
    pub controller: Option<AgentProc>,
    pub agents: Vec<Option<AgentProc>>,
    pub sandboxes: Vec<Sandbox>,
    cnitool: PathBuf,
    conf_dir: PathBuf,
    netns: Vec<String>,
    seq: u32,
}

/// Why the cluster cannot be made here, if it cannot: the node module's
/// reasons, the bridge plugins, the control plane's binaries.
pub fn prerequisites() -> Result<PathBuf, String> {
    let cnitool = crate::node::prerequisites()?;
    for p in ["bridge", "host-local"] {
        if !Path::new(PLUGINS).join(p).exists() {
            return Err(format!(
                "{PLUGINS}/{p} is missing (containernetworking-plugins)"
            ));
        }
    }
    if !crate::common::bin_dir().join("kube-apiserver").is_file() {
        return Err(format!(
            "no kube-apiserver ({})",
            crate::common::MISSING_HINT
        ));
    }
    Ok(cnitool)
}

fn run(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"))
}

impl Cluster {
    /// The bridge, the probe and the nodes' network lists; no pods, no
    /// processes yet. `tag`: unique among the test files (names
    /// `lk{tag}PID...`); `octet`: the second octet of the /16; `options`:
    /// linkem-cni's `options` (the emulator's own flags).
    pub fn new(
        cnitool: PathBuf,
        tag: &str,
        octet: u32,
        kubeconfig: &Path,
        options: &[&str],
    ) -> Cluster {
        let prefix = format!("lk{tag}{}", std::process::id() % 10_000);
        let base = std::env::temp_dir().join(&prefix);
        let _ = std::fs::remove_dir_all(&base);
        let conf_dir = base.join("net");
        std::fs::create_dir_all(&conf_dir).unwrap();
        let c = Cluster {
            bridge: format!("{prefix}br"),
            probe: format!("{prefix}probe"),
            run_dirs: NODES.iter().map(|n| base.join(n)).collect(),
            kubeconfig: kubeconfig.to_path_buf(),
            log: base.join("processes.log"),
            metrics_ports: vec![],
            controller: None,
            agents: vec![],
            sandboxes: vec![],
            cnitool,
            conf_dir,
            netns: vec![],
            seq: 0,
            prefix,
            base,
        };
        let br = c.bridge.clone();
        ok("ip", &["link", "add", &br, "type", "bridge"]);
        ok("ip", &["link", "set", &br, "up"]);
        // The probe: a namespace whose veth's other end is a bridge port.
        let (pv, ph) = (format!("{}pv", c.prefix), format!("{}ph", c.prefix));
        ok("ip", &["netns", "add", &c.probe]);
        ok(
            "ip",
            &["link", "add", &ph, "type", "veth", "peer", "name", &pv],
        );
        ok("ip", &["link", "set", &pv, "netns", &c.probe]);
        ok("ip", &["link", "set", &ph, "master", &br, "up"]);
        let probe_addr = format!("10.{octet}.0.2/16");
        c.probe_ok(&["ip", "addr", "add", &probe_addr, "dev", &pv]);
        c.probe_ok(&["ip", "link", "set", &pv, "up"]);
        c.probe_ok(&["ip", "link", "set", "lo", "up"]);
        for (i, node) in NODES.iter().enumerate() {
            let list = json!({"cniVersion": "1.0.0", "name": c.network(i), "plugins": [
                {"type": "bridge", "bridge": br, "ipam": {"type": "host-local",
                  "dataDir": c.base.join("ipam"),
                  "ranges": [[{"subnet": format!("10.{octet}.0.0/16"),
                    "rangeStart": format!("10.{octet}.{}.1", i + 1),
                    "rangeEnd": format!("10.{octet}.{}.254", i + 1)}]]}},
                {"type": "linkem-cni", "link": "rate 1gbit", "options": options,
                 "runDir": c.run_dirs[i]}
            ]});
            let path = c.conf_dir.join(format!("{}.conflist", c.network(i)));
            std::fs::write(path, list.to_string()).unwrap();
            eprintln!("{node}: run dir {}", c.run_dirs[i].display());
        }
        c
    }

    fn network(&self, node: usize) -> String {
        format!("{}-{}", self.prefix, NODES[node])
    }

    fn probe_ok(&self, args: &[&str]) -> String {
        let mut all = vec!["netns", "exec", &self.probe];
        all.extend_from_slice(args);
        ok("ip", &all)
    }

    fn cnitool(&self, command: &str, node: usize, netns_path: &str, args: &str) -> Output {
        Command::new(&self.cnitool)
            .args([command, &self.network(node), netns_path])
            .env("NETCONFPATH", &self.conf_dir)
            .env("CNI_PATH", format!("{}:{PLUGINS}", bin_dir().display()))
            .env("CNI_ARGS", args)
            .output()
            .unwrap()
    }

    /// A sandbox for the pod on `node` through CNI ADD; kept in `sandboxes`.
    pub fn add(&mut self, namespace: &str, name: &str, uid: &str, node: usize) -> Sandbox {
        let netns = format!("{}s{}", self.prefix, self.seq);
        self.seq += 1;
        ok("ip", &["netns", "add", &netns]);
        self.netns.push(netns.clone());
        let netns_path = format!("/var/run/netns/{netns}");
        let args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name};K8S_POD_UID={uid}"
        );
        let o = self.cnitool("add", node, &netns_path, &args);
        assert!(
            o.status.success(),
            "cnitool add {name} on {}: {}{}",
            NODES[node],
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let addr = v["ips"][0]["address"].as_str().unwrap();
        let emulator = cnitool_emulator(&netns_path);
        let sb = Sandbox {
            namespace: namespace.into(),
            name: name.into(),
            node,
            addr: addr.split('/').next().unwrap().to_string(),
            socket: self.run_dirs[node].join(format!("{emulator}.sock")),
            emulator,
            netns,
            netns_path,
        };
        self.sandboxes.push(sb.clone());
        sb
    }

    /// CNI DEL of the sandbox, then its namespace goes.
    pub fn del(&mut self, sb: &Sandbox) {
        let o = self.cnitool("del", sb.node, &sb.netns_path, "");
        assert!(
            o.status.success(),
            "cnitool del {}: {}",
            sb.name,
            String::from_utf8_lossy(&o.stderr)
        );
        self.sandboxes.retain(|s| s.netns != sb.netns);
        let _ = run("ip", &["netns", "del", &sb.netns]);
        self.netns.retain(|n| n != &sb.netns);
    }

    /// The controller and both agents, once each agent's metrics answer.
    pub fn start_processes(&mut self) {
        self.controller = Some(AgentProc::operator(
            &["controller".to_string()],
            &self.kubeconfig,
            &self.log,
        ));
        self.metrics_ports = NODES.iter().map(|_| free_port()).collect();
        self.agents = (0..NODES.len()).map(|_| None).collect();
        for i in 0..NODES.len() {
            self.start_agent(i);
        }
    }

    /// Node `i`'s agent (again, after [`Cluster::kill_agent`]); returns once
    /// its metrics endpoint answers.
    pub fn start_agent(&mut self, i: usize) {
        let port = self.metrics_ports[i];
        let a = AgentProc::start_node(
            NODES[i],
            &self.run_dirs[i],
            &self.kubeconfig,
            port,
            &self.log,
        );
        self.agents[i] = Some(a);
        let up = until(Duration::from_secs(20), || scrape(port).is_some());
        assert!(
            up.is_some(),
            "agent {} did not start:\n{}",
            NODES[i],
            self.log_tail(30)
        );
    }

    pub fn kill_agent(&mut self, i: usize) {
        if let Some(mut a) = self.agents[i].take() {
            a.kill();
        }
    }

    /// The processes' output, its last `lines`.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// `ping` from the probe: the replies' RTTs in ms and how many were sent.
    pub fn ping(&self, addr: &str, count: u32, interval_s: &str) -> (Vec<f64>, u32) {
        let o = run(
            "ip",
            &[
                "netns",
                "exec",
                &self.probe,
                "ping",
                "-n",
                "-c",
                &count.to_string(),
                "-i",
                interval_s,
                "-W",
                "1",
                addr,
            ],
        );
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let sent = text
            .lines()
            .find(|l| l.contains("packets transmitted"))
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        (ping_rtts(&text), sent)
    }

    /// Median RTT in ms over 12 pings (the first, which may wait for ARP,
    /// left out); None when fewer than 8 came back.
    pub fn median_rtt_ms(&self, addr: &str) -> Option<f64> {
        let o = run(
            "ip",
            &[
                "netns",
                "exec",
                &self.probe,
                "ping",
                "-n",
                "-c",
                "12",
                "-i",
                "0.05",
                "-W",
                "1",
                addr,
            ],
        );
        let mut rtts: Vec<f64> = ping_rtts(&String::from_utf8_lossy(&o.stdout));
        if rtts.len() < 9 {
            return None;
        }
        rtts.remove(0);
        Some(median(&mut rtts))
    }
}

impl Cluster {
    /// The pids of the emulators linkem-cni started (its `cni/*.pid` files).
    pub fn emulator_pids(&self) -> Vec<u32> {
        let mut pids = vec![];
        for dir in &self.run_dirs {
            for p in std::fs::read_dir(dir.join("cni"))
                .into_iter()
                .flatten()
                .flatten()
            {
                let p = p.path();
                if p.extension().is_some_and(|e| e == "pid") {
                    let text = std::fs::read_to_string(&p).unwrap_or_default();
                    pids.extend(text.trim().parse::<u32>().ok());
                }
            }
        }
        pids
    }
}

/// The `time=` values of ping's per-reply lines.
pub fn ping_rtts(text: &str) -> Vec<f64> {
    text.lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect()
}

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Agents first: none may re-apply to an emulator being taken down.
        for a in self.agents.iter_mut() {
            if let Some(mut a) = a.take() {
                a.kill();
            }
        }
        if let Some(mut c) = self.controller.take() {
            c.kill();
        }
        for sb in std::mem::take(&mut self.sandboxes) {
            let _ = self.cnitool("del", sb.node, &sb.netns_path, "");
        }
        // An emulator a failed DEL left keeps its namespace alive: stop it by its pid.
        for pid in self.emulator_pids() {
            let _ = run("kill", &[&pid.to_string()]);
        }
        for ns in self.netns.iter().chain([&self.probe]) {
            let _ = run("ip", &["netns", "del", ns]);
        }
        let _ = run("ip", &["link", "del", &format!("{}ph", self.prefix)]);
        let _ = run("ip", &["link", "del", &self.bridge]);
        let _ = std::fs::remove_dir_all(&self.base);
    }
}
