//! `linkem lab`: labs brought up in the background (`up --detach`) from
//! files written here, each named uniquely (`lt` and this process's id and
//! a counter) and taken down by a guard also when a test fails: a line of
//! three nodes pings with the sum of its delays, iperf3 through `rate
//! 50mbit`, `down` leaves nothing, a killed lab is cleaned by the next `up`,
//! a second `up` is refused, a node namespace deleted while the lab runs is
//! reported and not spun on, `netem set` changes one word of one direction.

#[macro_use]
mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A lab of this test process: its file, and `linkem lab down` when dropped.
struct Lab {
    name: String,
    file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Lab {
    /// Writes the lab file of `topology` (the YAML under `topology:`) with a
    /// unique name.
    fn new(topology: &str) -> Lab {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("lt{:x}{n}", std::process::id());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("lab.clab.yml");
        std::fs::write(&file, format!("name: {name}\ntopology:\n{topology}")).unwrap();
        Lab {
            name,
            file,
            _dir: dir,
        }
    }

    fn up(&self) -> Output {
        linkem(&["lab", "up", "--detach", self.file.to_str().unwrap()])
    }

    fn up_ok(&self) {
        self.up_with(&[]);
    }

    fn up_with(&self, options: &[&str]) {
        let mut args = vec!["lab", "up", "--detach", self.file.to_str().unwrap()];
        args.extend_from_slice(options);
        let o = linkem(&args);
        assert!(o.status.success(), "lab up: {}", text(&o));
    }

    fn ns(&self, node: &str) -> String {
        format!("lk-{}-{node}", self.name)
    }

    fn in_node(&self, node: &str, args: &[&str]) -> Output {
        linkem_io::netns::exec_in(&self.ns(node), args).unwrap()
    }

    fn state(&self) -> Value {
        let path = Path::new("/run/linkem/labs")
            .join(&self.name)
            .join("state.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    fn pid(&self) -> u32 {
        self.state()["pid"].as_u64().unwrap() as u32
    }

    fn log(&self) -> String {
        let path = Path::new("/run/linkem/labs")
            .join(&self.name)
            .join("up.log");
        std::fs::read_to_string(path).unwrap_or_default()
    }

    /// What of this lab is left on the machine: namespaces, its state
    /// directory, its control socket.
    fn leftovers(&self) -> Vec<String> {
        let mut left: Vec<String> = linkem_io::netns::list_namespaces()
            .unwrap()
            .into_iter()
            .filter(|ns| ns == &format!("lk-{}", self.name) || ns.starts_with(&self.ns("")))
            .collect();
        for path in [
            format!("/run/linkem/labs/{}", self.name),
            format!("/run/linkem/{}.sock", self.name),
        ] {
            if Path::new(&path).exists() {
                left.push(path);
            }
        }
        left
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = linkem(&["lab", "down", &self.name]);
    }
}

fn linkem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A line h1 -- r -- h2 whose links take `first` and `second`.
fn line3(first: &str, second: &str) -> String {
    format!(
        "  defaults:
    kind: linux
  nodes:
    h1:
      exec:
        - ip addr add 10.0.1.1/24 dev eth1
        - ip route add 10.0.2.0/24 via 10.0.1.2
    r:
      exec:
        - ip addr add 10.0.1.2/24 dev eth1
        - ip addr add 10.0.2.2/24 dev eth2
        - sysctl -qw net.ipv4.ip_forward=1
    h2:
      exec:
        - ip addr add 10.0.2.1/24 dev eth1
        - ip route add 10.0.1.0/24 via 10.0.2.2
  links:
    - endpoints: [\"h1:eth1\", \"r:eth1\"]
      impair: {first}
    - endpoints: [\"r:eth2\", \"h2:eth1\"]
      impair: {second}
"
    )
}

/// Every answered RTT of `count` pings from `node` to `dst`, in ms.
fn ping_rtts(lab: &Lab, node: &str, dst: &str, count: u32) -> Vec<f64> {
    try_ping_rtts(lab, node, dst, count).unwrap_or_else(|e| panic!("{e}"))
}

/// As [`ping_rtts`], with fewer than 9 in 10 answered an `Err` naming
/// ping's output: a stall of the machine longer than the lab's max-lag (5
/// ms) drops what was held through it as `late`.
fn try_ping_rtts(lab: &Lab, node: &str, dst: &str, count: u32) -> Result<Vec<f64>, String> {
    let o = lab.in_node(node, &["ping", "-c", &count.to_string(), "-i", "0.02", dst]);
    answered_rtts_ms(&String::from_utf8_lossy(&o.stdout), count, count * 9 / 10)
}

/// CPU time of `pid` so far in clock ticks (user + system).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn a_line_pings_with_its_delays_and_down_leaves_nothing() {
    if skip() {
        return;
    }
    let _serial = serial();
    let lab = Lab::new(&line3("delay 3ms", "delay 5ms"));
    lab.up_ok();
    // The first pings wait for ARP; the rest cross both links twice.
    let _ = ping_rtts(&lab, "h1", "10.0.2.1", 3);
    // 0.2 ms at the median on a quiet machine; a loaded one (other builds on
    // the two cores) wakes the stages later, so the median's bound here is
    // the bridge tests' 1 ms and the fastest ping's 0.2 ms (ping shows 0.1 ms
    // here). The landing CI once saw a median of 18 ms, min 16.1, across
    // all 40 pings: the machine's, so the pings are measured again.
    within_attempts("h1 -> h2 across delay 3ms and delay 5ms", 3, |_| {
        let rtts = try_ping_rtts(&lab, "h1", "10.0.2.1", 40)?;
        let min_ms = rtts.iter().copied().fold(f64::INFINITY, f64::min);
        let rtt_ms = median(rtts);
        let report = format!("RTT median {rtt_ms:.3} ms, min {min_ms:.3} ms (2 x (3 + 5) = 16 ms)");
        eprintln!("h1 -> h2 {report}");
        if (16.0..=16.25).contains(&min_ms) && (rtt_ms - 16.0).abs() <= 1.0 {
            Ok(())
        } else {
            Err(report)
        }
    });
    // Listed, shown, and refused a second time by name.
    let list = text(&linkem(&["lab", "list"]));
    assert!(list.contains(&lab.name), "{list}");
    let show = linkem(&["lab", "show", &lab.name, "--json"]);
    let v: Value =
        serde_json::from_slice(&show.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&show)));
    assert_eq!(v["links"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["links"][0]["name"], "h1:eth1--r:eth1", "{v}");
    let again = lab.up();
    assert!(!again.status.success());
    assert!(
        text(&again).contains(&format!("lab '{}' is running already", lab.name)),
        "{}",
        text(&again)
    );
    // exec passes the command's status through.
    let o = linkem(&["lab", "exec", &lab.name, "h2", "--", "sh", "-c", "exit 7"]);
    assert_eq!(o.status.code(), Some(7), "{}", text(&o));
    let down = linkem(&["lab", "down", &lab.name]);
    assert!(down.status.success(), "{}", text(&down));
    assert_eq!(lab.leftovers(), Vec::<String>::new());
}

/// SIGKILL to `pid`, and its end.
fn kill_and_wait(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
    let until = Instant::now() + Duration::from_secs(5);
    while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_killed_lab_is_cleaned_by_the_next_up() {
    if skip() {
        return;
    }
    let _serial = serial();
    let lab = Lab::new(&line3("delay 1ms", "delay 1ms"));
    lab.up_ok();
    let pid = lab.pid();
    kill_and_wait(pid);
    let list = text(&linkem(&["lab", "list"]));
    assert!(list.contains("stale"), "{list}");
    let o = lab.up();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        lab.log().contains("is gone without cleaning up"),
        "{}",
        lab.log()
    );
    assert_ne!(lab.pid(), pid);
    let _ = ping_rtts(&lab, "h1", "10.0.2.1", 5);
    // Killed again: `down` cleans it as well.
    kill_and_wait(lab.pid());
    let down = linkem(&["lab", "down", &lab.name]);
    assert!(down.status.success(), "{}", text(&down));
    assert!(
        text(&down).contains("gone without cleaning up"),
        "{}",
        text(&down)
    );
    assert_eq!(lab.leftovers(), Vec::<String>::new());
}

#[test]
fn a_node_deleted_while_the_lab_runs_is_reported_not_spun_on() {
    if skip() {
        return;
    }
    let _serial = serial();
    let lab = Lab::new(&line3("delay 1ms", "delay 1ms"));
    lab.up_ok();
    let pid = lab.pid();
    linkem_io::netns::ip(&["netns", "del", &lab.ns("h2")]).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let before = cpu_ticks(pid);
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let ticks = cpu_ticks(pid) - before;
    let cpu = ticks as f64 / (100.0 * t.elapsed().as_secs_f64());
    eprintln!(
        "emulator CPU after a node vanished: {:.1} % of a core",
        cpu * 100.0
    );
    assert!(
        cpu < 0.1,
        "the emulator took {:.0} % of a core",
        cpu * 100.0
    );
    let log = lab.log();
    assert!(log.contains("node h2's namespace"), "{log}");
    let show = text(&linkem(&["lab", "show", &lab.name]));
    assert!(show.contains("stopped: interface"), "{show}");
    // The other link still carries its node's traffic.
    let _ = ping_rtts(&lab, "h1", "10.0.1.2", 5);
    let down = linkem(&["lab", "down", &lab.name]);
    assert!(down.status.success(), "{}", text(&down));
    assert_eq!(lab.leftovers(), Vec::<String>::new());
}

#[test]
fn iperf3_through_rate_50mbit_gets_what_the_link_carries() {
    if skip() {
        return;
    }
    let _serial = serial();
    let lab = Lab::new(
        "  nodes:
    a:
      kind: linux
      exec: [\"ip addr add 10.0.9.1/24 dev eth1\"]
    b:
      kind: linux
      exec: [\"ip addr add 10.0.9.2/24 dev eth1\"]
  links:
    - endpoints: [\"a:eth1\", \"b:eth1\"]
      impair: rate 50mbit delay 1ms
",
    );
    lab.up_ok();
    // TCP's payload is 1448 of each 1514-byte frame: at most 47.8 Mbit/s of
    // goodput, which a quiet machine reaches (47-48 over the run, 48.0 in
    // the median second). Under the CI's load (fuzzers and builds on the
    // two cores) three runs got 36.7-44.7 over the run, one 41.7 in its
    // median second: the median second is judged against 80 % of the
    // link, and the run must not exceed the link. The landing CI once got
    // 32.2 over a run, 33.4 in its median second, with the host taking the
    // cores (the other live tests of that run missed too): measured again.
    let most = 50.0 * 1448.0 / 1514.0;
    within_attempts("iperf3 through rate 50mbit", 3, |_| {
        let mut server =
            linkem_io::netns::spawn_in(&lab.ns("b"), &["iperf3", "-s", "-1", "-p", "5302"])
                .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let o = lab.in_node(
            "a",
            &[
                "iperf3", "-c", "10.0.9.2", "-p", "5302", "-J", "-t", "4", "-O", "1",
            ],
        );
        let _ = server.kill();
        let _ = server.wait();
        let v: Value =
            serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
        let (bps, median_bps) = iperf3_goodput_bps(&v);
        let (mbit, median_mbit) = (bps / 1e6, median_bps / 1e6);
        // Beyond the link is a defect no load explains.
        assert!(
            mbit <= 50.0,
            "iperf3 through rate 50mbit: {mbit:.2} Mbit/s, more than the link"
        );
        let report = format!(
            "{mbit:.2} Mbit/s of goodput, median second {median_mbit:.2} (at most {most:.1})"
        );
        eprintln!("iperf3 through rate 50mbit: {report}");
        if median_mbit >= 0.8 * most {
            Ok(())
        } else {
            Err(report)
        }
    });
}

#[test]
fn netem_set_changes_one_word_of_one_direction() {
    if skip() {
        return;
    }
    let _serial = serial();
    let lab = Lab::new(&line3("delay 2ms loss 1% rate 10mbit", "delay 1ms"));
    // The metrics endpoint is bound in this namespace, the emulator runs in
    // the lab's: both links are scraped, and `down` still ends it at once.
    let metrics = format!("127.0.0.1:{}", 20000 + std::process::id() % 20000);
    lab.up_with(&["--metrics", &metrics]);
    let scraped = {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(&metrics).unwrap();
        c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        let _ = c.read_to_string(&mut body);
        body
    };
    for link in ["h1:eth1--r:eth1", "r:eth2--h2:eth1"] {
        assert!(
            scraped.contains(&format!("link=\"{link}\"")),
            "{link}: {scraped}"
        );
    }
    let set = linkem(&[
        "lab", "netem", "set", "--lab", &lab.name, "-n", "r", "-i", "eth1", "--delay", "7ms",
    ]);
    assert!(set.status.success(), "{}", text(&set));
    let show = linkem(&[
        "lab", "netem", "show", "--lab", &lab.name, "-n", "r", "-f", "json",
    ]);
    let v: Value =
        serde_json::from_slice(&show.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&show)));
    let eth1 = &v["r"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["interface"] == "eth1")
        .unwrap();
    assert_eq!(eth1["delay"], "7ms", "{v}");
    assert_eq!(eth1["packet_loss"], 1.0, "{v}");
    assert_eq!(eth1["rate"], 10_000, "{v}");
    // h1 sends a-to-b: unchanged.
    let show = linkem(&[
        "lab", "netem", "show", "--lab", &lab.name, "-n", "h1", "-f", "json",
    ]);
    let v: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(v["h1"][0]["delay"], "2ms", "{v}");
    let t = Instant::now();
    let down = linkem(&["lab", "down", &lab.name]);
    assert!(down.status.success(), "{}", text(&down));
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "down took {:?}",
        t.elapsed()
    );
    assert_eq!(lab.leftovers(), Vec::<String>::new());
}
