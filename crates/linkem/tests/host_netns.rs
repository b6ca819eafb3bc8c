//! `linkem host` live, as root, in namespaces each test makes (unique prefix,
//! deleted by a guard): UDP echo RTTs through rules on one port and not the
//! other (IPv4 and IPv6, and `uid`), a veth case limited by `--dev`, fail-open
//! after `kill -9` and the stale chain removed at the next start, and TCP
//! through `delay 20ms rate 100mbit` beside the same words on the bridge, and
//! two users' port claims on one host (seed 004).

mod common;

use common::{in_ns, median, serial, skip, within_attempts};
use linkem_io::netns;
use std::io::Read;
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A namespace (with loopback up), deleted on drop.
struct Ns(String);

impl Ns {
    fn new(tag: &str) -> Ns {
        let name = netns::unique_prefix(tag);
        netns::ip(&["netns", "add", &name]).expect("netns add");
        netns::ip(&["-n", &name, "link", "set", "lo", "up"]).expect("lo up");
        Ns(name)
    }

    fn exec(&self, args: &[&str]) -> std::process::Output {
        netns::exec_in(&self.0, args).expect("runs in the namespace")
    }

    /// The netfilter queues bound in the namespace (by any process).
    fn bound_queues(&self) -> usize {
        let o = self.exec(&["cat", "/proc/net/netfilter/nfnetlink_queue"]);
        String::from_utf8_lossy(&o.stdout).lines().count()
    }

    fn iptables_rules(&self) -> String {
        let mut s = String::from_utf8_lossy(&self.exec(&["iptables", "-S"]).stdout).to_string();
        s += &String::from_utf8_lossy(&self.exec(&["ip6tables", "-S"]).stdout);
        s
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = netns::ip(&["netns", "del", &self.0]);
    }
}

/// `linkem host` running in a namespace.
struct Host {
    child: Child,
}

