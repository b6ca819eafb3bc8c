//! The control plane of a live `linkem bridge`: `linkem ctl` changes with
//! traffic flowing, a change storm, who may do what, the audit log, the
//! Prometheus endpoint, and clients that misbehave. `nsA <-veth-> linkem
//! <-veth-> nsB`, names unique to each test, torn down by the topology's Drop.
//! Needs root and prints "skipped" otherwise.

use linkem_ctl::Client;
use linkem_io::netns::Topology;
use serde_json::Value;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod common;

use common::ctl::{ctl, ctl_as, ctl_file, parse_exposition, ping_rtts_to, scrape, CtlBridge};
use common::{serial, skip};

fn topology() -> Topology {
    common::topology("lkC")
}

/// RTTs (ms) of `count` pings from A to B.
fn ping_rtts(topo: &Topology, count: u32) -> Vec<f64> {
    ping_rtts_to(topo, topo.addr_b, count)
}

/// `linkem ctl` as uid/gid 65534 with the given supplementary groups.
fn ctl_as_nobody(socket: &Path, groups: Option<&str>, words: &[&str]) -> Output {
    ctl_as(65534, groups, socket, words)
}

fn totals(dir: &Value) -> (u64, u64, u64) {
    let fates = dir["fates"].as_object().unwrap();
    let delivered = fates["delivered"].as_u64().unwrap();
    let drops: u64 = fates
        .iter()
        .filter(|(k, _)| *k != "delivered")
        .map(|(_, v)| v.as_u64().unwrap())
        .sum();
    (delivered, drops, dir["in_flight"].as_u64().unwrap())
}

#[test]
fn ctl_delay_change_follows_within_one_rtt() {
    if skip() {
        return;
    }
    let _g = serial();
    let topo = topology();
    // No late drops on a loaded machine: every ping must come back.
    let bridge = CtlBridge::start(&topo, &["delay", "10ms", "--max-lag", "off"]);
    let before = ping_rtts(&topo, 5);
    assert!(
        before.iter().all(|r| (19.5..45.0).contains(r)),
        "before: {before:?}"
    );

    let t = Instant::now();
    let o = ctl(&bridge.socket, &["link", "both", "delay", "30ms"]);
    let took = t.elapsed();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("in effect from"));
    eprintln!("linkem ctl answered in {took:?}");
    // The first ping sent after the reply already sees the new delay both ways.
    let after = ping_rtts(&topo, 5);
    assert!(
        after.iter().all(|r| (59.5..100.0).contains(r)),
        "after: {after:?}"
    );

    // Bad words change nothing and name the word.
    let o = ctl(&bridge.socket, &["link", "both", "delay", "3xs"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("word 4 '3xs'"), "{err}");
    let again = ping_rtts(&topo, 3);
    assert!(
        again.iter().all(|r| (59.5..100.0).contains(r)),
        "after a bad change: {again:?}"
    );

    // A batch applies all or nothing.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.ctl");
    std::fs::write(
        &bad,
        "# one good line, one bad\nlink a-to-b delay 1ms\nlink b-to-a delay 1ms loss 200%\n",
    )
    .unwrap();
    let o = ctl_file(&bridge.socket, &bad);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad.ctl:3") && err.contains("nothing applied"),
        "{err}"
    );
    let mut c = bridge.client();
    let list = c.request_json("list").unwrap();
    assert_eq!(list["links"][0]["changes"], 1, "{list}");
    let good = dir.path().join("good.ctl");
    std::fs::write(&good, "link a-to-b delay 2ms\nlink b-to-a delay 3ms\n").unwrap();
    let o = ctl_file(&bridge.socket, &good);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let list = c.request_json("list").unwrap();
    // Both directions changed at one instant.
    assert_eq!(
        list["links"][0]["changed_at_ns"],
        list["links"][1]["changed_at_ns"]
    );
    let rtt = ping_rtts(&topo, 3);
    assert!(
        rtt.iter().all(|r| (4.5..30.0).contains(r)),
        "after the batch: {rtt:?}"
    );

    // zero: the socket's counts start again; --stats json keeps the totals.
    let before = c.request_json("stats").unwrap();
    assert!(before["directions"][0]["received"].as_u64().unwrap() >= 16);
    assert_eq!(c.request_json("zero").unwrap()["ok"], true);
    let after = c.request_json("stats").unwrap();
    assert_eq!(after["zeroed"], true);
    assert!(
        after["directions"][0]["received"].as_u64().unwrap() < 4,
        "{after}"
    );
    drop(c);
    let (stats, _, _) = bridge.finish();
    for d in stats["directions"].as_array().unwrap() {
        let (delivered, drops, in_flight) = totals(d);
        assert_eq!(
            d["received"].as_u64().unwrap(),
            delivered + drops + in_flight,
            "{d}"
        );
        assert!(d["received"].as_u64().unwrap() >= 16, "{d}");
    }
}

