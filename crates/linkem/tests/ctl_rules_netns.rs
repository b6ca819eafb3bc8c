//! The control plane of a live `linkem bridge --rules`: pipes and rules
//! changed through `linkem ctl` while traffic flows, a storm of pipe
//! reconfigurations, owners, and the audit log. `nsA <-veth-> linkem
//! <-veth-> nsB`, names unique to each test, torn down by the topology's Drop.
//! Needs root and prints "skipped" otherwise.

use linkem_ctl::Client;
use linkem_io::netns::{self, Topology};
use serde_json::Value;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

mod common;

use common::ctl::{ctl, ctl_as, ctl_file, parse_exposition, rtt_ms, scrape, CtlBridge};
use common::{add_address, serial, skip, topology};

/// A bridge running `rules` (from a file of its own), late frames let through.
struct Bridge {
    ctl: CtlBridge,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Bridge {
    fn start(topo: &Topology, rules: &str, args: &[&str]) -> Bridge {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("node.rules");
        std::fs::write(&file, rules).unwrap();
        let mut all = vec!["--max-lag", "off", "--rules", file.to_str().unwrap()];
        all.extend_from_slice(args);
        let ctl = CtlBridge::start(topo, &all);
        Bridge {
            socket: ctl.socket.clone(),
            ctl,
            _dir: dir,
        }
    }

    fn client(&self) -> Client {
        self.ctl.client()
    }

    /// SIGTERM, then the final `--stats json` line, with the invariant
    /// received + segmented = every fate + in flight checked per direction.
    fn finish(self) -> Value {
        let (v, stderr, status) = self.ctl.finish();
        assert!(status.success(), "linkem failed: {stderr}");
        for d in v["directions"].as_array().unwrap() {
            common::assert_counts_add_up(
                d,
                "received + segmented = delivered + drops by reason + in flight",
            );
        }
        v
    }
}

/// `linkem ctl` as uid `uid` (gid 65534) in supplementary group 100.
fn ctl_in_group(uid: u32, socket: &Path, words: &[&str]) -> Output {
    ctl_as(uid, Some("100"), socket, words)
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "ctl failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn rule_packets(list: &Value, number: u32) -> u64 {
    list["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["number"] == number)
        .unwrap_or_else(|| panic!("rule {number} listed: {list}"))["packets"]
        .as_u64()
        .unwrap()
}

#[test]
fn ctl_rules_pipe_delay_new_rule_and_batches() {
    if skip() {
        return;
    }
    let _g = serial();
    let topo = topology("lkQ1");
    let near = topo.addr_b;
    let o = near.octets();
    let far = Ipv4Addr::new(o[0], o[1], o[2], 12);
    add_address(&topo, &topo.ns_b, &topo.host_b, far);
    let bridge = Bridge::start(
        &topo,
        "pipe 1 config delay 5ms\nadd 100 pipe 1 ip from any to any\n",
        &[],
    );
    rtt_ms(&topo, far, 3); // ARP for the new address
    let before = rtt_ms(&topo, near, 9);
    assert!((10.0..14.0).contains(&before), "before: {before} ms");

    // The pipe's delay changes: the next ping sees it both ways.
    let t = Instant::now();
    let out = ok(&ctl(
        &bridge.socket,
        &["pipe", "1", "config", "delay", "15"],
    ));
    eprintln!("linkem ctl pipe config answered in {:?}", t.elapsed());
    assert!(out.contains("in effect from"), "{out}");
    let after = rtt_ms(&topo, near, 9);
    assert!((30.0..34.0).contains(&after), "after: {after} ms");

    // One host's traffic to a new pipe, in one batch: only that host changes.
    let dir = tempfile::tempdir().unwrap();
    let batch = dir.path().join("far.ctl");
    std::fs::write(
        &batch,
        format!(
            "pipe 2 config delay 40ms\nadd 50 pipe 2 ip from any to {far}\n\
             add 60 pipe 2 ip from {far} to any\n"
        ),
    )
    .unwrap();
    let o = ctl_file(&bridge.socket, &batch);
    ok(&o);
    let rtt_far = rtt_ms(&topo, far, 9);
    let rtt_near = rtt_ms(&topo, near, 9);
    eprintln!("after the batch: {far}: {rtt_far:.3} ms, {near}: {rtt_near:.3} ms");
    assert!((80.0..84.0).contains(&rtt_far), "{far}: {rtt_far} ms");
    assert!((30.0..34.0).contains(&rtt_near), "{near}: {rtt_near} ms");

    // A bad word changes nothing and names the word.
    let o = ctl(&bridge.socket, &["pipe", "1", "config", "delay", "3xs"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("(word 5 '3xs')"), "{err}");
    // A batch whose second line names a pipe that does not exist: nothing applied.
    std::fs::write(
        &batch,
        "pipe 1 config delay 1ms\nadd 70 pipe 9 ip from any to any\n",
    )
    .unwrap();
    let o = ctl_file(&bridge.socket, &batch);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("pipe 9 is not configured") && err.contains("nothing applied"),
        "{err}"
    );
    // Applied, the batch would have made it 2 ms.
    let still = rtt_ms(&topo, near, 9);
    assert!(still >= 30.0, "after refused changes: {still} ms");

    // Rules with their counters; pipes in ipfw's layout.
    let mut c = bridge.client();
    let list = c.request_json("list").unwrap();
    assert_eq!(list["rule_set"], true);
    assert!(rule_packets(&list, 50) >= 9, "{list}");
    assert!(rule_packets(&list, 60) >= 9, "{list}");
    let show = ok(&ctl(&bridge.socket, &["pipe", "2", "show"]));
    assert!(
        show.starts_with("00002:") && show.contains("40ms"),
        "{show}"
    );
    let show = c.request_json("pipe show --json").unwrap();
    assert_eq!(show["pipes"].as_array().unwrap().len(), 2, "{show}");
    let text = ok(&ctl(&bridge.socket, &["show"]));
    assert!(text.contains("pipe 2 ip from any to"), "{text}");

    // A pipe still named by rules cannot go; once they are deleted it can.
    let o = ctl(&bridge.socket, &["pipe", "2", "delete"]);
    assert!(!o.status.success());
    ok(&ctl(&bridge.socket, &["delete", "50", "60"]));
    ok(&ctl(&bridge.socket, &["pipe", "2", "delete"]));
    let back = rtt_ms(&topo, far, 9);
    assert!(
        (30.0..34.0).contains(&back),
        "{far} back on pipe 1: {back} ms"
    );

    // zero: the rules' counters start again.
    assert_eq!(c.request_json("zero").unwrap()["ok"], true);
    let list = c.request_json("list").unwrap();
    assert!(rule_packets(&list, 100) < 4, "{list}");
    drop(c);
    let v = bridge.finish();
    assert!(
        v["directions"][0]["received"].as_u64().unwrap() >= 50,
        "{v}"
    );
}

#[test]
fn ctl_rules_pipe_storm_loses_nothing() {
    if skip() {
        return;
    }
    let _g = serial();
    let topo = topology("lkQ2");
    let bridge = Bridge::start(
        &topo,
        "pipe 1 config bw 100Mbit/s delay 5ms queue 1000\nadd 100 pipe 1 ip from any to any\n",
        &[],
    );
    let b = topo.addr_b.to_string();
    let mut sink = topo
        .spawn_in_b(&["iperf3", "-s", "-1", "-p", "5302"])
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut source = topo
        .spawn_in_a(&[
            "iperf3", "-u", "-c", &b, "-p", "5302", "-b", "20M", "-l", "1000", "-t", "4",
        ])
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));