impl Host {
    fn start(ns: &Ns, args: &[&str]) -> Host {
        let mut child = netns::command_in(&ns.0, &[env!("CARGO_BIN_EXE_linkem"), "host"])
            .args(["--stats", "json", "--realtime", "off"])
            // No socket unless the test names one.
            .args(if args.contains(&"--control") {
                &[][..]
            } else {
                &["--control", "none"][..]
            })
            .args(["--max-lag", "off"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("linkem starts");
        // Binding the queues and running iptables four times takes a while.
        // Both must be seen: the chains alone may be a killed run's (which
        // the new one removes first), and a SIGINT sent before linkem has
        // bound its queues may find it without its signal handler yet.
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if ns.iptables_rules().matches("NFQUEUE").count() >= 4 && ns.bound_queues() >= 2 {
                break;
            }
            if let Some(status) = child.try_wait().unwrap() {
                let mut err = String::new();
                child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                panic!("linkem host exited at start ({status}): {err}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Host { child }
    }

    /// SIGINT; the final counts and stderr.
    fn stop(mut self) -> (serde_json::Value, String) {
        // Safety: kill with a pid we own.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let out = self.child.wait_with_output_ref();
        let stdout = String::from_utf8_lossy(&out.0).to_string();
        let last = stdout.lines().last().unwrap_or("{}").to_string();
        (
            serde_json::from_str(&last).unwrap_or_else(|e| panic!("stats ({e}): {stdout}")),
            String::from_utf8_lossy(&out.1).to_string(),
        )
    }
}

trait WaitRef {
    fn wait_with_output_ref(&mut self) -> (Vec<u8>, Vec<u8>);
}

impl WaitRef for Child {
    fn wait_with_output_ref(&mut self) -> (Vec<u8>, Vec<u8>) {
        let mut out = Vec::new();
        let mut err = Vec::new();
        self.stdout.take().unwrap().read_to_end(&mut out).unwrap();
        self.stderr.take().unwrap().read_to_end(&mut err).unwrap();
        let t = Instant::now();
        while self.try_wait().unwrap().is_none() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "linkem host did not stop"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        (out, err)
    }
}

/// UDP echo servers on `addrs`, inside `ns`, until the flag drops.
struct Echo {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Echo {
    fn start(ns: &str, addrs: &[SocketAddr]) -> Echo {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for &a in addrs {
            let sock = in_ns(ns, || UdpSocket::bind(a).expect("echo binds"));
            sock.set_read_timeout(Some(Duration::from_millis(50)))
                .unwrap();
            let stop = stop.clone();
            threads.push(std::thread::spawn(move || {
                let mut buf = [0u8; 2048];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((n, from)) = sock.recv_from(&mut buf) {
                        let _ = sock.send_to(&buf[..n], from);
                    }
                }
            }));
        }
        Echo { stop, threads }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The fastest RTT in ms of `n` UDP echoes to `to` from a socket made in `ns`
/// (user-space clocks at both ends: what an application sees). The fastest,
/// not the median: no echo can beat the delay linkem adds, so lower bounds
/// hold for every echo, while a stall of the machine that slows most of them
/// (medians of 9 went from 1 to 8-17 ms under a parallel build) leaves the
/// fastest where the path puts it.
fn udp_rtt_min_ms(ns: &str, to: SocketAddr, n: usize) -> f64 {
    let bind: SocketAddr = if to.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" }
        .parse()
        .unwrap();
    let sock = in_ns(ns, || UdpSocket::bind(bind).unwrap());
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut rtts = Vec::new();
    let mut buf = [0u8; 64];
    for i in 0..n as u32 {
        let t = Instant::now();
        sock.send_to(&i.to_be_bytes(), to).unwrap();
        // Answers to earlier (timed-out) requests are skipped.
        while let Ok((k, _)) = sock.recv_from(&mut buf) {
            if k == 4 && buf[..4] == i.to_be_bytes() {
                rtts.push(t.elapsed().as_secs_f64() * 1e3);
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        rtts.len() >= n * 8 / 10,
        "{} of {n} echoes from {to} came back",
        rtts.len()
    );
    rtts.into_iter().fold(f64::INFINITY, f64::min)
}

#[test]
fn rules_delay_one_port_both_families_and_by_uid() {
    if skip() {
        return;
    }
    let _g = serial();
    let ns = Ns::new("hrul");
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("host.rules");
    // Port 5678 both ways on the received side (a request is received by the
    // server, the answer by the client: 2 x 20 ms); 5680 on the sent side,
    // only for root's sockets; 5681 only for uid 4321's (none here).
    std::fs::write(
        &rules,
        "pipe 1 config delay 20ms\n\
         add 100 pipe 1 udp dst-port 5678 in\n\
         add 110 pipe 1 udp src-port 5678 in\n\
         add 120 pipe 1 udp dst-port 5680 out uid 0\n\
         add 130 pipe 1 udp dst-port 5681 out uid 4321\n",
    )
    .unwrap();
    let addrs: Vec<SocketAddr> = ["127.0.0.1", "[::1]"]
        .iter()
        .flat_map(|h| [5678, 5679, 5680, 5681].map(move |p| format!("{h}:{p}").parse().unwrap()))
        .collect();
    let _echo = Echo::start(&ns.0, &addrs);
    let host = Host::start(&ns, &["--rules", rules.to_str().unwrap()]);
    let mut got = Vec::new();
    for a in &addrs {
        got.push((a, udp_rtt_min_ms(&ns.0, *a, 15)));
    }
    let (stats, stderr) = host.stop();
    for (a, rtt) in &got {
        let (lo, hi) = match a.port() {
            5678 => (39.0, 55.0),
            5680 => (19.0, 33.0),
            _ => (0.0, 8.0),
        };
        assert!(
            (lo..hi).contains(rtt),
            "RTT to {a}: {rtt:.2} ms, expected {lo}..{hi} (all: {got:?}; stats {stats}; {stderr})"
        );
    }
    assert!(
        !ns.iptables_rules().contains("LINKEM"),
        "chains left after exit: {}",
        ns.iptables_rules()
    );
}

#[test]
fn veth_limited_to_its_device_and_loopback_untouched() {
    if skip() {
        return;
    }
    let _g = serial();
    let n1 = Ns::new("hv1");
    let n2 = Ns::new("hv2");
    let (d1, d2) = (format!("{}x", n1.0), format!("{}y", n2.0));
    netns::ip(&["link", "add", &d1, "type", "veth", "peer", "name", &d2]).unwrap();
    netns::ip(&["link", "set", &d1, "netns", &n1.0]).unwrap();
    netns::ip(&["link", "set", &d2, "netns", &n2.0]).unwrap();
    for (ns, d, a) in [(&n1, &d1, "10.79.3.1/24"), (&n2, &d2, "10.79.3.2/24")] {
        netns::ip(&["-n", &ns.0, "addr", "add", a, "dev", d]).unwrap();
        netns::ip(&["-n", &ns.0, "link", "set", d, "up"]).unwrap();
    }
    let remote: SocketAddr = "10.79.3.2:5678".parse().unwrap();
    let local: SocketAddr = "127.0.0.1:5679".parse().unwrap();
    let _echo_remote = Echo::start(&n2.0, &[remote]);
    let _echo_local = Echo::start(&n1.0, &[local]);
    // Wait for the veth to carry traffic before measuring.
    let base = udp_rtt_min_ms(&n1.0, remote, 5);
    let host = Host::start(&n1, &["--dev", &d1, "--a-to-b", "delay", "15ms"]);
    let via_veth = udp_rtt_min_ms(&n1.0, remote, 15);
    let via_lo = udp_rtt_min_ms(&n1.0, local, 15);
    let (stats, _) = host.stop();
    // The lower bound is absolute: a baseline inflated by a stall must not
    // make 15 ms look short.
    assert!(
        via_veth >= 14.0 && via_veth - base < 25.0,
        "veth RTT: fastest {via_veth:.2} ms, baseline fastest {base:.2} ms; expected 14 ms..baseline \
         + 25 ms: the received side adds 15 ms ({stats})"
    );
    assert!(
        via_lo < 5.0,
        "loopback RTT {via_lo:.2} ms: --dev must leave lo alone ({stats})"
    );
}

#[test]
fn kill_9_fails_open_and_the_next_start_removes_the_stale_chain() {
    if skip() {
        return;
    }
    let _g = serial();
    let ns = Ns::new("hk9");
    let to: SocketAddr = "127.0.0.1:5678".parse().unwrap();
    let _echo = Echo::start(&ns.0, &[to]);
    let mut host = Host::start(&ns, &["delay", "10ms"]);
    let held = udp_rtt_min_ms(&ns.0, to, 5);
    assert!(held > 35.0, "4 x 10 ms on loopback, got {held:.2} ms");
    host.child.kill().unwrap();
    host.child.wait().unwrap();
    assert!(
        ns.iptables_rules().contains("LINKEM-HOST-IN"),
        "the killed run's chain stays"
    );
    let open = udp_rtt_min_ms(&ns.0, to, 10);
    assert!(
        open < 5.0,
        "after kill -9 traffic flows unimpaired: {open:.2} ms"
    );
    let host = Host::start(&ns, &["delay", "1ms"]);
    let (_, stderr) = host.stop();
    assert!(
        stderr.contains("removed the chains"),
        "stale chain reported: {stderr}"
    );
    let left = ns.iptables_rules();
    assert!(!left.contains("LINKEM"), "chains left after exit: {left}");
    assert_eq!(
        left.matches("-j LINKEM").count(),
        0,
        "one jump per hook at most: {left}"
    );
}

/// Receiver-side goodput of `secs` s of iperf3 from `client` to `server_addr`.
fn iperf3_bps(server_ns: &str, client_ns: &str, server_addr: &str, secs: u32) -> f64 {
    let mut server = netns::spawn_in(server_ns, &["iperf3", "-s", "-1", "-p", "5302"]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let t = secs.to_string();
    let o = netns::exec_in(
        client_ns,
        &[
            "iperf3",
            "-c",
            server_addr,
            "-p",
            "5302",
            "-J",
            "-t",
            &t,
            "-O",
            "1",
        ],
    )
    .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or_else(|| panic!("iperf3: {v}"))
}

#[test]
fn tcp_through_host_mode_within_ten_percent_of_the_bridge() {
    if skip() {
        return;
    }
    let _g = serial();
    let words = ["delay", "20ms", "rate", "100mbit"];
    // Three runs each, compared at their medians; a spell of the host's
    // load through one side's runs (the landing CI once saw the bridge's at
    // 69-78 Mbit/s, host mode's at 80-88) makes both sides again.
    within_attempts("TCP through host mode against the bridge", 3, |_| {
        // The bridge: stock hosts (offloads on) on either side of linkem.
        let topo = common::topology_with("htb", true);
        let bridge = common::Bridge::start(&topo, "packet", &words);
        let b = topo.addr_b.to_string();
        let mut on_bridge = Vec::new();
        for _ in 0..3 {
            on_bridge.push(iperf3_bps(&topo.ns_b, &topo.ns_a, &b, 4));
        }
        bridge.stop();
        drop(topo);
        // Host mode on the receiver: a veth pair, stock offloads.
        let n1 = Ns::new("hts");
        let n2 = Ns::new("htr");
        let (d1, d2) = (format!("{}x", n1.0), format!("{}y", n2.0));
        netns::ip(&["link", "add", &d1, "type", "veth", "peer", "name", &d2]).unwrap();
        netns::ip(&["link", "set", &d1, "netns", &n1.0]).unwrap();
        netns::ip(&["link", "set", &d2, "netns", &n2.0]).unwrap();
        for (ns, d, a) in [(&n1, &d1, "10.79.4.1/24"), (&n2, &d2, "10.79.4.2/24")] {
            netns::ip(&["-n", &ns.0, "addr", "add", a, "dev", d]).unwrap();
            netns::ip(&["-n", &ns.0, "link", "set", d, "up"]).unwrap();
        }
        let mut args = vec!["--dev", d2.as_str()];
        args.extend(words);
        let host = Host::start(&n2, &args);
        let mut on_host = Vec::new();
        for _ in 0..3 {
            on_host.push(iperf3_bps(&n2.0, &n1.0, "10.79.4.2", 4));
        }
        let (stats, _) = host.stop();
        let (bridge_bps, host_bps) = (median(on_bridge.clone()), median(on_host.clone()));
        let ratio = host_bps / bridge_bps;
        eprintln!("TCP goodput: bridge {on_bridge:?}, host {on_host:?}, ratio {ratio:.3}");
        if (0.9..1.1).contains(&ratio) {
            Ok(())
        } else {
            Err(format!(
                "host mode {host_bps:.0} bit/s vs bridge {bridge_bps:.0} bit/s (runs: bridge \
                 {on_bridge:?}, host {on_host:?}; host stats {stats})"
            ))
        }
    });
}

#[test]
fn duplicate_is_refused_in_host_mode() {
    let o = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(["host", "duplicate", "1%"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("'duplicate' is not available in host mode"),
        "{err}"
    );
}

#[test]
fn a_host_mode_recording_replays_to_the_same_events() {
    if skip() {
        return;
    }
    let _g = serial();
    let ns = Ns::new("hrec");
    let dir = tempfile::tempdir().unwrap();
    let (rec, events, replayed) = (
        dir.path().join("rec"),
        dir.path().join("live.tsv"),
        dir.path().join("replay.tsv"),
    );
    let to: SocketAddr = "127.0.0.1:5678".parse().unwrap();
    let _echo = Echo::start(&ns.0, &[to]);
    let host = Host::start(
        &ns,
        &[
            "delay",
            "5ms",
            "loss",
            "10%",
            "seed",
            "3",
            "--record",
            rec.to_str().unwrap(),
            "--events",
            events.to_str().unwrap(),
        ],
    );
    let _ = udp_rtt_ms_lossy(&ns.0, to, 20);
    let (stats, stderr) = host.stop();
    let o = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(["replay", "--events"])
        .args([&replayed, &rec, &dir.path().join("out.pcap")])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines = |p: &std::path::Path| -> Vec<String> {
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(String::from)
            .collect()
    };
    let (live, again) = (lines(&events), lines(&replayed));
    assert!(
        live.len() >= 40,
        "decisions: {} ({stats}; {stderr})",
        live.len()
    );
    assert!(
        live.iter().any(|l| l.contains("\tloss\t")),
        "some losses among {}",
        live.len()
    );
    assert_eq!(
        live, again,
        "the replay of the recording decides as the live run"
    );
}

/// Sends `n` echoes, some lost: only that they were sent matters.
fn udp_rtt_ms_lossy(ns: &str, to: SocketAddr, n: usize) -> usize {
    let sock = in_ns(ns, || UdpSocket::bind("0.0.0.0:0").unwrap());
    sock.set_read_timeout(Some(Duration::from_millis(60)))
        .unwrap();
    let mut buf = [0u8; 64];
    let mut back = 0;
    for i in 0..n as u32 {
        sock.send_to(&i.to_be_bytes(), to).unwrap();
        back += sock.recv_from(&mut buf).is_ok() as usize;
    }
    back
}

/// Seed 004 on one host: `linkem host --claims` with no rule file; uid 1001
/// claims udp 5678 (`delay 50ms`, +100 ms RTT), 5679 is untouched; uid 1002
/// may not change 5678 but claims 5679 (`delay 10ms`, +20 ms); 1001's claim
/// expires at its ttl and 5678 is back to the baseline; each user lists only
/// their own claims.
#[test]
fn two_users_claim_ports_of_this_host_and_a_claim_expires() {
    if skip() {
        return;
    }
    let _g = serial();
    let ns = Ns::new("hclm");
    let dir = tempfile::tempdir().unwrap();
    // Reachable by the users: the socket itself is 0666 with --claims.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let socket = dir.path().join("host.sock");
    let addrs: Vec<SocketAddr> = ["127.0.0.1:5678", "127.0.0.1:5679"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    let _echo = Echo::start(&ns.0, &addrs);
    // The echo servers are this test's, root's: a user may claim a port a
    // socket of another uid holds only when root's limits allow it.
    let limits = dir.path().join("limits");
    std::fs::write(&limits, "1001 allow=udp:5678\n1002 allow=udp:5679\n").unwrap();
    let host = Host::start(
        &ns,
        &[
            "--claims",
            "--claim-ttl",
            "6s",
            "--limits",
            limits.to_str().unwrap(),
            "--control",
            socket.to_str().unwrap(),
        ],
    );
    let rtt = |i: usize| udp_rtt_min_ms(&ns.0, addrs[i], 9);
    let base = [rtt(0), rtt(1)];
    let as_user = |uid: u32, words: &[&str]| {
        let o = common::ctl::ctl_as(uid, None, &socket, words);
        (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )
    };
    let (ok, said) = as_user(1001, &["claim", "udp", "5678", "--", "delay", "50ms"]);
    assert!(ok, "uid 1001's claim: {said}");
    let claimed_at = Instant::now();
    let first = [rtt(0), rtt(1)];
    let (ok, said) = as_user(1002, &["claim", "udp", "5678", "--", "delay", "1ms"]);
    assert!(!ok && said.contains("uid 1001"), "uid 1002 on 5678: {said}");
    let (ok, said) = as_user(1002, &["claim", "udp", "5679", "--", "delay", "10ms"]);
    assert!(ok, "uid 1002's claim: {said}");
    let second = [rtt(0), rtt(1)];
    let (ok, listing) = as_user(1002, &["claims"]);
    assert!(
        ok && listing.contains("5679") && !listing.contains("5678"),
        "uid 1002 sees its own claims only: {listing}"
    );
    // 1001's claim ends 6 s after it was made; 1002's (made later) still holds.
    let wait = Duration::from_secs(7).saturating_sub(claimed_at.elapsed());
    std::thread::sleep(wait);
    let expired = rtt(0);
    let (stats, stderr) = host.stop();
    let ctx = format!(
        "baseline {base:?}, 1001 claimed {first:?}, 1002 claimed {second:?}, \
         after expiry {expired:.2}; stats {stats}; {stderr}"
    );
    assert!(base.iter().all(|&r| r < 8.0), "{ctx}");
    assert!((99.0..120.0).contains(&first[0]), "5678 claimed: {ctx}");
    assert!(first[1] < 8.0, "5679 not claimed: {ctx}");
    assert!((99.0..120.0).contains(&second[0]), "5678 kept: {ctx}");
    assert!((19.0..35.0).contains(&second[1]), "5679 claimed: {ctx}");
    assert!(expired < 8.0, "5678 after its claim expired: {ctx}");
}

/// `linkem ctl WORDS` as root; whether it succeeded, and what it said.
fn ctl_said(socket: &std::path::Path, words: &[&str]) -> (bool, String) {
    let o = common::ctl::ctl(socket, words);
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

/// The first line a control socket sends: its banner.
fn banner(socket: &std::path::Path) -> serde_json::Value {
    let s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(s), &mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("banner ({e}): {line}"))
}

/// `GET /metrics` from inside `ns`.
fn metrics_in(ns: &str, port: u16) -> String {
    in_ns(ns, || {
        use std::io::Write;
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body
    })
}

/// Host mode gives each packet back with one netfilter verdict, so it cannot
/// send a duplicate: a running `linkem host` refuses every change that would
/// duplicate (link words, a pipe's config, a claim's pipe) with a message
/// naming 'duplicate' and why, and keeps what runs. It names itself `host`
/// in its stats (text and JSON), its control banner and its metrics.
#[test]
fn a_running_host_refuses_duplication_and_names_itself_host() {
    if skip() {
        return;
    }
    let _g = serial();
    let ns = Ns::new("hdup");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("host.sock");
    let sock = socket.to_str().unwrap();
    let why = "'duplicate' is not available in host mode";

    // Link words.
    let port = 9000 + (std::process::id() % 1000) as u16;
    let metrics = port.to_string();
    let host = Host::start(
        &ns,
        &["delay", "1ms", "--control", sock, "--metrics", &metrics],
    );
    let b = banner(&socket);
    let info = metrics_in(&ns.0, port)
        .lines()
        .find(|l| l.starts_with("linkem_info{"))
        .map(String::from);
    let (ok, said) = ctl_said(
        &socket,
        &["link", "both", "delay", "1ms", "duplicate", "1%"],
    );
    let (_, links) = ctl_said(&socket, &["--json", "list"]);
    let (ok_b, said_b) = ctl_said(&socket, &["link", "a-to-b", "delay", "2ms"]);
    let (stats, stderr) = host.stop();
    assert!(
        !ok && said.contains(why),
        "link words with duplicate: {said}"
    );
    assert!(
        !links.contains("duplicate") && links.contains("1ms"),
        "the links kept: {links}"
    );
    assert!(ok_b, "a change without duplication still applies: {said_b}");
    assert_eq!(b["front"], "host", "banner {b}");
    assert!(
        info.as_deref()
            .is_some_and(|l| l.contains("front=\"host\"")),
        "metrics: {info:?}"
    );
    assert_eq!(stats["front"], "host", "stats {stats}; {stderr}");

    // A rule set with claims: a pipe's config and a claim's pipe.
    let rules = dir.path().join("host.rules");
    std::fs::write(
        &rules,
        "pipe 1 config delay 1ms\nadd 100 pipe 1 udp from any to any dst-port 5678\n",
    )
    .unwrap();
    let host = Host::start(
        &ns,
        &[
            "--rules",
            rules.to_str().unwrap(),
            "--claims",
            "--control",
            sock,
        ],
    );
    let (ok_pipe, said_pipe) = ctl_said(
        &socket,
        &["pipe", "1", "config", "delay", "1ms", "duplicate", "5%"],
    );
    let (ok_claim, said_claim) = ctl_said(
        &socket,
        &[
            "claim",
            "udp",
            "5679",
            "--",
            "delay",
            "1ms",
            "duplicate",
            "5%",
        ],
    );
    let (_, pipe) = ctl_said(&socket, &["pipe", "1", "show"]);
    let (ok_plain, said_plain) = ctl_said(&socket, &["pipe", "1", "config", "delay", "2ms"]);
    let (stats, stderr) = host.stop();
    assert!(
        !ok_pipe && said_pipe.contains(why),
        "pipe with duplicate: {said_pipe}"
    );
    assert!(
        !ok_claim && said_claim.contains(why),
        "claim with duplicate: {said_claim}"
    );
    assert!(
        !pipe.contains("duplicate") && pipe.contains("1ms"),
        "pipe 1 kept: {pipe}"
    );
    assert!(ok_plain, "a pipe change without duplication: {said_plain}");
    assert_eq!(stats["front"], "host", "stats {stats}; {stderr}");

    // The text stats' heading.
    let o = netns::command_in(&ns.0, &[env!("CARGO_BIN_EXE_linkem"), "host"])
        .args(["--stats", "text", "--realtime", "off", "--control", "none"])
        .args(["--duration", "0.5", "delay", "1ms"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("linkem host after") && !out.contains("bridge"),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A veth pair between `n1` and `n2` with IPv4 `10.79.P.1/24` / `.2` and
/// IPv6 `fd79:P::1/64` / `::2` (no duplicate address detection), up.
fn veth_between(n1: &Ns, n2: &Ns, p: u8) -> (String, String) {
    let (d1, d2) = (format!("{}x", n1.0), format!("{}y", n2.0));
    netns::ip(&["link", "add", &d1, "type", "veth", "peer", "name", &d2]).unwrap();
    netns::ip(&["link", "set", &d1, "netns", &n1.0]).unwrap();
    netns::ip(&["link", "set", &d2, "netns", &n2.0]).unwrap();
    for (ns, d, i) in [(n1, &d1, 1), (n2, &d2, 2)] {
        let v4 = format!("10.79.{p}.{i}/24");
        let v6 = format!("fd79:{p}::{i}/64");
        netns::ip(&["-n", &ns.0, "addr", "add", &v4, "dev", d]).unwrap();
        netns::ip(&["-n", &ns.0, "addr", "add", &v6, "dev", d, "nodad"]).unwrap();
        netns::ip(&["-n", &ns.0, "link", "set", d, "up"]).unwrap();
    }
    (d1, d2)
}

/// `ping ARGS` in `ns`: how many replies came back, and what it said.
fn ping_in(ns: &Ns, args: &[&str]) -> (u32, String) {
    let mut a = vec!["ping", "-n", "-q", "-i", "0.2", "-W", "2"];
    a.extend(args);
    let o = ns.exec(&a);
    let out = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    let got = out
        .split(", ")
        .find_map(|w| w.strip_suffix(" received"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    (got, out)
}

/// Item 7 of issue 34: a locally sent datagram larger than the MTU reaches
/// the OUTPUT hook whole (the kernel fragments it later) and a raw socket
/// refuses to send it; host mode holds such a packet and accepts it, so it
/// leaves fragmented. `ping -s 4000` and a 6000-byte UDP datagram, IPv4 and
/// IPv6, over a veth of MTU 1500, while `linkem host` runs (no claim).
#[test]
fn datagrams_larger_than_the_mtu_leave_fragmented_v4_and_v6() {
    if skip() {
        return;
    }
    let _g = serial();
    let n1 = Ns::new("lkbf1");
    let n2 = Ns::new("lkbf2");
    veth_between(&n1, &n2, 7);
    // Both ends ready before linkem starts (the first ping also resolves
    // the neighbours).
    for to in ["10.79.7.2", "fd79:7::2"] {
        let (got, out) = ping_in(&n1, &["-c", "1", to]);
        assert_eq!(got, 1, "before linkem host: {out}");
    }
    let host = Host::start(&n1, &["delay", "1ms"]);
    let mut pings = Vec::new();
    for to in ["10.79.7.2", "fd79:7::2"] {
        pings.push((to, ping_in(&n1, &["-c", "3", "-s", "4000", to])));
    }
    let mut udp = Vec::new();
    for (bind, to) in [
        ("10.79.7.2:5690", "10.79.7.2:5690"),
        ("[fd79:7::2]:5690", "[fd79:7::2]:5690"),
    ] {
        let rx = in_ns(&n2.0, || UdpSocket::bind(bind).unwrap());
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let any = if to.starts_with('[') {
            "[::]:0"
        } else {
            "0.0.0.0:0"
        };
        let tx = in_ns(&n1.0, || UdpSocket::bind(any).unwrap());
        let big = vec![0x5au8; 6000];
        tx.send_to(&big, to).unwrap();
        let mut buf = vec![0u8; 9000];
        udp.push((to, rx.recv(&mut buf).map_err(|e| e.to_string())));
    }
    let (stats, stderr) = host.stop();
    for (to, (got, out)) in &pings {
        assert_eq!(
            *got, 3,
            "ping -s 4000 {to} under linkem host: {out} (stats {stats}; {stderr})"
        );
    }
    for (to, got) in &udp {
        assert_eq!(
            got.as_ref().ok(),
            Some(&6000),
            "a 6000-byte UDP datagram to {to} under linkem host: {got:?} (stats {stats}; {stderr})"
        );
    }
}

/// Item 8 of issue 34: a packet keeps its own firewall mark. `ping -m 7`
/// to an address that only the table of `ip rule fwmark 7` routes (the main
/// table says unreachable) still arrives under `linkem host`: before, the
/// re-send carried linkem's mark and found no route.
#[test]
fn a_marked_packet_keeps_its_mark_and_its_route() {
    if skip() {
        return;
    }
    let _g = serial();
    let n1 = Ns::new("lkbm1");
    let n2 = Ns::new("lkbm2");
    veth_between(&n1, &n2, 8);
    netns::ip(&["-n", &n2.0, "addr", "add", "10.79.9.2/32", "dev", "lo"]).unwrap();
    for args in [
        &["route", "add", "unreachable", "10.79.9.0/24"][..],
        &[
            "route",
            "add",
            "10.79.9.0/24",
            "via",
            "10.79.8.2",
            "table",
            "107",
        ][..],
        &["rule", "add", "fwmark", "7", "table", "107"][..],
    ] {
        let mut a = vec!["-n", n1.0.as_str()];
        a.extend(args);
        netns::ip(&a).unwrap();
    }
    let (got, out) = ping_in(&n1, &["-c", "1", "-m", "7", "10.79.9.2"]);
    assert_eq!(got, 1, "the marked route before linkem host: {out}");
    let (got, _) = ping_in(&n1, &["-c", "1", "10.79.9.2"]);
    assert_eq!(got, 0, "unmarked, 10.79.9.2 is unreachable");
    let host = Host::start(&n1, &["delay", "1ms"]);
    let (got, out) = ping_in(&n1, &["-c", "3", "-m", "7", "10.79.9.2"]);
    let (stats, stderr) = host.stop();
    assert_eq!(
        got, 3,
        "ping -m 7 under linkem host must take table 107: {out} (stats {stats}; {stderr})"
    );
}

/// Whether one UDP echo to `to` comes back within `wait`.
fn echo_once(ns: &str, to: SocketAddr, wait: Duration) -> bool {
    let sock = in_ns(ns, || UdpSocket::bind("0.0.0.0:0").unwrap());
    sock.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 64];
    sock.send_to(b"ping", to).is_ok() && sock.recv_from(&mut buf).is_ok_and(|(n, _)| n == 4)
}

/// Item 9 of issue 34: a stopped `linkem host` (SIGSTOP) no longer stops
/// the namespace's traffic: after `--fail-open-after 300ms` without a
/// heartbeat its watchdog removes the jumps to the chains, and loopback
/// echoes flow unimpaired well within 300 ms + a margin for iptables on a
/// busy machine; after SIGCONT the jumps come back and the delay applies
/// again; a clean exit leaves no chain and no watchdog.
#[test]
fn a_stopped_host_fails_open_within_its_bound_and_resumes_on_sigcont() {
    if skip() {
        return;
    }
    let _g = serial();
    let ns = Ns::new("lkbst");
    let to: SocketAddr = "127.0.0.1:5678".parse().unwrap();
    let _echo = Echo::start(&ns.0, &[to]);
    let host = Host::start(&ns, &["delay", "10ms", "--fail-open-after", "300ms"]);
    let pid = host.child.id() as i32;
    let held = udp_rtt_min_ms(&ns.0, to, 5);
    // Safety: kill with a pid we own.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let stopped_at = Instant::now();
    let mut open_after = None;
    while stopped_at.elapsed() < Duration::from_secs(10) {
        if echo_once(&ns.0, to, Duration::from_millis(100)) {
            open_after = Some(stopped_at.elapsed());
            break;
        }
    }
    let open_rtt = udp_rtt_min_ms(&ns.0, to, 5);
    let rules_while_stopped = ns.iptables_rules();
    // Safety: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let resumed_at = Instant::now();
    let mut again = 0.0;
    while resumed_at.elapsed() < Duration::from_secs(10) {
        again = udp_rtt_min_ms(&ns.0, to, 3);
        if again > 35.0 {
            break;
        }
    }
    let (stats, stderr) = host.stop();
    let ctx = format!(
        "held {held:.2} ms, open after {open_after:?} at {open_rtt:.2} ms, after SIGCONT \
         {again:.2} ms; rules while stopped: {rules_while_stopped}; stats {stats}; {stderr}"
    );
    eprintln!("{ctx}");
    assert!(held > 35.0, "4 x 10 ms on loopback: {ctx}");
    let open_after = open_after.unwrap_or_else(|| panic!("never failed open: {ctx}"));
    assert!(
        open_after < Duration::from_millis(300 + 1700),
        "failed open too late: {ctx}"
    );
    assert!(
        open_after >= Duration::from_millis(250),
        "failed open before its bound: {ctx}"
    );
    assert!(open_rtt < 5.0, "unimpaired while stopped: {ctx}");
    assert!(
        !rules_while_stopped.contains("-j LINKEM-HOST-IN")
            && rules_while_stopped.contains("-N LINKEM-HOST-IN"),
        "jumps removed, chains kept: {ctx}"
    );
    assert!(again > 35.0, "the delay applies again after SIGCONT: {ctx}");
    assert!(
        stderr.contains("no heartbeat") && stderr.contains("answers again"),
        "the watchdog says what it did: {ctx}"
    );
    let left = ns.iptables_rules();
    assert!(!left.contains("LINKEM"), "chains left after exit: {left}");
}

/// Item 10 of issue 34: an ordinary user (uid 1001) running a copy of linkem
/// with the package's file capabilities (`cap_net_admin,cap_net_raw+ep`)
/// got iptables' "you must be root" once the queues were bound; linkem now
/// passes CAP_NET_ADMIN on to iptables (ambient), so host mode runs, installs
/// its chains and removes them.
#[test]
fn an_ordinary_user_with_file_capabilities_runs_host_mode() {
    if skip() {
        return;
    }
    let _g = serial();
    let ns = Ns::new("lkbcp");
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let bin = dir.path().join("linkem");
    std::fs::copy(env!("CARGO_BIN_EXE_linkem"), &bin).unwrap();
    let bin = bin.to_str().unwrap();
    let o = Command::new("setcap")
        .args(["cap_net_admin,cap_net_raw+ep", bin])
        .output()
        .expect("setcap (libcap2-bin) runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = ns.exec(&[
        "setpriv",
        "--reuid",
        "1001",
        "--regid",
        "1001",
        "--clear-groups",
        "--",
        bin,
        "host",
        "--control",
        "none",
        "--realtime",
        "off",
        "--duration",
        "1",
        "delay",
        "1ms",
    ]);
    let said = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(
        o.status.success() && !said.contains("must be root"),
        "linkem host as uid 1001 with file capabilities: {said}"
    );
    let left = ns.iptables_rules();
    assert!(!left.contains("LINKEM"), "chains left after exit: {left}");
}

/// Item 10 of issue 34: plain `ping` stamps a reply when the kernel receives
/// it, before netfilter's queue at INPUT, so the delay host mode adds to
/// what this host receives is hidden from it; `ping -U` (user-to-user
/// latency) stamps in the program and shows it. Loopback through `--a-to-b
/// delay 20ms`: request and reply each wait 20 ms when received; ping shows
/// about 20 ms, ping -U about 40.
#[test]
fn plain_ping_hides_the_received_delay_and_ping_u_shows_it() {
    if skip() {
        return;
    }
    let _g = serial();
    let ns = Ns::new("lkbpu");
    let host = Host::start(&ns, &["--a-to-b", "delay", "20ms"]);
    // The fastest reply: a stall of the machine lengthens some (one CI run:
    // 156 ms of five pings, an average of 47.5), never shortens one.
    let min = |args: &[&str]| {
        let (got, out) = ping_in(&ns, args);
        let min_ms: f64 = out
            .split("min/avg/max")
            .nth(1)
            .and_then(|t| t.split('=').nth(1))
            .and_then(|t| t.trim().split('/').next())
            .and_then(|t| t.parse().ok())
            .unwrap_or(f64::NAN);
        (got, min_ms, out)
    };
    let plain = min(&["-c", "5", "127.0.0.1"]);
    let user = min(&["-U", "-c", "5", "127.0.0.1"]);
    let (stats, stderr) = host.stop();
    let ctx = format!("ping: {plain:?}; ping -U: {user:?}; stats {stats}; {stderr}");
    eprintln!("{ctx}");
    assert!(plain.0 >= 4 && user.0 >= 4, "replies: {ctx}");
    assert!(
        (15.0..32.0).contains(&plain.1),
        "plain ping shows one 20 ms: {ctx}"
    );
    assert!((35.0..60.0).contains(&user.1), "ping -U shows both: {ctx}");
}

/// Packets the kernel holds in netfilter queue `queue` of `ns` now
/// (`/proc/net/netfilter/nfnetlink_queue`, per namespace: its third column).
fn kernel_queue_total(ns: &Ns, queue: u32) -> Option<u64> {
    let o = ns.exec(&["cat", "/proc/net/netfilter/nfnetlink_queue"]);
    String::from_utf8_lossy(&o.stdout).lines().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        (w.first()?.parse::<u32>().ok()? == queue).then(|| w.get(2)?.parse().ok())?
    })
}

/// Item 2 of issue 34: one claim that holds packets long must not fill the
/// kernel's queue of 65 536 (from then on the kernel accepts every packet
/// without asking linkem). 3000 small UDP packets into a claim's `delay 4s`:
/// at most `MAX_HELD_PER_PIPE` (1024) wait in the kernel, the rest are
/// dropped at once and counted as backpressure. Root's own pipe (the rule
/// file's, same words) is not bounded: its 3000 all wait.
#[test]
fn one_claim_holds_a_bounded_share_of_the_kernel_queue() {
    if skip() {
        return;
    }
    let _g = serial();
    let ns = Ns::new("lkbq2");
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("host.rules");
    std::fs::write(
        &rules,
        "pipe 1 config delay 4s queue 10000\nadd 100 pipe 1 udp dst-port 5691 in\n",
    )
    .unwrap();
    let socket = dir.path().join("host.sock");
    let host = Host::start(
        &ns,
        &[
            "--rules",
            rules.to_str().unwrap(),
            "--claims",
            "--control",
            socket.to_str().unwrap(),
        ],
    );
    let (ok, said) = ctl_said(
        &socket,
        &[
            "claim", "udp", "5690", "--", "delay", "4s", "queue", "10000",
        ],
    );
    assert!(ok, "root's claim: {said}");
    let sock = in_ns(&ns.0, || UdpSocket::bind("127.0.0.1:0").unwrap());
    let send = |port: u16| {
        let mut sent = 0u64;
        for i in 0..3000u32 {
            sent += sock.send_to(&i.to_be_bytes(), ("127.0.0.1", port)).is_ok() as u64;
        }
        std::thread::sleep(Duration::from_millis(500));
        (sent, kernel_queue_total(&ns, 4242))
    };
    let (sent, held) = send(5690);
    let (sent_root, held_all) = send(5691);
    let (stats, stderr) = host.stop();
    let a = &stats["directions"][0];
    let backpressure = a["fates"]["backpressure"].as_u64().unwrap_or(0);
    let ctx = format!(
        "claim: sent {sent}, held in the kernel {held:?}; root's pipe: sent {sent_root}, \
         held then {held_all:?}; stats {stats}; {stderr}"
    );
    eprintln!("{ctx}");
    assert!(sent >= 2900 && sent_root >= 2900, "{ctx}");
    let held = held.unwrap_or_else(|| panic!("queue 4242 not listed: {ctx}"));
    assert!(
        (900..=1024).contains(&held),
        "one claim's pipe keeps at most 1024 packets in the kernel: {ctx}"
    );
    assert!(
        backpressure >= sent - 1024,
        "the rest dropped at once as backpressure: {ctx}"
    );
    assert!(
        held_all.is_some_and(|n| n >= held + sent_root - 50),
        "root's pipe is not bounded: {ctx}"
    );
}

/// Item 2 of issue 34: a released claim's packets get their verdicts at
/// once. 100 packets wait in a claim's `delay 4s` (held by the kernel);
/// `release` drops them (counted as flushed) within a fraction of a second,
/// not at their release time 4 s later.
#[test]
fn a_released_claim_gives_its_held_packets_their_verdicts_at_once() {
    if skip() {
        return;
    }
    let _g = serial();
    let ns = Ns::new("lkbrl");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("host.sock");
    let host = Host::start(&ns, &["--claims", "--control", socket.to_str().unwrap()]);
    let (ok, said) = ctl_said(&socket, &["claim", "udp", "5690", "--", "delay", "4s"]);
    assert!(ok, "root's claim: {said}");
    let sock = in_ns(&ns.0, || UdpSocket::bind("127.0.0.1:0").unwrap());
    for i in 0..100u32 {
        sock.send_to(&i.to_be_bytes(), "127.0.0.1:5690").unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    let before = kernel_queue_total(&ns, 4242);
    let (ok, said) = ctl_said(&socket, &["release", "udp", "5690"]);
    let released_at = Instant::now();
    let mut emptied_after = None;
    while released_at.elapsed() < Duration::from_secs(6) {
        if kernel_queue_total(&ns, 4242) == Some(0) {
            emptied_after = Some(released_at.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (stats, stderr) = host.stop();
    let flushed = stats["directions"][0]["fates"]["flushed"]
        .as_u64()
        .unwrap_or(0);
    let ctx = format!(
        "held before release {before:?}, emptied {emptied_after:?} after release ({said}); \
         stats {stats}; {stderr}"
    );
    eprintln!("{ctx}");
    assert!(ok, "release: {ctx}");
    assert_eq!(before, Some(100), "{ctx}");
    let emptied_after = emptied_after.unwrap_or_else(|| panic!("never emptied: {ctx}"));
    assert!(
        emptied_after < Duration::from_millis(1000),
        "verdicts at release, not 4 s later: {ctx}"
    );
    assert_eq!(
        flushed, 100,
        "the released claim's packets counted as flushed: {ctx}"
    );
}

/// Item 2 of issue 34: an expired claim's packets get their verdicts at
/// expiry. A claim of `--claim-ttl 1s` holds 100 packets in `delay 4s`; they
/// are dropped (flushed) about 1 s after the claim, not 4 s.
#[test]
fn an_expired_claim_gives_its_held_packets_their_verdicts_at_expiry() {
    if skip() {
        return;
    }
    let _g = serial();
    let ns = Ns::new("lkbex");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("host.sock");
    let host = Host::start(
        &ns,
        &[
            "--claims",
            "--claim-ttl",
            "1s",
            "--control",
            socket.to_str().unwrap(),
        ],
    );
    let (ok, said) = ctl_said(&socket, &["claim", "udp", "5690", "--", "delay", "4s"]);
    let claimed_at = Instant::now();
    assert!(ok, "root's claim: {said}");
    let sock = in_ns(&ns.0, || UdpSocket::bind("127.0.0.1:0").unwrap());
    for i in 0..100u32 {
        sock.send_to(&i.to_be_bytes(), "127.0.0.1:5690").unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    let before = kernel_queue_total(&ns, 4242);
    let mut emptied_after = None;
    while claimed_at.elapsed() < Duration::from_secs(6) {
        if kernel_queue_total(&ns, 4242) == Some(0) {
            emptied_after = Some(claimed_at.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (stats, stderr) = host.stop();
    let flushed = stats["directions"][0]["fates"]["flushed"]
        .as_u64()
        .unwrap_or(0);
    let ctx = format!(
        "held {before:?}, emptied {emptied_after:?} after the claim; stats {stats}; {stderr}"
    );
    eprintln!("{ctx}");
    assert_eq!(before, Some(100), "{ctx}");
    let emptied_after = emptied_after.unwrap_or_else(|| panic!("never emptied: {ctx}"));
    assert!(
        (Duration::from_millis(900)..Duration::from_millis(2500)).contains(&emptied_after),
        "verdicts at expiry (1 s), not at release (4 s): {ctx}"
    );
    assert_eq!(flushed, 100, "{ctx}");
}
