//! The measures of `linkem lab`, live: a schedule's gap seen by a 10 ms
//! ping at both edges, a recorded lab replayed to each link's events, a lab
//! across two namespace-machines over VXLAN (`--host`), 100 links in one
//! lab, and every example under `examples/labs/` pinging with the sum of
//! the delays on its paths. Labs are named `lm` + this process's id + a
//! counter (the examples' own names replaced), the machines `lmM…`, and a
//! guard runs `linkem lab down` also when a test fails. Medians and margins
//! hold on a loaded machine; the numbers measured are printed.

#[macro_use]
mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A lab file of this test process; `linkem lab down` of every part it
/// started when dropped.
struct Lab {
    name: String,
    file: PathBuf,
    dir: tempfile::TempDir,
    /// The parts started: (run name, the namespace-machine it runs in).
    parts: Vec<(String, Option<String>)>,
    /// Nodes of a part started in a namespace-machine, with its emulator's
    /// pid: their namespaces are mounted in the mount namespace `ip netns
    /// exec` made for it, and reached through it.
    mounts: BTreeMap<String, u32>,
}

impl Lab {
    /// A lab of `text` (a whole lab file) with its `name:` line replaced
    /// by a unique name.
    fn from_text(text: &str) -> Lab {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("lm{:x}{n}", std::process::id());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("lab.clab.yml");
        let body: Vec<String> = text
            .lines()
            .map(|l| {
                if l.starts_with("name:") {
                    format!("name: {name}")
                } else {
                    l.to_string()
                }
            })
            .collect();
        std::fs::write(&file, body.join("\n") + "\n").unwrap();
        Lab {
            name,
            file,
            dir,
            parts: Vec::new(),
            mounts: BTreeMap::new(),
        }
    }

    /// `[ip netns exec MACHINE] linkem lab up --detach FILE [--host M] EXTRA`.
    fn up(&mut self, machine: Option<(&str, &str)>, extra: &[&str]) -> Duration {
        let mut args = vec!["lab", "up", "--detach", self.file.to_str().unwrap()];
        let run = match machine {
            Some((_, host)) => {
                args.extend(["--host", host]);
                format!("{}@{host}", self.name)
            }
            None => self.name.clone(),
        };
        args.extend(extra);
        let ns = machine.map(|(ns, _)| ns.to_string());
        self.parts.push((run, ns.clone()));
        let t0 = Instant::now();
        let o = linkem_in(ns.as_deref(), &args);
        let took = t0.elapsed();
        assert!(o.status.success(), "lab up {args:?}: {}", text(&o));
        took
    }

    fn ns(&self, node: &str) -> String {
        format!("lk-{}-{node}", self.name)
    }

    fn in_node(&self, node: &str, args: &[&str]) -> Output {
        self.command_in(&self.ns(node), node, args)
            .output()
            .unwrap()
    }

    /// `args` in the namespace `ns`, of the part that runs `node`.
    fn command_in(&self, ns: &str, node: &str, args: &[&str]) -> Command {
        let mut c = Command::new("nsenter");
        match self.mounts.get(node) {
            Some(pid) => c.args(["-t", &pid.to_string(), "-m", "--"]),
            None => c.arg("--"),
        };
        c.args(["ip", "netns", "exec", ns]).args(args);
        c.stdin(std::process::Stdio::null());
        c
    }

    /// The state file of the part `run`.
    fn state(&self, run: &str) -> Value {
        let path = Path::new("/run/linkem/labs").join(run).join("state.json");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_json::from_str(&text).unwrap()
    }

    /// The median and the least RTT of `count` pings from `node` to `dst`
    /// (after three that wait for ARP), in ms, saying where the answers went
    /// when too few came.
    fn rtt_ms(&self, node: &str, dst: &str, count: u32) -> Rtt {
        let _ = self.in_node(node, &["ping", "-c", "3", "-i", "0.02", "-W", "1", dst]);
        let o = self.in_node(
            node,
            &[
                "ping",
                "-c",
                &count.to_string(),
                "-i",
                "0.02",
                "-W",
                "1",
                dst,
            ],
        );
        let out = String::from_utf8_lossy(&o.stdout);
        let mut rtts = ping_times_ms(&out);
        assert!(
            rtts.len() as u32 >= count / 2,
            "{node} -> {dst}: {} of {count} pings answered:\n{out}{}",
            rtts.len(),
            String::from_utf8_lossy(&o.stderr)
        );
        Rtt {
            median_ms: median(&mut rtts),
            min_ms: rtts[0],
        }
    }
}

