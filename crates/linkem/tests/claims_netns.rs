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

/// Median UDP round trip (ms) of `count` probes from nsA to `dst:port`,
/// one at a time; a probe without an answer within 1 s fails the test,
/// naming the port and how many were answered.
fn udp_rtt_ms(topo: &Topology, dst: Ipv4Addr, port: u16, count: u32) -> f64 {
    common::in_ns(&topo.ns_a, || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let to = SocketAddrV4::new(dst, port);
        let mut rtts = Vec::new();
        let mut buf = [0u8; 64];
        for seq in 0..count {
            let t = Instant::now();
            s.send_to(&seq.to_be_bytes(), to).unwrap();
            loop {
                match s.recv_from(&mut buf) {
                    // An answer to an earlier probe that came late is skipped.
                    Ok((4, _)) if buf[..4] == seq.to_be_bytes() => break,
                    Ok(_) => continue,
                    Err(e) => panic!(
                        "udp {to}: probe {seq} unanswered ({e}); {} of {count} answered",
                        rtts.len()
                    ),
                }
            }
            rtts.push(t.elapsed().as_secs_f64() * 1e3);
            std::thread::sleep(Duration::from_millis(10));
        }
        median(rtts)
    })
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
    let base = PORTS.map(|p| udp_rtt_ms(&topo, far, p, 9));
    eprintln!("baseline: 5678 {:.2} ms, 5679 {:.2} ms", base[0], base[1]);

    // uid 1001 claims 5678: 50 ms each way on that port only.
    let (ok, out, err) = as_user(1001, &s, &["claim", "udp", "5678", "--", "delay", "50ms"]);
    assert!(ok, "1001's claim: {err}");
    assert!(out.starts_with("claimed udp 5678: pipe 40000"), "{out}");
    let claimed_at = Instant::now();
    let rtt = PORTS.map(|p| udp_rtt_ms(&topo, far, p, 7));
    eprintln!(
        "1001 holds 5678: 5678 {:.2} ms, 5679 {:.2} ms",
        rtt[0], rtt[1]
    );
    assert!(
        (base[0] + 98.0..base[0] + 115.0).contains(&rtt[0]),
        "5678: {} ms, baseline {} ms",
        rtt[0],
        base[0]
    );
    assert!(
        rtt[1] < base[1] + 10.0,
        "5679: {} ms, baseline {} ms",
        rtt[1],
        base[1]
    );

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
    let rtt = PORTS.map(|p| udp_rtt_ms(&topo, far, p, 5));
    eprintln!("both claims: 5678 {:.2} ms, 5679 {:.2} ms", rtt[0], rtt[1]);
    assert!(
        (base[1] + 19.0..base[1] + 35.0).contains(&rtt[1]),
        "5679: {} ms",
        rtt[1]
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
    let after = udp_rtt_ms(&topo, far, 5678, 7);
    eprintln!("after 1001's expiry ({lived:?}): 5678 {after:.2} ms");
    assert!(after < base[0] + 10.0, "5678 after expiry: {after} ms");

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
