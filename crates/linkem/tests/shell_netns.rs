//! Live tests of `linkem shell` (root only; skipped otherwise). Each runs the
//! shell inside a namespace of its own, "outer", standing for the caller's
//! machine, joined by a veth to "far", a host beyond it (reached through the
//! shell's NAT). Stock offloads everywhere: the shell's veths keep the
//! kernel's defaults (TSO, checksum offload), as users' machines do.

mod common;

use common::{median, serial, skip};
use linkem_io::netns::{self, command_in, exec_in};
use std::io::Read;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

const LINKEM: &str = env!("CARGO_BIN_EXE_linkem");

/// outer 10.78.0.1/24 fd00:78::1/64 <-veth-> far 10.78.0.2/24 fd00:78::2/64.
struct World {
    outer: String,
    far: String,
}

const FAR4: &str = "10.78.0.2";
const FAR6: &str = "fd00:78::2";

impl World {
    fn new(tag: &str) -> World {
        let p = netns::unique_prefix(tag);
        let w = World {
            outer: format!("{p}o"),
            far: format!("{p}f"),
        };
        let (o, f) = (w.outer.as_str(), w.far.as_str());
        for ns in [o, f] {
            netns::ip(&["netns", "add", ns]).unwrap();
            netns::ip(&["-n", ns, "link", "set", "lo", "up"]).unwrap();
        }
        let (vo, vf) = (format!("{p}vo"), format!("{p}vf"));
        netns::ip(&[
            "link", "add", &vo, "netns", o, "type", "veth", "peer", "name", &vf, "netns", f,
        ])
        .unwrap();
        for (ns, dev, a4, a6) in [
            (o, &vo, "10.78.0.1/24", "fd00:78::1/64"),
            (f, &vf, "10.78.0.2/24", "fd00:78::2/64"),
        ] {
            netns::ip(&["-n", ns, "addr", "add", a4, "dev", dev]).unwrap();
            netns::ip(&["-n", ns, "-6", "addr", "add", a6, "dev", dev, "nodad"]).unwrap();
            netns::ip(&["-n", ns, "link", "set", dev, "up"]).unwrap();
        }
        w
    }

    /// `linkem shell ARGS` run in outer, to completion.
    fn shell(&self, args: &[&str]) -> Output {
        let mut all = vec![LINKEM, "shell"];
        all.extend_from_slice(args);
        exec_in(&self.outer, &all).unwrap()
    }

