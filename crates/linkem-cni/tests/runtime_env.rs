//! linkem-cni called as a runtime calls it, without libcni or other CNI
//! plugins: `CNI_*` in the environment, the configuration on stdin, a
//! previous result made here for a veth the test puts in a namespace of its
//! own (names `lka...`, removed by Drop).
//!
//! Root only; skipped, saying why, otherwise.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Live tests share two cores: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2))
        == Some("0")
}

fn ok(cmd: &str, args: &[&str]) -> String {
    let o = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        o.status.success(),
        "{cmd} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `linkem` beside the plugin (cargo builds the workspace's binaries there).
fn linkem_present() -> bool {
    PathBuf::from(env!("CARGO_BIN_EXE_linkem-cni"))
        .with_file_name("linkem")
        .is_file()
}

/// Runs the plugin: exit status, stdout, stderr.
fn plugin(command: &str, netns: &str, id: &str, ifname: &str, conf: &[u8]) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_linkem-cni"))
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", id)
        .env("CNI_NETNS", netns)
        .env("CNI_IFNAME", ifname)
        .env("CNI_PATH", "/nonexistent")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(conf).unwrap();
    child.wait_with_output().unwrap()
}

fn said(o: &Output) -> String {
    format!(
        "exit {}; stdout {}; stderr {}",
        o.status,
        String::from_utf8_lossy(&o.stdout).trim(),
        String::from_utf8_lossy(&o.stderr).trim()
    )
}

/// A container: namespace `lkaNNNNNc` with `eth0` (a veth whose host end is
/// `lkaNNNNNh`), an address on each end. Drop removes both.
struct Container {
    ns: String,
    path: String,
    host_end: String,
    attached: Option<String>,
}

impl Container {
    fn new() -> Container {
        let tag = std::process::id() % 100_000;
        let ns = format!("lka{tag}c");
        let host_end = format!("lka{tag}h");
        let peer = format!("lka{tag}p");
        let c = Container {
            path: format!("/run/netns/{ns}"),
            ns,
            host_end,
            attached: None,
        };
        ok("ip", &["netns", "add", &c.ns]);
        ok(
            "ip",
            &[
                "link",
                "add",
                &c.host_end,
                "type",
                "veth",
                "peer",
                "name",
                &peer,
            ],
        );
        ok("ip", &["link", "set", &peer, "netns", &c.ns]);
        ok("ip", &["-n", &c.ns, "link", "set", &peer, "name", "eth0"]);
        ok(
            "ip",
            &["-n", &c.ns, "addr", "add", "10.234.7.2/24", "dev", "eth0"],
        );
        ok("ip", &["-n", &c.ns, "link", "set", "eth0", "up"]);
        ok("ip", &["addr", "add", "10.234.7.1/24", "dev", &c.host_end]);
        ok("ip", &["link", "set", &c.host_end, "up"]);
        c
    }

    /// The names of the links in the container's namespace, sorted.
    fn links(&self) -> Vec<String> {
        let out = ok("ip", &["-n", &self.ns, "-o", "link", "show"]);
        let mut names: Vec<String> = out
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|n| n.split('@').next().unwrap().to_string())
            .collect();
        names.sort();
        names
    }

    fn eth0(&self) -> (String, String) {
        let mac = ok(
            "ip",
            &[
                "netns",
                "exec",
                &self.ns,
                "cat",
                "/sys/class/net/eth0/address",
            ],
        );
        let addr = ok("ip", &["-n", &self.ns, "-o", "-4", "addr", "show", "eth0"]);
        let addr = addr
            .split_whitespace()
            .skip_while(|w| *w != "inet")
            .nth(1)
            .unwrap_or("none")
            .to_string();
        (mac.trim().to_string(), addr)
    }

    fn conf(&self, cni_version: &str) -> Value {
        json!({
            "cniVersion": cni_version,
            "name": "lka-net",
            "type": "linkem-cni",
            "link": "delay 5ms",
            "options": ["--max-lag", "off"],
            "prevResult": {
                "cniVersion": cni_version,
                "interfaces": [{"name": "eth0", "sandbox": self.path}],
                "ips": [{"address": "10.234.7.2/24", "interface": 0}]
            }
        })
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let conf = self.conf("1.0.0").to_string();
        let _ = plugin("DEL", &self.path, "lka-ct", "eth0", conf.as_bytes());
        if let Some(a) = &self.attached {
            // Detaches the name only: the host's namespace itself stays.
            let _ = Command::new("ip").args(["netns", "delete", a]).status();
        }
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.ns])
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_end])
            .status();
    }
}

/// The plugin's files for one link (pid, log, state, rules).
fn link_files(name: &str) -> Vec<String> {
    std::fs::read_dir("/run/linkem/cni")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|f| f.starts_with(&format!("{name}.")))
                .collect()
        })
        .unwrap_or_default()
}

