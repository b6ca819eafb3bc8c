//! `linkem bridge` on hosts left at their defaults (no ethtool on the host
//! ends): every receive queue of a multi-queue interface, jumbo frames,
//! which interfaces it refuses, running without root on file capabilities,
//! and a restart after SIGKILL. Needs root (it prints "skipped" otherwise);
//! a missing tool (ip, python3, ping, setcap, setpriv) fails the test.
//!
//! ```text
//!  ns {p}a: {p}ha <-veth (N queues)-> {p}ea [linkem] {p}eb <-veth (N queues)-> {p}hb :ns {p}b
//! ```

mod common;

use linkem_io::netns;
use serde_json::Value;
use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Live tests share two cores: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> Option<std::sync::MutexGuard<'static, ()>> {
    match netns::check_prerequisites() {
        Err(e @ netns::NetnsError::NotRoot) => {
            eprintln!("skipped: {e}");
            return None;
        }
        Err(e) => panic!("{e}"),
        Ok(()) => {}
    }
    for (program, package) in [
        ("python3", "python3"),
        ("ping", "iputils-ping"),
        ("setcap", "libcap2-bin"),
        ("setpriv", "util-linux"),
    ] {
        if Command::new(program).arg("--version").output().is_err() {
            panic!("`{program}` not found: install {package} (e.g. `apt-get install {package}`)");
        }
    }
    Some(SERIAL.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Two hosts with `queues` receive and transmit queues on every veth end,
/// and every setting (offloads, GRO, IPv6) at the kernel's defaults.
struct Hosts {
    prefix: String,
}

impl Hosts {
    fn new(tag: &str, queues: u32, mtu: u32) -> Hosts {
        let prefix = netns::unique_prefix(tag);
        let h = Hosts { prefix };
        let q = queues.to_string();
        let m = mtu.to_string();
        for s in ["a", "b"] {
            let (ns, host, emu) = (h.ns(s), h.host(s), h.emu(s));
            run(&["ip", "netns", "add", &ns]);
            run(&[
                "ip",
                "link",
                "add",
                &host,
                "numrxqueues",
                &q,
                "numtxqueues",
                &q,
                "type",
                "veth",
                "peer",
                "name",
                &emu,
                "numrxqueues",
                &q,
                "numtxqueues",
                &q,
            ]);
            run(&["ip", "link", "set", &host, "netns", &ns, "mtu", &m]);
            run(&["ip", "link", "set", &emu, "mtu", &m, "up"]);
            let addr = format!(
                "10.78.{}.{}/24",
                netns_octet(&h.prefix),
                if s == "a" { 1 } else { 2 }
            );
            run(&["ip", "-n", &ns, "addr", "add", &addr, "dev", &host]);
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        }
        h
    }

    fn ns(&self, s: &str) -> String {
        format!("{}{s}", self.prefix)
    }
    fn host(&self, s: &str) -> String {
        format!("{}h{s}", self.prefix)
    }
    fn emu(&self, s: &str) -> String {
        format!("{}e{s}", self.prefix)
    }
    fn addr(&self, s: &str) -> String {
        format!(
            "10.78.{}.{}",
            netns_octet(&self.prefix),
            if s == "a" { 1 } else { 2 }
        )
    }

    /// Brings the host ends up: before this, the hosts send nothing, so
    /// their counters count only what linkem could see.
    fn hosts_up(&self) {
        for s in ["a", "b"] {
            run(&["ip", "-n", &self.ns(s), "link", "set", &self.host(s), "up"]);
        }
    }

    fn in_ns(&self, s: &str, args: &[&str]) -> Output {
        netns::exec_in(&self.ns(s), args).expect("runs in the namespace")
    }

    /// A counter of a host's interface (`tx_packets`, `rx_packets`).
    fn counter(&self, s: &str, name: &str) -> u64 {
        let o = self.in_ns(
            s,
            &[
                "cat",
                &format!("/sys/class/net/{}/statistics/{name}", self.host(s)),
            ],
        );
        String::from_utf8_lossy(&o.stdout)
            .trim()
            .parse()
            .expect("a number")
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for s in ["a", "b"] {
            let _ = Command::new("ip")
                .args(["link", "del", &self.emu(s)])
                .output();
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(s)])
                .output();
        }
    }
}

