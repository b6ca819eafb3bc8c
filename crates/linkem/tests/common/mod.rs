//! Helpers the live bridge tests share: one test at a time, namespaces torn
//! down by the topology's Drop, `linkem bridge` started and stopped with its
//! counts checked, ping and iperf3 from inside the namespaces.

#![allow(dead_code)]

pub mod ctl;

/// One test per backend for each scenario: `SCENARIO::packet` and `SCENARIO::xdp`
/// (unused by the control tests, which run on one backend).
#[allow(unused_macros)]
macro_rules! on_both_backends {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            #[test]
            fn packet() {
                super::$scenario("packet");
            }

            #[test]
            fn xdp() {
                super::$scenario("xdp");
            }
        }
    )*};
}

use linkem_io::netns::{self, Topology};
use serde_json::Value;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Live tests share two cores: run them one at a time.
pub static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn skip() -> bool {
    match netns::check_prerequisites() {
        Err(e @ netns::NetnsError::NotRoot) => {
            eprintln!("skipped: {e}");
            true
        }
        Err(e) => panic!("{e}"),
        Ok(()) => {
            for (program, package) in [("iperf3", "iperf3"), ("ping", "iputils-ping")] {
                if Command::new(program).arg("-V").output().is_err() {
                    panic!("`{program}` not found: install {package} (e.g. `apt-get install {package}`)");
                }
            }
            false
        }
    }
}

pub fn topology(tag: &str) -> Topology {
    topology_with(tag, false)
}

/// `stock`: the hosts' interfaces keep the kernel's defaults (checksum offload,
/// TSO/GSO on), as containers get them; otherwise offloads are off on the hosts.
pub fn topology_with(tag: &str, stock: bool) -> Topology {
    let prefix = netns::unique_prefix(tag);
    let topo = if stock {
        Topology::two_hosts_stock(&prefix)
    } else {
        Topology::two_hosts(&prefix)
    }
    .expect("namespaces come up");
    // Static neighbours: a lost ARP request must not look like a lost packet.
    topo.pin_neighbours().expect("neighbour entries");
    topo
}

/// A second address on a host's interface `dev` in namespace `ns`.
pub fn add_address(topo: &Topology, ns: &str, dev: &str, addr: Ipv4Addr) {
    let a = format!("{addr}/{}", topo.prefix_len);
    let o = Command::new("ip")
        .args(["-n", ns, "addr", "add", &a, "dev", dev])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

pub struct Bridge {
    pub child: Child,
    /// linkem's stdout, read as it comes: with `--stats-interval` the lines
    /// would otherwise fill the pipe, and linkem would block writing them
    /// (and so not stop on SIGINT).
    stdout: Option<std::thread::JoinHandle<String>>,
}

impl Bridge {
    /// Starts `linkem bridge` between the topology's emulator ends. Unless
    /// `args` set `--max-lag`, it runs with `--max-lag off`: on this shared
    /// VM a stall of the whole machine for more than the default 5 ms would
    /// turn the frames in it into `late` drops, which tests of RTTs, rates
    /// and counts would take for the model's losses. Max-lag has tests of
    /// its own, and those give it.
    pub fn start(topo: &Topology, backend: &str, args: &[&str]) -> Bridge {
        let child = Command::new(env!("CARGO_BIN_EXE_linkem"))
            .args([
                "bridge",
                &topo.emu_a,
                &topo.emu_b,
                "--backend",
                backend,
                "--stats",
                "json",
            ])
            .args(args)
            .args(max_lag_off_unless_given(args))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("linkem starts");
        let mut child = child;
        let socket = linkem_ctl::bridge_socket_path(args, &topo.emu_a, &topo.emu_b);
        wait_until_serving(&mut child, socket.as_deref());
        let mut out = child.stdout.take().expect("piped stdout");
        let stdout = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = out.read_to_string(&mut text);
            text
        });
        Bridge {
            child,
            stdout: Some(stdout),
        }
    }

    pub fn signal(&self, sig: libc::c_int) {
        // Safety: kill with a pid we own.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// SIGINT, then the final counts. Fails if linkem does not exit 0 within 10 s.
    pub fn stop(self) -> Value {
        self.stop_with_stderr().0
    }

    /// [`Bridge::stop`], and what linkem wrote on stderr.
    pub fn stop_with_stderr(self) -> (Value, String) {
        let (mut lines, stderr) = self.stop_with_lines();
        (lines.pop().expect("a final line"), stderr)
    }

    /// [`Bridge::stop`], with every stats line printed (the periodic ones of
    /// `--stats-interval`, then the final one), and linkem's stderr.
    pub fn stop_with_lines(mut self) -> (Vec<Value>, String) {
        self.signal(libc::SIGINT);
        let t = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "linkem did not stop on SIGINT"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let status = self.child.wait().unwrap();
        let stdout = self.stdout.take().unwrap().join().unwrap();
        let mut stderr = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert!(status.success(), "linkem failed: {stderr}");
        let lines: Vec<Value> = stdout
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let v = lines
            .last()
            .unwrap_or_else(|| panic!("no counts printed; stderr: {stderr}"));
        assert_eq!(v["final"], true);
        for d in v["directions"].as_array().unwrap() {
            assert_counts_add_up(
                d,
                "received + segmented = delivered + drops by reason + in flight",
            );
        }
        (lines, stderr)
    }
}

