//! `linkem bridge --pair ... --pair ...`: many links in one process. Twenty
//! topologies `nsA <-veth-> linkem <-veth-> nsB` (names unique to the test,
//! torn down by each topology's Drop), one linkem for all of them, each pair
//! `delay 5ms`: ping through every pair, the process's CPU while idle, and
//! the per-pair counts of `--stats json`.

#[macro_use]
mod common;

use common::*;
use linkem_io::netns::{self, Topology};
use serde_json::Value;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

on_both_backends!(twenty_pairs_with_delay_5ms_in_one_process);

const PAIRS: usize = 20;

/// CPU time of process `pid` so far (user + system), in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name's closing parenthesis: state is
    // field 3, utime 14 and stime 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

fn clock_ticks_per_s() -> u64 {
    // Safety: sysconf reads a constant.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as u64
}

/// Sends SIGINT, waits for the exit (at most 10 s) and returns the final
/// stats line and stderr.
fn stop(
    mut child: Child,
    stdout: std::thread::JoinHandle<String>,
    stderr: std::thread::JoinHandle<String>,
) -> (Value, String) {
    // Safety: kill with a pid we own.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "linkem did not stop on SIGINT"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = child.wait().unwrap();
    let stderr = stderr.join().unwrap();
    assert!(status.success(), "linkem failed: {stderr}");
    let out = stdout.join().unwrap();
    let last = out
        .lines()
        .rfind(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no counts printed; stderr: {stderr}"));
    (serde_json::from_str(last).unwrap(), stderr)
}

/// `bridge OPTIONS --stats json --max-lag off --control none` and a
/// `--pair IF_A IF_B WORDS...` per topology. Lateness is not what these
/// tests measure (see Bridge::start).
fn bridge_args(options: &[&str], pairs: &[(&Topology, &[&str])]) -> Vec<String> {
    let mut args: Vec<String> = ["bridge"]
        .iter()
        .chain(options)
        .map(|a| a.to_string())
        .collect();
    args.extend(["--stats", "json", "--max-lag", "off", "--control", "none"].map(String::from));
    for (t, words) in pairs {
        args.extend(["--pair", &t.emu_a, &t.emu_b].map(String::from));
        args.extend(words.iter().map(|w| w.to_string()));
    }
    args
}

/// Starts `linkem ARGS` and returns once it says its stages run, with
/// threads reading its stdout and stderr.
fn spawn_ready(
    args: &[String],
) -> (
    Child,
    std::thread::JoinHandle<String>,
    std::thread::JoinHandle<String>,
) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("linkem starts");
    let mut out = child.stdout.take().unwrap();
    let stdout = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = out.read_to_string(&mut text);
        text
    });
    // Opening 40 interfaces and making each delay line's first stretch
    // resident takes seconds on a loaded machine: traffic starts once linkem
    // says its stages run (frames sent before would wait in the rings).
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let stderr = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut text = String::new();
        let mut line = String::new();
        while err.read_line(&mut line).unwrap_or(0) > 0 {
            if line.contains("pairs in one process") {
                let _ = ready_tx.send(());
            }
            text.push_str(&line);
            line.clear();
        }
        text
    });
    let started = Instant::now();
    if ready.recv_timeout(Duration::from_secs(60)).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "linkem did not start its stages within 60 s: {}",
            stderr.join().unwrap()
        );
    }
    eprintln!(
        "stages running {:.1} s after the start",
        started.elapsed().as_secs_f64()
    );
    (child, stdout, stderr)
}