/// A ping's RTTs: the median and the least, in ms.
#[derive(Clone, Copy)]
struct Rtt {
    median_ms: f64,
    min_ms: f64,
}

impl Rtt {
    /// Whether these RTTs are `want_ms` on a path of `links` links each way:
    /// the least within what ping shows (0.1 ms) and 50 us per crossing of
    /// a link (the emulator's wake-up and forwarding, measured 20-50 us on a
    /// loaded machine), the median within 0.2 ms on a quiet machine; a
    /// loaded one (the suite's fuzz build on the two cores) wakes the stages
    /// later: a whole run of 50 pings of a 1 ms link came out 1.7-2.1 ms late
    /// in the median in CI, every ping's least still exact. So the median's
    /// bound is 2.5 ms and 50 us more per crossing: the least is what says
    /// whether the delays add up, the median only that no ping waits for
    /// another. None: they are.
    fn off(&self, want_ms: f64, links: u32) -> Option<String> {
        let slack_ms = 0.1 + 0.05 * f64::from(2 * links);
        // ping rounds what it prints to 3 significant digits (0.1 ms from
        // 10 ms up): a least of 20.04 ms prints 20.0, under a sum of 20.052.
        let printed_ms = ping_step_ms(want_ms) / 2.0;
        let ok = (want_ms - 0.05 - printed_ms..=want_ms + slack_ms).contains(&self.min_ms)
            && (self.median_ms - want_ms).abs() <= 2.5 + 0.05 * f64::from(2 * links);
        (!ok).then(|| format!("{self}, not {want_ms:.3} ms ({links} links each way)"))
    }
}

/// The step of the RTTs ping prints near `rtt_ms` (iputils: whole ms from
/// 100 ms, then 0.1, 0.01 and 0.001 ms).
fn ping_step_ms(rtt_ms: f64) -> f64 {
    match rtt_ms {
        r if r >= 100.0 => 1.0,
        r if r >= 10.0 => 0.1,
        r if r >= 1.0 => 0.01,
        _ => 0.001,
    }
}

impl std::fmt::Display for Rtt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "median {:.3} ms, least {:.3} ms",
            self.median_ms, self.min_ms
        )
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for (run, ns) in self.parts.iter().rev() {
            let _ = linkem_in(ns.as_deref(), &["lab", "down", run]);
        }
    }
}

