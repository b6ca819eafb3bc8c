//! `linkem bridge --rules` with real traffic: `nsA <-veth-> linkem <-veth-> nsB`
//! with the hosts at the kernel's defaults (checksum offload, TSO/GSO on), so
//! the node stage cuts super-frames as the plain bridge does. Needs root and
//! prints "skipped" otherwise; namespaces are torn down by the topology's Drop.

#[macro_use]
mod common;

use common::*;
use linkem_io::netns::Topology;
use serde_json::Value;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// A rule file in a directory removed when the value is dropped.
struct RulesFile {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

fn rules_file(text: &str) -> RulesFile {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bridge.rules");
    std::fs::write(&path, text).unwrap();
    RulesFile { _dir: dir, path }
}

fn start(topo: &Topology, backend: &str, rules: &RulesFile, extra: &[&str]) -> Bridge {
    let mut args = vec!["--rules", rules.path.to_str().unwrap()];
    args.extend_from_slice(extra);
    Bridge::start(topo, backend, &args)
}

/// Packets the flows of pipe `pipe` carried, from the node's stats.
fn pipe_packets(v: &Value, pipe: u64) -> u64 {
    v["node"]["pipes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pipe"] == pipe)
        .unwrap_or_else(|| panic!("pipe {pipe} listed: {v}"))["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["packets"].as_u64().unwrap())
        .sum()
}

on_both_backends!(
    two_pipes_by_direction_add_up_to_the_rtt,
    two_hosts_behind_different_pipes_see_their_own_rtt,
    a_src_port_mask_gives_each_tcp_connection_its_own_rate,
    wf2q_weights_1_and_3_share_the_link_25_75,
    sighup_rereads_the_rules_and_a_broken_file_keeps_them,
    seed_003_two_links_run_as_written,
    seed_003_multipath_shares_within_binomial_bounds,
    seed_003_multi_hop_path_adds_every_hop,
    seed_003_scheduler_example_shares_by_weight,
    seed_003_mac_profile_matches_the_replay_of_its_recording,
);

fn two_pipes_by_direction_add_up_to_the_rtt(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology_with("lkr1", true);
    let rules = rules_file(
        "pipe 1 config delay 10ms\n\
         pipe 2 config delay 30ms\n\
         add 100 pipe 1 ip from any to any in\n\
         add 200 pipe 2 ip from any to any out\n",
    );
    let b = start(&topo, backend, &rules, &[]);
    ping_median_ms(&topo, 10); // warm-up
    let rtt = ping_median_ms(&topo, 40);
    let v = b.stop();
    eprintln!("{backend}: pipes 10 ms a->b, 30 ms b->a: RTT {rtt:.3} ms");
    assert!(
        (40.0..42.0).contains(&rtt),
        "RTT {rtt} ms, expected 40 ms and the hosts' own time"
    );
    assert!(
        pipe_packets(&v, 1) >= 50,
        "pipe 1 carried the requests: {v}"
    );
    assert!(pipe_packets(&v, 2) >= 50, "pipe 2 carried the replies: {v}");
}

fn two_hosts_behind_different_pipes_see_their_own_rtt(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology_with("lkr2", true);
    let o = topo.addr_b.octets();
    let near = topo.addr_b;
    let far = Ipv4Addr::new(o[0], o[1], o[2], 12);
    add_address(&topo, &topo.ns_b, &topo.host_b, far);
    let rules = rules_file(&format!(
        "# two hosts behind one bridge: {near} 5 ms each way, {far} 25 ms\n\
         pipe 1 config delay 5ms\n\
         pipe 2 config delay 25ms\n\
         add 100 pipe 1 ip from any to {near}\n\
         add 110 pipe 1 ip from {near} to any\n\
         add 200 pipe 2 ip from any to {far}\n\
         add 210 pipe 2 ip from {far} to any\n"
    ));
    let b = start(&topo, backend, &rules, &[]);
    ping_median_ms_to(&topo, far, 10); // warm-up, and ARP for the new address
    let rtt_near = ping_median_ms_to(&topo, near, 30);
    let rtt_far = ping_median_ms_to(&topo, far, 30);
    let v = b.stop();
    eprintln!("{backend}: {near}: {rtt_near:.3} ms, {far}: {rtt_far:.3} ms");
    assert!(
        (10.0..12.0).contains(&rtt_near),
        "RTT to {near}: {rtt_near} ms"
    );
    assert!(
        (50.0..52.0).contains(&rtt_far),
        "RTT to {far}: {rtt_far} ms"
    );
    // ARP is not IP: no rule takes it, it passes unimpaired.
    assert!(v["node"]["unmatched"].as_u64().unwrap() > 0, "{v}");
}

fn a_src_port_mask_gives_each_tcp_connection_its_own_rate(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology_with("lkr3", true);
    let rules = rules_file(
        "pipe 1 config bw 20Mbit/s queue 100 mask src-port 0xffff\n\
         add 100 pipe 1 tcp from any to any dst-port 5301 in\n",
    );
    let b = start(&topo, backend, &rules, &[]);
    let r = iperf3(&topo, &["-P", "4", "-t", "5", "-O", "1"]);
    let v = b.stop();
    let streams: Vec<f64> = r["end"]["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["receiver"]["bits_per_second"].as_f64().unwrap())
        .collect();
    let total: f64 = streams.iter().sum();
    eprintln!(
        "{backend}: 4 connections through a 20 Mbit/s pipe per source port: {:?} Mbit/s, total {:.1}",
        streams.iter().map(|b| (b / 1e5).round() / 10.0).collect::<Vec<_>>(),
        total / 1e6
    );
    assert_eq!(streams.len(), 4, "{r}");
    // Goodput of 1448 bytes in 1514-byte frames: 19.1 Mbit/s per connection.
    assert!(
        total > 50e6,
        "the 4 connections share no rate: {total} bit/s"
    );
    for s in &streams {
        assert!(
            (14e6..20.5e6).contains(s),
            "one connection: {s} bit/s, expected about 19 Mbit/s"
        );
    }
    // One instance per connection (and one for iperf3's control connection).
    let flows = v["node"]["pipes"][0]["flows"].as_array().unwrap().len();
    assert!(flows >= 4, "dynamic instances: {flows}: {v}");
}

/// Two iperf3 TCP flows at once, to ports 5301 and 5302, for `secs` s with the
/// first second left out; returns the receivers' bit/s.
fn two_tcp_flows(topo: &Topology, secs: u32) -> [f64; 2] {
    let servers: Vec<_> = ["5301", "5302"]
        .iter()
        .map(|p| topo.spawn_in_b(&["iperf3", "-s", "-1", "-p", p]).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let b = topo.addr_b.to_string();
    let t = secs.to_string();
    let clients: Vec<_> = ["5301", "5302"]
        .iter()
        .map(|p| {
            topo.spawn_in_a(&["iperf3", "-c", &b, "-p", p, "-J", "-t", &t, "-O", "1"])
                .unwrap()
        })
        .collect();
    let mut out = [0.0; 2];
    for (i, c) in clients.into_iter().enumerate() {
        let o = c.wait_with_output().unwrap();
        let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!(
                "iperf3 output ({e}): {}",
                String::from_utf8_lossy(&o.stdout)
            )
        });
        out[i] = v["end"]["sum_received"]["bits_per_second"]
            .as_f64()
            .unwrap_or_else(|| panic!("iperf3 TCP result: {v}"));
    }
    for mut s in servers {
        let _ = s.kill();
        let _ = s.wait();
    }
    out
}

fn wf2q_weights_1_and_3_share_the_link_25_75(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology_with("lkr4", true);
    let rules = rules_file(
        "pipe 1 config bw 20Mbit/s\n\
         sched 1 config type wf2q+\n\
         queue 1 config sched 1 weight 1 queue 100\n\
         queue 2 config sched 1 weight 3 queue 100\n\
         add 100 queue 1 tcp from any to any dst-port 5301 in\n\
         add 200 queue 2 tcp from any to any dst-port 5302 in\n",
    );
    let b = start(&topo, backend, &rules, &[]);
    let [low, high] = two_tcp_flows(&topo, 8);
    let v = b.stop();
    let share = low / (low + high);
    eprintln!(
        "{backend}: wf2q+ weights 1:3: {:.2} and {:.2} Mbit/s, share of weight 1: {:.3}",
        low / 1e6,
        high / 1e6,
        share
    );
    assert!(
        (0.20..=0.30).contains(&share),
        "weight 1 of 1+3 took {share} of the link (expected 0.25 ± 0.05)"
    );
    assert!(
        low + high > 0.85 * 20e6 * 1448.0 / 1514.0,
        "the link is used: {} bit/s",
        low + high
    );
    assert!(
        v["node"]["schedulers"][0]["queues"]
            .as_array()
            .unwrap()
            .len()
            >= 2,
        "{v}"
    );
}

fn sighup_rereads_the_rules_and_a_broken_file_keeps_them(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology_with("lkr5", true);
    let rules = rules_file("pipe 1 config delay 10ms\nadd 100 pipe 1 ip from any to any\n");
    let b = start(&topo, backend, &rules, &[]);
    ping_median_ms(&topo, 5);
    let before = ping_median_ms(&topo, 20);
    std::fs::write(
        &rules.path,
        "pipe 1 config delay 30ms\nadd 100 pipe 1 ip from any to any\n",
    )
    .unwrap();
    b.signal(libc::SIGHUP);
    std::thread::sleep(Duration::from_millis(300));
    let after = ping_median_ms(&topo, 20);
    std::fs::write(&rules.path, "pipe 1 config delay 5ms frobnicate\n").unwrap();
    b.signal(libc::SIGHUP);
    std::thread::sleep(Duration::from_millis(300));
    let kept = ping_median_ms(&topo, 20);
    let (_, err) = b.stop_with_stderr();
    eprintln!("{backend}: RTT {before:.3} ms, after SIGHUP {after:.3} ms, after a broken file {kept:.3} ms");
    assert!((20.0..22.0).contains(&before), "before: {before} ms");
    assert!((60.0..62.0).contains(&after), "after SIGHUP: {after} ms");
    assert!(
        (60.0..62.0).contains(&kept),
        "a broken file keeps the rules: {kept} ms"
    );
    assert!(err.contains("rules re-read"), "{err}");
    // The rule of every file linkem reads: the error names the place, and
    // quotes nothing of the file.
    assert!(
        err.contains("keeping the current rules")
            && err.contains("line 1, word 6")
            && err.contains("unknown word")
            && !err.contains("frobnicate"),
        "{err}"
    );
}

/// testdata/rules/NAME.
fn testdata_rules(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/rules")
        .join(name)
}

/// Packets counted by rule `number` (each took the rule's action).
fn rule_packets(v: &Value, number: u64) -> u64 {
    v["node"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["number"] == number)
        .unwrap_or_else(|| panic!("rule {number} listed: {v}"))["packets"]
        .as_u64()
        .unwrap()
}

/// Dummynet Revisited §3.2 as written (testdata/rules/two-links.rules): host
/// 10.0.0.2 behind IF_A gets 256 kbit/s + 12 ms up and 2 Mbit/s + 3 ms down.
fn seed_003_two_links_run_as_written(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology_with("lkr6", true);
    let host = Ipv4Addr::new(10, 0, 0, 2);
    let net = Ipv4Addr::new(10, 0, 0, 1);
    add_address(&topo, &topo.ns_a, &topo.host_a, host);
    add_address(&topo, &topo.ns_b, &topo.host_b, net);
    let path = testdata_rules("two-links.rules");
    let b = Bridge::start(
        &topo,
        backend,
        &["--rules", path.to_str().unwrap(), "seed", "1"],
    );
    ping_median_ms_to(&topo, net, 5); // ARP
    let rtt = ping_median_ms_to(&topo, net, 30);
    let v = b.stop();
    // A 98-byte echo frame: 3.06 ms at 256 kbit/s + 12 ms up, 0.39 ms at 2 Mbit/s + 3 ms down.
    let expected = 98.0 * 8.0 / 256.0 + 12.0 + 98.0 * 8.0 / 2000.0 + 3.0;
    eprintln!("{backend}: §3.2 two links: RTT {rtt:.3} ms, expected {expected:.3} ms");
    assert!(
        rtt >= expected && rtt < expected + 1.5,
        "RTT {rtt} ms, expected {expected} ms"
    );
    assert!(
        rule_packets(&v, 100) >= 30 && rule_packets(&v, 200) >= 30,
        "{v}"
    );
}

/// Dummynet Revisited §3.3 as written (testdata/rules/multipath.rules): UDP from
/// port 80 on IF_A's side is split 0.2 / 0.8 × 0.7 / the rest over three pipes.
fn seed_003_multipath_shares_within_binomial_bounds(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology_with("lkr7", true);
    let path = testdata_rules("multipath.rules");
    let b = Bridge::start(
        &topo,
        backend,
        &["--rules", path.to_str().unwrap(), "seed", "7"],
    );
    let n = 3000u32;
    let dst = SocketAddrV4::new(topo.addr_b, 40080);
    in_ns(&topo.ns_a, || {
        let sock = UdpSocket::bind("0.0.0.0:80").unwrap();
        for seq in 0..n {
            let _ = sock.send_to(&seq.to_be_bytes(), dst);
            // 5 kpps: below every pipe's rate, so no queue overflows.
            std::thread::sleep(Duration::from_micros(200));
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    let v = b.stop();
    let got = [1000, 1010, 1020].map(|r| rule_packets(&v, r));
    let total: u64 = got.iter().sum();
    eprintln!("{backend}: §3.3 multipath: {got:?} of {total}");
    assert!(
        total >= u64::from(n) * 99 / 100,
        "the datagrams arrived: {v}"
    );
    for (k, p) in got.iter().zip([0.2, 0.8 * 0.7, 0.8 * 0.3]) {
        let sd = (p * (1.0 - p) / total as f64).sqrt();
        let share = *k as f64 / total as f64;
        assert!(
            (share - p).abs() <= 4.5 * sd,
            "share {share}, expected {p} ± {:.4} (4.5 sd): {got:?}",
            4.5 * sd
        );
    }
}

/// Dummynet Revisited §3.3's multi-hop path as written
/// (testdata/rules/multihop.rules, one-pass off): every packet crosses the
/// three pipes in a row, each hop's release the next one's arrival, so the
/// node's reinjections are served by its poll, with no traffic arriving.
fn seed_003_multi_hop_path_adds_every_hop(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology_with("lkr8", true);
    let path = testdata_rules("multihop.rules");
    let b = Bridge::start(
        &topo,
        backend,
        &["--rules", path.to_str().unwrap(), "seed", "1"],
    );
    ping_median_ms(&topo, 5);
    // The fastest ping: no packet may leave before the three hops' sum, and
    // the fastest shows what the path adds beyond it even when a stall of
    // the machine delays some pings (a median of 30 went 2 ms over then).
    let rtt = ping_min_ms(&topo, 30);
    let v = b.stop();
    // Each way: 2 + 20 + 2 ms, and a 98-byte frame at 100, 10 and 100 Mbit/s.
    let expected = 2.0 * (24.0 + 98.0 * 8.0 * (1.0 / 100e3 + 1.0 / 10e3 + 1.0 / 100e3));
    eprintln!("{backend}: §3.3 multi-hop: fastest RTT {rtt:.3} ms, expected {expected:.3} ms");
    assert!(
        rtt >= expected && rtt < expected + 1.5,
        "fastest RTT {rtt} ms of 30, expected {expected} ms"
    );
    for rule in [100, 200, 300] {
        assert!(rule_packets(&v, rule) >= 70, "rule {rule}: {v}");
    }
    assert_eq!(v["node"]["one_pass"], false);
}

/// A bad rule file, or link words beside --rules: a clear error naming the
/// problem, before any interface is looked at (these interfaces do not exist).
#[test]
fn a_bad_rule_file_is_refused_before_any_interface_is_touched() {
    let bad =
        rules_file("pipe 1 config delay 10ms\nadd 100 pipe 1 ip from any to any frobnicate\n");
    let run = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_linkem"))
            .args(["bridge", "lkrnone0", "lkrnone1"])
            .args(args)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    let (code, err) = run(&["--rules", bad.path.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("line 2, word 10")
            && err.contains("unknown word")
            && !err.contains("frobnicate"),
        "names the line and the word's place, quoting nothing of the file: {err}"
    );
    assert!(!err.contains("lkrnone"), "no interface looked at: {err}");

    let missing = rules_file("add 100 pipe 7 ip from any to any\n");
    let (code, err) = run(&["--rules", missing.path.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains('7'), "names the missing pipe: {err}");

    let good = rules_file("pipe 1 config delay 10ms\nadd pipe 1 ip\n");
    let path = good.path.to_str().unwrap();
    let (code, err) = run(&["--rules", path, "delay", "10ms"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("'delay'") && err.contains("pipe N config"),
        "{err}"
    );
    let (code, err) = run(&["--rules", path, "--a-to-b", "delay 5ms"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--a-to-b"), "{err}");
    let (code, err) = run(&["--rules", path, "--forward-only"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--forward-only"), "{err}");
    let (code, err) = run(&["--rules", "/nonexistent/bridge.rules"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("/nonexistent/bridge.rules"), "{err}");
}

/// Dummynet Revisited §3.6 as written (testdata/rules/sched.rules): under a
/// 4 Mbit/s wf2q+ pipe, UDP in one queue of weight 20 and each TCP source of
/// 10.8.5.0/24 in its own queue of weight 10. UDP offered at 8 Mbit/s and two
/// TCP sources, all from IF_B's side (`out`), all backlogged: the link splits
/// 20:10:10, so 50 %, 25 %, 25 % of the frame bytes sent (from the
/// scheduler's own counters), each within 5 points.
fn seed_003_scheduler_example_shares_by_weight(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology_with("lkS1", true);
    let srcs = [Ipv4Addr::new(10, 8, 5, 1), Ipv4Addr::new(10, 8, 5, 2)];
    for s in srcs {
        add_address(&topo, &topo.ns_b, &topo.host_b, s);
    }
    let o = Command::new("ip")
        .args([
            "-n",
            &topo.ns_a,
            "route",
            "add",
            "10.8.5.0/24",
            "dev",
            &topo.host_a,
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let path = testdata_rules("sched.rules");
    let b = Bridge::start(&topo, backend, &["--rules", path.to_str().unwrap()]);
    let a = topo.addr_a.to_string();
    let servers: Vec<_> = ["5301", "5302", "5303"]
        .iter()
        .map(|p| topo.spawn_in_a(&["iperf3", "-s", "-1", "-p", p]).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let (s1, s2) = (srcs[0].to_string(), srcs[1].to_string());
    let clients: Vec<_> = [
        vec!["-p", "5301", "-u", "-b", "8M", "-l", "1472"],
        vec!["-p", "5302", "-B", &s1],
        vec!["-p", "5303", "-B", &s2],
    ]
    .into_iter()
    .map(|extra| {
        let mut args = vec!["iperf3", "-c", &a, "-J", "-t", "8"];
        args.extend(extra);
        topo.spawn_in_b(&args).unwrap()
    })
    .collect();
    for c in clients {
        let o = c.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "iperf3: {}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
    for mut s in servers {
        let _ = s.kill();
        let _ = s.wait();
    }
    let v = b.stop();
    let queues = v["node"]["schedulers"][0]["queues"]
        .as_array()
        .unwrap_or_else(|| panic!("schedulers listed: {v}"));
    let sent = |q: u64| -> Vec<f64> {
        queues
            .iter()
            .filter(|c| c["queue"] == q)
            .map(|c| c["dequeued_bytes"].as_f64().unwrap())
            .collect()
    };
    let (udp, tcp) = (sent(10), sent(8));
    let total: f64 = udp.iter().chain(&tcp).sum();
    eprintln!(
        "{backend}: §3.6 shares: udp {:?} tcp {:?} of {total} bytes",
        udp.iter().map(|b| b / total).collect::<Vec<_>>(),
        tcp.iter().map(|b| b / total).collect::<Vec<_>>()
    );
    assert_eq!(udp.len(), 1, "{v}");
    assert_eq!(tcp.len(), 2, "one queue per TCP source: {v}");
    // 8 s at 4 Mbit/s: the link was kept busy.
    assert!(total * 8.0 > 0.9 * 8.0 * 4e6, "{total} bytes");
    assert!(
        (udp[0] / total - 0.5).abs() < 0.05,
        "udp {}",
        udp[0] / total
    );
    for t in &tcp {
        assert!((t / total - 0.25).abs() < 0.05, "tcp {}", t / total);
    }
}

/// One `--events` line of a packet pipe 3 took.
struct PipeEvent {
    arrival_ns: u64,
    len_bytes: u32,
    /// None: lost, or refused by a full queue (`queue_full`).
    release_ns: Option<u64>,
    queue_full: bool,
    queue_packets: u32,
}

/// The decision lines of an `--events` file (the header left out).
fn event_lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(String::from)
        .collect()
}

/// The lines of `lines` whose packet went to pipe `pipe`, in arrival order.
fn pipe_events(lines: &[String], pipe: &str) -> Vec<PipeEvent> {
    lines
        .iter()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[10] == pipe).then(|| PipeEvent {
                arrival_ns: f[1].parse().unwrap(),
                len_bytes: f[2].parse().unwrap(),
                release_ns: match f[3] {
                    "delivered" => Some(f[4].parse().unwrap()),
                    "loss" | "queue-full" => None,
                    other => panic!("fate {other} in {l}"),
                },
                queue_full: f[3] == "queue-full",
                queue_packets: f[5].parse().unwrap(),
            })
        })
        .collect()
}

/// Dummynet Revisited §3.7 as written (testdata/rules/radio.rules: `pipe 3
/// config profile profile_foo`, every IP packet in either direction to pipe 3).
/// The profile's 5-entry table gives each packet, besides its 296 µs at 2 Mbit/s
/// (74-byte frames), an extra airtime of 0, 100, 130 or 586.7 µs, or loses it
/// after its link time: `loss-level 0.99` of 5 samples keeps ⌊4.95⌋ = 4 entries,
/// so 1/5 of the packets are lost, as in ipfw. A UDP stream paced 2.5 ms apart
/// goes through the bridge with `--events` and `--record`.
///
/// The exact oracle is the replay of the run's own recording: it decides
/// every packet as the live run did, line for line, whatever the machine's
/// load did to the arrival times (a replay of a synthetic stream of the same
/// seed only agrees while the live packets keep their 2.5 ms spacing, which a
/// loaded machine does not promise). The profile itself is checked on the live
/// decisions: 1/5 lost, and every packet that found the pipe idle leaves after
/// 296 µs plus one of the four airtimes, each for about a quarter of them.
fn seed_003_mac_profile_matches_the_replay_of_its_recording(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology_with("lkr9", true);
    // Pipe 3 takes every IP packet: keep the hosts' IPv6 chatter (router
    // solicitations, MLD reports) out of the stream, so that pipe 3 sees it alone.
    for ns in [&topo.ns_a, &topo.ns_b] {
        let o = Command::new("ip")
            .args(["netns", "exec", ns, "sysctl", "-qw"])
            .args([
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let dir = tempfile::tempdir().unwrap();
    let (rec, events, replayed) = (
        dir.path().join("rec"),
        dir.path().join("live.tsv"),
        dir.path().join("replay.tsv"),
    );
    let path = testdata_rules("radio.rules");
    let b = Bridge::start(
        &topo,
        backend,
        &[
            "--rules",
            path.to_str().unwrap(),
            "--events",
            events.to_str().unwrap(),
            "--record",
            rec.to_str().unwrap(),
            "seed",
            "3",
        ],
    );
    // 32 bytes of UDP payload: 74-byte Ethernet frames.
    let (n, payload, frame, gap) = (2000u32, 32usize, 74u32, Duration::from_micros(2500));
    let live = udp_flow(&topo, true, n, payload, gap);
    let v = b.stop();
    let o = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(["replay", "--events"])
        .args([&replayed, &rec, &dir.path().join("out.pcap")])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (live_lines, again) = (event_lines(&events), event_lines(&replayed));

    let pipe = &v["node"]["pipes"][0];
    assert_eq!(pipe["pipe"], 3, "{v}");
    assert_eq!(pipe["profile"]["name"], "profile_foo", "{v}");
    assert_eq!(v["events_skipped"], 0, "every decision written: {v}");
    let arrived = pipe_packets(&v, 3);
    let drops = pipe["drops"].as_u64().unwrap();
    let counted = fate(&v, 0, "loss") + fate(&v, 1, "loss");
    let ev = pipe_events(&live_lines, "3");
    let stream: Vec<&PipeEvent> = ev.iter().filter(|e| e.len_bytes == frame).collect();
    let lost = ev
        .iter()
        .filter(|e| e.release_ns.is_none() && !e.queue_full)
        .count() as u64;
    // A stall of the machine can gather the paced stream into one burst that
    // overflows pipe 3's 50 slots; the replay decides those as the run did,
    // and the profile's statistics are taken over the packets it queued.
    let queue_full = ev.iter().filter(|e| e.queue_full).count() as u64;
    let delivered_stream = stream.iter().filter(|e| e.release_ns.is_some()).count();
    let got = live.iter().filter(|d| d.is_some()).count();
    eprintln!(
        "{backend}: §3.7 profile: pipe 3 took {arrived} packets ({} of the stream's {frame} \
         bytes), lost {lost}, queue-full {queue_full} (drops {drops}, 'loss' {counted}); \
         the stream's delivered {} \
         decisions, {got} of {n} arrived in nsB",
        stream.len(),
        delivered_stream,
    );

    // The exact oracle: the replay of the recording decides as the live run.
    assert_eq!(
        live_lines.len(),
        again.len(),
        "decisions: live {}, replay of its recording {}",
        live_lines.len(),
        again.len()
    );
    if let Some(i) = (0..live_lines.len()).find(|&i| live_lines[i] != again[i]) {
        panic!(
            "decision {i} of {}: live '{}', replay of its recording '{}'",
            live_lines.len(),
            live_lines[i],
            again[i]
        );
    }

    // linkem's own counts agree with its decisions.
    assert_eq!(
        ev.len() as u64,
        arrived,
        "pipe 3's packets are its decisions: {v}"
    );
    assert_eq!(
        drops,
        counted + queue_full,
        "pipe 3's drops are the profile's losses and its full queue's: {v}"
    );
    assert!(
        queue_full <= u64::from(n) / 20,
        "{queue_full} of {n} packets found pipe 3's queue full: more than a stall explains ({v})"
    );
    assert_eq!(
        lost, counted,
        "the events' losses are the counted ones: {v}"
    );
    assert!(
        stream.len() as u32 >= n - n / 100,
        "the stream reached pipe 3: {} of {n} frames of {frame} bytes ({v})",
        stream.len()
    );
    // What the model delivered reached nsB, nothing more (a frame or two may
    // be refused by a loaded kernel).
    assert!(
        got <= delivered_stream && got + n as usize / 200 >= delivered_stream,
        "{got} frames arrived in nsB, the model delivered {delivered_stream} of the stream"
    );

    // The profile: loss 1/5 within a binomial bound (4.5 sd).
    let k = (ev.len() as u64 - queue_full) as f64;
    let rate = lost as f64 / k;
    assert!(
        (rate - 0.2).abs() <= 4.5 * (0.2 * 0.8 / k).sqrt(),
        "loss rate {rate} of {k} packets"
    );
    // A packet that found the pipe idle leaves after its link time (296 µs)
    // and one airtime of the table, exactly (to the ns rounding of each).
    let airtimes_us = [0.0, 100.0, 130.0, 586.667];
    let mut per_airtime = [0usize; 4];
    for e in stream.iter().filter(|e| e.queue_packets == 0) {
        let Some(release) = e.release_ns else {
            continue;
        };
        let us = (release - e.arrival_ns) as f64 / 1e3;
        let which = airtimes_us
            .iter()
            .position(|a| (us - 296.0 - a).abs() < 0.01)
            .unwrap_or_else(|| {
                panic!("a packet into an idle pipe left after {us} µs: 296 µs plus no airtime of the table")
            });
        per_airtime[which] += 1;
    }
    eprintln!(
        "{backend}: packets into an idle pipe by airtime {airtimes_us:?} µs: {per_airtime:?}"
    );
    let idle: usize = per_airtime.iter().sum();
    assert!(
        idle as u32 >= n / 2,
        "{idle} of the stream's packets found pipe 3 idle"
    );
    for (a, c) in airtimes_us.iter().zip(per_airtime) {
        let share = c as f64 / idle as f64;
        assert!(
            (share - 0.25).abs() <= 4.5 * (0.25 * 0.75 / idle as f64).sqrt(),
            "airtime {a} µs: {c} of {idle} packets"
        );
    }
}

/// A rules bridge holds both interfaces' locks for its whole life (it used to
/// let them go as soon as it had started, and a second bridge then forwarded
/// every frame a second time): a second linkem on them, plain or with rules,
/// is refused while it runs, and starts once it has stopped.
#[test]
fn a_second_bridge_is_refused_while_a_rules_bridge_runs() {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology("lkrL");
    let rules = rules_file("pipe 1 config delay 1ms\nadd 100 pipe 1 ip from any to any\n");
    let path = rules.path.to_str().unwrap();
    let second = |extra: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_linkem"))
            .args(["bridge", &topo.emu_a, &topo.emu_b, "--backend", "packet"])
            .args([
                "--duration",
                "1",
                "--max-lag",
                "off",
                "--name",
                "lkrL-second",
            ])
            .args(extra)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    let first = start(&topo, "packet", &rules, &[]);
    for extra in [&[][..], &["--rules", path][..]] {
        let (code, err) = second(extra);
        assert_eq!(
            code,
            Some(1),
            "a second bridge {extra:?} ran beside the rules bridge: {err}"
        );
        assert!(
            err.contains("already in use by another linkem"),
            "refused for the lock: {err}"
        );
    }
    // The first is unharmed and still forwards.
    let rtt = ping_median_ms(&topo, 5);
    assert!(rtt >= 2.0, "RTT {rtt} ms through two 1 ms pipes");
    first.stop();
    let (code, err) = second(&["--rules", path]);
    assert_eq!(code, Some(0), "starts once the first has stopped: {err}");
}

/// Dynamic instances go by time, with no further packet to their pipe: one
/// datagram from each of 16 source ports through a masked pipe and a masked
/// fq_codel pipe makes 32 instances; with no traffic after that, the node's
/// periodic sweep removes them once their idle hold (1 s) has passed, and the
/// stats say so: the periodic lines show the 32 instances and their charged
/// memory, the final one (2.5 s later) none, each pipe's rule having taken
/// exactly its 16 packets.
#[test]
fn idle_instances_expire_by_time_with_no_further_packet() {
    const PORTS: u16 = 16;
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology_with("lkrx", true);
    let rules = rules_file(
        "pipe 1 config delay 1ms mask src-port 0xffff\n\
         pipe 2 config bw 100Mbit/s mask src-port 0xffff\n\
         sched 2 config type fq_codel\n\
         add 100 pipe 1 udp from any to any dst-port 7001 in\n\
         add 200 pipe 2 udp from any to any dst-port 7002 in\n",
    );
    let b = start(&topo, "packet", &rules, &["--stats-interval", "0.5"]);
    let dst = topo.addr_b;
    in_ns(&topo.ns_a, || {
        for i in 0..PORTS {
            let sock =
                UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 41000 + i)).unwrap();
            for port in [7001, 7002] {
                sock.send_to(b"expire me", SocketAddrV4::new(dst, port))
                    .unwrap();
            }
        }
    });
    // Idle hold 1 s, a sweep every 100 ms, and room for a loaded machine.
    std::thread::sleep(Duration::from_millis(2500));
    let (lines, _) = b.stop_with_lines();
    let v = lines.last().unwrap();
    let instances = |v: &Value| v["node"]["flow_instances"].as_u64().unwrap();
    let seen: Vec<(u64, u64)> = lines
        .iter()
        .map(|v| {
            (
                instances(v),
                v["node"]["flow_memory_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    eprintln!("(instances, charged bytes) per stats line: {seen:?}");
    assert_eq!(
        rule_packets(v, 100) + rule_packets(v, 200),
        2 * u64::from(PORTS),
        "the rules took the datagrams and nothing after them: {v}"
    );
    assert!(
        seen.iter().any(|&(n, _)| n == 2 * u64::from(PORTS)),
        "a stats line shows one instance per source port in each pipe: {seen:?}"
    );
    assert_eq!(
        seen.last(),
        Some(&(0, 0)),
        "2.5 s after the last packet, with none since, instances are left: {v}"
    );
    let pipe = |n: u64| {
        v["node"]["pipes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pipe"] == n)
            .unwrap_or_else(|| panic!("pipe {n} listed: {v}"))
            .clone()
    };
    for n in [1, 2] {
        let p = pipe(n);
        assert_eq!(p["expired"], u64::from(PORTS), "pipe {n}: {p}");
        assert_eq!(p["flow_limit_drops"], 0, "pipe {n}: {p}");
    }
    assert_eq!(
        v["node"]["schedulers"].as_array().unwrap().len(),
        0,
        "no scheduler instance left: {v}"
    );
}
