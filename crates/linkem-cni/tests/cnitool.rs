//! linkem-cni as container runtimes call it: through libcni, with the CNI
//! project's `cnitool` and Debian's containernetworking-plugins (bridge,
//! host-local, host-device, static), on network namespaces made here.
//!
//! Root only; skipped, saying why, without root, without the plugins or
//! without cnitool (scripts/cnitool.sh builds it).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const PLUGINS: &str = "/usr/lib/cni";

/// Live tests share two cores: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn plugin_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_linkem-cni"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// cnitool, or why the test cannot run.
fn cnitool() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("CNITOOL") {
        return Ok(p.into());
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/cnitool.sh");
    let target = plugin_dir().parent().unwrap().to_path_buf();
    let o = Command::new(script)
        .env("CARGO_TARGET_DIR", &target)
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

fn skip_reason() -> Option<String> {
    // The effective uid, from /proc/self/status.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let euid = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2))
        .unwrap();
    if euid != "0" {
        return Some("not root".into());
    }
    for p in ["bridge", "host-local", "host-device", "static"] {
        if !Path::new(PLUGINS).join(p).exists() {
            return Some(format!(
                "{PLUGINS}/{p} is missing (apt-get install containernetworking-plugins)"
            ));
        }
    }
    None
}

/// `linkem` beside the plugin, where the workspace's build puts it
/// (`cargo test --workspace` builds it; a cargo build from inside this test
/// may wait on the lock the running `cargo test` holds on the target
/// directory).
fn ensure_linkem() {
    let linkem = plugin_dir().join("linkem");
    assert!(
        linkem.is_file(),
        "{} is missing: build it first (cargo build -p linkem-emu), or run the workspace's tests",
        linkem.display()
    );
}

fn run(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"))
}

fn ok(cmd: &str, args: &[&str]) -> String {
    let o = run(cmd, args);
    assert!(
        o.status.success(),
        "{cmd} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The test's networks, namespaces and files; Drop removes them all.
struct Lab {
    prefix: String,
    conf_dir: PathBuf,
    ipam_dir: PathBuf,
    cnitool: PathBuf,
    netns: Vec<String>,
    /// (network, netns) of each ADD, for DEL at teardown.
    added: Vec<(String, String)>,
    links: Vec<String>,
    /// A `runDir` of the test's own, for the networks that name it.
    run_dir: PathBuf,
}

impl Lab {
    /// `tag`: one letter per test, so the two never share a name.
    fn new(cnitool: PathBuf, tag: char) -> Lab {
        let prefix = format!("lkn{}{tag}", std::process::id() % 100_000);
        let conf_dir = std::env::temp_dir().join(format!("{prefix}-net"));
        let ipam_dir = PathBuf::from(format!("/run/{prefix}-ipam"));
        std::fs::create_dir_all(&conf_dir).unwrap();
        let run_dir = std::env::temp_dir().join(format!("{prefix}-run"));
        Lab {
            run_dir,
            prefix,
            conf_dir,
            ipam_dir,
            cnitool,
            netns: vec![],
            added: vec![],
            links: vec![],
        }
    }

    fn netns(&mut self, tag: &str) -> String {
        let name = format!("{}{tag}", self.prefix);
        ok("ip", &["netns", "add", &name]);
        self.netns.push(name.clone());
        format!("/var/run/netns/{name}")
    }

    fn network(&self, name: &str, plugins: Value) {
        let list = serde_json::json!({"cniVersion": "1.0.0", "name": name, "plugins": plugins});
        std::fs::write(
            self.conf_dir.join(format!("{name}.conflist")),
            list.to_string(),
        )
        .unwrap();
    }

    /// `cnitool COMMAND NETWORK NETNS` with the environment runtimes give;
    /// `env` adds CNI_ARGS or CAP_ARGS.
    fn cnitool(&self, command: &str, network: &str, netns: &str, env: &[(&str, &str)]) -> Output {
        Command::new(&self.cnitool)
            .args([command, network, netns])
            .env("NETCONFPATH", &self.conf_dir)
            .env("CNI_PATH", format!("{}:{PLUGINS}", plugin_dir().display()))
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }

    /// ADD; the container's IPv4 address.
    fn add(&mut self, network: &str, netns: &str, env: &[(&str, &str)]) -> String {
        let o = self.cnitool("add", network, netns, env);
        assert!(
            o.status.success(),
            "cnitool add {network} {netns}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        self.added.push((network.to_string(), netns.to_string()));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let addr = v["ips"][0]["address"].as_str().unwrap();
        addr.split('/').next().unwrap().to_string()
    }

    fn del(&mut self, network: &str, netns: &str) {
        let o = self.cnitool("del", network, netns, &[]);
        assert!(
            o.status.success(),
            "cnitool del: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        self.added.retain(|(n, s)| !(n == network && s == netns));
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for (network, netns) in std::mem::take(&mut self.added) {
            let _ = self.cnitool("del", &network, &netns, &[]);
        }
        // An emulator a failed DEL left keeps its namespace alive: stop it.
        let dirs = [PathBuf::from("/run/linkem/cni"), self.run_dir.join("cni")];
        for path in dirs.iter().flat_map(std::fs::read_dir).flatten().flatten() {
            let path = path.path();
            let state: Value = match std::fs::read(&path).map(|b| serde_json::from_slice(&b)) {
                Ok(Ok(v)) if path.extension().is_some_and(|e| e == "json") => v,
                _ => continue,
            };
            let ours = state["netns"]
                .as_str()
                .is_some_and(|n| self.netns.iter().any(|m| n.ends_with(&format!("/{m}"))));
            if ours {
                let pid_file = path.with_extension("pid");
                if let Ok(pid) = std::fs::read_to_string(&pid_file) {
                    let _ = run("kill", &[pid.trim()]);
                }
                for ext in ["pid", "log", "rules", "json"] {
                    let _ = std::fs::remove_file(path.with_extension(ext));
                }
            }
        }
        for ns in &self.netns {
            let _ = run("ip", &["netns", "del", ns]);
        }
        for l in &self.links {
            let _ = run("ip", &["link", "del", l]);
        }
        let _ = std::fs::remove_dir_all(&self.conf_dir);
        let _ = std::fs::remove_dir_all(&self.ipam_dir);
        let _ = std::fs::remove_dir_all(&self.run_dir);
    }
}

/// Median ping RTT in ms (`ip netns exec NS` when `from` is given), the
/// first echo (ARP) left out.
fn median_rtt_ms(from: Option<&str>, to: &str) -> f64 {
    let mut args: Vec<&str> = vec![];
    if let Some(ns) = from {
        args.extend(["ip", "netns", "exec", ns]);
    }
    args.extend(["ping", "-n", "-c", "16", "-i", "0.1", "-W", "2", to]);
    let o = run(args[0], &args[1..]);
    let text = String::from_utf8_lossy(&o.stdout);
    let mut rtts: Vec<f64> = text
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .skip(1)
        .collect();
    assert!(
        rtts.len() >= 10,
        "ping {to} from {from:?}: too few replies:\n{text}"
    );
    rtts.sort_by(f64::total_cmp);
    rtts[rtts.len() / 2]
}

/// The plugin's files (pid, log, state, rules), the control sockets and
/// the emulators' `--control-files` directories (`RUN/files/NAME`, shown as
/// `NAME/`) under a run directory.
fn state_files_in(run_dir: &Path) -> Vec<String> {
    let names = |dir: &str| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut files = names(&run_dir.join("cni").display().to_string());
    files.extend(
        names(&run_dir.display().to_string())
            .into_iter()
            .filter(|f| f.ends_with(".sock")),
    );
    files.extend(
        names(&run_dir.join("files").display().to_string())
            .into_iter()
            .map(|d| format!("{d}/")),
    );
    files
}

/// The container id cnitool gives the container in `netns_path`.
fn cnitool_id(netns_path: &str) -> String {
    let o = ok(
        "sh",
        &["-c", &format!("printf %s '{netns_path}' | sha512sum")],
    );
    format!("cnitool-{}", &o[..20])
}

/// Runs linkem-cni as a runtime would, without cnitool (for GC, which
/// Debian's plugins, at CNI 1.0.0, cannot take part in).
fn plugin(env: &[(&str, &str)], conf: &Value) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_linkem-cni"))
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(conf.to_string().as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The emulator name linkem-cni gives cnitool's container in `netns`
/// (cnitool's container id: "cnitool-" and 20 hex digits of SHA-512 of the path).
fn emulator_files(netns_path: &str) -> Vec<String> {
    emulator_files_in(Path::new("/run/linkem"), netns_path)
}

fn emulator_files_in(run_dir: &Path, netns_path: &str) -> Vec<String> {
    let id = cnitool_id(netns_path);
    state_files_in(run_dir)
        .into_iter()
        .filter(|f| f.starts_with(&format!("cni-{id}-")))
        .collect()
}

#[test]
fn containers_on_a_bridge_get_the_link_and_lose_it_on_del() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let cnitool = match cnitool() {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    ensure_linkem();
    let _one_at_a_time = serial();
    let mut lab = Lab::new(cnitool, 'x');
    let subnet = format!("10.231.{}.0/24", std::process::id() % 200 + 20);
    let bridge = format!("{}br", lab.prefix);
    let net = format!("{}net", lab.prefix);
    lab.links.push(bridge.clone());
    lab.network(
        &net,
        serde_json::json!([
            {"type": "bridge", "bridge": bridge, "isGateway": true, "ipMasq": false,
             "ipam": {"type": "host-local", "subnet": subnet, "dataDir": lab.ipam_dir,
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "linkem-cni", "link": "delay 20ms", "options": ["--max-lag", "off"],
             "capabilities": {"linkem": true}}
        ]),
    );
    let ns_a = lab.netns("a");
    let ns_b = lab.netns("b");
    let addr_a = lab.add(&net, &ns_a, &[]);
    // Per container: the runtime config (capability linkem) wins over CNI_ARGS.
    let addr_b = lab.add(
        &net,
        &ns_b,
        &[
            ("CNI_ARGS", "IgnoreUnknown=1;LINKEM_LINK=delay 70ms"),
            ("CAP_ARGS", r#"{"linkem": {"link": "delay 20ms"}}"#),
        ],
    );
    let name_a = format!("{}a", lab.prefix);

    // The container sees its interface as the bridge plugin made it.
    let links = ok("ip", &["-n", &name_a, "-br", "addr", "show", "dev", "eth0"]);
    assert!(
        links.contains(&addr_a),
        "eth0 of {name_a} lost its address: {links}"
    );

    let host_to_a = median_rtt_ms(None, &addr_a);
    let a_to_b = median_rtt_ms(Some(&name_a), &addr_b);
    eprintln!("median RTT host -> a {host_to_a:.2} ms, a -> b {a_to_b:.2} ms");
    // One link of 20 ms each way on the path, then two; the rest of the
    // path adds well under a millisecond, a stalled VM a few.
    assert!(
        (40.0..46.0).contains(&host_to_a),
        "host -> container: median RTT {host_to_a} ms, want 40 ms + a little (one 20 ms link each way)"
    );
    assert!(
        (80.0..88.0).contains(&a_to_b),
        "container -> container: median RTT {a_to_b} ms, want 80 ms + a little (two 20 ms links each way)"
    );

    // The emulators answer linkem ctl under the names the files carry, and
    // each has its --control-files directory, root's alone.
    let files_b = emulator_files(&ns_b);
    let dir_b = files_b
        .iter()
        .find_map(|f| f.strip_suffix('/'))
        .unwrap_or_else(|| panic!("no RUN/files/NAME for {ns_b}: {files_b:?}"));
    let mode = std::fs::metadata(Path::new("/run/linkem/files").join(dir_b))
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777)
        .unwrap();
    assert_eq!(mode, 0o700, "{dir_b}");
    let sock_name = files_b
        .iter()
        .find_map(|f| f.strip_suffix(".pid"))
        .unwrap_or_else(|| panic!("no pid file for {ns_b}: {files_b:?}"))
        .to_string();
    let show = ok(
        plugin_dir().join("linkem").to_str().unwrap(),
        &["ctl", "--name", &sock_name, "show"],
    );
    assert!(
        show.contains("delay 20ms") && !show.contains("70ms"),
        "{show}"
    );

    // GC of another network leaves the links alone; GC of this one with only
    // a's attachment valid removes b's link.
    let gc = |network: &str| {
        let conf = serde_json::json!({"cniVersion": "1.1.0", "name": network, "type": "linkem-cni",
            "cni.dev/valid-attachments": [{"containerID": cnitool_id(&ns_a), "ifname": "eth0"}]});
        let o = plugin(&[("CNI_COMMAND", "GC"), ("CNI_PATH", PLUGINS)], &conf);
        assert!(
            o.status.success(),
            "GC: {}",
            String::from_utf8_lossy(&o.stdout)
        );
    };
    gc("another-network");
    assert!(
        !emulator_files(&ns_b).is_empty(),
        "GC of another network removed b's link"
    );
    gc(&net);
    assert!(
        emulator_files(&ns_b).is_empty(),
        "GC left b's link: {:?}",
        emulator_files(&ns_b)
    );
    assert!(
        !emulator_files(&ns_a).is_empty(),
        "GC removed a's link, which is valid"
    );
    let name_b = format!("{}b", lab.prefix);
    let links = ok("ip", &["-n", &name_b, "-br", "link"]);
    assert!(!links.contains("lkc-"), "GC left b's bump: {links}");

    // DEL removes everything: emulators, their files and sockets, the bump;
    // the bridge plugin's DEL then finds its own interface and removes it.
    lab.del(&net, &ns_a);
    lab.del(&net, &ns_b);
    for (ns, path) in [(&name_a, &ns_a), (&format!("{}b", lab.prefix), &ns_b)] {
        let left = ok("ip", &["-n", ns, "-br", "link"]);
        assert!(
            left.lines().all(|l| l.starts_with("lo ")),
            "interfaces left in {ns} after DEL: {left}"
        );
        assert!(
            emulator_files(path).is_empty(),
            "files left: {:?}",
            emulator_files(path)
        );
    }
    assert!(!Path::new(&format!("/run/linkem/{sock_name}.sock")).exists());
    let ps = ok("ps", &["-eo", "args"]);
    assert!(!ps.contains(&sock_name), "an emulator outlived DEL:\n{ps}");
    // DEL again: nothing to remove is no error.
    lab.del(&net, &ns_a);
}

#[test]
fn check_reports_a_missing_link_and_del_gives_the_device_back() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let cnitool = match cnitool() {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    ensure_linkem();
    // host-device moves a veth end of the test's into the container: its
    // CHECK only asks that the interface be there with its MAC and address
    // (the bridge plugin's asks that the container's veth be paired with the
    // bridge port, which no bump keeps: see docs/guide/cni.md).
    let _one_at_a_time = serial();
    let mut lab = Lab::new(cnitool, 'y');
    let dev = format!("{}d0", lab.prefix);
    let peer = format!("{}d1", lab.prefix);
    ok(
        "ip",
        &["link", "add", &dev, "type", "veth", "peer", "name", &peer],
    );
    lab.links.push(peer.clone());
    let x = std::process::id() % 200 + 20;
    let (host_addr, cont_addr) = (format!("10.232.{x}.1/24"), format!("10.232.{x}.2/24"));
    ok("ip", &["addr", "add", &host_addr, "dev", &peer]);
    ok("ip", &["link", "set", &peer, "up"]);
    let mac = ok("cat", &[&format!("/sys/class/net/{dev}/address")])
        .trim()
        .to_string();
    let net = format!("{}hd", lab.prefix);
    lab.network(
        &net,
        serde_json::json!([
            {"type": "host-device", "device": dev,
             "ipam": {"type": "static", "addresses": [{"address": cont_addr}]}},
            {"type": "linkem-cni", "link": "delay 20ms", "options": ["--max-lag", "off"],
             "runDir": lab.run_dir}
        ]),
    );
    let run_dir = lab.run_dir.clone();
    let ns_c = lab.netns("c");
    // Per container through CNI_ARGS: 10 ms both ways, then 15 ms on what the
    // container sends (side a is the container); the pod as a kubelet names it.
    let args = "IgnoreUnknown=1;LINKEM_LINK=delay 10ms;LINKEM_A_TO_B=delay 15ms;\
                K8S_POD_NAMESPACE=lkns;K8S_POD_NAME=pod-c;K8S_POD_UID=uid-c";
    let addr_c = lab.add(&net, &ns_c, &[("CNI_ARGS", args)]);
    assert!(
        emulator_files(&ns_c).is_empty(),
        "files under /run/linkem with runDir {}",
        run_dir.display()
    );
    check_recorded_state(&run_dir, &ns_c);
    let rtt = median_rtt_ms(None, &addr_c);
    eprintln!("median RTT host -> c {rtt:.2} ms");
    assert!(
        (25.0..31.0).contains(&rtt),
        "host -> container: median RTT {rtt} ms, want 25 ms + a little (CNI_ARGS' 10 ms in, 15 ms out)"
    );

    let check = lab.cnitool("check", &net, &ns_c, &[]);
    assert!(
        check.status.success(),
        "CHECK of a working link failed: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    // The emulator dies: CHECK says so.
    let files = emulator_files_in(&run_dir, &ns_c);
    let pid_file = files
        .iter()
        .find(|f| f.ends_with(".pid"))
        .unwrap_or_else(|| panic!("no pid file for {ns_c}: {files:?}"));
    let socket = run_dir.join(format!("{}.sock", pid_file.trim_end_matches(".pid")));
    let pid = std::fs::read_to_string(run_dir.join("cni").join(pid_file)).unwrap();
    ok("kill", &["-KILL", pid.trim()]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let check = lab.cnitool("check", &net, &ns_c, &[]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(
        !check.status.success(),
        "CHECK passed with the emulator killed"
    );
    assert!(
        said.contains("is not running"),
        "CHECK did not name the dead emulator: {said}"
    );
    // An interface of the link goes: CHECK names it.
    let name_c = format!("{}c", lab.prefix);
    ok(
        "ip",
        &["-n", &name_c, "link", "set", "lkc-eth0", "name", "lkc-gone"],
    );
    let check = lab.cnitool("check", &net, &ns_c, &[]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(
        said.contains("lkc-eth0 is missing"),
        "CHECK did not name the missing interface: {said}"
    );
    ok(
        "ip",
        &["-n", &name_c, "link", "set", "lkc-gone", "name", "lkc-eth0"],
    );

    // DEL: the device goes back to the host as it came, MAC address included.
    lab.del(&net, &ns_c);
    let back = ok("cat", &[&format!("/sys/class/net/{dev}/address")]);
    assert_eq!(back.trim(), mac, "{dev} came back with another MAC address");
    assert!(emulator_files_in(&run_dir, &ns_c).is_empty());
    // The killed emulator could not remove its control socket: DEL did.
    assert!(!socket.exists(), "{} left after DEL", socket.display());
}

/// The state file under `runDir` names the pod, the container, the socket
/// (which answers), the base link and the pod's egress direction.
fn check_recorded_state(run_dir: &Path, netns: &str) {
    let id = cnitool_id(netns);
    let name = format!("cni-{id}-eth0");
    let path = run_dir.join("cni").join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("no state file {}: {e}", path.display()));
    let v: Value = serde_json::from_str(&text).unwrap();
    let socket = run_dir.join(format!("{name}.sock"));
    assert_eq!(v["version"], 2, "{text}");
    assert_eq!(
        v["pod"],
        serde_json::json!({"namespace": "lkns", "name": "pod-c", "uid": "uid-c"}),
        "{text}"
    );
    assert_eq!(
        (v["containerID"].as_str(), v["ifname"].as_str()),
        (Some(id.as_str()), Some("eth0"))
    );
    assert_eq!(v["emulator"], name.as_str());
    assert_eq!(v["socket"], socket.display().to_string().as_str());
    assert_eq!(
        v["base"],
        serde_json::json!({"link": "delay 10ms", "a-to-b": "delay 15ms"}),
        "{text}"
    );
    assert_eq!(v["egress"], "a-to-b");
    assert!(v["pid"].as_u64().is_some(), "no pid once serving: {text}");
    // The socket is the emulator's, under runDir.
    let show = ok(
        plugin_dir().join("linkem").to_str().unwrap(),
        &["ctl", "--socket", socket.to_str().unwrap(), "show"],
    );
    assert!(show.contains("delay 15ms"), "{show}");
}

#[test]
fn bad_words_fail_add_and_leave_the_container_as_it_was() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let cnitool = match cnitool() {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    ensure_linkem();
    let _one_at_a_time = serial();
    let mut lab = Lab::new(cnitool, 'z');
    let bridge = format!("{}br", lab.prefix);
    lab.links.push(bridge.clone());
    let net = format!("{}net", lab.prefix);
    let subnet = format!("10.233.{}.0/24", std::process::id() % 200 + 20);
    lab.network(
        &net,
        serde_json::json!([
            {"type": "bridge", "bridge": bridge, "ipam": {"type": "host-local", "subnet": subnet,
                                                           "dataDir": lab.ipam_dir}},
            {"type": "linkem-cni", "link": "delay 20xs"}
        ]),
    );
    let ns = lab.netns("e");
    let o = lab.cnitool("add", &net, &ns, &[]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        !o.status.success(),
        "ADD with 'delay 20xs' succeeded: {said}"
    );
    assert!(
        said.contains("20xs"),
        "the error does not name the word: {said}"
    );
    // libcni DELs nothing after a failed ADD: the bump must be gone already,
    // the bridge plugin's interface back with its address.
    let name = format!("{}e", lab.prefix);
    let links = ok("ip", &["-n", &name, "-br", "addr"]);
    assert!(
        !links.contains("lkc-") && !links.contains("lke-"),
        "bump left: {links}"
    );
    assert!(
        links
            .lines()
            .any(|l| l.starts_with("eth0") && l.contains(&subnet[..subnet.len() - 5])),
        "eth0 lost its address: {links}"
    );
    assert!(
        emulator_files(&ns).is_empty(),
        "files left: {:?}",
        emulator_files(&ns)
    );
    lab.added.push((net.clone(), ns.clone()));
}