fn netns_octet(prefix: &str) -> u8 {
    (prefix
        .bytes()
        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32))
        % 250
        + 1) as u8
}

fn run(args: &[&str]) {
    let o = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("runs");
    assert!(
        o.status.success(),
        "{}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
}

struct Bridge {
    child: Child,
}

impl Bridge {
    fn spawn(cmd: &mut Command) -> Bridge {
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("linkem starts");
        std::thread::sleep(Duration::from_millis(600));
        let mut b = Bridge { child };
        if let Some(status) = b.child.try_wait().unwrap() {
            panic!("linkem bridge exited at start ({status}): {}", b.stderr());
        }
        b
    }

    fn start(h: &Hosts, backend: &str, args: &[&str]) -> Bridge {
        Bridge::spawn(
            Command::new(env!("CARGO_BIN_EXE_linkem")).args(bridge_args(h, backend, args)),
        )
    }

    fn stderr(&mut self) -> String {
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            e.read_to_string(&mut err).unwrap();
        }
        err
    }

    fn signal(&self, sig: libc::c_int) {
        // Safety: kill with the pid of our own child.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// SIGINT, then the final JSON counts and stderr.
    fn stop(mut self) -> (Value, String) {
        self.signal(libc::SIGINT);
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        let err = self.stderr();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "linkem failed ({status}): {err}");
        let last = out
            .lines()
            .last()
            .unwrap_or_else(|| panic!("no stats: {err}"));
        (serde_json::from_str(last).expect("JSON stats"), err)
    }
}

fn bridge_args(h: &Hosts, backend: &str, args: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = ["bridge", &h.emu("a"), &h.emu("b"), "--backend", backend]
        .iter()
        .map(|s| s.to_string())
        .collect();
    v.extend(["--stats", "json"].map(String::from));
    v.extend(args.iter().map(|s| s.to_string()));
    v
}

fn dir(stats: &Value, i: usize) -> (u64, u64) {
    let d = &stats["directions"][i];
    (
        d["received"].as_u64().unwrap(),
        d["fates"]["delivered"].as_u64().unwrap(),
    )
}

fn ping(h: &Hosts, args: &[&str]) -> Output {
    let dst = h.addr("b");
    let mut v = vec!["ping", "-q", "-W", "2"];
    v.extend_from_slice(args);
    v.push(&dst);
    h.in_ns("a", &v)
}

/// min/avg/max of a ping summary, ms.
fn rtt_ms(o: &Output) -> Vec<f64> {
    let text = String::from_utf8_lossy(&o.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("min/avg/max"))
        .unwrap_or_else(|| panic!("no rtt line: {text}"));
    let nums = line.split('=').nth(1).unwrap().trim();
    nums.split(['/', ' '])
        .take(3)
        .map(|x| x.parse().unwrap())
        .collect()
}

/// Python in host A: 8 UDP sockets (8 source ports, which the kernel
/// spreads over the transmit queues, and so over linkem's receive queues),
/// each sending N 1000-byte datagrams in small bursts. No receiver: frames
/// are counted at the interfaces, so the test does not depend on the
/// checksum offload of the hosts (a separate concern of the backends).
const SENDER: &str = r#"
import socket, sys, time
d = (sys.argv[1], 9)
socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(8)]
b = b'x' * 1000
for i in range(int(sys.argv[2])):
    for s in socks:
        s.sendto(b, d)
    if i % 8 == 7:
        time.sleep(0.002)
"#;

