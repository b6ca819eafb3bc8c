//! Port claims on a live `linkem bridge --rules --claims` between two
//! namespaces (`nsA <-veth-> linkem <-veth-> nsB`, names unique to the test,
//! torn down by the topology's Drop): two users (uids 1001 and 1002, their
//! `linkem ctl` run through `setpriv --reuid`) share the emulator as seed 004
//! describes. UDP echo servers on 5678 and 5679 in nsB, probed from nsA.
//! Needs root and prints "skipped" otherwise.

use linkem_io::netns::{self, Topology};
use serde_json::Value;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use common::ctl::{ctl, ctl_as, CtlBridge};
use common::{median, serial, skip, topology};

const PORTS: [u16; 2] = [5678, 5679];

/// UDP echo servers on `PORTS` in namespace `ns` (a thread each, so that
/// one waiting never delays the other), until the flag is set.
fn echo_servers(ns: &str, stop: Arc<AtomicBool>) -> Vec<std::thread::JoinHandle<()>> {
    PORTS
        .iter()
        .map(|&port| {
            let (ns, stop) = (ns.to_string(), stop.clone());
            std::thread::spawn(move || {
                netns::enter(&ns).expect("the namespace exists and we are root");
                let s = UdpSocket::bind(("0.0.0.0", port)).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                let mut buf = [0u8; 64];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((n, from)) = s.recv_from(&mut buf) {
                        let _ = s.send_to(&buf[..n], from);
                    }
                }
            })
        })
        .collect()
}

/// UDP round trips (ms) from nsA to `dst:port`: one warm-up probe whose
/// time is discarded (a first exchange may wait for caches, the bridge's
/// first batch, a page fault), then `count` probes one at a time; a probe
/// without an answer within 1 s fails the test, naming the port and how
/// many were answered.
fn udp_rtts_ms(topo: &Topology, dst: Ipv4Addr, port: u16, count: u32) -> Rtts {
    common::in_ns(&topo.ns_a, || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let to = SocketAddrV4::new(dst, port);
        let mut rtts = Vec::new();
        let mut buf = [0u8; 64];
        for seq in 0..=count {
            let t = Instant::now();
            s.send_to(&seq.to_be_bytes(), to).unwrap();
            loop {
                match s.recv_from(&mut buf) {
                    // An answer to an earlier probe that came late is skipped.
                    Ok((4, _)) if buf[..4] == seq.to_be_bytes() => break,
                    Ok(_) => continue,
                    Err(e) => panic!(
                        "udp {to}: probe {seq} unanswered ({e}); {} of {count} answered (after the warm-up): {rtts:.2?} ms",
                        rtts.len()
                    ),
                }
            }
            if seq > 0 {
                rtts.push(t.elapsed().as_secs_f64() * 1e3);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Rtts {
            port,
            samples: rtts,
        }
    })
}

/// The round trips of one port: compared by their median, so that one
/// stalled exchange (a busy machine) moves nothing; shown whole in a
/// failure.
#[derive(Clone)]
struct Rtts {
    port: u16,
    samples: Vec<f64>,
}

impl Rtts {
    fn median(&self) -> f64 {
        median(self.samples.clone())
    }
}

impl std::fmt::Display for Rtts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "udp {}: median {:.2} ms of {:.2?}",
            self.port,
            self.median(),
            self.samples
        )
    }
}

/// Asserts that the median round trip `got` lies in `added_ms` (the delay a
/// claim adds) above the baseline: at least `added_ms - 2` whatever the
/// baseline (a delay is never shorter; a baseline inflated by a stall must
/// not raise this bound), at most `base + added_ms + slack_ms`.
fn assert_added(what: &str, base: &Rtts, got: &Rtts, added_ms: f64, slack_ms: f64) {
    let (lo, hi) = (added_ms - 2.0, base.median() + added_ms + slack_ms);
    assert!(
        (lo..hi).contains(&got.median()),
        "{what}: expected {lo:.2}..{hi:.2} ms (+{added_ms} ms over the baseline, {slack_ms} ms \
         slack); measured {got}; baseline {base}"
    );
}

fn text(o: &Output) -> (bool, String, String) {
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).to_string(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    )
}