#[test]
fn ctl_change_storm_loses_nothing() {
    if skip() {
        return;
    }
    let _g = serial();
    let topo = topology();
    let bridge = CtlBridge::start(&topo, &["delay", "5ms", "--max-lag", "off"]);
    let b = topo.addr_b.to_string();
    // Steady UDP traffic A -> B for the whole storm.
    let mut sink = topo
        .spawn_in_b(&["iperf3", "-s", "-1", "-p", "5301"])
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut source = topo
        .spawn_in_a(&[
            "iperf3", "-u", "-c", &b, "-p", "5301", "-b", "20M", "-l", "1000", "-t", "4",
        ])
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));

    let mut c = bridge.client();
    let n = 10_000;
    let t = Instant::now();
    for i in 0..n {
        let line = format!("link both delay {}us", 5000 + (i % 7) * 100);
        let v = c.request_json(&line).unwrap();
        assert_eq!(v["ok"], true, "{line}: {v}");
    }
    let secs = t.elapsed().as_secs_f64();
    eprintln!(
        "{n} changes over one connection in {secs:.3} s: {:.0} per second",
        n as f64 / secs
    );
    let _ = source.wait();
    let _ = sink.kill();
    let _ = sink.wait();
    std::thread::sleep(Duration::from_millis(200));
    let list = c.request_json("list").unwrap();
    assert_eq!(list["links"][0]["changes"], n, "{list}");
    let (stats, _, _) = bridge.finish();
    let d = &stats["directions"][0];
    let (delivered, drops, in_flight) = totals(d);
    assert!(delivered > 5_000, "little traffic: {d}");
    assert_eq!(
        d["received"].as_u64().unwrap(),
        delivered + drops + in_flight,
        "{d}"
    );
    // Every drop fate stays zero: a change never drops a packet.
    assert_eq!(drops, 0, "{d}");
}