/// ADD with CNI_NETNS naming the host's own namespace (pid 1's path, and a
/// name under /run/netns bound to the plugin's own) is refused with a CNI error naming
/// the problem; the host's interface keeps its name and MAC, nothing of
/// linkem's appears.
#[test]
fn add_into_the_host_namespace_is_refused() {
    if !is_root() {
        eprintln!("skipped: not root");
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = Container::new();
    let attached = format!("{}x", c.ns);
    // A name bound to this process's namespace, which the plugin shares
    // (binding pid 1's may be refused inside a container).
    ok(
        "ip",
        &[
            "netns",
            "attach",
            &attached,
            &std::process::id().to_string(),
        ],
    );
    c.attached = Some(attached.clone());
    let mac_before = ok("cat", &[&format!("/sys/class/net/{}/address", c.host_end)]);
    // The host end is the interface the plugin would take, were it a container's.
    let mut conf = c.conf("1.0.0");
    conf["prevResult"]["interfaces"][0]["name"] = c.host_end.clone().into();
    let mut paths = vec![
        format!("/proc/{}/ns/net", std::process::id()),
        format!("/run/netns/{attached}"),
    ];
    // pid 1's may be out of reach inside a sandbox (then the plugin cannot
    // enter it either).
    if std::fs::metadata("/proc/1/ns/net").is_ok() {
        paths.push("/proc/1/ns/net".into());
    } else {
        eprintln!("/proc/1/ns/net is out of reach here: not tried");
    }
    for netns in paths {
        let o = plugin(
            "ADD",
            &netns,
            "lka-host",
            &c.host_end,
            conf.to_string().as_bytes(),
        );
        assert!(
            !o.status.success(),
            "ADD into the host's namespace: {}",
            said(&o)
        );
        let v: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("no CNI error on stdout ({e}): {}", said(&o)));
        assert_eq!(v["code"], 4, "{v}");
        let msg = v["msg"].as_str().unwrap();
        let whose = ["the host's (pid 1's)", "linkem-cni's own"];
        assert!(
            whose
                .iter()
                .any(|w| msg.contains(&format!("CNI_NETNS {netns} is {w} network namespace")))
                && msg.contains("nothing was changed"),
            "{msg}"
        );
        let mac = ok("cat", &[&format!("/sys/class/net/{}/address", c.host_end)]);
        assert_eq!(mac, mac_before, "{} changed its MAC", c.host_end);
        for gone in ["lkc-", "lke-"] {
            let tail = &c.host_end[..c.host_end.len().min(11)];
            let dev = format!("/sys/class/net/{gone}{tail}");
            assert!(
                !Path::new(&dev).exists(),
                "{dev} made in the host's namespace"
            );
        }
        let name = format!("cni-lka-host-{}", c.host_end);
        assert!(link_files(&name).is_empty(), "{:?}", link_files(&name));
    }
}

/// DEL whose configuration cannot be parsed (not JSON, an unknown field, a
/// wrong type, an unknown version) still stops the emulator and gives the
/// container its interface back (name, MAC, address), and succeeds; without
/// CNI_NETNS too (the state ADD kept names the namespace).
#[test]
fn del_with_a_broken_configuration_cleans_up_and_succeeds() {
    if !is_root() {
        eprintln!("skipped: not root");
        return;
    }
    if !linkem_present() {
        panic!("linkem is missing beside linkem-cni: cargo build -p linkem-emu first");
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Container::new();
    let before = c.eth0();
    let name = "cni-lka-ct-eth0";
    let mut good = c.conf("1.0.0");
    for broken in [
        b"{not json".to_vec(),
        br#"{"cniVersion":"1.0.0","name":"lka-net","type":"linkem-cni","speed":"1"}"#.to_vec(),
        br#"{"cniVersion":"1.0.0","name":"lka-net","type":"linkem-cni","link":5}"#.to_vec(),
        br#"{"cniVersion":"7.0.0","name":"lka-net","type":"linkem-cni"}"#.to_vec(),
    ] {
        let shown = String::from_utf8_lossy(&broken).to_string();
        good["prevResult"]["cniVersion"] = "1.0.0".into();
        let o = plugin(
            "ADD",
            &c.path,
            "lka-ct",
            "eth0",
            good.to_string().as_bytes(),
        );
        assert!(o.status.success(), "ADD: {}", said(&o));
        let links = c.links();
        assert!(
            links.contains(&"lkc-eth0".to_string()) && links.contains(&"lke-eth0".to_string()),
            "after ADD: {links:?}"
        );
        let pid: i32 = std::fs::read_to_string(format!("/run/linkem/cni/{name}.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let o = plugin("DEL", &c.path, "lka-ct", "eth0", &broken);
        assert!(
            o.status.success() && o.stdout.is_empty(),
            "DEL with '{shown}': {}",
            said(&o)
        );
        let t = Instant::now();
        while Path::new(&format!("/proc/{pid}")).exists() && t.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(
            stat.is_empty() || stat.contains(") Z"),
            "DEL with '{shown}' left the emulator (pid {pid}) running: {stat}"
        );
        assert_eq!(
            c.links(),
            ["eth0", "lo"],
            "DEL with '{shown}' left the container's links bumped"
        );
        assert_eq!(
            c.eth0(),
            before,
            "eth0 (MAC, address) after DEL with '{shown}'"
        );
        assert!(
            link_files(name).is_empty(),
            "DEL with '{shown}' left {:?}",
            link_files(name)
        );
    }
    // A DEL without CNI_NETNS (the spec allows it) and with a broken
    // configuration: the state names the namespace ADD bumped.
    let o = plugin(
        "ADD",
        &c.path,
        "lka-ct",
        "eth0",
        good.to_string().as_bytes(),
    );
    assert!(o.status.success(), "ADD: {}", said(&o));
    let o = plugin("DEL", "", "lka-ct", "eth0", b"{not json");
    assert!(o.status.success(), "DEL without CNI_NETNS: {}", said(&o));
    assert_eq!(c.links(), ["eth0", "lo"], "DEL without CNI_NETNS");
    assert_eq!(c.eth0(), before, "eth0 after DEL without CNI_NETNS");
    assert!(link_files(name).is_empty(), "{:?}", link_files(name));
}