/// `--max-lag off` unless `args` choose a max-lag (see [`Bridge::start`]).
pub fn max_lag_off_unless_given(args: &[&str]) -> &'static [&'static str] {
    if args.contains(&"--max-lag") {
        &[]
    } else {
        &["--max-lag", "off"]
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        // SIGINT first, so linkem removes its control socket and detaches;
        // only one that does not exit in time is killed. A child already
        // waited for (by `stop`) is never signalled again.
        if matches!(self.child.try_wait(), Ok(None)) {
            self.signal(libc::SIGINT);
            let t = Instant::now();
            while matches!(self.child.try_wait(), Ok(None)) && t.elapsed() < Duration::from_secs(5)
            {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            return;
        }
        // A test failed with the bridge running: its counts (by fate, per
        // direction and per pipe) and its stderr tell where the frames went.
        let mut stderr = String::new();
        let stdout = self
            .stdout
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        eprintln!(
            "linkem bridge at the failure: last counts {}\nstderr: {stderr}",
            stdout.lines().last().unwrap_or("(none)")
        );
    }
}

/// Returns once the `linkem bridge` `child` serves at `socket` (its ports
/// open, its pipeline running), with the client that found it serving; with
/// no socket to ask, after twice the time it takes to start on an idle
/// machine. Panics with its stderr if it exits first. Not a fixed sleep:
/// traffic sent before it forwards would be lost on no link's account, and a
/// loaded machine takes longer than any sleep.
pub fn wait_until_serving(
    child: &mut std::process::Child,
    socket: Option<&std::path::Path>,
) -> Option<linkem_ctl::Client> {
    let served = match socket {
        Some(socket) => {
            linkem_ctl::Client::connect_when_serving(socket, Duration::from_secs(30), || {
                matches!(child.try_wait(), Ok(None))
            })
            .map(Some)
        }
        None => {
            std::thread::sleep(Duration::from_millis(400));
            Ok(None)
        }
    };
    if let Some(status) = child.try_wait().unwrap() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        panic!("linkem bridge exited at start ({status}): {err}");
    }
    served.unwrap_or_else(|e| {
        let _ = child.kill();
        panic!("linkem bridge did not start: {e}");
    })
}

pub fn fate(v: &Value, dir: usize, name: &str) -> u64 {
    v["directions"][dir]["fates"][name].as_u64().unwrap()
}