#[test]
fn ctl_permissions_ownership_and_audit() {
    if skip() {
        return;
    }
    let _g = serial();
    let topo = topology();
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let audit_s = audit.to_str().unwrap();
    // Root-only by default: uid 65534 cannot even connect.
    let bridge = CtlBridge::start(&topo, &["delay", "1ms", "--audit", audit_s]);
    let mode = std::fs::metadata(&bridge.socket).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(mode.permissions().mode() & 0o777, 0o600);
    let o = ctl_as_nobody(&bridge.socket, None, &["show"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("permission denied"));
    bridge.finish();

    // With --control-group users: members connect; outsiders still cannot.
    let bridge = CtlBridge::start(
        &topo,
        &[
            "delay",
            "1ms",
            "--audit",
            audit_s,
            "--control-group",
            "users",
        ],
    );
    let meta = std::fs::metadata(&bridge.socket).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((meta.mode() & 0o777, meta.gid()), (0o660, 100));
    let o = ctl_as_nobody(&bridge.socket, None, &["show"]);
    assert!(!o.status.success(), "an outsider connected");
    let o = ctl_as_nobody(&bridge.socket, Some("100"), &["show"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A member may look but not change what root owns.
    let o = ctl_as_nobody(
        &bridge.socket,
        Some("100"),
        &["link", "both", "delay", "9ms"],
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("belong to uid 0"));
    let o = ctl_as_nobody(&bridge.socket, Some("100"), &["zero"]);
    assert!(!o.status.success());
    let o = ctl_as_nobody(
        &bridge.socket,
        Some("100"),
        &["pipe", "1", "config", "bw", "1Mbit/s"],
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("no rule set"));
    let o = ctl(&bridge.socket, &["link", "both", "delay", "2ms"]);
    assert!(o.status.success());
    let mut c = bridge.client();
    assert_eq!(
        c.request_json("list").unwrap()["links"][0]["words"],
        "delay 2ms"
    );
    drop(c);
    bridge.finish();

    let text = std::fs::read_to_string(&audit).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let refused: Vec<&Value> = lines.iter().filter(|l| l["uid"] == 65534).collect();
    assert_eq!(refused.len(), 3, "{text}");
    assert!(refused[0]["result"]
        .as_str()
        .unwrap()
        .starts_with("refused:"));
    assert_eq!(refused[0]["command"], "link both delay 9ms");
    assert!(refused[0]["pid"].as_i64().unwrap() > 0);
    assert!(refused[2]["result"]
        .as_str()
        .unwrap()
        .contains("no rule set"));
    let ok: Vec<&Value> = lines.iter().filter(|l| l["uid"] == 0).collect();
    assert_eq!(ok.len(), 1, "{text}");
    assert_eq!(ok[0]["result"], "ok");
    assert!(ok[0]["at_ns"].as_u64().is_some() && ok[0]["time"].as_str().unwrap().ends_with('Z'));
    // Reading is not audited.
    assert!(!text.contains("\"show\""));
}

#[test]
fn ctl_metrics_parse_and_match_stats_json() {
    if skip() {
        return;
    }
    let _g = serial();
    let python = "/usr/bin/python3";
    let check = Command::new(python)
        .args(["-c", "import prometheus_client"])
        .output();
    assert!(
        check.map(|o| o.status.success()).unwrap_or(false),
        "the Prometheus parser is missing: apt-get install python3-prometheus-client"
    );
    let topo = topology();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let p = port.to_string();
    let bridge = CtlBridge::start(
        &topo,
        &["delay", "2ms", "loss", "10%", "seed", "7", "--metrics", &p],
    );
    let b = topo.addr_b.to_string();
    topo.exec_in_a(&[
        "ping", "-n", "-q", "-c", "100", "-i", "0.005", "-W", "1", &b,
    ])
    .unwrap();
    let o = ctl(&bridge.socket, &["link", "a-to-b", "delay", "3ms"]);
    assert!(o.status.success());
    let _ = ctl(&bridge.socket, &["link", "a-to-b", "delay", "3xs"]);
    // Stray frames (IPv6 neighbour discovery) may pass at any time: take a
    // scrape whose counters did not move across the `stats` request beside it.
    let mut c = bridge.client();
    let (body, ctl_stats) = loop {
        std::thread::sleep(Duration::from_millis(100));
        let before = scrape(port);
        let st = c.request_json("stats").unwrap();
        let after = scrape(port);
        let counters = |b: &str| {
            b.lines()
                .filter(|l| {
                    [
                        "linkem_received",
                        "linkem_packets",
                        "linkem_stage_",
                        "linkem_output_wakeups",
                    ]
                    .iter()
                    .any(|f| l.starts_with(f))
                })
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        if counters(&before) == counters(&after) {
            break (after, st);
        }
    };
    // The client library's own parser: every family, sample and histogram.
    let samples = parse_exposition(&body);
    let get = |name: &str, labels: &str| -> f64 {
        samples[format!("{name}{labels}")]
            .as_f64()
            .unwrap_or_else(|| panic!("no {name}{labels} in\n{body}"))
    };
    // The info family names the build as `linkem --version` does: version and commit.
    let said = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .arg("--version")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&said.stdout);
    let commit = said
        .trim()
        .rsplit('(')
        .next()
        .unwrap()
        .trim_end_matches(')');
    let info = body
        .lines()
        .find(|l| l.starts_with("linkem_info{"))
        .unwrap_or_else(|| panic!("no linkem_info in\n{body}"));
    assert!(
        info.contains(&format!("commit=\"{commit}\"")) && info.contains("seed=\"7\""),
        "linkem_info does not name commit {commit} and seed 7: {info}"
    );
    drop(c);
    let (final_stats, _, _) = bridge.finish();
    // `stats` over the socket is `--stats json`'s own rendering of the same counts.
    assert_eq!(
        final_stats["directions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_object().unwrap().keys().cloned().collect::<Vec<_>>())
            .collect::<Vec<_>>(),
        ctl_stats["directions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_object().unwrap().keys().cloned().collect::<Vec<_>>())
            .collect::<Vec<_>>()
    );
    for d in ctl_stats["directions"].as_array().unwrap() {
        let dir = d["direction"].as_str().unwrap();
        let l = format!("{{\"direction\": \"{dir}\"}}");
        assert_eq!(
            get("linkem_received_packets_total", &l),
            d["received"].as_f64().unwrap(),
            "{dir}"
        );
        for (fate, v) in d["fates"].as_object().unwrap() {
            let lf = format!("{{\"direction\": \"{dir}\", \"fate\": \"{fate}\"}}");
            assert_eq!(
                get("linkem_packets_total", &lf),
                v.as_f64().unwrap(),
                "{dir} {fate}"
            );
        }
        assert_eq!(
            get("linkem_in_flight_packets", &l),
            d["in_flight"].as_f64().unwrap()
        );
        assert_eq!(
            get("linkem_lateness_seconds_count", &l),
            d["lateness_ns"]["count"].as_f64().unwrap()
        );
        for (family, key) in [
            ("linkem_received_bytes_total", "received_bytes"),
            ("linkem_delivered_bytes_total", "delivered_bytes"),
            ("linkem_output_wakeups_total", "tx_wakeups"),
        ] {
            assert_eq!(get(family, &l), d[key].as_f64().unwrap(), "{dir} {key}");
        }
        // Pings crossed: the model's delays of them, in both outputs.
        assert!(get("linkem_delay_seconds_count", &l) > 0.0, "{dir}");
        assert!(d["delay_ms"]["p50"].as_f64().unwrap() > 0.0, "{dir}: {d}");
        assert!(
            d["fates"]["loss"].as_u64().unwrap() > 0,
            "loss 10% lost nothing: {d}"
        );
        let fin = final_stats["directions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["direction"] == dir)
            .unwrap();
        assert!(fin["received"].as_u64() >= d["received"].as_u64());
    }
    // The one stage of the link, once (each direction reports its counts).
    for (family, key) in [
        ("linkem_stage_wakeups_total", "rx_wakeups"),
        ("linkem_stage_on_beat_total", "rx_on_beat"),
        ("linkem_stage_yields_lost_total", "rx_yields_lost"),
    ] {
        for d in ctl_stats["directions"].as_array().unwrap() {
            assert_eq!(get(family, "{}"), d[key].as_f64().unwrap(), "{key}");
        }
    }
    assert!(get("linkem_stage_wakeups_total", "{}") > 0.0, "{body}");
    assert_eq!(
        get("linkem_link_delay_seconds", "{\"direction\": \"a->b\"}"),
        0.003
    );
    assert!(get("linkem_control_requests_total", "{\"result\": \"ok\"}") >= 2.0);
    assert_eq!(
        get("linkem_control_requests_total", "{\"result\": \"error\"}"),
        1.0
    );
}

#[test]
fn ctl_bad_clients_harm_nothing() {
    if skip() {
        return;
    }
    let _g = serial();
    let topo = topology();
    // A stale socket of a killed run is replaced.
    let name = format!("{}-{}", topo.emu_a, std::process::id());
    let stale = linkem_ctl::default_socket_path(&name);
    std::fs::create_dir_all(stale.parent().unwrap()).unwrap();
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    let bridge = CtlBridge::start(&topo, &["delay", "1ms"]);
    let path = bridge.socket.clone();
    assert_eq!(path, stale);

    let read_line = |s: &mut UnixStream| -> String {
        let mut out = Vec::new();
        let mut b = [0u8; 1];
        while s.read(&mut b).unwrap_or(0) == 1 && b[0] != b'\n' {
            out.push(b[0]);
        }
        String::from_utf8_lossy(&out).to_string()
    };
    let connect = || {
        let mut s = UnixStream::connect(&path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let banner = read_line(&mut s);
        assert!(banner.contains("\"linkem\":\"ctl\""), "{banner}");
        s
    };
    // Garbage, not UTF-8, an over-long line: each refused, the connection goes on.
    let mut s = connect();
    s.write_all(b"\x00\x01garbage \xff\xfe\n").unwrap();
    assert!(read_line(&mut s).contains("\"ok\":false"));
    s.write_all(&vec![b'x'; 100_000]).unwrap();
    s.write_all(b"\nping\n").unwrap();
    let r = read_line(&mut s);
    assert!(r.contains("longer than"), "{r}");
    assert!(read_line(&mut s).contains("pong"));
    // Disconnect mid-batch and mid-line: nothing applied.
    s.write_all(b"begin\nlink both delay 50ms\nlink both del")
        .unwrap();
    drop(s);
    // A stalled partial line is cut off; meanwhile others are served.
    let mut stalled = connect();
    stalled.write_all(b"link both delay 40").unwrap();
    let mut many: Vec<UnixStream> = (0..20).map(|_| connect()).collect();
    let mut c = Client::connect(&path, Duration::from_secs(5)).unwrap();
    let t = Instant::now();
    assert_eq!(c.request_json("ping").unwrap()["ok"], true);
    eprintln!("ping beside 21 idle clients: {:?}", t.elapsed());
    let r = read_line(&mut stalled);
    assert!(r.contains("unfinished line"), "{r}");
    many.clear();
    let list = c.request_json("list").unwrap();
    assert_eq!(list["links"][0]["changes"], 0, "{list}");
    assert!(
        list["links"][0]["words"]
            .as_str()
            .unwrap()
            .contains("delay 1ms"),
        "{list}"
    );
    // Watch streams lines and ends at any line.
    let w = c.request_json("watch 20ms").unwrap();
    assert_eq!(w["watch"], 0);
    let w1: Value = serde_json::from_str(&c.recv().unwrap()).unwrap();
    assert_eq!(w1["watch"], 1);
    c.send("stop").unwrap();
    loop {
        let v: Value = serde_json::from_str(&c.recv().unwrap()).unwrap();
        if v["watch"] == "ended" {
            break;
        }
    }
    assert_eq!(c.request_json("ping").unwrap()["pong"], true);
    // list-emulators finds it.
    let o = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(["ctl", "list-emulators"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains(&name));
    drop(c);
    let (stats, _, _) = bridge.finish();
    assert!(stats["final"].as_bool().unwrap());
    assert!(!path.exists(), "the socket outlived linkem");
}

/// Holds `count` connections to `socket` as uid `uid` (group 100) until its
/// stdin closes; returns the process and, per connection, its first line.
fn hold_connections_as(
    uid: u32,
    socket: &Path,
    count: usize,
) -> (std::process::Child, Vec<String>) {
    use std::io::BufRead;
    let script = r#"
import socket, sys
held = []
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    f = s.makefile()
    print(f.readline().strip(), flush=True)
    held.append((s, f))
sys.stdin.read()
"#;
    let mut child = Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .args([
            "--regid=65534",
            "--groups=100",
            "/usr/bin/python3",
            "-c",
            script,
        ])
        .arg(socket)
        .arg(count.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let lines = (0..count)
        .map(|_| {
            let mut l = String::new();
            out.read_line(&mut l).unwrap();
            l
        })
        .collect();
    (child, lines)
}

#[test]
fn ctl_connection_bounds_keep_room_for_root() {
    if skip() {
        return;
    }
    let _g = serial();
    let topo = topology();
    let bridge = CtlBridge::start(&topo, &["delay", "1ms", "--control-group", "users"]);
    // One member: 8 connections at most.
    let (mut one, lines) = hold_connections_as(65534, &bridge.socket, 10);
    let served = lines.iter().filter(|l| l.contains("\"name\"")).count();
    assert_eq!(served, 8, "{lines:?}");
    assert!(lines[9].contains("at most 8 at once per user"), "{lines:?}");
    drop(one.stdin.take());
    one.wait().unwrap();
    // Eight members fill the 64 ordinary slots; a ninth is told so.
    let mut held = Vec::new();
    for uid in 65526..65534 {
        let (child, lines) = hold_connections_as(uid, &bridge.socket, 8);
        assert!(
            lines.iter().all(|l| l.contains("\"name\"")),
            "uid {uid}: {lines:?}"
        );
        held.push(child);
    }
    let (mut ninth, lines) = hold_connections_as(65534, &bridge.socket, 1);
    assert!(lines[0].contains("at most 64 at once"), "{lines:?}");
    let o = ctl_as_nobody(&bridge.socket, Some("100"), &["ping"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("refused the connection") && err.contains("64"),
        "{err}"
    );
    // Root still gets in, more than once.
    for _ in 0..3 {
        let o = ctl(&bridge.socket, &["ping"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let c1 = bridge.client();
    let mut c2 = bridge.client();
    assert_eq!(c2.request_json("ping").unwrap()["pong"], true);
    drop((c1, c2));
    drop(ninth.stdin.take());
    ninth.wait().unwrap();
    for mut c in held {
        drop(c.stdin.take());
        c.wait().unwrap();
    }
    bridge.finish();
}

#[test]
fn ctl_batch_lines_checked_as_they_arrive_and_bounded() {
    if skip() {
        return;
    }
    let _g = serial();
    let topo = topology();
    let bridge = CtlBridge::start(&topo, &["delay", "1ms", "--control-group", "users"]);
    let dir = tempfile::tempdir().unwrap();
    // A member's change to root's links is refused at its line, not at commit.
    let file = dir.path().join("b.ctl");
    std::fs::write(&file, "link both delay 9ms\nlink a-to-b delay 8ms\n").unwrap();
    let o = ctl_as_nobody(
        &bridge.socket,
        Some("100"),
        &["--json", "-f", file.to_str().unwrap()],
    );
    assert!(!o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    let first: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(first["refused"], true, "{out}");
    assert!(
        first["error"].as_str().unwrap().contains("belong to uid 0"),
        "{out}"
    );

    // Bytes per batch: 1 MiB of requests, then each line is refused naming the bound.
    let mut c = bridge.client();
    assert_eq!(c.request_json("begin").unwrap()["ok"], true);
    let line = format!("link both delay 2ms{}", " ".repeat(4000));
    let mut refused = None;
    for i in 0..300 {
        let v = c.request_json(&line).unwrap();
        if v["ok"] != true {
            refused = Some((i, v));
            break;
        }
    }
    let (i, v) = refused.expect("a batch of 1.2 MB was taken");
    assert_eq!(i, (1 << 20) / line.len(), "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("at most 1048576 bytes"),
        "{v}"
    );
    let v = c.request_json("commit").unwrap();
    assert_eq!(v["ok"], false, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("batch not applied"),
        "{v}"
    );
    let list = c.request_json("list").unwrap();
    assert_eq!(list["links"][0]["changes"], 0, "{list}");

    // `-f` reads at most 4 MiB: /dev/zero is refused, not read to exhaustion.
    let t = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(["ctl", "--socket"])
        .arg(&bridge.socket)
        .args(["-f", "/dev/zero"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("larger than 4 MiB"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    drop(c);
    bridge.finish();
}

#[test]
fn ctl_failed_or_interrupted_start_leaves_no_socket() {
    if skip() {
        return;
    }
    let _g = serial();
    let topo = topology();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_port = busy.local_addr().unwrap().port().to_string();
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_linkem"))
            .args(["bridge", &topo.emu_a, &topo.emu_b, "--backend", "packet"])
            .args(["--duration", "1", "--control"])
            .arg(&socket)
            .args(extra)
            .output()
            .unwrap()
    };
    for (extra, says) in [
        (vec!["--audit", "/nonexistent-dir/audit.jsonl"], "audit"),
        (vec!["--metrics", busy_port.as_str()], "cannot listen"),
    ] {
        let o = run(&extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{extra:?} started: {err}");
        assert!(err.contains(says), "{extra:?}: {err}");
        assert!(!socket.exists(), "{extra:?} left {}", socket.display());
    }
    // A good start says how to reach it: the socket as given, the port bound.
    let o = run(&["--metrics", "0"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!("(linkem ctl --socket {})", socket.display())),
        "{err}"
    );
    let port = err
        .split("metrics on http://127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|p| p.parse::<u16>().ok())
        .unwrap_or_else(|| panic!("no metrics port in: {err}"));
    assert_ne!(port, 0);
    assert!(!socket.exists());
    // SIGINT as soon as the socket appears, while linkem is still starting.
    let mut child = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(["bridge", &topo.emu_a, &topo.emu_b, "--backend", "packet"])
        .args(["--duration", "30", "--control"])
        .arg(&socket)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !socket.exists() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_micros(200));
    }
    // Safety: kill with a pid we own.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert!(t.elapsed() < Duration::from_secs(10), "no socket appeared");
    assert!(
        !socket.exists(),
        "SIGINT during the start ({status}) left the socket"
    );
}

#[test]
fn ctl_metrics_answer_beside_slow_clients() {
    if skip() {
        return;
    }
    let _g = serial();
    let topo = topology();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bridge = CtlBridge::start(&topo, &["delay", "1ms", "--metrics", &port.to_string()]);
    // Slowloris: connections that send a byte of their request every 1.5 s.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let slow = |count: usize| {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut conns: Vec<std::net::TcpStream> = (0..count)
                .filter_map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).ok())
                .collect();
            let request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n";
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for c in &mut conns {
                    let _ = c.write_all(&request[i % request.len()..][..1]);
                }
                i += 1;
                for _ in 0..15 {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        })
    };
    let timed_scrape = || {
        let t = Instant::now();
        let body = scrape(port);
        assert!(body.contains("linkem_received_packets_total"), "{body}");
        t.elapsed()
    };
    let eight = slow(8);
    std::thread::sleep(Duration::from_millis(300));
    let mut times: Vec<Duration> = (0..5)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(400));
            timed_scrape()
        })
        .collect();
    // More slow clients than places: the longest waiting is closed for a scrape.
    let many = slow(40);
    std::thread::sleep(Duration::from_millis(300));
    times.extend((0..5).map(|_| {
        std::thread::sleep(Duration::from_millis(400));
        timed_scrape()
    }));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    eight.join().unwrap();
    many.join().unwrap();
    eprintln!("scrapes beside 8, then 48 slow clients: {times:?}");
    times.sort();
    assert!(
        times[times.len() / 2] < Duration::from_millis(200)
            && times[times.len() - 1] < Duration::from_secs(1),
        "scrapes beside slow clients took {times:?}"
    );
    bridge.finish();
}

#[test]
fn ctl_metrics_slow_requests_cut_at_deadline() {
    if skip() {
        return;
    }
    let _g = serial();
    let topo = topology();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bridge = CtlBridge::start(&topo, &["delay", "1ms", "--metrics", &port.to_string()]);
    // One client silent, one sending a byte of its request every 300 ms:
    // each must be closed about 2 s (the request deadline) after it came.
    let client = |trickle: bool| {
        std::thread::spawn(move || {
            let t = Instant::now();
            let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            c.set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            let request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n";
            let mut buf = [0u8; 4096];
            let mut i = 0;
            let mut reply = Vec::new();
            while t.elapsed() < Duration::from_secs(8) {
                if trickle && c.write_all(&request[i % request.len()..][..1]).is_err() {
                    break;
                }
                i += 1;
                match c.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => reply.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => break,
                }
            }
            (t.elapsed(), String::from_utf8_lossy(&reply).into_owned())
        })
    };
    let silent = client(false);
    let trickling = client(true);
    for (what, h) in [("silent", silent), ("trickling", trickling)] {
        let (closed_after, reply) = h.join().unwrap();
        eprintln!("{what} client closed after {closed_after:?}");
        assert!(
            closed_after >= Duration::from_millis(1500)
                && closed_after < Duration::from_millis(3500),
            "the {what} client was closed after {closed_after:?}, not at the 2 s deadline"
        );
        assert!(
            !reply.contains("200 OK"),
            "the {what} client was answered: {reply}"
        );
    }
    // A request head over 8 KiB is refused, and the endpoint still answers.
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let big = format!(
        "GET /metrics HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(10_000)
    );
    let _ = c.write_all(big.as_bytes());
    let mut reply = String::new();
    let _ = c.read_to_string(&mut reply);
    assert!(
        reply.starts_with("HTTP/1.1 431"),
        "a 10 kB head got: {reply}"
    );
    assert!(scrape(port).contains("linkem_received_packets_total"));
    bridge.finish();
}