/// 8 parallel UDP streams through `delay 10ms`, hosts at their defaults:
/// linkem receives every frame host A sent, host B receives every frame
/// linkem delivered, and the delay applies.
fn every_queue_feeds_one_link(backend: &str, tag: &str) {
    let Some(_s) = serial() else { return };
    let h = Hosts::new(tag, 4, 1500);
    let bridge = Bridge::start(&h, backend, &["delay 10ms"]);
    h.hosts_up();
    // Host B's address without ARP (a lost ARP must not look like a lost frame).
    let mac_b = String::from_utf8_lossy(
        &h.in_ns(
            "b",
            &["cat", &format!("/sys/class/net/{}/address", h.host("b"))],
        )
        .stdout,
    )
    .trim()
    .to_string();
    let o = h.in_ns(
        "a",
        &[
            "ip",
            "neigh",
            "replace",
            &h.addr("b"),
            "lladdr",
            &mac_b,
            "dev",
            &h.host("a"),
            "nud",
            "permanent",
        ],
    );
    assert!(o.status.success());
    let o = h.in_ns("a", &["python3", "-c", SENDER, &h.addr("b"), "500"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rtt = rtt_ms(&ping(&h, &["-c", "5", "-i", "0.2"]));
    std::thread::sleep(Duration::from_millis(300));
    let (sent_a, got_b) = (h.counter("a", "tx_packets"), h.counter("b", "rx_packets"));
    let spread = queue_spread(&h.emu("a"));
    let (stats, err) = bridge.stop();
    let sent_a_after = h.counter("a", "tx_packets");
    let (received, delivered) = dir(&stats, 0);
    eprintln!(
        "{backend}: host A sent {sent_a}..{sent_a_after}, linkem a->b received {received} delivered \
         {delivered}, host B received {got_b}; rtt {rtt:?} ms; per-queue XDP frames {spread:?}\n{err}"
    );
    assert!(sent_a >= 4000, "the streams ran ({sent_a} frames)");
    assert!(
        (sent_a..=sent_a_after).contains(&received),
        "every frame host A sent went through linkem: sent {sent_a}, received {received}"
    );
    // Every frame ends in one counted fate. On this shared machine the
    // output stage can fall behind: frames later than --max-lag are counted
    // `late` (by design), so only those may be missing.
    let d = &stats["directions"][0];
    let fates = d["fates"].as_object().unwrap();
    let all: u64 = fates.values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(all + d["in_flight"].as_u64().unwrap(), received, "{d}");
    let late = fates["late"].as_u64().unwrap() + fates["backpressure"].as_u64().unwrap();
    assert_eq!(
        delivered + late,
        received,
        "only overload drops on an unimpaired link: {d}"
    );
    assert!(late * 10 <= received, "mostly delivered: {d}");
    assert!(got_b >= delivered.saturating_sub(sent_a_after - sent_a));
    assert!(
        rtt[0] >= 20.0,
        "10 ms each way applies: rtt min {} ms",
        rtt[0]
    );
    if backend == "xdp" {
        assert!(err.contains("queues 0-3"), "{err}");
        let busy = spread.iter().filter(|&&n| n > 100).count();
        assert!(busy >= 2, "the streams used several queues: {spread:?}");
    }
}

/// Frames the XDP program redirected per receive queue (veth's own
/// counters; empty where there are none).
fn queue_spread(ifname: &str) -> Vec<u64> {
    let o = Command::new("ethtool").args(["-S", ifname]).output();
    let Ok(o) = o else { return Vec::new() };
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.contains("_xdp_redirect:") && l.trim().starts_with("rx_queue_"))
        .filter_map(|l| l.split(':').nth(1)?.trim().parse().ok())
        .collect()
}

#[test]
fn every_receive_queue_feeds_the_link_xdp() {
    every_queue_feeds_one_link("xdp", "lkXq");
}

#[test]
fn every_receive_queue_feeds_the_link_packet() {
    every_queue_feeds_one_link("packet", "lkXp");
}

/// MTU 9000 everywhere, `ping -s 8000` (8028-byte frames, several UMEM
/// frames each on AF_XDP), hosts at their defaults.
fn jumbo(backend: &str, tag: &str) {
    let Some(_s) = serial() else { return };
    let h = Hosts::new(tag, 1, 9000);
    // Every echo must cross: a stall of this shared VM beyond the default
    // max-lag would make one `late`, which is not what this test is about.
    let bridge = Bridge::start(&h, backend, &["--max-lag", "off"]);
    h.hosts_up();
    let o = ping(&h, &["-c", "5", "-i", "0.2", "-s", "8000", "-M", "do"]);
    let (stats, err) = bridge.stop();
    let text = String::from_utf8_lossy(&o.stdout);
    eprintln!("{backend}: {text}\n{err}");
    assert!(text.contains(" 0% packet loss"), "{text}");
    if backend == "xdp" {
        assert!(err.contains("multi-buffer"), "{err}");
    }
    assert!(dir(&stats, 0).1 >= 5);
}

#[test]
fn jumbo_frames_cross_xdp() {
    jumbo("xdp", "lkXj");
}

#[test]
fn jumbo_frames_cross_packet() {
    jumbo("packet", "lkXk");
}

/// An interface with a smaller MTU on the way out: the jumbo frames cannot
/// be sent, and linkem says so once.
#[test]
fn frames_too_big_for_the_egress_are_named_once() {
    let Some(_s) = serial() else { return };
    let h = Hosts::new("lkXt", 1, 9000);
    run(&["ip", "link", "set", &h.emu("b"), "mtu", "1500"]);
    let bridge = Bridge::start(&h, "xdp", &[]);
    h.hosts_up();
    let o = ping(&h, &["-c", "3", "-i", "0.2", "-s", "4000"]);
    let (stats, err) = bridge.stop();
    assert!(
        !o.status.success(),
        "4 KB frames cannot cross a 1500-byte interface"
    );
    let too_big = stats["directions"][0]["fates"]["too-big"].as_u64().unwrap();
    let (received, delivered) = dir(&stats, 0);
    assert!(
        too_big >= 3,
        "every echo request counted as too-big: {stats}"
    );
    assert!(delivered + too_big <= received, "{stats}");
    assert_eq!(err.matches("larger than").count(), 1, "{err}");
    assert!(err.contains("too-big"), "{err}");
}

fn refused(args: &[String]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(args)
        .output()
        .expect("runs");
    assert!(!o.status.success(), "linkem {args:?} should fail");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// With what it needs and coalescing off, auto takes AF_XDP on a veth and
/// says what it found; with coalescing on (the default) it takes AF_PACKET,
/// the backend that hands the hosts super-frames, and says why.
#[test]
fn auto_says_what_it_chose() {
    let Some(_s) = serial() else { return };
    let h = Hosts::new("lkXa", 1, 1500);
    h.hosts_up();
    let b = Bridge::start(&h, "auto", &["--coalesce", "off"]);
    let o = ping(&h, &["-c", "2", "-i", "0.2"]);
    let (_stats, err) = b.stop();
    assert!(o.status.success(), "{err}");
    for s in ["a", "b"] {
        let line = format!("{}: --backend auto chose AF_XDP (driver veth", h.emu(s));
        assert!(err.contains(&line), "{err}");
    }
    let b = Bridge::start(&h, "auto", &[]);
    let o = ping(&h, &["-c", "2", "-i", "0.2"]);
    let (_stats, err) = b.stop();
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("--backend auto chose AF_PACKET: it hands the hosts super-frames"),
        "{err}"
    );
}

#[test]
fn loopback_and_one_interface_twice_are_refused() {
    let Some(_s) = serial() else { return };
    let h = Hosts::new("lkXl", 1, 1500);
    let lo = refused(&["bridge", "lo", &h.emu("a")].map(String::from));
    assert!(lo.contains("'lo' is a loopback interface"), "{lo}");
    let twice = refused(&["bridge", &h.emu("a"), &h.emu("a")].map(String::from));
    assert!(twice.contains("both"), "{twice}");
    // The same interface under its alternative name.
    let alt = format!("{}x", h.emu("a"));
    run(&[
        "ip",
        "link",
        "property",
        "add",
        "dev",
        &h.emu("a"),
        "altname",
        &alt,
    ]);
    let same = refused(&["bridge", &h.emu("a"), &alt].map(String::from));
    assert!(same.contains("are the same interface"), "{same}");
}

/// A second linkem on an interface the first holds is refused, whichever
/// backend each uses; after SIGKILL the next start works, and nothing is
/// left on the interfaces once it stops.
#[test]
fn one_linkem_per_interface_and_a_restart_after_sigkill() {
    let Some(_s) = serial() else { return };
    let h = Hosts::new("lkXk", 2, 1500);
    h.hosts_up();
    for (first, second) in [("xdp", "packet"), ("packet", "xdp")] {
        let b = Bridge::start(&h, first, &[]);
        let e = refused(&bridge_args(&h, second, &["--duration", "1"]));
        assert!(e.contains("already in use by another linkem"), "{e}");
        b.signal(libc::SIGKILL);
        let mut b = b;
        b.child.wait().unwrap();
        // At once: the kernel releases what the killed one held.
        let t0 = Instant::now();
        let again = Bridge::start(&h, first, &[]);
        let o = ping(&h, &["-c", "3", "-i", "0.2"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
        let (_stats, err) = again.stop();
        eprintln!(
            "{first}: restart after SIGKILL took {:?}\n{err}",
            t0.elapsed()
        );
        for s in ["a", "b"] {
            let link = Command::new("ip")
                .args(["-d", "link", "show", &h.emu(s)])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&link.stdout);
            assert!(
                !text.contains("xdp") && !text.contains("PROMISC"),
                "left behind: {text}"
            );
        }
    }
}

/// An unprivileged user cannot deny linkem an interface: `nobody` holding
/// the abstract socket names linkem once used as its lock
/// (`@linkem/if/IFINDEX`) blocks nothing, and it cannot take the lock linkem
/// uses now (a packet socket: CAP_NET_RAW). Two linkems are still refused.
#[test]
fn an_unprivileged_user_cannot_squat_the_interface_lock() {
    let Some(_s) = serial() else { return };
    let h = Hosts::new("lkXq", 1, 1500);
    h.hosts_up();
    let index = |s: &str| {
        std::fs::read_to_string(format!("/sys/class/net/{}/ifindex", h.emu(s)))
            .unwrap()
            .trim()
            .to_string()
    };
    let (ia, ib) = (index("a"), index("b"));
    // nobody binds both old names, says so, and holds them until killed; then
    // tries a packet socket, which must be refused.
    let squat = format!(
        "import socket, sys, time\n\
         held = []\n\
         for i in ({ia}, {ib}):\n\
         \x20   s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n\
         \x20   s.bind('\\0linkem/if/%d' % i)\n\
         \x20   held.append(s)\n\
         try:\n\
         \x20   socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)\n\
         \x20   print('packet socket opened', flush=True)\n\
         except PermissionError:\n\
         \x20   print('no packet socket', flush=True)\n\
         print('holding', flush=True)\n\
         time.sleep(60)\n"
    );
    let mut squatter = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            // The system's: a python3 under root's home (pyenv) is out of nobody's reach.
            if std::path::Path::new("/usr/bin/python3").exists() {
                "/usr/bin/python3"
            } else {
                "python3"
            },
            "-c",
            &squat,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv and python3 run");
    let mut out = std::io::BufReader::new(squatter.stdout.take().unwrap());
    let mut said = String::new();
    for _ in 0..2 {
        std::io::BufRead::read_line(&mut out, &mut said).unwrap();
    }
    let kill = |mut c: Child| {
        let _ = c.kill();
        c.wait().unwrap()
    };
    if !said.contains("holding") {
        let mut err = String::new();
        let _ = squatter.stderr.take().unwrap().read_to_string(&mut err);
        kill(squatter);
        panic!("the squatter did not bind the old names: {said}{err}");
    }
    assert!(
        said.contains("no packet socket"),
        "nobody opened a packet socket: {said}"
    );
    let ss = Command::new("ss").args(["-xlp"]).output().unwrap();
    let ss = String::from_utf8_lossy(&ss.stdout);
    assert!(
        ss.contains(&format!("@linkem/if/{ia}")),
        "the old name is held while linkem starts: {ss}"
    );
    for backend in ["packet", "xdp"] {
        let b = Bridge::start(&h, backend, &[]);
        let o = ping(&h, &["-c", "2", "-i", "0.2"]);
        assert!(
            o.status.success(),
            "{backend}: frames cross despite the squatter: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        let e = refused(&bridge_args(&h, "packet", &["--duration", "1"]));
        assert!(e.contains("already in use by another linkem"), "{e}");
        b.stop();
    }
    kill(squatter);
}

/// As `nobody`, with the capabilities of the README's setcap line on a
/// copy of the binary: both backends bridge, and once running the process
/// has only what it still needs (CAP_SYS_NICE for --realtime out, nothing
/// with --realtime off). Without them, the error names what is missing.
#[test]
fn runs_as_nobody_with_file_capabilities_and_drops_them() {
    use std::os::unix::fs::PermissionsExt;
    let Some(_s) = serial() else { return };
    let h = Hosts::new("lkXc", 1, 1500);
    h.hosts_up();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("linkem");
    std::fs::copy(env!("CARGO_BIN_EXE_linkem"), &bin).unwrap();
    let as_nobody = |args: &[String]| {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            "nobody",
            "--regid",
            "nogroup",
            "--clear-groups",
            "--",
        ])
        .arg(&bin)
        .args(args);
        c
    };
    let without = as_nobody(&bridge_args(&h, "xdp", &["--duration", "1"]))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&without.stderr);
    assert!(!without.status.success());
    assert!(
        text.contains("CAP_NET_RAW") && text.contains("setcap cap_net_raw,cap_net_admin,cap_bpf"),
        "{text}"
    );
    // Only what AF_PACKET needs: auto says why it does not take AF_XDP.
    run(&["setcap", "cap_net_raw+ep", bin.to_str().unwrap()]);
    let b = Bridge::spawn(&mut as_nobody(&bridge_args(
        &h,
        "auto",
        // Coalescing makes auto take AF_PACKET whatever the capabilities.
        &["--realtime", "off", "--coalesce", "off"],
    )));
    let o = ping(&h, &["-c", "2", "-i", "0.2"]);
    let (_stats, err) = b.stop();
    assert!(o.status.success(), "auto as nobody with cap_net_raw: {err}");
    assert!(
        err.contains("--backend auto chose AF_PACKET: AF_XDP needs CAP_NET_ADMIN, CAP_BPF"),
        "{err}"
    );
    run(&[
        "setcap",
        "cap_net_raw,cap_net_admin,cap_bpf,cap_ipc_lock,cap_sys_nice+ep",
        bin.to_str().unwrap(),
    ]);
    for (backend, realtime, left) in [("xdp", "out", 1u64 << 23), ("packet", "off", 0)] {
        let b = Bridge::spawn(&mut as_nobody(&bridge_args(
            &h,
            backend,
            &["--realtime", realtime],
        )));
        let status = std::fs::read_to_string(format!("/proc/{}/status", b.child.id())).unwrap();
        let cap = |name: &str| {
            let line = status.lines().find(|l| l.starts_with(name)).unwrap();
            u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
        };
        let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        assert!(
            uid.split_whitespace().all(|w| w == "Uid:" || w == "65534"),
            "{uid}"
        );
        assert_eq!(
            (cap("CapEff:"), cap("CapPrm:")),
            (left, left),
            "{backend}: {status}"
        );
        let o = ping(&h, &["-c", "3", "-i", "0.2"]);
        let (_stats, err) = b.stop();
        assert!(o.status.success(), "{backend} as nobody: {err}");
    }
}

