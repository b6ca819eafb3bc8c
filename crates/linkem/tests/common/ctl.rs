//! A live `linkem bridge` with its control socket, and `linkem ctl` run as
//! root or as another user, for the control-plane tests.

use super::median;
use linkem_ctl::Client;
use linkem_io::netns::Topology;
use serde_json::Value;
use std::io::Read;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

pub struct CtlBridge {
    pub child: Child,
    pub socket: PathBuf,
}

impl CtlBridge {
    /// Starts `linkem bridge` (AF_PACKET, `--stats json`, stopped after 120 s
    /// at the latest so that it never outlives a failed test) with its control
    /// socket at a unique path under /run/linkem, then `args`; returns once the
    /// socket answers.
    pub fn start(topo: &Topology, args: &[&str]) -> CtlBridge {
        let name = format!("{}-{}", topo.emu_a, std::process::id());
        let socket = linkem_ctl::default_socket_path(&name);
        let child = Command::new(env!("CARGO_BIN_EXE_linkem"))
            .args(["bridge", &topo.emu_a, &topo.emu_b, "--backend", "packet"])
            .args(["--stats", "json", "--name", &name])
            .args(["--duration", "120"])
            .args(args)
            .args(super::max_lag_off_unless_given(args))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("linkem starts");
        let mut b = CtlBridge { child, socket };
        super::wait_until_serving(&mut b.child, Some(&b.socket));
        b
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.socket, Duration::from_secs(10)).expect("connects")
    }

    /// SIGTERM, then the final `--stats json` line, stderr and the exit status.
    pub fn finish(self) -> (Value, String, std::process::ExitStatus) {
        // Safety: kill with a pid we own.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let out = self.child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        let last = stdout
            .lines()
            .last()
            .unwrap_or_else(|| panic!("no stats; stderr: {stderr}"));
        (serde_json::from_str(last).unwrap(), stderr, out.status)
    }
}

/// `linkem ctl --socket SOCKET WORDS...` as root.
pub fn ctl(socket: &Path, words: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_linkem"))
        .arg("ctl")
        .arg("--socket")
        .arg(socket)
        .args(words)
        .output()
        .unwrap()
}

/// `linkem ctl --socket SOCKET -f FILE` (a batch) as root.
pub fn ctl_file(socket: &Path, file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_linkem"))
        .arg("ctl")
        .arg("--socket")
        .arg(socket)
        .arg("-f")
        .arg(file)
        .output()
        .unwrap()
}

/// `linkem ctl` as uid `uid`, gid 65534, with the supplementary groups
/// `groups` (a setpriv list) or none.
pub fn ctl_as(uid: u32, groups: Option<&str>, socket: &Path, words: &[&str]) -> Output {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={uid}")).arg("--regid=65534");
    match groups {
        Some(g) => c.arg(format!("--groups={g}")),
        None => c.arg("--clear-groups"),
    };
    c.arg(env!("CARGO_BIN_EXE_linkem"))
        .arg("ctl")
        .arg("--socket")
        .arg(socket)
        .args(words)
        .output()
        .unwrap()
}

/// RTTs (ms) of `count` pings from A to `dst`; on these links nothing drops, so
/// a missing reply is a failure, not a skip.
pub fn ping_rtts_to(topo: &Topology, dst: Ipv4Addr, count: u32) -> Vec<f64> {
    let o = topo
        .exec_in_a(&[
            "ping",
            "-n",
            "-c",
            &count.to_string(),
            "-i",
            "0.02",
            "-W",
            "1",
            &dst.to_string(),
        ])
        .unwrap();
    let rtts: Vec<f64> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect();
    assert_eq!(
        rtts.len(),
        count as usize,
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    rtts
}

/// Median of [`ping_rtts_to`].
pub fn rtt_ms(topo: &Topology, dst: Ipv4Addr, count: u32) -> f64 {
    median(ping_rtts_to(topo, dst, count))
}

/// GET /metrics with a bare HTTP/1.1 request; the body.
pub fn scrape(port: u16) -> String {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
    r.split("\r\n\r\n").nth(1).unwrap_or("").to_string()
}

/// Samples by `name{labels as sorted JSON}`, read by the Prometheus client
/// library's own parser.
pub fn parse_exposition(body: &str) -> Value {
    use std::io::Write;
    let script = r#"
import sys, json
from prometheus_client.parser import text_string_to_metric_families
out = {}
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        key = s.name + json.dumps(dict(sorted(s.labels.items())), sort_keys=True)
        out[key] = s.value
print(json.dumps(out))
"#;
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 with prometheus_client (apt-get install python3-prometheus-client)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "parser: {}\n{body}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