    let mut c = bridge.client();
    let n = 10_000;
    let t = Instant::now();
    for i in 0..n {
        let line = format!(
            "pipe 1 config bw 100Mbit/s delay {}us queue 1000",
            5000 + (i % 7) * 100
        );
        let v = c.request_json(&line).unwrap();
        assert_eq!(v["ok"], true, "{line}: {v}");
    }
    let secs = t.elapsed().as_secs_f64();
    eprintln!(
        "{n} pipe reconfigurations over one connection in {secs:.3} s: {:.0} per second",
        n as f64 / secs
    );
    let _ = source.wait();
    let _ = sink.kill();
    let _ = sink.wait();
    std::thread::sleep(Duration::from_millis(200));
    let list = c.request_json("list").unwrap();
    let carried = rule_packets(&list, 100);
    drop(c);
    let v = bridge.finish();
    let d = &v["directions"][0];
    let fates = d["fates"].as_object().unwrap();
    let delivered = fates["delivered"].as_u64().unwrap();
    let drops: u64 = fates
        .iter()
        .filter(|(k, _)| *k != "delivered")
        .map(|(_, v)| v.as_u64().unwrap())
        .sum();
    eprintln!("storm: delivered {delivered}, drops {drops}, rule 100 carried {carried}");
    assert!(delivered > 5_000, "little traffic: {d}");
    // Every drop fate stays zero: a reconfiguration never drops a packet.
    assert_eq!(drops, 0, "{d}");
    // The rule kept its counter through every change.
    assert!(carried >= delivered, "rule 100: {carried} < {delivered}");
}