/// AF_XDP with both hosts at their defaults (checksum offload on, TSO/GSO
/// on, GRO off): TCP and UDP work because linkem finishes the checksums the
/// hosts left for offload, and no super-frame arrives because the kernel
/// turns segmentation offload off on a veth whose peer has an XDP program.
#[test]
fn tcp_and_udp_cross_xdp_with_hosts_at_their_defaults() {
    let Some(_s) = serial() else { return };
    if Command::new("iperf3").arg("--version").output().is_err() {
        panic!("`iperf3` not found: install iperf3");
    }
    let h = Hosts::new("lkXo", 1, 1500);
    let tso = |s: &str| {
        let o = h.in_ns(s, &["ethtool", "-k", &h.host(s)]);
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .find(|l| l.starts_with("tcp-segmentation-offload:"))
            .map(|l| l.contains(": on"))
            .unwrap_or(false)
    };
    assert!(tso("a"), "a host end starts with TSO on");
    // What is tested is that the checksums are right, not lateness: a stall
    // of this shared machine (a CI build beside) may leave frames late, and
    // --max-lag would drop them (307 in one CI run, 1.4 % of the datagrams).
    let bridge = Bridge::start(&h, "xdp", &["--max-lag", "off", "rate 50mbit delay 5ms"]);
    h.hosts_up();
    assert!(
        !tso("a"),
        "TSO off on the host end while linkem's end has XDP"
    );
    let iperf = |args: &[&str]| -> Value {
        let server = netns::spawn_in(&h.ns("b"), &["iperf3", "-s", "-1"]).expect("server");
        std::thread::sleep(Duration::from_millis(400));
        let dst = h.addr("b");
        let mut v = vec!["iperf3", "-c", &dst, "-J", "-t", "3"];
        v.extend_from_slice(args);
        let o = h.in_ns("a", &v);
        let _ = server.wait_with_output();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
        serde_json::from_slice(&o.stdout).expect("iperf3 JSON")
    };
    // Wrong checksums would leave next to nothing in every run; a spell of
    // the host's load (38.3 Mbit/s once, with releases 20 ms late at p99)
    // costs one run.
    let tcp_bps = common::within_attempts("TCP through rate 50mbit across AF_XDP", 3, |_| {
        let tcp = iperf(&[]);
        let bps = tcp["end"]["sum_received"]["bits_per_second"]
            .as_f64()
            .unwrap();
        if bps > 0.8 * 50e6 {
            Ok(bps)
        } else {
            Err(format!("{:.1} Mbit/s, want more than 40", bps / 1e6))
        }
    });
    let udp = iperf(&["-u", "-b", "20M"]);
    let udp_lost = udp["end"]["sum"]["lost_percent"].as_f64().unwrap();
    let (stats, err) = bridge.stop();
    eprintln!(
        "TCP {:.1} Mbit/s, UDP lost {udp_lost} %\n{stats}\n{err}",
        tcp_bps / 1e6
    );
    for i in 0..2 {
        let f = &stats["directions"][i]["fates"];
        assert_eq!(f["too-big"], 0, "only wire-sized frames arrive: {stats}");
    }
    assert!(
        udp_lost < 1.0,
        "UDP datagrams arrive with right checksums: {udp_lost} % lost; linkem's fates a->b {}",
        stats["directions"][0]["fates"]
    );
    assert!(
        tso("a"),
        "TSO back on the host end once linkem's program is gone"
    );
}