/// `linkem ARGS`, in the namespace `ns` when given.
fn linkem_in(ns: Option<&str>, args: &[&str]) -> Output {
    let exe = env!("CARGO_BIN_EXE_linkem");
    match ns {
        Some(ns) => Command::new("ip")
            .args(["netns", "exec", ns, exe])
            .args(args)
            .output()
            .unwrap(),
        None => Command::new(exe).args(args).output().unwrap(),
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The lab's start on the packet clock (ns since the epoch), from its
/// socket's `stats`: each link's `now_ns` less its `elapsed_s`, both read
/// by the emulator at one moment.
fn lab_start_ns(lab: &str) -> u64 {
    let o = linkem_in(None, &["ctl", "--name", lab, "--json", "stats"]);
    assert!(o.status.success(), "ctl stats: {}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("ctl --json stats ({e}): {}", text(&o)));
    // The body, whether or not the reply wraps it.
    let body = ["body", "result", "stats"]
        .iter()
        .find(|k| v[**k]["links"].is_array())
        .map_or(&v, |k| &v[*k]);
    let link = &body["links"][0];
    let now_ns = link["now_ns"].as_u64().expect("now_ns");
    let elapsed_ns = (link["elapsed_s"].as_f64().expect("elapsed_s") * 1e9) as u64;
    now_ns - elapsed_ns
}

/// The median time between requests ping sent, in s, from the answers'
/// sequence numbers.
fn send_interval_s(sent: &[(f64, u32)]) -> f64 {
    let mut steps: Vec<f64> = sent
        .windows(2)
        .filter(|w| w[1].1 > w[0].1)
        .map(|w| (w[1].0 - w[0].0) / f64::from(w[1].1 - w[0].1))
        .collect();
    if steps.is_empty() {
        return 0.01;
    }
    median(&mut steps)
}

/// One answer of `ping -D`: when its request left (s since the epoch,
/// the answer's time less its RTT) and its sequence number.
fn sent_times(out: &str) -> Vec<(f64, u32)> {
    out.lines()
        .filter_map(|l| {
            let at: f64 = l.strip_prefix('[')?.split(']').next()?.parse().ok()?;
            let seq: u32 = l
                .split("icmp_seq=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            let rtt_ms: f64 = l
                .split("time=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some((at - rtt_ms / 1e3, seq))
        })
        .collect()
}

/// A line h1 -- r -- h2 whose first link goes to `loss 100%` from 5 s to
/// 7 s; a 10 ms ping across it (h1 -> r) and across the other (r -> h2).
#[test]
fn a_scheduled_gap_shows_at_both_edges_and_nowhere_else() {
    if skip() {
        return;
    }
    let _serial = serial();
    let mut lab = Lab::from_text(
        "name: x
topology:
  defaults: {kind: linux}
  nodes:
    h1: {exec: [ip addr add 10.0.1.1/24 dev eth1]}
    r:  {exec: [ip addr add 10.0.1.2/24 dev eth1, ip addr add 10.0.2.2/24 dev eth2]}
    h2: {exec: [ip addr add 10.0.2.1/24 dev eth1]}
  links:
    - endpoints: [\"h1:eth1\", \"r:eth1\"]
      impair: delay 1ms
      schedule: [{at: 5s, words: loss 100%}, {at: 7s, words: loss 0%}]
    - endpoints: [\"r:eth2\", \"h2:eth1\"]
      impair: delay 1ms
",
    );
    lab.up(None, &[]);
    let start_s = lab_start_ns(&lab.name) as f64 / 1e9;
    let since = |t: f64| t - start_s;
    let now = linkem_runtime::clock::now_ns() as f64 / 1e9;
    // Pings until 9.5 s after the start.
    let count = (((start_s + 9.5) - now) / 0.01).max(1.0) as u32;
    assert!(
        since(now) < 4.0,
        "the lab took {:.1} s to answer",
        since(now)
    );
    let ping = move |ns: String, dst: &'static str| {
        let count = count.to_string();
        let o = linkem_io::netns::exec_in(
            &ns,
            &["ping", "-D", "-c", &count, "-i", "0.01", "-W", "1", dst],
        )
        .unwrap();
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let other = {
        let ns = lab.ns("r");
        std::thread::spawn(move || ping(ns, "10.0.2.1"))
    };
    let across = ping(lab.ns("h1"), "10.0.1.2");
    let beside = other.join().unwrap();

    let sent = sent_times(&across);
    let last_before = sent
        .iter()
        .filter(|(t, _)| since(*t) < 6.0)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map_or((f64::MIN, 0), |(t, q)| (since(*t), *q));
    let first_after = sent
        .iter()
        .filter(|(t, _)| since(*t) >= 6.0)
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map_or((f64::MAX, 0), |(t, q)| (since(*t), *q));
    // Ping sends every 10 ms when the machine lets it (a loaded one: every
    // 15-20 ms): an edge lies between an answered request and the next one
    // sent, which `interval_s` apart. A stall of the VM holds ping's sender for
    // tens of ms now and then (a run saw the first answer after the gap sent
    // 31 ms after its end, 10 ms apart elsewhere): the margin is 50 ms, which
    // still tells a 2 s gap at 5 s from one at any other place.
    let interval_s = send_interval_s(&sent);
    let edges = format!(
        "last answer before the gap: icmp_seq {} sent at {:.4} s, first after: icmp_seq {} \
         sent at {:.4} s (from the lab's start); ping sent every {:.1} ms; {} of {count} \
         answered",
        last_before.1,
        last_before.0,
        first_after.1,
        first_after.0,
        interval_s * 1e3,
        sent.len()
    );
    println!("scheduled link: {edges}");
    let near = |from: f64, to: f64, edge: f64| from <= edge + 0.05 && to >= edge - 0.05;
    assert!(
        near(last_before.0, last_before.0 + interval_s, 5.0)
            && near(first_after.0 - interval_s, first_after.0, 7.0),
        "the gap is not 5 s to 7 s +- 50 ms: {edges}"
    );
    let beside_sent = sent_times(&beside);
    let lost = count as usize - beside_sent.len();
    let in_gap = beside_sent
        .iter()
        .filter(|(t, _)| (5.0..7.0).contains(&since(*t)))
        .count();
    let (stats, late) = link_stats(&lab.name, "r:eth2--h2:eth1");
    println!(
        "other link: {} of {count} answered, {in_gap} sent in 5-7 s; its counts: {stats}",
        beside_sent.len()
    );
    // Nothing, or what a stalled machine loses: the pings linkem dropped late
    // (a stall held an output stage past --max-lag; a CI run had 13 of 948),
    // and 1 % more. Never the link's `loss`.
    assert!(
        !stats.contains("\"loss\":") || stats.matches("\"loss\":0").count() == 2,
        "the other link lost by its words: {stats}"
    );
    assert!(
        lost.saturating_sub(late as usize) * 100 <= count as usize && in_gap >= 150,
        "the other link: {lost} of {count} pings lost, {in_gap} answered in 5-7 s; \
         the link's counts: {stats}"
    );
}

/// A link's counts, per direction: received and their fates; and its `late`
/// drops, both directions together.
fn link_stats(lab: &str, link: &str) -> (String, u64) {
    let o = linkem_in(None, &["ctl", "--name", lab, "--json", "stats", link]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    let dirs = ["directions", "body", "result"]
        .iter()
        .find_map(|k| {
            let d = if *k == "directions" {
                &v[*k]
            } else {
                &v[*k]["directions"]
            };
            d.as_array().cloned()
        })
        .unwrap_or_default();
    let each: Vec<String> = dirs
        .iter()
        .map(|d| {
            format!(
                "{}: received {}, kernel drops {}, fates {}",
                d["direction"], d["received"], d["rx_kernel_drops"], d["fates"]
            )
        })
        .collect();
    let late = dirs
        .iter()
        .filter_map(|d| d["fates"]["late"].as_u64())
        .sum();
    (
        format!("{} {}", each.join("; "), String::from_utf8_lossy(&o.stderr)),
        late,
    )
}

/// A group events file's lines, by link, each as written.
fn by_link(path: &Path) -> BTreeMap<String, Vec<Value>> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{}: not a JSON line ({e}): {line}", path.display()));
        let link = v["link"].as_str().expect("each line names its link");
        out.entry(link.to_string()).or_default().push(v);
    }
    out
}

/// Three links, one with a schedule: `up --record DIR --events LIVE`,
/// pings across all three, `down`; `linkem replay DIR OUT --events E`
/// gives each link's live events line for line.
#[test]
fn a_recorded_lab_of_three_links_replays_to_each_links_events() {
    if skip() {
        return;
    }
    let _serial = serial();
    let mut lab = Lab::from_text(
        "name: x
topology:
  defaults: {kind: linux}
  nodes:
    h1: {exec: [ip addr add 10.0.1.1/24 dev eth1, ip route add 10.0.0.0/16 via 10.0.1.2]}
    r:  {exec: [ip addr add 10.0.1.2/24 dev eth1, ip addr add 10.0.2.2/24 dev eth2,
                ip addr add 10.0.3.2/24 dev eth3, sysctl -qw net.ipv4.ip_forward=1]}
    h2: {exec: [ip addr add 10.0.2.1/24 dev eth1, ip route add 10.0.0.0/16 via 10.0.2.2]}
    h3: {exec: [ip addr add 10.0.3.1/24 dev eth1, ip route add 10.0.0.0/16 via 10.0.3.2]}
  links:
    - endpoints: [\"h1:eth1\", \"r:eth1\"]
      impair: delay 2ms loss 5%
    - endpoints: [\"r:eth2\", \"h2:eth1\"]
      impair: delay 1ms
      schedule: [{at: 1s, words: delay 3ms loss 20%}, {at: 2s, words: delay 1ms}]
    - endpoints: [\"r:eth3\", \"h3:eth1\"]
      a-to-b: delay 4ms rate 10mbit
      b-to-a: delay 1ms jitter 500us
",
    );
    let names = ["h1:eth1--r:eth1", "r:eth2--h2:eth1", "r:eth3--h3:eth1"];
    // 100 pings and their replies each, fewer where a link lost some: at
    // least 150 events per link. The landing CI once saw 127 on one link
    // while the host took the cores (the replay agreed line for line): such
    // a run is made again, a recording of its own each.
    let (rec, live) = within_attempts("a recorded lab's pings", 3, |run| {
        let rec = lab.dir.path().join(format!("rec{run}"));
        let live = lab.dir.path().join(format!("live{run}.jsonl"));
        lab.up(
            None,
            &[
                "--record",
                rec.to_str().unwrap(),
                "--events",
                live.to_str().unwrap(),
            ],
        );
        // Both from h1: across the first link, then the second or the third.
        let pings = [(lab.ns("h1"), "10.0.2.1"), (lab.ns("h1"), "10.0.3.1")].map(|(ns, dst)| {
            std::thread::spawn(move || {
                linkem_io::netns::exec_in(
                    &ns,
                    &["ping", "-q", "-c", "100", "-i", "0.025", "-W", "1", dst],
                )
                .unwrap()
            })
        });
        let said: Vec<String> = pings
            .into_iter()
            .map(|p| text(&p.join().unwrap()))
            .collect();
        let counts: Vec<String> = names
            .iter()
            .map(|l| format!("{l}: {}", link_stats(&lab.name, l).0))
            .collect();
        let (name, _) = lab.parts.pop().unwrap();
        let o = linkem_in(None, &["lab", "down", &name]);
        assert!(o.status.success(), "lab down: {}", text(&o));
        let events = by_link(&live);
        let few: Vec<String> = names
            .iter()
            .filter_map(|l| {
                let n = events.get(*l).map_or(0, Vec::len);
                (n < 150).then(|| format!("{l}: {n} live events"))
            })
            .collect();
        if few.is_empty() {
            Ok((rec, live))
        } else {
            Err(format!(
                "{}; ping said: {}; the links' counts: {}",
                few.join(", "),
                said.join(" | "),
                counts.join(" | ")
            ))
        }
    });
    let out = lab.dir.path().join("replayed");
    let replayed = lab.dir.path().join("replay.jsonl");
    let o = linkem_in(
        None,
        &[
            "replay",
            rec.to_str().unwrap(),
            out.to_str().unwrap(),
            "--events",
            replayed.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "linkem replay: {}", text(&o));
    let (live, again) = (by_link(&live), by_link(&replayed));
    assert_eq!(
        live.keys().collect::<Vec<_>>(),
        again.keys().collect::<Vec<_>>(),
        "the same links live and replayed"
    );
    for name in names {
        let (l, r) = (&live[name], &again[name]);
        println!("{name}: {} events live, {} replayed", l.len(), r.len());
        if let Some(k) = l.iter().zip(r).position(|(a, b)| a != b) {
            panic!(
                "{name}: line {k} differs:\n live   {}\n replay {}",
                l[k], r[k]
            );
        }
        assert_eq!(l.len(), r.len(), "{name}: as many lines live and replayed");
    }
}

/// Two network namespaces standing for two machines, joined by an
/// underlay veth (10.99.0.1/24 and 10.99.0.2/24, no delay); removed when
/// dropped (after the lab's parts, declared later, are down).
struct Machines {
    names: [String; 2],
}

impl Machines {
    fn new() -> Machines {
        let p = format!("lmM{:x}", std::process::id());
        let names = [format!("{p}m1"), format!("{p}m2")];
        let m = Machines { names };
        let [m1, m2] = &m.names;
        for ns in [m1, m2] {
            ip(&["netns", "add", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        let (u1, u2) = (format!("{p}u1"), format!("{p}u2"));
        ip(&[
            "link", "add", &u1, "netns", m1, "type", "veth", "peer", "name", &u2, "netns", m2,
        ]);
        for (ns, dev, addr) in [(m1, &u1, "10.99.0.1/24"), (m2, &u2, "10.99.0.2/24")] {
            ip(&["-n", ns, "addr", "add", addr, "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
        }
        m
    }

    /// The packets machine 1's underlay interface has sent.
    fn underlay_tx_packets(&self) -> u64 {
        let dev = format!("lmM{:x}u1", std::process::id());
        let o = Command::new("ip")
            .args(["-n", &self.names[0], "-j", "-s", "link", "show", &dev])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        v[0]["stats64"]["tx"]["packets"].as_u64().unwrap_or(0)
    }
}

impl Drop for Machines {
    fn drop(&mut self) {
        for ns in &self.names {
            let _ = linkem_io::netns::ip(&["netns", "del", ns]);
        }
    }
}

fn ip(args: &[&str]) {
    linkem_io::netns::ip(args).unwrap_or_else(|e| panic!("ip {args:?}: {e}"));
}

/// The names of a state file's `key` (nodes or links).
fn names_of(state: &Value, key: &str) -> Vec<String> {
    let all = state[key].as_array().into_iter().flatten();
    all.filter_map(|n| n["name"].as_str().map(String::from))
        .collect()
}

/// iperf3's TCP goodput from `client` to `server_addr` (in `server`) over
/// 5 s, in Mbit/s: over the whole run, and in its median second (which a
/// stall of the machine does not move).
fn iperf3_mbit(lab: &Lab, client: &str, server: &str, server_addr: &str) -> (f64, f64) {
    let mut srv = lab
        .command_in(
            &lab.ns(server),
            server,
            &["iperf3", "-s", "-1", "-p", "5311"],
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let o = lab.in_node(
        client,
        &[
            "iperf3",
            "-c",
            server_addr,
            "-p",
            "5311",
            "-J",
            "-t",
            "5",
            "-O",
            "1",
        ],
    );
    let _ = srv.kill();
    let _ = srv.wait();
    let v: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("iperf3 ({e}): {}", text(&o)));
    let (whole_bps, median_bps) = iperf3_goodput_bps(&v);
    (whole_bps / 1e6, median_bps / 1e6)
}

/// examples/labs/two-machines.clab.yml on two namespace-machines: each
/// `up --host M` makes its own part only, the link b--c rides VXLAN and is
/// emulated once (on m1), RTT across is the delays plus the underlay's, and
/// `rate 100mbit` across carries TCP near the link's rate (80 % of it in
/// iperf3's median second, at most the rate over the run).
#[test]
fn a_lab_across_two_machines_runs_each_part_and_the_link_across_once() {
    if skip() {
        return;
    }
    let _serial = serial();
    let machines = Machines::new();
    let mut lab = Lab::from_text(&example("two-machines.clab.yml"));
    let [m1, m2] = machines.names.clone();
    let took1 = lab.up(Some((&m1, "m1")), &[]);
    let took2 = lab.up(Some((&m2, "m2")), &[]);
    println!("up --host m1 {took1:.2?}, --host m2 {took2:.2?}");
    let (s1, s2) = (
        lab.state(&format!("{}@m1", lab.name)),
        lab.state(&format!("{}@m2", lab.name)),
    );
    assert_eq!(names_of(&s1, "nodes"), ["a", "b"], "m1's nodes: {s1}");
    assert_eq!(names_of(&s2, "nodes"), ["c", "d"], "m2's nodes: {s2}");
    assert_eq!(
        names_of(&s1, "links"),
        ["a:eth1--b:eth1", "b:eth2--c:eth1"],
        "m1 emulates its link and the one across"
    );
    assert_eq!(
        names_of(&s2, "links"),
        ["c:eth2--d:eth1"],
        "m2 emulates its own link only"
    );
    for (state, nodes) in [(&s1, ["a", "b"]), (&s2, ["c", "d"])] {
        let pid = state["pid"].as_u64().unwrap() as u32;
        for n in nodes {
            lab.mounts.insert(n.to_string(), pid);
        }
    }
    for (m, node) in [("m1", "a"), ("m2", "c")] {
        let emu = format!("lk-{}@{m}", lab.name);
        let o = lab
            .command_in(
                &emu,
                node,
                &["ip", "-d", "-j", "link", "show", "type", "vxlan"],
            )
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        assert_eq!(
            v.as_array().map_or(0, Vec::len),
            1,
            "{emu}: one VXLAN device: {}",
            text(&o)
        );
    }
    let o = Command::new("ip")
        .args([
            "netns",
            "exec",
            &m1,
            "ping",
            "-c",
            "50",
            "-i",
            "0.02",
            "10.99.0.2",
        ])
        .output()
        .unwrap();
    let mut underlay = ping_times_ms(&String::from_utf8_lossy(&o.stdout));
    let underlay_ms = median(&mut underlay);
    let tx0 = machines.underlay_tx_packets();
    let across = lab.rtt_ms("b", "10.20.2.2", 100);
    let tx1 = machines.underlay_tx_packets();
    println!(
        "underlay RTT median {underlay_ms:.3} ms; b -> c {across}; {} packets on the \
         underlay for b -> c's 100 pings",
        tx1 - tx0
    );
    assert!(
        tx1 - tx0 >= 90,
        "b -> c's pings did not ride the underlay: {} packets sent on it",
        tx1 - tx0
    );
    // Each path's one-way delays: on m1, on m2, across (plus the underlay).
    // A spell of the host's load through a path's 50 pings (the CI once saw
    // a -> 10.20.3.2 at 43.9 ms at the median, least 40.2, against 40.07)
    // pings it again.
    for (node, dst, want, links) in [
        ("b", "10.20.2.2", 20.0 + underlay_ms, 1),
        ("a", "10.20.1.2", 10.0, 1),
        ("c", "10.20.3.2", 10.0, 1),
        ("b", "10.20.3.2", 30.0 + underlay_ms, 2),
        ("a", "10.20.2.2", 30.0 + underlay_ms, 2),
        ("a", "10.20.3.2", 40.0 + underlay_ms, 3),
    ] {
        within_attempts(&format!("{node} -> {dst}"), 3, |_| {
            let got = lab.rtt_ms(node, dst, 50);
            println!("{node} -> {dst}: {got} (sum {want:.3} ms)");
            match got.off(want, links) {
                Some(off) => Err(off),
                None => Ok(()),
            }
        });
    }
    // TCP's payload is 1448 of each 1514-byte frame: at most 95.6 Mbit/s,
    // which a quiet machine reaches (93-96 over the run). One CI run on a
    // loaded machine got 80.5 over the run; as in lab_netns, the median
    // second must hold 80 % of the link (measured again when a spell of
    // the host's load misses it) and the run must not exceed it.
    let most = 100.0 * 1448.0 / 1514.0;
    within_attempts("iperf3 b -> c across rate 100mbit", 3, |_| {
        let (mbit, median_mbit) = iperf3_mbit(&lab, "b", "c", "10.20.2.2");
        let report = format!(
            "{mbit:.2} Mbit/s over the run, {median_mbit:.2} in its median second (at most \
             {most:.1}; want at least {:.1} in the median second)",
            0.8 * most
        );
        println!("iperf3 b -> c across rate 100mbit: {report}");
        assert!(mbit <= 100.0, "more than the link: {report}");
        if median_mbit >= 0.8 * most {
            Ok(())
        } else {
            Err(report)
        }
    });
}

/// The text of examples/labs/FILE.
fn example(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/labs")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// CPU time of `pid` so far in clock ticks (user + system).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// A process's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// A hub of 100 spokes: `up --detach` under 10 s, the emulator idle under
/// 5 % of a core over 5 s; its resident memory per link is printed.
#[test]
fn a_lab_of_100_links_starts_in_10_s_and_idles() {
    if skip() {
        return;
    }
    let _serial = serial();
    let mut file = String::from("name: x\ntopology:\n  nodes:\n    hub: {kind: bridge}\n");
    for i in 1..=100 {
        file +=
            &format!("    s{i}: {{kind: linux, exec: [ip addr add 10.61.0.{i}/24 dev eth1]}}\n");
    }
    file += "  links:\n";
    for i in 1..=100 {
        file += &format!("    - {{endpoints: [\"s{i}:eth1\", \"hub:p{i}\"], impair: delay 1ms}}\n");
    }
    let mut lab = Lab::from_text(&file);
    let took = lab.up(None, &[]);
    let pid = lab.state(&lab.name.clone())["pid"].as_u64().unwrap() as u32;
    let rtt = lab.rtt_ms("s1", "10.61.0.100", 20);
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let t0 = (cpu_ticks(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(5));
    let cpu = (cpu_ticks(pid) - t0.0) as f64 / hz / t0.1.elapsed().as_secs_f64();
    let rss = rss_kib(pid);
    println!(
        "100 links: up --detach {:.2} s; s1 -> s100 {rtt} (4 ms); idle CPU {:.2} % of a \
         core over 5 s; RSS {} MiB, {:.0} KiB per link",
        took.as_secs_f64(),
        cpu * 100.0,
        rss / 1024,
        rss as f64 / 100.0
    );
    assert!(took < Duration::from_secs(10), "up took {took:.2?}");
    assert!(cpu < 0.05, "idle CPU {:.2} % of a core", cpu * 100.0);
    if let Some(off) = rtt.off(4.0, 2) {
        panic!("s1 -> s100: {off}");
    }
}

/// One path to ping: node, address, the sum of the delays there and back
/// in ms, links each way.
type PingPath<'a> = (&'a str, &'a str, f64, u32);

/// Starts examples/labs/FILE and checks the RTTs of each path in `pairs`,
/// then, once `after` has passed since the lab's start, of each in `later`
/// (paths across a link that a schedule takes down for a while: on a loaded
/// machine the pings before could run into the gap).
fn example_pings(file: &str, pairs: &[PingPath], after: Duration, later: &[PingPath]) {
    if skip() {
        return;
    }
    let _serial = serial();
    let mut lab = Lab::from_text(&example(file));
    let took = lab.up(None, &[]);
    let later_ns = if later.is_empty() {
        0
    } else {
        lab_start_ns(&lab.name) + after.as_nanos() as u64
    };
    println!("{file}: up --detach {:.2} s", took.as_secs_f64());
    let mut wrong = Vec::new();
    for (i, (node, dst, want, links)) in pairs.iter().chain(later).enumerate() {
        if i == pairs.len() {
            let now_ns = linkem_runtime::clock::now_ns();
            std::thread::sleep(Duration::from_nanos(later_ns.saturating_sub(now_ns)));
        }
        // A stall of the machine spoils one run of pings; a wrong delay
        // spoils every run: a pair is wrong only if three runs are.
        let mut offs = Vec::new();
        for _ in 0..3 {
            let got = lab.rtt_ms(node, dst, 50);
            println!(
                "{file}: {node} -> {dst}: {got} (sum {want} ms; median {:+.3} ms off)",
                got.median_ms - want
            );
            match got.off(*want, *links) {
                Some(off) => offs.push(off),
                None => break,
            }
        }
        if offs.len() == 3 {
            wrong.push(format!("{node} -> {dst}: {}", offs.join(" / ")));
        }
    }
    assert!(wrong.is_empty(), "{file}: {}", wrong.join("; "));
}

#[test]
fn example_line3_pings_with_the_sums_of_its_delays() {
    // The second link's b-to-a is delay 10ms too (its loss only loses).
    example_pings(
        "line3.clab.yml",
        &[
            ("h1", "10.0.1.2", 20.0, 1),
            ("h1", "10.0.2.1", 40.0, 2),
            ("r", "10.0.2.1", 20.0, 1),
            ("h2", "10.0.1.1", 40.0, 2),
        ],
        Duration::ZERO,
        &[],
    );
}

#[test]
fn example_ring10_pings_with_the_sums_of_its_delays() {
    // Each link both ways, two paths of five links (the tie taken clockwise
    // from the lower number, both ways) and one of three. Those across
    // n4--n5 last, once its schedule's gap (5-7 s after the lab's start) is
    // over: one CI run measured them first and its third path ran into the
    // gap.
    example_pings(
        "ring10.clab.yml",
        &[
            ("n1", "10.255.0.2", 10.0, 1),
            ("n2", "10.255.0.3", 20.0, 1),
            ("n3", "10.255.0.4", 4.0, 1),
            ("n5", "10.255.0.6", 40.0, 1),
            ("n6", "10.255.0.7", 2.0, 1),
            ("n7", "10.255.0.8", 10.0, 1),
            ("n8", "10.255.0.9", 20.0, 1),
            ("n9", "10.255.0.10", 4.0, 1),
            ("n10", "10.255.0.1", 10.0, 1),
            ("n2", "10.255.0.9", 2.0 * (5.0 + 5.0 + 2.0), 3),
        ],
        Duration::from_millis(7_500),
        &[
            ("n4", "10.255.0.5", 10.0, 1),
            ("n1", "10.255.0.6", 2.0 * (5.0 + 10.0 + 2.0 + 5.0 + 20.0), 5),
            ("n8", "10.255.0.3", 2.0 * (2.0 + 5.0 + 20.0 + 1.0 + 5.0), 5),
        ],
    );
}

#[test]
fn example_hub50_pings_with_the_sums_of_its_delays() {
    // A sample of spoke pairs, each two links of 1 ms.
    example_pings(
        "hub50.clab.yml",
        &[
            ("s1", "10.50.0.2", 4.0, 2),
            ("s10", "10.50.0.37", 4.0, 2),
            ("s25", "10.50.0.50", 4.0, 2),
            ("s50", "10.50.0.1", 4.0, 2),
        ],
        Duration::ZERO,
        &[],
    );
}

#[test]
fn example_clab_style_pings_with_the_sums_of_its_delays() {
    example_pings(
        "clab-style.clab.yml",
        &[
            ("PC1", "192.168.22.2", 14.0, 3),
            ("PC1", "10.10.10.1", 2.0, 1),
            ("PC1", "10.10.10.3", 12.0, 2),
            ("router1", "10.10.10.2", 10.0, 1),
            ("router2", "10.10.10.3", 10.0, 1),
            ("router3", "10.10.10.1", 10.0, 1),
            ("PC2", "10.10.10.3", 12.0, 2),
        ],
        Duration::ZERO,
        &[],
    );
}