#[test]
fn ctl_rules_owners_and_audit() {
    if skip() {
        return;
    }
    let _g = serial();
    let topo = topology("lkQ3");
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let bridge = Bridge::start(
        &topo,
        "pipe 1 config delay 1ms\nadd 100 pipe 1 ip from any to any\n",
        &[
            "--control-group",
            "users",
            "--audit",
            audit.to_str().unwrap(),
        ],
    );
    let s = &bridge.socket;
    // The rule file's pipe and rule are the starter's (root's).
    let o = ctl_in_group(65534, s, &["pipe", "1", "config", "delay", "9ms"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("belongs to uid 0"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = ctl_in_group(65534, s, &["delete", "100"]);
    assert!(!o.status.success());
    // A member makes its own pipe and rule ...
    ok(&ctl_in_group(
        65534,
        s,
        &["pipe", "7", "config", "delay", "2ms"],
    ));
    ok(&ctl_in_group(
        65534,
        s,
        &[
            "add",
            "700",
            "pipe",
            "7",
            "ip",
            "from",
            "192.0.2.1",
            "to",
            "any",
        ],
    ));
    ok(&ctl_in_group(
        65534,
        s,
        &["pipe", "7", "config", "delay", "3ms"],
    ));
    // ... which another member may neither change nor delete, nor flush away.
    let o = ctl_in_group(65533, s, &["pipe", "7", "config", "delay", "1ms"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("belongs to uid 65534"));
    let o = ctl_in_group(65533, s, &["delete", "700"]);
    assert!(!o.status.success());
    let o = ctl_in_group(65533, s, &["flush"]);
    assert!(!o.status.success());
    // Root may.
    let mut c = bridge.client();
    let list = c.request_json("list").unwrap();
    let rule = list["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["number"] == 700)
        .unwrap()
        .clone();
    assert_eq!(rule["owner_uid"], 65534, "{list}");
    ok(&ctl(s, &["delete", "700"]));
    ok(&ctl(s, &["pipe", "7", "delete"]));
    drop(c);
    bridge.finish();

    let text = std::fs::read_to_string(&audit).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let by = |uid: u32| -> Vec<&Value> { lines.iter().filter(|l| l["uid"] == uid).collect() };
    let nobody = by(65534);
    assert_eq!(nobody.len(), 5, "{text}");
    assert!(nobody[0]["result"]
        .as_str()
        .unwrap()
        .starts_with("refused:"));
    assert_eq!(nobody[0]["command"], "pipe 1 config delay 9ms");
    assert_eq!(nobody[2]["result"], "ok");
    let other = by(65533);
    assert_eq!(other.len(), 3, "{text}");
    assert!(other
        .iter()
        .all(|l| l["result"].as_str().unwrap().starts_with("refused:")));
    let root = by(0);
    assert_eq!(root.len(), 2, "{text}");
    assert!(root.iter().all(|l| l["result"] == "ok"));
}

#[test]
fn ctl_rules_metrics_match_stats_json() {
    if skip() {
        return;
    }
    let _g = serial();
    let topo = topology("lkQ4");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let p = port.to_string();
    let bridge = Bridge::start(
        &topo,
        "pipe 1 config delay 20ms\npipe 2 config mask src-port 0xffff delay 1ms bw 50Mbit/s\n\
         pipe 3 config bw 50Mbit/s\nsched 3 config type wf2q+\n\
         queue 5 config sched 3 weight 1\nqueue 6 config sched 3 weight 2\n\
         add 90 queue 5 udp from any to any dst-port 40005\n\
         add 100 pipe 2 udp from any to any\nadd 200 pipe 1 icmp from any to any\n",
        &["--metrics", &p],
    );
    rtt_ms(&topo, topo.addr_b, 20);
    // 50 datagrams through queue 5 of scheduler 3.
    let ns = topo.ns_a.clone();
    let q5 = std::net::SocketAddrV4::new(topo.addr_b, 40005);
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let sock = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        for _ in 0..50 {
            let _ = sock.send_to(&[0u8; 200], q5);
            std::thread::sleep(Duration::from_micros(300));
        }
    })
    .join()
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // `KIND N show` shows object N only; `KIND show` all; an unknown N is named.
    let mut c = bridge.client();
    let show = c.request_json("pipe 1 show --json").unwrap();
    assert_eq!(show["pipes"].as_array().unwrap().len(), 1, "{show}");
    assert_eq!(show["pipes"][0]["pipe"], 1, "{show}");
    let show = c.request_json("pipe show --json").unwrap();
    assert_eq!(show["pipes"].as_array().unwrap().len(), 3, "{show}");
    let show = c.request_json("queue 5 show --json").unwrap();
    assert_eq!(show["queues"].as_array().unwrap().len(), 1, "{show}");
    assert_eq!(show["queues"][0]["number"], 5, "{show}");
    let scheds = show["schedulers"].as_array().unwrap();
    assert_eq!(scheds.len(), 1, "{show}");
    let queues = scheds[0]["queues"].as_array().unwrap();
    assert!(
        !queues.is_empty() && queues.iter().all(|q| q["queue"] == 5),
        "{show}"
    );
    let show = c.request_json("queue show --json").unwrap();
    assert_eq!(show["queues"].as_array().unwrap().len(), 2, "{show}");
    let text = ok(&ctl(&bridge.socket, &["queue", "6", "show"]));
    assert!(
        text.contains("queue 6 config sched 3 weight 2") && !text.contains("queue 5"),
        "{text}"
    );
    let show = c.request_json("sched 3 show --json").unwrap();
    assert_eq!(show["scheds"].as_array().unwrap().len(), 1, "{show}");
    assert_eq!(show["schedulers"][0]["pipe"], 3, "{show}");
    for (kind, n) in [("queue", 9), ("sched", 9), ("pipe", 9)] {
        let o = ctl(&bridge.socket, &[kind, &n.to_string(), "show"]);
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(&format!("{kind} {n} does not exist")), "{err}");
    }
    drop(c);
    // A rule change counts in the control counters; the pipes keep theirs.
    ok(&ctl(
        &bridge.socket,
        &["pipe", "1", "config", "delay", "3ms"],
    ));
    let dst = std::net::SocketAddrV4::new(topo.addr_b, 40000);
    // UDP from 12 source ports, more from the low ones: the top 10 by bytes.
    // Sent round-robin just before the scrapes, so that every flow's instance
    // is still live then (idle instances expire by time, 1 s after their last
    // packet, even on a machine that stalls).
    let ns = topo.ns_a.clone();
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let socks: Vec<_> = (0..12u16)
            .map(|k| std::net::UdpSocket::bind(("0.0.0.0", 30001 + k)).unwrap())
            .collect();
        for i in 0..40u16 {
            for (k, sock) in (0u16..).zip(&socks) {
                if i < 40 - k {
                    let _ = sock.send_to(&[0u8; 100], dst);
                }
            }
            std::thread::sleep(Duration::from_micros(300));
        }
    })
    .join()
    .unwrap();
    let last_sent = Instant::now();
    std::thread::sleep(Duration::from_millis(100));
    // Stray frames may pass at any time: take a `stats` between two scrapes
    // whose direction counters agree.
    let mut c = bridge.client();
    let (samples, stats) = loop {
        let before = parse_exposition(&scrape(port));
        let st = c.request_json("stats").unwrap();
        let after = parse_exposition(&scrape(port));
        let dirs = |s: &Value| -> Vec<f64> {
            let mut v: Vec<(String, f64)> = s
                .as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| k.starts_with("linkem_packets_total"))
                .map(|(k, v)| (k.clone(), v.as_f64().unwrap()))
                .collect();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v.into_iter().map(|x| x.1).collect()
        };
        if dirs(&before) == dirs(&after) {
            break (after, st);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // Idle flow instances expire 1 s after their last packet: a stall that
    // kept the scrapes past it leaves fewer flows to compare, not a fault.
    let flows_live = last_sent.elapsed() < Duration::from_millis(900);
    drop(c);
    let v = bridge.finish();
    let get = |name: &str, labels: &str| -> f64 {
        samples[format!("{name}{labels}")]
            .as_f64()
            .unwrap_or_else(|| panic!("{name}{labels} in {samples}"))
    };
    let node = &v["node"];
    for pipe in node["pipes"].as_array().unwrap() {
        let n = pipe["pipe"].as_u64().unwrap();
        let l = format!("{{\"pipe\": \"{n}\"}}");
        assert_eq!(
            get("linkem_pipe_packets_total", &l),
            pipe["packets"].as_f64().unwrap()
        );
        assert_eq!(
            get("linkem_pipe_bytes_total", &l),
            pipe["bytes"].as_f64().unwrap()
        );
        assert_eq!(
            get("linkem_pipe_drops_total", &l),
            pipe["drops"].as_f64().unwrap()
        );
    }
    for rule in node["rules"].as_array().unwrap() {
        let l = format!("{{\"rule\": \"{}\"}}", rule["number"]);
        assert_eq!(
            get("linkem_rule_packets_total", &l),
            rule["packets"].as_f64().unwrap()
        );
        assert_eq!(
            get("linkem_rule_bytes_total", &l),
            rule["bytes"].as_f64().unwrap()
        );
    }
    // Per pipe and queue: fates, occupancy and time in the pipe, as
    // `--stats json`'s `objects` counts them.
    let objects = &v["objects"];
    for (kind, list) in [("pipe", &objects["pipes"]), ("queue", &objects["queues"])] {
        for o in list.as_array().unwrap() {
            let n = o[kind].as_u64().unwrap();
            for (fate, count) in o["fates"].as_object().unwrap() {
                let l = format!("{{\"fate\": \"{fate}\", \"{kind}\": \"{n}\"}}");
                assert_eq!(
                    get(&format!("linkem_{kind}_fate_packets_total"), &l),
                    count.as_f64().unwrap(),
                    "{kind} {n} {fate}"
                );
            }
            let l = format!("{{\"{kind}\": \"{n}\"}}");
            assert_eq!(get(&format!("linkem_{kind}_occupancy_packets"), &l), 0.0);
            assert_eq!(get(&format!("linkem_{kind}_occupancy_bytes"), &l), 0.0);
            let h = &o["time_in_pipe"];
            let name = format!("linkem_{kind}_time_in_pipe_seconds");
            assert_eq!(
                get(&format!("{name}_count"), &l),
                h["count"].as_f64().unwrap()
            );
            let le = h["le_s"].as_array().unwrap();
            let counts = h["counts"].as_array().unwrap();
            for (b, c) in le.iter().zip(counts) {
                let l = format!(
                    "{{\"le\": \"{}\", \"{kind}\": \"{n}\"}}",
                    b.as_f64().unwrap()
                );
                assert_eq!(get(&format!("{name}_bucket"), &l), c.as_f64().unwrap());
            }
            let inf = format!("{{\"le\": \"+Inf\", \"{kind}\": \"{n}\"}}");
            assert_eq!(
                get(&format!("{name}_bucket"), &inf),
                h["count"].as_f64().unwrap()
            );
        }
    }
    // Pipe 1 (delay 20 ms, no rate) held every ping exactly 20 ms: all its
    // mass is in the bucket holding 0.02 s, none below.
    let pipe1 = &objects["pipes"][0];
    assert_eq!(pipe1["pipe"], 1);
    let le: Vec<f64> = pipe1["time_in_pipe"]["le_s"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_f64().unwrap())
        .collect();
    let at = le.iter().position(|&b| b >= 0.02).unwrap();
    let bucket = |i: usize| {
        get(
            "linkem_pipe_time_in_pipe_seconds_bucket",
            &format!("{{\"le\": \"{}\", \"pipe\": \"1\"}}", le[i]),
        )
    };
    let total = get(
        "linkem_pipe_time_in_pipe_seconds_count",
        "{\"pipe\": \"1\"}",
    );
    assert!(total >= 38.0, "pings through pipe 1: {total}");
    assert_eq!(bucket(at - 1), 0.0, "none under {} s", le[at - 1]);
    assert_eq!(bucket(at), total, "all at or under {} s", le[at]);
    let q5 = &objects["queues"][0];
    assert_eq!(q5["queue"], 5);
    assert!(q5["fates"]["delivered"].as_u64().unwrap() >= 45, "{q5}");
    let pipe2 = &node["pipes"][1];
    assert!(pipe2["packets"].as_u64().unwrap() >= 300, "{pipe2}");
    // The ten busiest of twelve flows, each as --stats json counts it.
    let flows: Vec<(&str, f64)> = samples
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.starts_with("linkem_flow_bytes_total{"))
        .map(|(k, v)| (k.as_str(), v.as_f64().unwrap()))
        .collect();
    if !flows_live {
        eprintln!(
            "the scrapes ended {:?} after the last packet, past the 1 s idle hold: \
             {} flows left, their bytes compared only",
            last_sent.elapsed(),
            flows.len()
        );
    } else {
        assert_eq!(flows.len(), 10, "{samples}");
    }
    for f in pipe2["flows"].as_array().unwrap() {
        let src = f["src"].as_str().unwrap();
        let port: u32 = src.rsplit('/').next().unwrap().parse().unwrap();
        let key = format!(
            "linkem_flow_bytes_total{{\"dst\": \"{}\", \"pipe\": \"2\", \"proto\": \"{}\", \"src\": \"{src}\"}}",
            f["dst"].as_str().unwrap(),
            f["proto"]
        );
        match samples.get(&key) {
            Some(b) => assert_eq!(b.as_f64().unwrap(), f["bytes"].as_f64().unwrap()),
            // Only the two quietest flows are left out (or expired ones, after a stall).
            None => assert!(
                port >= 30011 || !flows_live,
                "flow from {src} missing: {samples}"
            ),
        }
    }
    let d0 = &stats["directions"][0];
    for fate in ["delivered", "denied", "queue-full"] {
        let l = format!("{{\"direction\": \"a->b\", \"fate\": \"{fate}\"}}");
        assert_eq!(
            get("linkem_packets_total", &l),
            d0["fates"][fate].as_f64().unwrap(),
            "{fate}"
        );
    }
    assert_eq!(get("linkem_control_changes_total", "{}"), 1.0);
}