    fn spawn_shell(&self, args: &[&str]) -> Child {
        let mut all = vec![LINKEM, "shell"];
        all.extend_from_slice(args);
        command_in(&self.outer, &all)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn in_outer(&self, args: &[&str]) -> String {
        let o = exec_in(&self.outer, args).unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// What a shell may leave in outer: links and rules (empty when clean).
    fn leftovers(&self) -> Vec<String> {
        let mut left: Vec<String> = self
            .in_outer(&["ip", "-o", "link"])
            .lines()
            .filter(|l| {
                // The shell's link to outer: lksPID.
                l.split(": ").nth(1).is_some_and(|n| {
                    n.strip_prefix("lks")
                        .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
                })
            })
            .map(str::to_string)
            .collect();
        for program in ["iptables", "ip6tables"] {
            for table in ["nat", "filter"] {
                left.extend(
                    self.in_outer(&[program, "-w", "-t", table, "-S"])
                        .lines()
                        .filter(|l| l.contains("linkem-shell-"))
                        .map(|l| format!("{program} {table}: {l}")),
                );
            }
        }
        left
    }

    /// Waits up to 5 s for outer to be clean.
    fn assert_clean(&self, when: &str) {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            let left = self.leftovers();
            if left.is_empty() {
                return;
            }
            assert!(Instant::now() < until, "{when}: the shell left {left:#?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for ns in [&self.outer, &self.far] {
            let _ = netns::ip(&["netns", "del", ns]);
        }
    }
}

fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// RTTs (ms) of ping's replies in `out`.
fn rtts(out: &str) -> Vec<f64> {
    out.lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect()
}

/// The median RTT of pings 2.. (the first waits for ARP/ND across the link).
fn ping_rtt_ms(o: &Output, count: usize) -> f64 {
    let r = rtts(&String::from_utf8_lossy(&o.stdout));
    assert_eq!(r.len(), count, "replies missing: {}", text(o));
    median(r[1..].to_vec())
}

#[test]
fn ping_through_a_shell_sees_twice_the_delay_and_the_status_passes_through() {
    if skip() {
        return;
    }
    let _g = serial();
    let w = World::new("tshp");
    let base = exec_in(&w.outer, &["ping", "-c", "5", "-i", "0.2", FAR4]).unwrap();
    let base_ms = ping_rtt_ms(&base, 5);
    let o = w.shell(&["delay", "50ms", "--", "ping", "-c", "5", "-i", "0.2", FAR4]);
    assert!(o.status.success(), "{}", text(&o));
    let rtt = ping_rtt_ms(&o, 5);
    assert!(
        (99.0..115.0).contains(&(rtt - base_ms)),
        "delay 50ms each way should add 100 ms: {rtt} ms against {base_ms} ms without: {}",
        text(&o)
    );
    w.assert_clean("after a normal exit");
    let o = w.shell(&["--", "sh", "-c", "exit 7"]);
    assert_eq!(o.status.code(), Some(7), "{}", text(&o));
    let o = w.shell(&["--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(o.status.code(), Some(128 + libc::SIGTERM), "{}", text(&o));
    let o = w.shell(&["--", "/nonexistent/program"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cannot run '/nonexistent/program'"),
        "{}",
        text(&o)
    );
    w.assert_clean("after a command that could not start");
}

#[test]
fn ipv6_inside_reaches_the_parent_and_beyond() {
    if skip() {
        return;
    }
    let _g = serial();
    let w = World::new("tsh6");
    let script = format!("ping -6 -c 3 -i 0.2 $LINKEM_SHELL_PARENT6 && ping -6 -c 3 -i 0.2 {FAR6}");
    let o = w.shell(&["delay", "10ms", "--", "sh", "-c", &script]);
    assert!(o.status.success(), "{}", text(&o));
    let r = rtts(&String::from_utf8_lossy(&o.stdout));
    assert_eq!(r.len(), 6, "{}", text(&o));
    assert!(r[1..].iter().all(|&t| t >= 20.0), "{r:?}: {}", text(&o));
    w.assert_clean("after IPv6");
}

#[test]
fn nested_shells_add_their_hops_and_a_server_inside_is_reachable_from_the_parent() {
    if skip() {
        return;
    }
    let _g = serial();
    let w = World::new("tshn");
    let o = w.shell(&[
        "delay", "10ms", "--", LINKEM, "shell", "delay", "15ms", "--", "ping", "-c", "5", "-i",
        "0.2", FAR4,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let rtt = ping_rtt_ms(&o, 5);
    assert!(
        (50.0..65.0).contains(&rtt),
        "2 × (10 + 15) ms: {rtt}: {}",
        text(&o)
    );
    w.assert_clean("after nested shells");

    // A server in the shell; the parent (outer) connects to the address the
    // shell exports.
    let dir = tempfile::tempdir().unwrap();
    let addr_file = dir.path().join("addr");
    let script = format!(
        "echo $LINKEM_SHELL_ADDR > {}.tmp && mv {0}.tmp {0} && exec iperf3 -s -1",
        addr_file.display()
    );
    let mut server = w.spawn_shell(&["delay", "5ms", "--", "sh", "-c", &script]);
    let until = Instant::now() + Duration::from_secs(10);
    let addr = loop {
        if let Ok(a) = std::fs::read_to_string(&addr_file) {
            break a.trim().to_string();
        }
        assert!(Instant::now() < until, "the shell never wrote its address");
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(500));
    let client = exec_in(&w.outer, &["iperf3", "-c", &addr, "-t", "1", "-J"]).unwrap();
    let status = server.wait().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&client.stdout).unwrap_or_default();
    let bps = json["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(
        client.status.success() && bps > 1e6,
        "the parent could not reach the shell's server at {addr}: {}",
        text(&client)
    );
    assert!(status.success(), "the shell's server: {status}");
    w.assert_clean("after the server's shell");
}

/// Starts `linkem shell -- sleep 30 MARK` in outer; returns it once CMD runs.
fn sleeping_shell(w: &World) -> Child {
    let mut child = w.spawn_shell(&["delay", "1ms", "--", "sleep", "30"]);
    let until = Instant::now() + Duration::from_secs(10);
    while w.leftovers().is_empty() {
        assert!(Instant::now() < until, "the shell never set up");
        assert!(child.try_wait().unwrap().is_none(), "the shell ended early");
        std::thread::sleep(Duration::from_millis(50));
    }
    // CMD starts right after the way out is in place.
    std::thread::sleep(Duration::from_millis(300));
    child
}

fn signal_pid(pid: u32, sig: &str) {
    let o = std::process::Command::new("kill")
        .args(["-s", sig, &pid.to_string()])
        .output()
        .unwrap();
    assert!(o.status.success(), "kill -s {sig} {pid}: {}", text(&o));
}

fn sleepers_in(w: &World) -> usize {
    // `sleep 30` runs in the shell's namespace; its process is visible here.
    let _ = w;
    let o = std::process::Command::new("pgrep")
        .args(["-x", "-f", "sleep 30"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).lines().count()
}

#[test]
fn sigint_and_kill_9_leave_nothing_behind() {
    if skip() {
        return;
    }
    let _g = serial();
    let w = World::new("tshs");
    let before = sleepers_in(&w);
    let mut sh = sleeping_shell(&w);
    signal_pid(sh.id(), "INT");
    let until = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = sh.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < until, "SIGINT did not end the shell");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    sh.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    w.assert_clean("after SIGINT");
    assert_eq!(sleepers_in(&w), before, "CMD outlived SIGINT");

    let mut sh = sleeping_shell(&w);
    signal_pid(sh.id(), "KILL");
    sh.wait().unwrap();
    // The namespace with the emulator's ends dies with linkem, and the link
    // to outer with it; CMD gets SIGKILL.
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let links: Vec<String> = w
            .leftovers()
            .into_iter()
            .filter(|l| !l.contains("tables"))
            .collect();
        if links.is_empty() && sleepers_in(&w) == before {
            break;
        }
        assert!(
            Instant::now() < until,
            "after kill -9: {links:?}, sleepers {}",
            sleepers_in(&w)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Its rules stay until the next shell starts.
    assert!(
        !w.leftovers().is_empty(),
        "expected the killed shell's rules to stay"
    );
    let o = w.shell(&["--", "true"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("removed a rule left by shell"),
        "{}",
        text(&o)
    );
    w.assert_clean("after the next shell");
}

#[test]
fn a_shell_logs_both_directions_in_mahimahis_format() {
    if skip() {
        return;
    }
    let _g = serial();
    let w = World::new("tshl");
    let dir = tempfile::tempdir().unwrap();
    let (up, down) = (dir.path().join("up.log"), dir.path().join("down.log"));
    let o = w.shell(&[
        "--a-to-b",
        "delay",
        "30ms",
        "--b-to-a",
        "delay",
        "10ms",
        "--uplink-log",
        up.to_str().unwrap(),
        "--downlink-log",
        down.to_str().unwrap(),
        "--stats",
        "json",
        "--stats-interval",
        "0.1",
        "--series",
        "--",
        "ping",
        "-c",
        "5",
        "-i",
        "0.2",
        "-s",
        "200",
        FAR4,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    // The time series: one line per direction and 100 ms, the pings' delay in it.
    let series: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with("{\"series\""))
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["series"].clone())
        .collect();
    for (dir, delay_ms) in [("a->b", 30.0), ("b->a", 10.0)] {
        let mine: Vec<&serde_json::Value> =
            series.iter().filter(|s| s["direction"] == dir).collect();
        assert!(
            mine.len() >= 8,
            "{dir}: {} intervals: {}",
            mine.len(),
            text(&o)
        );
        let starts: Vec<f64> = mine
            .iter()
            .map(|s| s["start_s"].as_f64().unwrap())
            .collect();
        assert!(
            starts.windows(2).all(|p| (p[1] - p[0] - 0.1).abs() < 1e-9),
            "{starts:?}"
        );
        let delivered: u64 = mine
            .iter()
            .map(|s| s["delivered_packets"].as_u64().unwrap())
            .sum();
        assert!(delivered >= 5, "{dir}: {delivered}");
        let max = mine
            .iter()
            .map(|s| s["delay_max_ms"].as_f64().unwrap())
            .fold(0.0, f64::max);
        assert!((delay_ms..delay_ms + 1.0).contains(&max), "{dir}: {max}");
    }
    for (path, delay_ms) in [(&up, 30u64), (&down, 10)] {
        let log = std::fs::read_to_string(path).unwrap();
        assert!(log.contains("\n# base timestamp: 0\n"), "{log}");
        let events: Vec<Vec<&str>> = log
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(' ').collect())
            .collect();
        // 200 bytes of ping data + 8 ICMP + 20 IP = 228-byte IP packets.
        let echo = |kind: &str| {
            events
                .iter()
                .filter(|e| e[1] == kind && e[2] == "228")
                .count()
        };
        assert_eq!((echo("+"), echo("-")), (5, 5), "{log}");
        for e in events.iter().filter(|e| e[1] == "-") {
            let d: u64 = e[3].parse().unwrap();
            assert!(d.abs_diff(delay_ms) <= 1, "{path:?}: {log}");
        }
        let times: Vec<u64> = events.iter().map(|e| e[0].parse().unwrap()).collect();
        assert!(times.windows(2).all(|p| p[0] <= p[1]), "{log}");
    }
}

/// `linkem shell ARGS` as nobody, in a private mount namespace where
/// /dev/net/tun is a node of the same device (10, 200) with mode `tun_mode`.
fn as_nobody_with_tun(tun_mode: &str, args: &[&str]) -> Output {
    as_nobody_with_tun_env(tun_mode, &[], args)
}

/// [`as_nobody_with_tun`] with variables `env` set.
fn as_nobody_with_tun_env(tun_mode: &str, env: &[(&str, &str)], args: &[&str]) -> Output {
    // The exit status is linkem's. The node is unmounted again (the mount
    // namespace would drop it anyway) with 2 s of margin for the kernel to
    // close what linkem's pasta held; what still holds it then is named.
    let script = "set -e; d=$(mktemp -d); \
                  trap 'rc=$?; set +e; i=0; until umount /dev/net/tun 2>/dev/null; do \
                  i=$((i+1)); if [ $i -ge 40 ]; then \
                  echo \"/dev/net/tun still busy 2 s after linkem exited:\" >&2; \
                  ps -eo pid,user,stat,args >&2; break; fi; sleep 0.05; done; \
                  rm -rf \"$d\"; exit $rc' EXIT; \
                  mknod \"$d/tun\" c 10 200; chmod \"$1\" \"$d/tun\"; \
                  mount --bind \"$d/tun\" /dev/net/tun; shift; \
                  setpriv --reuid 65534 --regid 65534 --clear-groups \"$@\"";
    let mut all = vec![
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        "sh",
        tun_mode,
        LINKEM,
        "shell",
    ];
    all.extend_from_slice(args);
    std::process::Command::new("unshare")
        .args(&all)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// An ordinary user (nobody, via setpriv) gets a shell through a user
/// namespace and pasta, where /dev/net/tun lets it (Debian's mode 0666);
/// where the device is root's only, linkem says so. Both are checked without
/// touching the machine's device: each run sees, in a mount namespace of its
/// own, a node of the same device with the mode under test bound over it.
#[test]
fn an_ordinary_user_gets_a_shell_through_pasta_or_is_told_what_is_missing() {
    if skip() {
        return;
    }
    let _g = serial();
    if std::process::Command::new("pasta")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("`pasta` not found: install passt (e.g. `apt-get install passt`)");
    }
    let o = as_nobody_with_tun("0600", &["--", "true"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("/dev/net/tun") && err.contains("pasta"),
        "{err}"
    );

    let o = as_nobody_with_tun(
        "0666",
        &[
            "delay",
            "20ms",
            "--",
            "sh",
            "-c",
            "ping -c 4 -i 0.2 $LINKEM_SHELL_PARENT; exit 5",
        ],
    );
    assert_eq!(o.status.code(), Some(5), "{}", text(&o));
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("still busy"),
        "linkem left something holding the TUN device pasta opened: {}",
        text(&o)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("pasta (passt) for the way out"),
        "{}",
        text(&o)
    );
    let rtt = ping_rtt_ms(&o, 4);
    assert!(
        (40.0..55.0).contains(&rtt),
        "2 × 20 ms: {rtt}: {}",
        text(&o)
    );
}

/// Offsets (ms) of `testdata/traces/24-6mbit.trace`, one per 1504-byte
/// opportunity: 1 s at two per ms (24.06 Mbit/s), then 1 s at one per 2 ms
/// (6.02 Mbit/s), looping every 2000 ms.
fn trace_24_6_offsets_ms() -> (std::path::PathBuf, Vec<u64>) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/traces/24-6mbit.trace");
    let offsets: Vec<u64> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    (path, offsets)
}

/// Opportunities of the looping trace `offsets_ms` in [from_ms, to_ms) of
/// the trace's time (mahimahi's: the base moves by the last offset a loop).
fn opportunities_between(offsets_ms: &[u64], from_ms: f64, to_ms: f64) -> usize {
    let period_ms = *offsets_ms.last().unwrap() as f64;
    let mut n = 0;
    let mut base_ms = (from_ms / period_ms).floor().max(0.0) * period_ms;
    while base_ms < to_ms {
        n += offsets_ms
            .iter()
            .map(|&o| base_ms + o as f64)
            .filter(|&t| t >= from_ms && t < to_ms)
            .count();
        base_ms += period_ms;
    }
    n
}

/// iperf3 inside a shell sends through `--a-to-b trace 24-6mbit.trace` to a
/// server in the parent: the server's throughput in each 500 ms interval
/// follows the trace's capacity in that interval (24 Mbit/s one second,
/// 6 Mbit/s the next). The trace starts at the link's start, which the link
/// log gives (its first `#` line is the first opportunity), and iperf3's
/// intervals start with its data (the log's first full-size packet), so each
/// interval is placed on the trace to within a few ms.
#[test]
fn iperf3_in_a_shell_follows_a_traces_rate_over_time() {
    if skip() {
        return;
    }
    let _g = serial();
    let w = World::new("tsht");
    let (trace, offsets_ms) = trace_24_6_offsets_ms();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("up.log");
    let server_out = dir.path().join("server.json");
    let mut server = command_in(
        &w.outer,
        &["iperf3", "-s", "-1", "-J", "-i", "0.5", "--logfile"],
    )
    .arg(&server_out)
    .stdin(Stdio::null())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let secs = 8;
    let client = format!("iperf3 -c $LINKEM_SHELL_PARENT -t {secs} -i 0.5 -J");
    let o = w.shell(&[
        "--a-to-b",
        "trace",
        trace.to_str().unwrap(),
        "queue",
        "200",
        "--log-a-to-b",
        log.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &client,
    ]);
    let _ = server.wait();
    assert!(o.status.success(), "iperf3 in the shell: {}", text(&o));
    let log_text = std::fs::read_to_string(&log).unwrap();
    let events: Vec<(u64, &str, u64)> = log_text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Some((f[0].parse().ok()?, *f.get(1)?, f.get(2)?.parse().ok()?))
        })
        .collect();
    // The trace's origin (the link's start: its first opportunity, the log's
    // first `#` line, less that opportunity's offset) and iperf3's first data.
    let origin_ms = events
        .iter()
        .find(|e| e.1 == "#")
        .expect("no opportunity (`#` line) in the log")
        .0
        - offsets_ms[0];
    let data_ms = events
        .iter()
        .find(|e| e.1 == "+" && e.2 >= 1400)
        .expect("no full-size packet in the log")
        .0;
    let shift_ms = (data_ms - origin_ms) as f64;

    // The link itself, per 500 ms of the trace's time from 2 s on, while
    // iperf3 keeps it busy: what left against the trace's bytes.
    let mut link_ratios = Vec::new();
    let mut k = 4;
    loop {
        let (from, to) = (500.0 * k as f64, 500.0 * (k + 1) as f64);
        if to > shift_ms + 1000.0 * (secs as f64 - 0.5) {
            break;
        }
        let left: u64 = events
            .iter()
            .filter(|e| e.1 == "-")
            .filter(|e| ((e.0 - origin_ms) as f64) >= from && ((e.0 - origin_ms) as f64) < to)
            .map(|e| e.2)
            .sum();
        let cap = opportunities_between(&offsets_ms, from, to) as f64 * 1504.0;
        link_ratios.push((from, left as f64 / cap));
        k += 1;
    }

    // What the server received per interval, against the trace's capacity
    // over the same span of the trace's time, in TCP payload (1448 of each
    // 1500-byte IP packet, with timestamps).
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&server_out).unwrap_or_default())
            .unwrap_or_default();
    let intervals = json["intervals"].as_array().cloned().unwrap_or_default();
    assert!(
        intervals.len() >= 2 * secs - 1,
        "the server reported {} intervals: {json}\nshell: {}",
        intervals.len(),
        text(&o)
    );
    let mut fast = Vec::new();
    let mut slow = Vec::new();
    let mut report = String::new();
    // The first second is TCP's start; the last interval its end.
    for iv in &intervals[2..2 * secs - 1] {
        let s = &iv["sum"];
        let (start, end) = (s["start"].as_f64().unwrap(), s["end"].as_f64().unwrap());
        let got_bps = s["bits_per_second"].as_f64().unwrap();
        let (from, to) = (shift_ms + start * 1000.0, shift_ms + end * 1000.0);
        let opportunities = opportunities_between(&offsets_ms, from, to);
        let cap_bps = opportunities as f64 * 1504.0 * 8.0 * 1448.0 / 1500.0 / (end - start);
        let ratio = got_bps / cap_bps;
        report.push_str(&format!(
            "  iperf3 {start:.1}..{end:.1} s (trace {from:.0}..{to:.0} ms): {:.2} Mbit/s against \
             {:.2}\n",
            got_bps / 1e6,
            cap_bps / 1e6
        ));
        // Intervals wholly inside one phase (a few ms of slack for the placing).
        let phase = |t: f64| ((t + 5.0) / 1000.0).floor() as i64 % 2 == 0;
        let pure = ((from + 5.0) / 1000.0).floor() == ((to - 5.0) / 1000.0).floor();
        if pure && phase(from) {
            fast.push(ratio);
        } else if pure {
            slow.push(ratio);
        }
    }
    for (from, r) in &link_ratios {
        report.push_str(&format!(
            "  link at trace {from:.0} ms: {:.3} of the trace's bytes left\n",
            r
        ));
    }
    eprintln!("shift {shift_ms} ms; per interval:\n{report}");
    assert!(
        fast.len() >= 2 && slow.len() >= 2,
        "too few intervals inside one phase (shift {shift_ms} ms):\n{report}"
    );
    let (fast_m, slow_m) = (median(fast.clone()), median(slow.clone()));
    let link_m = median(link_ratios.iter().map(|r| r.1).collect());
    assert!(
        (0.85..1.1).contains(&fast_m) && (0.85..1.1).contains(&slow_m),
        "iperf3's throughput should follow the trace: median {fast_m:.3} of the capacity at \
         24 Mbit/s ({fast:.3?}), {slow_m:.3} at 6 Mbit/s ({slow:.3?}); per interval:\n{report}"
    );
    assert!(
        (0.95..1.02).contains(&link_m),
        "the link should use every opportunity while iperf3 keeps it busy: median {link_m:.3}\n\
         {report}"
    );
    w.assert_clean("after the trace");
}

/// The linkem commands of the "Coming from mahimahi" table of the guide's
/// shell page (its second column), in order, and the `codel.rules` file shown
/// under it.
fn guide_mahimahi_table() -> (Vec<String>, String) {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/guide/shell.md"
    ))
    .unwrap();
    let at = page
        .find("## Coming from mahimahi")
        .expect("docs/guide/shell.md has no \"Coming from mahimahi\" section");
    let section = &page[at..];
    let section = &section[..section[4..].find("\n## ").map_or(section.len(), |e| e + 4)];
    let mut commands = Vec::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let linkem_cell = row.split(" | ").nth(1).unwrap_or("");
        commands.extend(
            linkem_cell
                .split('`')
                .skip(1)
                .step_by(2)
                .filter(|c| c.starts_with("linkem "))
                .map(str::to_string),
        );
    }
    let rules_at = section
        .find("`codel.rules`")
        .expect("the section shows codel.rules");
    let rules: String = section[rules_at..]
        .lines()
        .skip_while(|l| !l.starts_with("    "))
        .take_while(|l| l.starts_with("    "))
        .map(|l| format!("{}\n", &l[4..]))
        .collect();
    (commands, rules)
}