/// Runs `f` on a thread inside network namespace `ns`.
pub fn in_ns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            netns::enter(ns).expect("the namespace exists and we are root");
            f()
        })
        .join()
        .expect("namespace thread")
    })
}

/// The first of up to `attempts` runs of a live measure that meets its bar
/// (`measure` returns its report as `Err` when it does not). Why: this VM is
/// shared, and its host takes the cores for seconds at a time (`steal` in
/// /proc/stat: 20-46 % of the time the cores wanted to run, in spells of up
/// to 21 s, while one CI run of this suite went on), so that a ping's median
/// moved 2 ms or TCP lost a third of a link; a measure of a few seconds that
/// such a spell falls into says nothing of linkem. A defect (a wrong delay, a
/// halved rate, a lost tick) fails every attempt, and the panic lists each
/// attempt's report with the host's share of it.
///
/// Before each attempt after the first it waits, up to 15 s, for the host to
/// give the cores back ([`wait_for_the_host`]); an attempt that missed while
/// the host took more than [`HOST_BUSY`] of the time is not counted, up to
/// twice `attempts` runs in all. Only for bars that a loaded machine can
/// miss: counts that must add up are asserted at once.
pub fn within_attempts<T>(
    what: &str,
    attempts: u32,
    mut measure: impl FnMut(u32) -> Result<T, String>,
) -> T {
    let mut reports = Vec::new();
    let mut counted = 0;
    for run in 1..=2 * attempts {
        if run > 1 {
            wait_for_the_host(Duration::from_secs(15));
        }
        let before = CpuTimes::now();
        match measure(run) {
            Ok(v) => return v,
            Err(report) => {
                let host = before.host_share_since();
                let void = host > HOST_BUSY;
                counted += u32::from(!void);
                let line = format!(
                    "run {run}{}: {report} (the host took {:.0} % of the time this machine's \
                     cores wanted)",
                    if void { ", not counted" } else { "" },
                    host * 100.0
                );
                eprintln!("{what}: {line}");
                reports.push(line);
                if counted >= attempts {
                    break;
                }
            }
        }
    }
    panic!(
        "{what}: missed in {} runs, {counted} of them counted ({attempts} allowed):\n{}",
        reports.len(),
        reports.join("\n")
    )
}

/// The share of the time this machine's cores wanted to run that the host
/// took, above which a missed attempt says nothing of linkem
/// ([`within_attempts`]); a quiet spell here is 0-3 %.
pub const HOST_BUSY: f64 = 0.10;

/// This machine's CPU time so far, from /proc/stat's first line, in clock
/// ticks: what its cores ran (user, nice, system, irq, softirq) and what the
/// host took while they wanted to run (steal).
#[derive(Clone, Copy, Debug)]
pub struct CpuTimes {
    ran: u64,
    stolen: u64,
}

impl CpuTimes {
    pub fn now() -> CpuTimes {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let f: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        let at = |i: usize| f.get(i).copied().unwrap_or(0);
        CpuTimes {
            ran: at(0) + at(1) + at(2) + at(5) + at(6),
            stolen: at(7),
        }
    }

    /// Of the time this machine's cores wanted to run since `self`, the
    /// share the host took (0 when they wanted none).
    pub fn host_share_since(&self) -> f64 {
        let now = CpuTimes::now();
        let ran = now.ran.saturating_sub(self.ran);
        let stolen = now.stolen.saturating_sub(self.stolen);
        if ran + stolen == 0 {
            0.0
        } else {
            stolen as f64 / (ran + stolen) as f64
        }
    }
}

/// Spins a core for 300 ms at a time, a second apart, until the host takes
/// at most 5 % of that (an idle machine's steal says nothing: its cores
/// want nothing), or `limit` has passed; returns the last share seen.
pub fn wait_for_the_host(limit: Duration) -> f64 {
    let start = Instant::now();
    loop {
        let before = CpuTimes::now();
        let spin = Instant::now();
        while spin.elapsed() < Duration::from_millis(300) {
            std::hint::spin_loop();
        }
        let share = before.host_share_since();
        if share <= 0.05 || start.elapsed() >= limit {
            return share;
        }
        std::thread::sleep(Duration::from_millis(700));
    }
}

pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median ping RTT from A to B in ms.
/// The `time=` of each answer in ping's output `out`, in ms.
pub fn ping_times_ms(out: &str) -> Vec<f64> {
    out.lines()
        .filter_map(|l| {
            l.split("time=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// Every answered RTT in ping's output `out` of `count` pings, in ms; an
/// `Err` naming the output when fewer than `least` were answered.
pub fn answered_rtts_ms(out: &str, count: u32, least: u32) -> Result<Vec<f64>, String> {
    let rtts = ping_times_ms(out);
    if (rtts.len() as u32) < least {
        return Err(format!(
            "{} of {count} pings answered, fewer than {least}: {out}",
            rtts.len()
        ));
    }
    Ok(rtts)
}

pub fn ping_median_ms(topo: &Topology, count: u32) -> f64 {
    ping_median_ms_to(topo, topo.addr_b, count)
}

/// Median ping RTT from A's namespace to `dst` in ms.
pub fn ping_median_ms_to(topo: &Topology, dst: Ipv4Addr, count: u32) -> f64 {
    median(ping_rtts_ms_to(topo, dst, count))
}

/// The fastest of `count` pings from A to B, in ms: what the path adds at
/// least. A stall of the machine delays some pings, rarely all of them, so a
/// bound on the fastest holds through one where a bound on the median fails.
pub fn ping_min_ms(topo: &Topology, count: u32) -> f64 {
    ping_rtts_ms_to(topo, topo.addr_b, count)
        .into_iter()
        .fold(f64::INFINITY, f64::min)
}

/// Five pings from B's namespace to A's address, 100 ms apart, each given
/// up after 1 s (without `-W`, ping lingers 10 s for a reply that cannot
/// come): for a path that is expected to be cut.
pub fn ping_a_from_b_briefly(topo: &Topology) -> std::process::Output {
    topo.exec_in_b(&[
        "ping",
        "-n",
        "-c",
        "5",
        "-i",
        "0.1",
        "-W",
        "1",
        &topo.addr_a.to_string(),
    ])
    .unwrap()
}

/// Every answered ping's RTT from A's namespace to `dst`, in ms.
pub fn ping_rtts_ms_to(topo: &Topology, dst: Ipv4Addr, count: u32) -> Vec<f64> {
    ping_rtts_ms_least(topo, dst, count, count * 9 / 10)
}

/// As [`ping_rtts_ms_to`], through a link that loses on purpose: at least
/// `least` of the `count` pings must be answered.
pub fn ping_rtts_ms_least(topo: &Topology, dst: Ipv4Addr, count: u32, least: u32) -> Vec<f64> {
    let o = topo
        .exec_in_a(&[
            "ping",
            "-c",
            &count.to_string(),
            "-i",
            "0.02",
            &dst.to_string(),
        ])
        .unwrap();
    answered_rtts_ms(&String::from_utf8_lossy(&o.stdout), count, least)
        .unwrap_or_else(|e| panic!("{e}"))
}

pub fn iperf3(topo: &Topology, args: &[&str]) -> Value {
    let mut server = topo
        .spawn_in_b(&["iperf3", "-s", "-1", "-p", "5301"])
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let b = topo.addr_b.to_string();
    let mut all = vec!["iperf3", "-c", &b, "-p", "5301", "-J"];
    all.extend_from_slice(args);
    let o = topo.exec_in_a(&all).unwrap();
    let _ = server.kill();
    let _ = server.wait();
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "iperf3 output ({e}): {}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

/// TCP goodput (receiver side) in bit/s from A to B over `secs` s, the first second left out.
pub fn tcp_goodput_bps(topo: &Topology, extra: &[&str], secs: u32) -> f64 {
    let t = secs.to_string();
    let mut args = vec!["-t", &t, "-O", "1"];
    args.extend_from_slice(extra);
    let v = iperf3(topo, &args);
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or_else(|| panic!("iperf3 TCP result: {v}"))
}

/// An `iperf3 -J` client run's goodput in bit/s: the receiver's over the
/// whole run, and the median of its one-second rates (those not omitted). A
/// stall of the machine costs a TCP flow the second it falls in (and its
/// recovery), not the median.
pub fn iperf3_goodput_bps(run: &Value) -> (f64, f64) {
    let whole = run["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or_else(|| panic!("iperf3 reported no goodput: {run}"));
    let rates: Vec<f64> = run["intervals"]
        .as_array()
        .map(|ivs| {
            ivs.iter()
                .filter(|iv| iv["sum"]["omitted"] != true)
                .filter_map(|iv| iv["sum"]["bits_per_second"].as_f64())
                .collect()
        })
        .unwrap_or_default();
    assert!(!rates.is_empty(), "iperf3 reported no interval: {run}");
    (whole, median(rates))
}

/// Sends `n` datagrams of `len` bytes (UDP payload) from A to B, `gap` apart (zero: as fast
/// as possible); returns, per sequence number, the one-way delay in ns if it arrived.
pub fn udp_flow(
    topo: &Topology,
    from_a: bool,
    n: u32,
    len: usize,
    gap: Duration,
) -> Vec<Option<u64>> {
    let port = 40000 + (std::process::id() % 20000) as u16;
    udp_flow_to(topo, from_a, n, len, gap, port)
}

/// [`udp_flow`] to the receiver's UDP `port` (several flows at once each
/// take their own).
pub fn udp_flow_to(
    topo: &Topology,
    from_a: bool,
    n: u32,
    len: usize,
    gap: Duration,
    port: u16,
) -> Vec<Option<u64>> {
    let (src_ns, dst_ns, dst) = if from_a {
        (&topo.ns_a, &topo.ns_b, topo.addr_b)
    } else {
        (&topo.ns_b, &topo.ns_a, topo.addr_a)
    };
    std::thread::scope(|s| {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let receiver = s.spawn(move || {
            in_ns(dst_ns, || {
                let sock = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port)).unwrap();
                // Best effort, as before: the receive buffer only makes drops rarer.
                let _ = linkem_io::sys::set_int_option(
                    &sock,
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUFFORCE,
                    8 << 20,
                );
                sock.set_read_timeout(Some(Duration::from_millis(1500)))
                    .unwrap();
                ready_tx.send(()).unwrap();
                let mut got = vec![None; n as usize];
                let mut buf = vec![0u8; 65536];
                while let Ok(k) = sock.recv(&mut buf) {
                    let t = now_ns();
                    if k >= 12 {
                        let seq = u32::from_be_bytes(buf[0..4].try_into().unwrap());
                        let sent = u64::from_be_bytes(buf[4..12].try_into().unwrap());
                        if let Some(slot) = got.get_mut(seq as usize) {
                            *slot = Some(t.saturating_sub(sent));
                        }
                    }
                }
                got
            })
        });
        ready_rx.recv().unwrap();
        in_ns(src_ns, || {
            let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
            let mut buf = vec![0u8; len.max(12)];
            let start = Instant::now();
            for seq in 0..n {
                let due = gap * seq;
                // Sleep, never spin: on two cores a spinning sender would take the CPU
                // linkem needs. Each datagram carries its real send time, so a late send
                // does not distort the measured delay.
                let now = start.elapsed();
                if due > now {
                    std::thread::sleep(due - now);
                }
                buf[0..4].copy_from_slice(&seq.to_be_bytes());
                buf[4..12].copy_from_slice(&now_ns().to_be_bytes());
                // ENOBUFS under overload is the point of some tests: ignore it.
                let _ = sock.send_to(&buf, SocketAddrV4::new(dst, port));
            }
        });
        receiver.join().unwrap()
    })
}

/// The count invariant of one direction of `--stats json` (or `stats`):
/// received + segmented = every fate + in flight; `what` names the moment.
pub fn assert_counts_add_up(d: &serde_json::Value, what: &str) {
    let fates: u64 = d["fates"]
        .as_object()
        .unwrap()
        .values()
        .map(|x| x.as_u64().unwrap())
        .sum();
    assert_eq!(
        d["received"].as_u64().unwrap() + d["segmented"].as_u64().unwrap(),
        fates + d["in_flight"].as_u64().unwrap(),
        "{what}: {d}"
    );
}

/// A bridge run by [`bridge_under_storm`]: its final `--stats json`, its
/// stderr, and how many control changes it applied during the traffic.
pub struct StormRun {
    pub stats: Value,
    pub stderr: String,
    pub applied: u32,
}

/// Runs `linkem bridge` between the topology's emulator ends with `--events
/// events`, `--max-lag off` and `args`; sends 3000 UDP frames each way while
/// `changes` (request lines, in turn) go over the control socket, every one
/// of which must succeed; then stops it with SIGTERM and returns what it said.
pub fn bridge_under_storm(
    topo: &Topology,
    backend: &str,
    events: &std::path::Path,
    args: &[&str],
    changes: &[&str],
) -> StormRun {
    let name = format!("{}-{}", topo.emu_a, std::process::id());
    let socket = linkem_ctl::default_socket_path(&name);
    let child = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(["bridge", &topo.emu_a, &topo.emu_b, "--backend", backend])
        .args(["--stats", "json", "--name", &name, "--duration", "60"])
        .args(["--max-lag", "off", "--events", events.to_str().unwrap()])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("linkem starts");
    let mut child = child;
    let mut client = wait_until_serving(&mut child, Some(&socket)).expect("a socket to ask");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let applied = std::thread::scope(|s| {
        let storm = s.spawn(|| {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let line = changes[n as usize % changes.len()];
                let v = client.request_json(line).unwrap();
                assert_eq!(v["ok"], true, "{line}: {v}");
                n += 1;
                std::thread::sleep(Duration::from_micros(500));
            }
            n
        });
        let ab = s.spawn(|| udp_flow(topo, true, 3000, 200, Duration::from_micros(300)));
        let ba = udp_flow(topo, false, 3000, 200, Duration::from_micros(300));
        ab.join().unwrap();
        drop(ba);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        storm.join().unwrap()
    });
    drop(client);
    // The receivers waited after their last packet: nothing is held any
    // more, so the run decided every frame its model saw.
    // Safety: kill with a pid we own.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "linkem failed: {stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stats: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    eprintln!("{backend}: {applied} changes applied during the traffic");
    assert!(applied > 50, "the storm ran: {applied} changes");
    StormRun {
        stats,
        stderr,
        applied,
    }
}

/// Link words for a storm run: jitter with correlation, Gilbert-Elliott loss,
/// duplication, a rate and a queue, seeded.
pub const STORM_LINK_WORDS: [&str; 16] = [
    "delay",
    "2ms",
    "1ms",
    "25%",
    "loss",
    "gemodel",
    "2%",
    "30%",
    "duplicate",
    "3%",
    "rate",
    "20mbit",
    "queue",
    "50",
    "seed",
    "7",
];

/// The control requests of a storm run with link words, sent in turn.
pub const STORM_LINK_CHANGES: [&str; 3] = [
    "link both delay 3ms 1ms 25% loss gemodel 2% 30% duplicate 3% rate 20mbit queue 50",
    "link a-to-b delay 2ms 500us loss 1% rate 10mbit queue 20",
    "link b-to-a delay 1ms duplicate 5% rate 30mbit queue 80",
];

/// An `--events` file's lines after its header.
pub fn event_lines(path: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(linkem_core::model::EVENTS_HEADER));
    lines.map(str::to_string).collect()
}