fn as_user(uid: u32, socket: &Path, words: &[&str]) -> (bool, String, String) {
    text(&ctl_as(uid, None, socket, words))
}

fn claims_of(uid: u32, socket: &Path) -> Value {
    let (ok, out, err) = as_user(uid, socket, &["--json", "claims"]);
    assert!(ok, "claims as {uid}: {err}");
    serde_json::from_str(out.trim()).unwrap()
}

fn audit_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn two_users_claim_ports_expire_and_are_bounded_by_limits() {
    if skip() {
        return;
    }
    let _g = serial();
    let topo = topology("lkCL");
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("node.rules");
    // A rule of root's own that lets everything go on to the next rule.
    std::fs::write(&rules, "add 100 count ip from any to any\n").unwrap();
    let limits = dir.path().join("limits");
    std::fs::write(
        &limits,
        "# root's limits\ndefault claims=2 rate=100Mbit/s delay=1s queue=64MiB\n1002 claims=1\n",
    )
    .unwrap();
    let audit = dir.path().join("audit.jsonl");
    let ttl_s = 8;
    let bridge = CtlBridge::start(
        &topo,
        &[
            "--rules",
            rules.to_str().unwrap(),
            "--claims",
            "--claim-ttl",
            &format!("{ttl_s}s"),
            "--limits",
            limits.to_str().unwrap(),
            "--audit",
            audit.to_str().unwrap(),
        ],
    );
    let s = bridge.socket.clone();
    let mode = std::fs::metadata(&s).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666, "with --claims every local user may connect");
    let stop = Arc::new(AtomicBool::new(false));
    let servers = echo_servers(&topo.ns_b, stop.clone());
    let far = topo.addr_b;
    std::thread::sleep(Duration::from_millis(200));
    let base = PORTS.map(|p| udp_rtts_ms(&topo, far, p, 9));
    eprintln!("baseline: {}; {}", base[0], base[1]);

    // uid 1001 claims 5678: 50 ms each way on that port only.
    let (ok, out, err) = as_user(1001, &s, &["claim", "udp", "5678", "--", "delay", "50ms"]);
    assert!(ok, "1001's claim: {err}");
    assert!(out.starts_with("claimed udp 5678: pipe 40000"), "{out}");
    let claimed_at = Instant::now();
    let rtt = PORTS.map(|p| udp_rtts_ms(&topo, far, p, 7));
    eprintln!("1001 holds 5678: {}; {}", rtt[0], rtt[1]);
    assert_added(
        "5678 claimed with delay 50ms",
        &base[0],
        &rtt[0],
        100.0,
        15.0,
    );
    assert_added("5679 not claimed", &base[1], &rtt[1], 0.0, 10.0);

    // uid 1002 may not configure 5678, nor see or touch what is not its claim.
    let (ok, _, err) = as_user(1002, &s, &["claim", "udp", "5678", "--", "delay", "1ms"]);
    assert!(!ok && err.contains("claimed by uid 1001"), "{err}");
    let (ok, _, err) = as_user(1002, &s, &["release", "udp", "5678"]);
    assert!(!ok && err.contains("claimed by uid 1001"), "{err}");
    for words in [
        &["pipe", "40000", "config", "delay", "1ms"][..],
        &["list"],
        &["show"],
        &["pipe", "show"],
        &["delete", "40000"],
        &["flush"],
        &["add", "pipe", "40000", "ip"],
        &["link", "both", "delay", "1ms"],
        &["zero"],
        &["begin"],
        &["set", "one-pass", "off"],
        &["sched", "show"],
        &["queue", "1", "config", "pipe", "40000"],
    ] {
        let (ok, _, err) = as_user(1002, &s, words);
        assert!(
            !ok && err.contains("uid 1002 may only claim"),
            "{words:?}: {err}"
        );
    }
    // Root may not reach the claims' numbers either, other than by release.
    let (ok, _, err) = text(&ctl(&s, &["pipe", "40000", "config", "delay", "1ms"]));
    assert!(!ok && err.contains("belong to claims"), "{err}");
    // 1002 claims 5679 (its one claim); a second is refused naming the limit.
    let (ok, _, err) = as_user(1002, &s, &["claim", "udp", "5679", "--", "delay", "10ms"]);
    assert!(ok, "1002's claim: {err}");
    let (ok, _, err) = as_user(1002, &s, &["claim", "tcp", "80"]);
    assert!(!ok && err.contains("limit claims=1 for uid 1002"), "{err}");
    // An oversized claim of 1001's: refused naming the limit and the value.
    let (ok, _, err) = as_user(1001, &s, &["claim", "udp", "7000", "--", "delay", "2s"]);
    assert!(
        !ok && err.contains("limit delay=1s for uid 1001: the a-to-b pipe asks delay 2s"),
        "{err}"
    );
    let rtt = PORTS.map(|p| udp_rtts_ms(&topo, far, p, 7));
    eprintln!("both claims: {}; {}", rtt[0], rtt[1]);
    assert_added(
        "5679 claimed with delay 10ms",
        &base[1],
        &rtt[1],
        20.0,
        15.0,
    );

    // Each sees its own claims with counters; root sees all.
    let mine = claims_of(1001, &s);
    let list = mine["claims"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{mine}");
    assert_eq!(list[0]["claim"], "udp 5678");
    for dir in ["a_to_b", "b_to_a"] {
        assert!(
            list[0][dir]["packets"].as_u64().unwrap() >= 12,
            "{dir}: {mine}"
        );
        assert!(list[0][dir]["bytes"].as_u64().unwrap() > 0, "{dir}: {mine}");
    }
    assert_eq!(claims_of(0, &s)["claims"].as_array().unwrap().len(), 2);
    let (ok, out, _) = as_user(1001, &s, &["claims"]);
    assert!(
        ok && out.contains("udp 5678") && !out.contains("udp 5679"),
        "{out}"
    );
    // The totals stay open to all.
    let (ok, _, err) = as_user(1002, &s, &["stats"]);
    assert!(ok, "{err}");

    // 1001's claim expires after the ttl: 5678 back to its baseline, 1002's stays.
    let t0 = Instant::now();
    loop {
        let all = claims_of(0, &s);
        let names: Vec<&str> = all["claims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["claim"].as_str().unwrap())
            .collect();
        if !names.contains(&"udp 5678") {
            assert_eq!(names, ["udp 5679"], "{all}");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(ttl_s + 5),
            "5678 still claimed {:?} after the claim: {all}",
            claimed_at.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let lived = claimed_at.elapsed();
    assert!(
        lived >= Duration::from_secs(ttl_s - 1),
        "expired after {lived:?}"
    );
    let after = udp_rtts_ms(&topo, far, 5678, 7);
    eprintln!("after 1001's expiry ({lived:?}): {after}");
    assert_added("5678 after its claim expired", &base[0], &after, 0.0, 10.0);

    // The audit log: the claim, the refusal, the expiry, each with uid and pid.
    let lines = audit_lines(&audit);
    let find = |f: &dyn Fn(&Value) -> bool, what: &str| -> Value {
        lines
            .iter()
            .find(|l| f(l))
            .unwrap_or_else(|| panic!("no audit line for {what}: {lines:?}"))
            .clone()
    };
    let claimed = find(
        &|l| l["uid"] == 1001 && l["event"] == "claimed" && l["claim"] == "udp 5678",
        "1001's claim",
    );
    assert!(
        claimed["pid"].as_u64().unwrap() > 0 && claimed["at_ns"].is_u64(),
        "{claimed}"
    );
    find(
        &|l| {
            l["uid"] == 1002
                && l["command"] == "claim udp 5678 -- delay 1ms"
                && l["result"]
                    .as_str()
                    .unwrap()
                    .contains("claimed by uid 1001")
        },
        "1002's refusal",
    );
    find(
        &|l| l["uid"] == 1001 && l["result"].as_str().unwrap().contains("limit delay=1s"),
        "the oversized claim",
    );
    let expired = find(
        &|l| l["event"] == "expired" && l["claim"] == "udp 5678",
        "the expiry",
    );
    assert_eq!(expired["uid"], 1001, "{expired}");
    assert!(
        expired["at_ns"].is_u64() && expired["time"].is_string(),
        "{expired}"
    );

    stop.store(true, Ordering::Relaxed);
    for t in servers {
        t.join().unwrap();
    }
    let (v, stderr, status) = bridge.finish();
    assert!(status.success(), "linkem failed: {stderr}");
    for d in v["directions"].as_array().unwrap() {
        common::assert_counts_add_up(d, "received = fates + in flight");
    }
}

/// Claim changes over one connection: the rate a client reaches, one
/// request answered before the next (seed 004 asked for 10 per second).
#[test]
fn claim_changes_over_one_connection_exceed_a_thousand_per_second() {
    if skip() {
        return;
    }
    let _g = serial();
    let topo = topology("lkCR");
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("node.rules");
    std::fs::write(&rules, "add 100 count ip from any to any\n").unwrap();
    let bridge = CtlBridge::start(&topo, &["--rules", rules.to_str().unwrap(), "--claims"]);
    let mut c = bridge.client();
    let first = c.request_json("claim udp 6000 -- delay 1ms").unwrap();
    assert_eq!(first["event"], "claimed", "{first}");
    let n = 3000;
    let t = Instant::now();
    for i in 0..n {
        let v = c
            .request_json(&format!(
                "claim udp 6000 -- delay {}ms bw 10Mbit/s",
                i % 50 + 1
            ))
            .unwrap();
        assert_eq!(v["event"], "changed", "{v}");
    }
    let per_s = n as f64 / t.elapsed().as_secs_f64();
    eprintln!(
        "claim changes over one connection: {per_s:.0}/s ({n} in {:?})",
        t.elapsed()
    );
    drop(c);
    let (_, stderr, status) = bridge.finish();
    assert!(status.success(), "linkem failed: {stderr}");
    assert!(per_s >= 1000.0, "{per_s:.0} claim changes per second");
}

/// A socket bound to an ephemeral port of 127.0.0.1 in this (linkem's)
/// namespace, owned by `uid`: the kernel stamps a socket with its creator's
/// fsuid, and fsuid is per thread in Linux, so a thread of its own takes
/// `uid` for the one call and nothing else of the test changes owner.
fn socket_of(uid: u32, tcp: bool) -> (std::os::fd::OwnedFd, u16) {
    std::thread::spawn(move || {
        // Safety: setfsuid on this thread only (the raw syscall; no other thread is touched).
        unsafe { libc::syscall(libc::SYS_setfsuid, uid) };
        let (fd, port) = if tcp {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port();
            (std::os::fd::OwnedFd::from(l), port)
        } else {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            let port = s.local_addr().unwrap().port();
            (std::os::fd::OwnedFd::from(s), port)
        };
        // Safety: as above.
        unsafe { libc::syscall(libc::SYS_setfsuid, 0) };
        (fd, port)
    })
    .join()
    .unwrap()
}

/// A user may claim only ports it could bind: not below
/// `ip_unprivileged_port_start`, not a port a socket of another uid holds
/// (here real sockets of uid 1003, UDP and a TCP listener, in linkem's
/// namespace), unless root's `--limits` allows it; each refusal names the
/// port and the rule, and the audit log keeps it. Root keeps every port.
#[test]
fn a_user_claims_only_ports_it_could_bind() {
    if skip() {
        return;
    }
    let _g = serial();
    let (udp_fd, udp_port) = socket_of(1003, false);
    let (tcp_fd, tcp_port) = socket_of(1003, true);
    let table = std::fs::read_to_string("/proc/net/udp").unwrap();
    let owner = table
        .lines()
        .find(|l| l.contains(&format!("0100007F:{udp_port:04X}")))
        .map(|l| l.split_whitespace().nth(7).unwrap_or("?").to_string());
    assert_eq!(
        owner.as_deref(),
        Some("1003"),
        "the test's socket on udp {udp_port} should be uid 1003's: {table}"
    );
    let start: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let topo = topology("lkaP");
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("node.rules");
    std::fs::write(&rules, "add 100 count ip from any to any\n").unwrap();
    let limits = dir.path().join("limits");
    std::fs::write(
        &limits,
        format!("default claims=8\n1002 allow=tcp:22,udp:{udp_port}\n"),
    )
    .unwrap();
    let audit = dir.path().join("audit.jsonl");
    let bridge = CtlBridge::start(
        &topo,
        &[
            "--rules",
            rules.to_str().unwrap(),
            "--claims",
            "--limits",
            limits.to_str().unwrap(),
            "--audit",
            audit.to_str().unwrap(),
        ],
    );
    let s = bridge.socket.clone();
    let (u, t) = (udp_port.to_string(), tcp_port.to_string());
    let range = format!("{udp_port}-{}", udp_port.saturating_add(1));
    let mut refusals = vec![
        (
            vec!["claim", "udp", &u, "--", "plr", "1"],
            format!("udp port {udp_port} is held by a socket of uid 1003"),
        ),
        (
            vec!["claim", "tcp", &t, "--", "plr", "1"],
            format!("tcp port {tcp_port} is held by a socket of uid 1003"),
        ),
        (
            vec!["claim", "udp", &range, "--", "delay", "1ms"],
            format!("udp {range}: udp port {udp_port} is held by a socket of uid 1003"),
        ),
    ];
    if start > 22 {
        refusals.push((
            vec!["claim", "tcp", "22", "--", "plr", "1"],
            format!("tcp port 22 is below ip_unprivileged_port_start ({start})"),
        ));
    }
    for (words, says) in &refusals {
        let (ok, out, err) = as_user(1001, &s, words);
        assert!(
            !ok && err.contains(says.as_str()),
            "uid 1001 {words:?}: expected a refusal saying '{says}'; ok={ok} out={out} err={err}"
        );
    }
    assert_eq!(
        claims_of(0, &s)["claims"].as_array().unwrap().len(),
        0,
        "a refused claim was kept"
    );
    // The socket's owner may claim its port; root's file allows 1002 more;
    // root keeps every port.
    for (uid, words) in [
        (1003, vec!["claim", "udp", &u, "--", "delay", "1ms"]),
        (1002, vec!["claim", "tcp", "22", "--", "delay", "1ms"]),
        (0, vec!["claim", "tcp", &t, "--", "delay", "1ms"]),
    ] {
        let (ok, out, err) = as_user(uid, &s, &words);
        assert!(ok, "uid {uid} {words:?}: {out}{err}");
    }
    let (ok, out, err) = as_user(1003, &s, &["release", "udp", &u]);
    assert!(ok, "release: {out}{err}");
    // 1002 is allowed udp PORT by root's file though uid 1003 holds it.
    let (ok, out, err) = as_user(1002, &s, &["claim", "udp", &u]);
    assert!(ok, "uid 1002, allowed udp {udp_port}: {out}{err}");
    let (ok, out, err) = as_user(1002, &s, &["release", "udp", &u]);
    assert!(ok, "release: {out}{err}");
    // Once the socket is gone, the port is anyone's.
    drop(udp_fd);
    let (ok, out, err) = as_user(1001, &s, &["claim", "udp", &u]);
    assert!(ok, "uid 1001 after the socket closed: {out}{err}");
    drop(tcp_fd);
    let lines = audit_lines(&audit);
    assert!(
        lines.iter().any(|l| l["uid"] == 1001
            && l["result"].as_str().is_some_and(
                |r| r.starts_with("refused: ") && r.contains("held by a socket of uid 1003")
            )),
        "no audit line for the refusal: {lines:?}"
    );
    let (_, stderr, status) = bridge.finish();
    assert!(status.success(), "linkem failed: {stderr}");
}

/// A connection to `socket` as `uid`: the kernel gives the server the
/// connecting thread's effective uid (SO_PEERCRED), and credentials are per
/// thread in Linux, so a thread of its own takes `uid` as its effective uid
/// for the connect only (the raw syscall: libc's wrapper would change every
/// thread), keeping real and saved uid 0 to return.
fn connect_as(uid: u32, socket: &Path) -> std::os::unix::net::UnixStream {
    let socket = socket.to_path_buf();
    std::thread::spawn(move || {
        // Safety: changes this thread's effective uid only; -1 keeps the others.
        let r = unsafe { libc::syscall(libc::SYS_setresuid, -1i32, uid, -1i32) };
        assert_eq!(r, 0, "setresuid: {}", std::io::Error::last_os_error());
        let s = std::os::unix::net::UnixStream::connect(&socket);
        // Safety: as above, back to root.
        unsafe { libc::syscall(libc::SYS_setresuid, -1i32, 0u32, -1i32) };
        s.unwrap()
    })
    .join()
    .unwrap()
}

/// One user floods the audit log with long refused requests (lines near
/// the 4096-byte bound, each refusal quoting its word) for 2 s, one answered
/// before the next; another user claims meanwhile. The log stays within
/// (BURST 200 + 50 lines/s × elapsed + reports) × 2 KiB, says how many of
/// the flooder's lines it dropped, and keeps the other user's lines.
#[test]
fn a_flood_of_refused_requests_leaves_the_audit_log_bounded() {
    use std::io::{BufRead, BufReader, Write};
    if skip() {
        return;
    }
    let _g = serial();
    let topo = topology("lkaA");
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("node.rules");
    std::fs::write(&rules, "add 100 count ip from any to any\n").unwrap();
    let audit = dir.path().join("audit.jsonl");
    let bridge = CtlBridge::start(
        &topo,
        &[
            "--rules",
            rules.to_str().unwrap(),
            "--claims",
            "--audit",
            audit.to_str().unwrap(),
        ],
    );
    let s = bridge.socket.clone();
    let stream = connect_as(1001, &s);
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let mut banner = String::new();
    reader.read_line(&mut banner).unwrap();
    let word = "A".repeat(4000);
    // Refused at its parse, audited (it asks for a change), the word quoted.
    let line = format!("pipe 40000 config delay {word}\n");
    let t0 = Instant::now();
    let mut sent = 0u64;
    let mut reply = String::new();
    let other = std::thread::spawn({
        let s = s.clone();
        move || {
            (0..5)
                .map(|i| {
                    std::thread::sleep(Duration::from_millis(300));
                    let port = (6000 + i).to_string();
                    as_user(1002, &s, &["claim", "udp", &port, "--", "delay", "1ms"]).0
                })
                .collect::<Vec<bool>>()
        }
    });
    while t0.elapsed() < Duration::from_secs(2) {
        writer.write_all(line.as_bytes()).unwrap();
        reply.clear();
        reader.read_line(&mut reply).unwrap();
        assert!(reply.contains("\"ok\":false"), "{reply}");
        sent += 1;
    }
    let flood_s = t0.elapsed().as_secs_f64();
    assert_eq!(other.join().unwrap(), [true; 5], "uid 1002's claims");
    drop((reader, writer));
    let (_, stderr, status) = bridge.finish();
    assert!(status.success(), "linkem failed: {stderr}");
    let text = std::fs::read_to_string(&audit).unwrap();
    let lines = audit_lines(&audit);
    let written = lines
        .iter()
        .filter(|l| l["uid"] == 1001 && l["command"].is_string())
        .count() as u64;
    let dropped: u64 = lines
        .iter()
        .filter(|l| l["uid"] == 1001 && l["event"] == "dropped")
        .map(|l| l["dropped"].as_u64().unwrap())
        .sum();
    let reports = lines.iter().filter(|l| l["event"] == "dropped").count();
    let bound = ((200.0 + 50.0 * (flood_s + 2.0)) as usize + reports + 5) * 2048;
    eprintln!(
        "uid 1001 sent {sent} refused requests of {} bytes in {flood_s:.2} s: {written} \
         lines written, {dropped} dropped ({reports} reports); log {} bytes (bound {bound})",
        line.len(),
        text.len()
    );
    assert!(
        sent > 400,
        "only {sent} requests in 2 s: too few to pass the burst"
    );
    assert!(
        text.len() <= bound,
        "audit log {} bytes over the bound {bound} ({written} lines of uid 1001)",
        text.len()
    );
    assert_eq!(
        written + dropped,
        sent,
        "every request of uid 1001 is written or counted dropped ({written} + {dropped})"
    );
    let first = lines.iter().find(|l| l["uid"] == 1001).unwrap();
    assert!(
        first["command"].as_str().unwrap().ends_with(" bytes cut]"),
        "{first}"
    );
    let mine = lines
        .iter()
        .filter(|l| l["uid"] == 1002 && l["event"] == "claimed")
        .count();
    assert_eq!(mine, 5, "uid 1002's claims in the log: {text:.2000}");
}