/// Every linkem command of the guide's "Coming from mahimahi" table runs as
/// written, in a directory holding what the table names (`up.trace`,
/// `down.trace`, `codel.rules`, an executable `./client` that pings a host
/// beyond the shell), and its client's packets cross the link: replies come,
/// with the table's delay where it sets one; `linkem plot` draws the log
/// that the row before wrote.
#[test]
fn the_coming_from_mahimahi_table_runs_as_written() {
    if skip() {
        return;
    }
    let _g = serial();
    let (commands, rules) = guide_mahimahi_table();
    assert!(commands.len() >= 12, "{commands:#?}");
    assert!(rules.contains("codel"), "{rules}");
    let w = World::new("tshm");
    let dir = tempfile::tempdir().unwrap();
    let traces = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/traces");
    for name in ["up.trace", "down.trace"] {
        std::fs::copy(traces.join("24-6mbit.trace"), dir.path().join(name)).unwrap();
    }
    std::fs::write(dir.path().join("codel.rules"), &rules).unwrap();
    let client = dir.path().join("client");
    // The far host, beyond every shell's hop (a nested shell's
    // $MAHIMAHI_BASE is the shell around it); -w: replies are awaited (a
    // lost one is sent again) for up to 10 s.
    std::fs::write(
        &client,
        format!("#!/bin/sh\nexec ping -n -c 3 -i 0.2 -w 10 {FAR4}\n"),
    )
    .unwrap();
    std::process::Command::new("chmod")
        .args(["+x", client.to_str().unwrap()])
        .status()
        .unwrap();
    let bin_dir = std::path::Path::new(LINKEM).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for command in &commands {
        let o = command_in(&w.outer, &["sh", "-c", command])
            .current_dir(dir.path())
            .env("PATH", &path)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(o.status.success(), "`{command}`: {}", text(&o));
        if command.starts_with("linkem plot ") {
            for out in ["up-throughput.png", "up-delay.svg"] {
                assert!(
                    dir.path().join(out).exists(),
                    "`{command}` drew no {out}: {}",
                    text(&o)
                );
            }
            continue;
        }
        let r = rtts(&String::from_utf8_lossy(&o.stdout));
        assert!(
            r.len() >= 3,
            "`{command}`: the client's pings: {}",
            text(&o)
        );
        // Each way's delay, both ways: the nested shells' hops add up.
        let delay_ms: f64 = command
            .split("delay ")
            .skip(1)
            .filter_map(|d| d.split("ms").next()?.parse::<f64>().ok())
            .sum();
        let least = r.iter().cloned().fold(f64::MAX, f64::min);
        assert!(
            least >= 2.0 * delay_ms,
            "`{command}`: RTT {r:?} ms, below 2 x {delay_ms} ms: {}",
            text(&o)
        );
    }
    w.assert_clean("after the table's commands");
}