/// A pipe deleted (with its rule, in one batch) while packets wait in its
/// queue: those not yet sent are counted as `flushed`, never lost silently,
/// and the counts add up (received = delivered + flushed + in flight).
#[test]
fn ctl_rules_pipe_deleted_with_packets_queued_counts_them_flushed() {
    if skip() {
        return;
    }
    let _g = serial();
    let topo = topology("lkQ5");
    let bridge = Bridge::start(
        &topo,
        "pipe 2 config bw 2Mbit/s queue 400\nadd 50 pipe 2 udp from any to any\n",
        &[],
    );
    let dst = std::net::SocketAddrV4::new(topo.addr_b, 40001);
    let ns = topo.ns_a.clone();
    let n = 300u64;
    // 300 datagrams of 1000 bytes at once: 1.2 s of queue at 2 Mbit/s.
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let sock = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        for _ in 0..n {
            let _ = sock.send_to(&[0u8; 958], dst);
        }
    })
    .join()
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let mut c = bridge.client();
    let st = c.request_json("stats").unwrap();
    let queued = st["directions"][0]["in_flight"].as_u64().unwrap();
    assert!(queued >= 100, "packets wait in pipe 2: {st}");
    for l in ["begin", "delete 50", "pipe 2 delete"] {
        assert_eq!(c.request_json(l).unwrap()["ok"], true, "{l}");
    }
    let v = c.request_json("commit").unwrap();
    assert_eq!(v["ok"], true, "{v}");
    let show = c.request_json("pipe show --json").unwrap();
    assert_eq!(show["pipes"].as_array().unwrap().len(), 0, "{show}");
    // After `zero` every count restarts, `flushed` too: the counts since
    // then add up when nothing was in flight at the zero, so wait for both
    // directions to be empty (a stray frame, or a stall of the machine, may
    // hold one for a moment).
    let idle = |c: &mut Client| -> Value {
        let t = Instant::now();
        loop {
            let st = c.request_json("stats").unwrap();
            let busy = st["directions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d["in_flight"] != 0);
            if !busy || t.elapsed() > Duration::from_secs(5) {
                return st;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    std::thread::sleep(Duration::from_millis(1500));
    let st = idle(&mut c);
    assert_eq!(st["directions"][0]["in_flight"], 0, "{st}");
    assert_eq!(st["directions"][1]["in_flight"], 0, "{st}");
    assert_eq!(c.request_json("zero").unwrap()["ok"], true);
    let ns = topo.ns_a.clone();
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let sock = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        for _ in 0..10 {
            let _ = sock.send_to(&[0u8; 100], dst);
        }
    })
    .join()
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let st = idle(&mut c);
    for d in st["directions"].as_array().unwrap() {
        common::assert_counts_add_up(d, "since zero: received + segmented = fates + in flight");
        assert_eq!(d["fates"]["flushed"], 0, "flushed since zero: {d}");
    }
    assert!(
        st["directions"][0]["received"].as_u64().unwrap() >= 10,
        "{st}"
    );
    drop(c);
    let v = bridge.finish();
    let d = &v["directions"][0];
    let fates = d["fates"].as_object().unwrap();
    let drops: u64 = fates
        .iter()
        .filter(|(k, _)| *k != "delivered")
        .map(|(_, v)| v.as_u64().unwrap())
        .sum();
    let flushed = fates["flushed"].as_u64().unwrap();
    let delivered = fates["delivered"].as_u64().unwrap();
    eprintln!(
        "{queued} in flight when pipe 2 was deleted: {flushed} flushed, {delivered} delivered"
    );
    // Nearly all of those in flight at the `stats` before the delete.
    assert!(flushed + 20 >= queued && flushed <= queued, "{queued}: {d}");
    assert_eq!(drops, flushed, "only flushed: {d}");
    assert!(delivered + flushed >= n, "{d}");
    assert_eq!(d["in_flight"], 0, "{d}");
}

#[test]
fn ctl_rules_members_add_only_behind_others_to_their_own_pipes() {
    if skip() {
        return;
    }
    let _g = serial();
    let topo = topology("lkQ6");
    let bridge = Bridge::start(
        &topo,
        "pipe 1 config delay 1ms\nadd 100 pipe 1 ip from 192.0.2.9 to any\n",
        &["--control-group", "users"],
    );
    let s = &bridge.socket;
    let refused = |words: &[&str], says: &str| {
        let o = ctl_in_group(65534, s, words);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(!o.status.success(), "{words:?} was taken");
        assert!(err.contains(says), "{words:?}: {err}");
    };
    // No rule over everyone's traffic: neither deny/allow nor someone else's pipe ...
    refused(
        &["add", "900", "deny", "ip", "from", "any", "to", "any"],
        "own pipes or queues",
    );
    refused(
        &[
            "add", "prob", "0.5", "reset", "ip", "from", "any", "to", "any",
        ],
        "own pipes or queues",
    );
    refused(
        &["add", "900", "pipe", "1", "ip", "from", "any", "to", "any"],
        "pipe 1 is not yours",
    );
    ok(&ctl_in_group(
        65534,
        s,
        &["pipe", "7", "config", "bw", "8bit/s"],
    ));
    // ... nor ahead of rules that are not the member's.
    refused(
        &["add", "50", "pipe", "7", "ip", "from", "any", "to", "any"],
        "only after every rule not its own (numbered above 100)",
    );
    ok(&ctl_in_group(
        65534,
        s,
        &["add", "200", "pipe", "7", "ip", "from", "any", "to", "any"],
    ));
    // In a batch, a pipe made by an earlier line is the member's own.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("b.ctl");
    std::fs::write(
        &file,
        "pipe 8 config delay 1ms\nadd 300 pipe 8 ip from any to any\n",
    )
    .unwrap();
    ok(&ctl_in_group(65534, s, &["-f", file.to_str().unwrap()]));
    // A refused line of a batch is refused as it arrives.
    std::fs::write(&file, "add 400 deny ip from any to any\n").unwrap();
    let o = ctl_in_group(65534, s, &["--json", "-f", file.to_str().unwrap()]);
    assert!(!o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    let first: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(first["refused"], true, "{out}");
    // Root and the starter may add anything anywhere.
    ok(&ctl(
        s,
        &["add", "10", "deny", "ip", "from", "192.0.2.8", "to", "any"],
    ));
    let mut c = bridge.client();
    let list = c.request_json("list").unwrap();
    let owners: Vec<(u64, u64)> = list["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["number"].as_u64().unwrap(),
                r["owner_uid"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        owners,
        [(10, 0), (100, 0), (200, 65534), (300, 65534)],
        "{list}"
    );
    drop(c);
    bridge.finish();
}

/// Issue 34 item 14: `flush` of a pipe whose packets wait, then `zero` while
/// they are still in flight: the packets flushed after the zero count since
/// the zero as received too (they were in flight at it), so the counts since
/// the zero add up (before: received 80, fates 90).
#[test]
fn ctl_rules_zero_right_after_a_flush_keeps_the_counts_adding_up() {
    if skip() {
        return;
    }
    let _g = serial();
    let topo = topology("lkdQz");
    let bridge = Bridge::start(
        &topo,
        "pipe 2 config bw 2Mbit/s queue 400\nadd 50 pipe 2 udp from any to any\n",
        &[],
    );
    let dst = std::net::SocketAddrV4::new(topo.addr_b, 40001);
    let ns = topo.ns_a.clone();
    // 300 datagrams of 1000 bytes at once: 1.2 s of queue at 2 Mbit/s.
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let sock = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        for _ in 0..300 {
            let _ = sock.send_to(&[0u8; 958], dst);
        }
    })
    .join()
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let mut c = bridge.client();
    for l in ["flush", "zero"] {
        let v = c.request_json(l).unwrap();
        assert_eq!(v["ok"], true, "{l}: {v}");
    }
    let at_zero = c.request_json("stats").unwrap();
    // Until every packet of the flushed pipe has met its fate.
    let t = Instant::now();
    let st = loop {
        let st = c.request_json("stats").unwrap();
        let busy = st["directions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["in_flight"] != 0);
        if !busy || t.elapsed() > Duration::from_secs(5) {
            break st;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let d = &st["directions"][0];
    eprintln!(
        "just after the zero: {}; later: {d}",
        at_zero["directions"][0]
    );
    for d in st["directions"].as_array().unwrap() {
        common::assert_counts_add_up(d, "since zero: received + segmented = fates + in flight");
    }
    assert!(
        d["fates"]["flushed"].as_u64().unwrap() + d["fates"]["delivered"].as_u64().unwrap() > 0,
        "nothing was in flight at the zero: {d}"
    );
    drop(c);
    bridge.finish();
}