fn twenty_pairs_with_delay_5ms_in_one_process(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let t0 = Instant::now();
    let topos: Vec<Topology> = (0..PAIRS).map(|_| topology("lkpr")).collect();
    eprintln!(
        "{PAIRS} topologies up in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let pairs: Vec<_> = topos.iter().map(|t| (t, &["delay", "5ms"][..])).collect();
    let (child, stdout, stderr) = spawn_ready(&bridge_args(&["--backend", backend], &pairs));
    // Each pair's first frames warm its path (a first ping each).
    std::thread::sleep(Duration::from_millis(200));
    let threads = std::fs::read_dir(format!("/proc/{}/task", child.id()))
        .unwrap()
        .count();
    // Every pair at once: ping's own interval paces each.
    const PINGS: u32 = 40;
    let medians: Vec<f64> = std::thread::scope(|s| {
        let handles: Vec<_> = topos
            .iter()
            .map(|t| s.spawn(move || ping_median_ms(t, PINGS)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Idle: no traffic (the neighbours are pinned, IPv6 is off on linkem's
    // ends); what the process spends over 2 s.
    std::thread::sleep(Duration::from_millis(300));
    let before = cpu_ticks(child.id());
    let idle_from = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let ticks = cpu_ticks(child.id()) - before;
    let idle_cpu = ticks as f64 / clock_ticks_per_s() as f64 / idle_from.elapsed().as_secs_f64();
    let (v, stderr) = stop(child, stdout, stderr);
    eprintln!(
        "{backend}: {PAIRS} pairs, {threads} threads; ping median RTT per pair (ms): {}; \
         idle CPU {:.2} % of one core",
        medians
            .iter()
            .map(|m| format!("{m:.3}"))
            .collect::<Vec<_>>()
            .join(" "),
        idle_cpu * 100.0
    );
    // Three stages and the main thread; no control sockets (--control none).
    assert!(
        threads <= 6,
        "{threads} threads for {PAIRS} pairs (expected the three stages and the main thread)"
    );
    let mut sorted = medians.clone();
    sorted.sort_by(f64::total_cmp);
    let median_of_medians = sorted[PAIRS / 2];
    // The issue asks 50 µs of 10 ms at the median; this shared VM's
    // scheduling and ping's own timing add to it: 10 ms + 1 ms, and the
    // median of the pairs within 0.3 ms.
    for (i, m) in medians.iter().enumerate() {
        assert!(
            (10.0..11.0).contains(m),
            "pair {i} ({}): median RTT {m:.3} ms, expected 10 ms (5 ms each way)",
            topos[i].emu_a
        );
    }
    assert!(
        (10.0..10.3).contains(&median_of_medians),
        "median over the pairs {median_of_medians:.3} ms"
    );
    // The issue asks below 5 %. Idle, every stage and the pager sleep with no
    // timeout; what is left is the main thread's 20 ms loop: 0.15-0.35 %
    // measured over 20 s (scripts/bench-idle.sh; 4.5-6 % when the stages woke
    // every 10 ms). 2 % is margin for 2 s of 10 ms ticks on a loaded VM.
    assert!(
        idle_cpu < 0.02,
        "idle {PAIRS}-pair bridge used {:.2} % of a core",
        idle_cpu * 100.0
    );
    let pairs = v["pairs"].as_array().expect("per-pair counts");
    assert_eq!(pairs.len(), PAIRS, "{v}");
    for (i, (p, t)) in pairs.iter().zip(&topos).enumerate() {
        assert_eq!(p["pair"], format!("{}-{}", t.emu_a, t.emu_b));
        assert_eq!(p["a"], t.emu_a.as_str());
        for (side, d) in p["directions"].as_array().unwrap().iter().enumerate() {
            assert_counts_add_up(d, &format!("pair {i} direction {side}"));
            let received = d["received"].as_u64().unwrap();
            let delivered = d["fates"]["delivered"].as_u64().unwrap();
            // Each ping and each reply crossed its own pair once, and no
            // other pair's frames came through it.
            assert!(
                (PINGS as u64 * 9 / 10..=PINGS as u64 + 20).contains(&received),
                "pair {i} direction {side}: {received} frames received for {PINGS} pings \
                 ({d}); stderr: {stderr}"
            );
            assert_eq!(delivered, received, "pair {i} direction {side}: {d}");
        }
    }
    let seeds: std::collections::HashSet<u64> =
        pairs.iter().map(|p| p["seed"].as_u64().unwrap()).collect();
    assert_eq!(seeds.len(), PAIRS, "each pair its own seed");
}

/// Coalescing in a bridge of several pairs: bulk TCP through two pairs at
/// once (stock hosts: TSO and checksum offload on), one plain, one `delay
/// 1ms`, through one AF_PACKET linkem. Each pair's data arrive and each
/// pair's a->b counts super-frames of its own; a held super-frame that the
/// shared output thread never sent would stall the flow (and the bytes).
#[test]
fn two_pairs_hand_their_hosts_super_frames_each() {
    let _g = serial();
    if skip() {
        return;
    }
    let topos: Vec<Topology> = (0..2).map(|_| topology_with("lkpg", true)).collect();
    let pairs: Vec<_> = topos.iter().zip([&[][..], &["delay", "1ms"][..]]).collect();
    // The plain pair through linkem, not the kernel path (kernel_path_netns).
    let args = bridge_args(
        &[
            "--backend",
            "packet",
            "--coalesce",
            "on",
            "--kernel-path",
            "off",
        ],
        &pairs,
    );
    let (child, stdout, stderr) = spawn_ready(&args);
    std::thread::sleep(Duration::from_millis(200));
    let results: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = topos
            .iter()
            .map(|t| s.spawn(move || iperf3(t, &["-t", "3", "-O", "1", "-w", "4M"])))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (v, stderr) = stop(child, stdout, stderr);
    let pairs = v["pairs"].as_array().expect("per-pair counts");
    assert_eq!(pairs.len(), 2, "{v}");
    for (i, (p, r)) in pairs.iter().zip(&results).enumerate() {
        let bytes = r["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
        let bps = r["end"]["sum_received"]["bits_per_second"]
            .as_f64()
            .unwrap_or(0.0);
        let d = &p["directions"][0];
        let (coalesced, supers) = (
            d["coalesced"].as_u64().unwrap(),
            d["super_frames"].as_u64().unwrap(),
        );
        let delivered = d["fates"]["delivered"].as_u64().unwrap();
        eprintln!(
            "pair {i}: TCP {:.0} Mbit/s, {bytes} bytes; a->b delivered {delivered}, \
             {coalesced} of them in {supers} super-frames",
            bps / 1e6
        );
        assert!(
            bytes > 10_000_000,
            "pair {i}: {bytes} bytes arrived ({d}); stderr: {stderr}"
        );
        assert!(
            supers > 0 && coalesced > supers,
            "pair {i}: no super-frames sent ({d})"
        );
        assert!(coalesced <= delivered, "pair {i}: {d}");
        for (side, d) in p["directions"].as_array().unwrap().iter().enumerate() {
            assert_counts_add_up(d, &format!("pair {i} direction {side}"));
            assert_eq!(d["fates"]["too-big"], 0, "pair {i} direction {side}: {d}");
        }
    }
}

/// Issue 34 item 11: host B's namespace of one pair of three is deleted
/// (taking the peer of that pair's IF_B with it) under a running `--pair`
/// process. That pair stops, reported on stderr and in its counts
/// (`stopped`), its counts still adding up; the other two pairs still
/// forward; the process does not spin; SIGINT ends it with status 0. Before,
/// the send error ended the whole process (or it spun at a full core).
#[test]
fn peer_deleted_under_one_of_three_pairs_leaves_the_others_forwarding() {
    let _g = serial();
    if skip() {
        return;
    }
    let topos: Vec<Topology> = (0..3).map(|_| topology("lkdp")).collect();
    let pairs: Vec<_> = topos.iter().map(|t| (t, &["delay", "5ms"][..])).collect();
    // With the control sockets: `linkem ctl stats` names a stopped pair too.
    let mut args = bridge_args(&["--backend", "packet"], &pairs);
    let at = args.iter().position(|a| a == "--control").unwrap();
    args.drain(at..at + 2);
    let (child, stdout, stderr) = spawn_ready(&args);
    std::thread::sleep(Duration::from_millis(200));
    for t in &topos {
        ping_median_ms(t, 3);
    }
    let gone = &topos[1];
    let o = Command::new("ip")
        .args(["netns", "del", &gone.ns_b])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The namespace goes in the kernel's own time: wait until the veth did.
    let t = Instant::now();
    while std::path::Path::new(&format!("/sys/class/net/{}", gone.emu_b)).exists() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{} not deleted",
            gone.emu_b
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        child.id() > 0 && std::path::Path::new(&format!("/proc/{}/stat", child.id())).exists(),
        "linkem ended with the loss of one pair"
    );
    let before = cpu_ticks(child.id());
    let from = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let cpu = (cpu_ticks(child.id()) - before) as f64
        / clock_ticks_per_s() as f64
        / from.elapsed().as_secs_f64();
    let ctl_stats = |t: &Topology| {
        let o = Command::new(env!("CARGO_BIN_EXE_linkem"))
            .args([
                "ctl",
                "--name",
                &format!("{}-{}", t.emu_a, t.emu_b),
                "stats",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let said = ctl_stats(gone);
    assert!(
        said.contains(&format!("stopped: interface '{}' is gone", gone.emu_b)),
        "linkem ctl stats of the stopped pair: {said}"
    );
    let said = ctl_stats(&topos[0]);
    assert!(!said.contains("stopped"), "a running pair: {said}");
    for i in [0, 2] {
        let rtt = ping_median_ms(&topos[i], 10);
        assert!(
            (10.0..15.0).contains(&rtt),
            "pair {i} after pair 1 went: median RTT {rtt:.3} ms"
        );
    }
    let (v, stderr) = stop(child, stdout, stderr);
    eprintln!(
        "CPU after the loss {:.2} % of a core; {stderr}",
        cpu * 100.0
    );
    assert!(cpu < 0.1, "{:.1} % of a core after the loss", cpu * 100.0);
    let name = format!("{}-{}", gone.emu_a, gone.emu_b);
    assert!(
        stderr.contains(&format!("pair {name}"))
            && stderr.contains(&format!("interface '{}' is gone", gone.emu_b)),
        "the loss is not reported naming the pair and interface: {stderr}"
    );
    let pairs = v["pairs"].as_array().expect("per-pair counts");
    for (i, p) in pairs.iter().enumerate() {
        let stopped = &p["stopped"];
        if i == 1 {
            assert!(
                stopped.as_str().is_some_and(|s| s.contains("is gone")),
                "pair {i}: {p}"
            );
        } else {
            assert!(stopped.is_null(), "pair {i}: {p}");
            let received = p["directions"][0]["received"].as_u64().unwrap();
            assert!(received >= 13, "pair {i} a->b received {received}: {p}");
        }
        for (side, d) in p["directions"].as_array().unwrap().iter().enumerate() {
            assert_counts_add_up(d, &format!("pair {i} direction {side}"));
        }
    }
}

/// Veth pairs in the root namespace, named `{prefix}{i}a`/`{prefix}{i}b`
/// (linkem's ends) with peers `...pa`/`...pb`, deleted on drop.
struct Veths(Vec<String>);

impl Veths {
    fn new(prefix: &str, n: usize) -> Veths {
        let mut made = Veths(Vec::new());
        for i in 0..n {
            for side in ["a", "b"] {
                let name = format!("{prefix}{i}{side}");
                let peer = format!("{prefix}{i}p{side}");
                let o = Command::new("ip")
                    .args(["link", "add", &name, "type", "veth", "peer", "name", &peer])
                    .output()
                    .unwrap();
                assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
                made.0.push(name.clone());
                for l in [&name, &peer] {
                    let _ = Command::new("ip").args(["link", "set", l, "up"]).output();
                }
            }
        }
        made
    }
}

impl Drop for Veths {
    fn drop(&mut self) {
        for l in &self.0 {
            let _ = Command::new("ip").args(["link", "del", l]).output();
        }
    }
}

/// Issue 34 item 12: SIGTERM while `--pair` opens its interfaces stops the
/// start-up within a bound (what was opened closed on the way out), rather
/// than after every pair is open. Before, the signal was ignored until the
/// start-up ended (90 s for 200 pairs).
#[test]
fn sigterm_during_the_start_up_of_many_pairs_ends_it_promptly() {
    let _g = serial();
    if skip() {
        return;
    }
    const N: usize = 60;
    let prefix = netns::unique_prefix("lkdt");
    // Interface names are at most 15 bytes: the prefix, the index, 2 letters.
    let prefix = &prefix[..prefix.len().min(10)];
    let veths = Veths::new(prefix, N);
    let mut args: Vec<String> = ["bridge", "--backend", "packet", "--stats", "json"]
        .map(String::from)
        .to_vec();
    for i in 0..N {
        args.extend([
            "--pair".into(),
            format!("{prefix}{i}a"),
            format!("{prefix}{i}b"),
        ]);
        args.extend(["delay", "5ms"].map(String::from));
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("linkem starts");
    // While it checks or opens the interfaces (0.1-0.6 s for 60 pairs).
    std::thread::sleep(Duration::from_millis(250));
    // Safety: kill with a pid we own.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(3) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("linkem still starting {N} pairs 3 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    eprintln!(
        "ended {:.2} s after SIGTERM ({status}): {}",
        t.elapsed().as_secs_f64(),
        stderr.lines().last().unwrap_or("")
    );
    if !stderr.contains("pairs in one process") {
        // Stopped during the start-up: it says so.
        assert!(
            stderr.contains("stopped by a signal while starting"),
            "{status}: {stderr}"
        );
    }
    drop(veths);
}