/// The name the test resolvers know, and its address.
const DNS_NAME: &str = "linkem-dns.test";
const DNS_ANSWER: [u8; 4] = [192, 0, 2, 77];

/// The answer of a resolver that knows one name: `DNS_ANSWER` for an A
/// query of `DNS_NAME`, no records for anything else (one question; EDNS
/// records of the query are not echoed).
fn dns_answer(query: &[u8]) -> Option<Vec<u8>> {
    let mut at = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*query.get(at)?);
        at += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(query.get(at..at + len)?).into_owned());
        at += len;
    }
    let qtype = u16::from_be_bytes([*query.get(at)?, *query.get(at + 1)?]);
    let question = &query[12..at + 4];
    let known = qtype == 1 && labels.join(".").eq_ignore_ascii_case(DNS_NAME);
    let mut out = query[..2].to_vec();
    out.extend_from_slice(&[0x81, 0x80, 0, 1, 0, u8::from(known), 0, 0, 0, 0]);
    out.extend_from_slice(question);
    if known {
        out.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
        out.extend_from_slice(&DNS_ANSWER);
    }
    Some(out)
}

/// A resolver on `addr` port 53, UDP and TCP, in network namespace `ns`
/// (None: this one) until the returned flag is set; it counts the queries
/// it answered over each (udp, tcp).
struct TestResolver {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    answered: std::sync::Arc<[std::sync::atomic::AtomicUsize; 2]>,
}

impl TestResolver {
    fn start(ns: Option<&str>, addr: &str) -> TestResolver {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        use std::sync::Arc;
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (ns, addr) = (ns.map(str::to_string), format!("{addr}:53"));
        let (stop2, answered2) = (stop.clone(), answered.clone());
        std::thread::spawn(move || {
            if let Some(ns) = ns {
                netns::enter(&ns).unwrap();
            }
            let udp = std::net::UdpSocket::bind(&addr).unwrap();
            let tcp = std::net::TcpListener::bind(&addr).unwrap();
            udp.set_read_timeout(Some(Duration::from_millis(50)))
                .unwrap();
            tcp.set_nonblocking(true).unwrap();
            ready_tx.send(()).unwrap();
            let mut buf = [0u8; 1500];
            while !stop2.load(Ordering::Relaxed) {
                if let Ok((n, from)) = udp.recv_from(&mut buf) {
                    if let Some(a) = dns_answer(&buf[..n]) {
                        udp.send_to(&a, from).unwrap();
                        answered2[0].fetch_add(1, Ordering::Relaxed);
                    }
                }
                let Ok((mut c, _)) = tcp.accept() else {
                    continue;
                };
                use std::io::Write;
                c.set_nonblocking(false).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                // Length-prefixed messages until the asker closes.
                let mut len = [0u8; 2];
                while c.read_exact(&mut len).is_ok() {
                    let mut q = vec![0u8; usize::from(u16::from_be_bytes(len))];
                    if c.read_exact(&mut q).is_err() {
                        break;
                    }
                    let Some(a) = dns_answer(&q) else { break };
                    let mut msg = (a.len() as u16).to_be_bytes().to_vec();
                    msg.extend_from_slice(&a);
                    if c.write_all(&msg).is_err() {
                        break;
                    }
                    answered2[1].fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        ready_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the test resolver did not start");
        TestResolver { stop, answered }
    }

    fn answered(&self) -> [usize; 2] {
        use std::sync::atomic::Ordering;
        [0, 1].map(|i| self.answered[i].load(Ordering::Relaxed))
    }
}

impl Drop for TestResolver {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// In a shell: resolves `DNS_NAME` with getent and prints the ms it took.
const RESOLVE_TIMED: &str =
    "s=$(date +%s%N); getent ahostsv4 linkem-dns.test || echo 'not resolved'; \
     e=$(date +%s%N); echo \"ms=$(( (e - s) / 1000000 ))\"";

/// The address getent printed and the ms the lookup took.
fn resolved(o: &Output) -> (Option<String>, u64) {
    let out = String::from_utf8_lossy(&o.stdout);
    let addr = out
        .lines()
        .find(|l| l.ends_with(DNS_NAME))
        .and_then(|l| l.split_whitespace().next())
        .map(str::to_string);
    let ms = out
        .lines()
        .find_map(|l| l.strip_prefix("ms="))
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("no time printed: {}", text(o)));
    (addr, ms)
}

/// A host whose resolv.conf names a loopback resolver (127.0.0.53, as
/// systemd-resolved's): the shell's command resolves names through it, over
/// UDP and over TCP (resolv.conf's `options use-vc`), and each lookup
/// crosses the emulated link (2 × 20 ms at least). The machine's
/// /etc/resolv.conf is untouched: linkem reads the test's from
/// LINKEM_RESOLV_CONF.
#[test]
fn a_loopback_resolver_of_the_host_answers_inside_through_the_link() {
    if skip() {
        return;
    }
    let _g = serial();
    let w = World::new("tsdn");
    let resolver = TestResolver::start(Some(&w.outer), "127.0.0.53");
    let dir = tempfile::tempdir().unwrap();
    let machine_conf = std::fs::read("/etc/resolv.conf").ok();
    for (transport, options) in [("UDP", ""), ("TCP", "options use-vc\n")] {
        let conf = dir.path().join(format!("resolv-{transport}.conf"));
        std::fs::write(&conf, format!("nameserver 127.0.0.53\n{options}")).unwrap();
        let before = resolver.answered();
        let o = command_in(
            &w.outer,
            &[
                LINKEM,
                "shell",
                "delay",
                "20ms",
                "--",
                "sh",
                "-c",
                RESOLVE_TIMED,
            ],
        )
        .env("LINKEM_RESOLV_CONF", &conf)
        .output()
        .unwrap();
        let after = resolver.answered();
        let (addr, ms) = resolved(&o);
        assert_eq!(
            addr.as_deref(),
            Some("192.0.2.77"),
            "{transport}: not resolved; the resolver answered {:?} queries (udp, tcp) \
             before and {after:?} after: {}",
            before,
            text(&o)
        );
        eprintln!("{transport}: resolved in {ms} ms through a 2 × 20 ms link");
        let i = usize::from(transport == "TCP");
        assert!(
            after[i] > before[i],
            "{transport}: answered {before:?} -> {after:?}"
        );
        // At least one round trip of the link; within one try of the
        // resolver (glibc retries after 5 s).
        assert!(
            (40..3000).contains(&ms),
            "{transport}: {ms} ms: {}",
            text(&o)
        );
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("relayed to it through the emulated link"),
            "{}",
            text(&o)
        );
    }
    assert_eq!(std::fs::read("/etc/resolv.conf").ok(), machine_conf);
    w.assert_clean("after the lookups");
}

/// An ordinary user's shell (pasta): the host's loopback resolver answers
/// inside too, through pasta's DNS forwarding (UDP).
#[test]
fn an_ordinary_users_shell_reaches_a_loopback_resolver_through_pasta() {
    if skip() {
        return;
    }
    let _g = serial();
    // On this machine's own loopback (pasta asks from there), at an address
    // nothing else uses.
    let resolver = TestResolver::start(None, "127.0.78.53");
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("resolv.conf");
    std::fs::write(&conf, "nameserver 127.0.78.53\n").unwrap();
    // nobody reads it.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let conf_path = conf.to_str().unwrap();
    let o = as_nobody_with_tun_env(
        "0666",
        &[("LINKEM_RESOLV_CONF", conf_path)],
        &["delay", "20ms", "--", "sh", "-c", RESOLVE_TIMED],
    );
    let (addr, ms) = resolved(&o);
    assert_eq!(
        addr.as_deref(),
        Some("192.0.2.77"),
        "the resolver answered {:?} (udp, tcp): {}",
        resolver.answered(),
        text(&o)
    );
    eprintln!("pasta: resolved in {ms} ms through a 2 × 20 ms link");
    assert!((40..3000).contains(&ms), "{ms} ms: {}", text(&o));
}

/// A command the shell cannot run gets sh's statuses: 127 when there is no
/// such file or command, 126 when it is not executable, with a message naming
/// it; the shell still leaves nothing behind.
#[test]
fn a_command_that_cannot_run_exits_127_or_126_as_in_sh() {
    if skip() {
        return;
    }
    let _g = serial();
    let w = World::new("lkex");
    let dir = tempfile::tempdir().unwrap();
    let not_exec = dir.path().join("data.txt");
    std::fs::write(&not_exec, "not a program\n").unwrap();
    let not_exec = not_exec.to_str().unwrap().to_string();
    for (cmd, code, says) in [
        ("/nonexistent/program", 127, "no such file"),
        ("lke-no-such-command", 127, "command not found"),
        (not_exec.as_str(), 126, "permission denied"),
    ] {
        let o = w.shell(&["--", cmd]);
        assert_eq!(o.status.code(), Some(code), "{cmd}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!("cannot run '{cmd}'")) && err.contains(says),
            "{cmd}: {}",
            text(&o)
        );
        w.assert_clean(&format!("after '{cmd}' could not start"));
    }
}

/// Nested shells keep the outermost shell's MAHIMAHI_BASE, as mahimahi's do:
/// a client talking to it from the innermost crosses both links (2 × (10 +
/// 15) ms), not the innermost alone (2 × 15 ms).
#[test]
fn nested_shells_keep_the_outermost_mahimahi_base() {
    if skip() {
        return;
    }
    let _g = serial();
    let w = World::new("lkeb");
    let inner = "echo base=$MAHIMAHI_BASE; ping -c 6 -i 0.2 $MAHIMAHI_BASE";
    let outer =
        format!("echo parent=$LINKEM_SHELL_PARENT; {LINKEM} shell delay 15ms -- sh -c '{inner}'");
    let o = w.shell(&["delay", "10ms", "--", "sh", "-c", &outer]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let field = |key: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} line: {}", text(&o)))
            .to_string()
    };
    let (parent, base) = (field("parent="), field("base="));
    assert_eq!(
        base,
        parent,
        "the inner shell's MAHIMAHI_BASE is not the outermost parent: {}",
        text(&o)
    );
    let rtt = ping_rtt_ms(&o, 6);
    assert!(
        (48.0..75.0).contains(&rtt),
        "pinging MAHIMAHI_BASE from the inner shell should cross both links, 2 × (10 + 15) ms: \
         median {rtt} ms: {}",
        text(&o)
    );
    w.assert_clean("after nested shells");
}
