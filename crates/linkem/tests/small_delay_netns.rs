//! No floor under small delays (issue 21 item 3): ping RTT through linkem with
//! `delay 0us` and `delay 50us`, beside the Linux bridge between the same
//! veths in the same test, stock offloads, default real-time policy, on each
//! backend. A frame due before the output thread could wake is sent by the
//! stage that decided it, so neither delay pays a second wake-up per
//! direction. And an answer that needs a host process to run (a UDP echo
//! server) is taken while the stage lingers, not after a second wake-up.
//! Needs root (prints "skipped" otherwise).

#[macro_use]
mod common;

use common::*;
use linkem_io::netns::{self, Topology};
use std::net::UdpSocket;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Pings per measurement: enough for a stable median on a loaded machine.
const PINGS: u32 = 300;
/// Slack for this shared 2-core VM on top of what each bound is due.
const MARGIN_US: f64 = 150.0;

/// The Linux bridge between the emulator's two veth ends, removed on drop.
struct LinuxBridge {
    name: String,
}

impl LinuxBridge {
    fn up(topo: &Topology) -> LinuxBridge {
        let name = format!("{}br", topo.prefix);
        let ip = |args: &[&str]| {
            let o = Command::new("ip").args(args).output().unwrap();
            assert!(
                o.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        };
        ip(&["link", "add", &name, "type", "bridge"]);
        let br = LinuxBridge { name };
        ip(&["link", "set", &topo.emu_a, "master", &br.name]);
        ip(&["link", "set", &topo.emu_b, "master", &br.name]);
        ip(&["link", "set", &br.name, "up"]);
        std::thread::sleep(Duration::from_millis(500));
        br
    }
}

impl Drop for LinuxBridge {
    fn drop(&mut self) {
        // Deleting the bridge releases its ports for linkem.
        let _ = Command::new("ip")
            .args(["link", "del", &self.name])
            .output();
    }
}

/// RTTs in µs of `PINGS` pings 2 ms apart from A to B, sorted, after a warm-up.
fn rtts_us(topo: &Topology) -> Vec<f64> {
    let b = topo.addr_b.to_string();
    let _ = topo.exec_in_a(&["ping", "-n", "-q", "-c", "20", "-i", "0.002", &b]);
    let count = PINGS.to_string();
    let o = topo
        .exec_in_a(&["ping", "-n", "-c", &count, "-i", "0.002", "-W", "1", &b])
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let mut rtts: Vec<f64> = text
        .lines()
        .filter_map(|l| {
            let ms: f64 = l
                .split("time=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some(ms * 1000.0)
        })
        .collect();
    assert!(
        rtts.len() as u32 >= PINGS * 9 / 10,
        "ping answers {} of {PINGS}: {text}",
        rtts.len()
    );
    rtts.sort_by(f64::total_cmp);
    rtts
}

fn summary(rtts: &[f64]) -> String {
    format!(
        "median {:.0} µs, p90 {:.0} µs ({} replies)",
        rtts[rtts.len() / 2],
        rtts[rtts.len() * 9 / 10],
        rtts.len()
    )
}

/// Measures the Linux bridge, then linkem with `delay 0us` and `delay 50us`,
/// then the bridge again (its two medians' mean is the baseline, so load that
/// changes during the test falls on both sides).
fn small_delays_cost_no_wake_up_floor(backend: &str) {
    if skip() {
        return;
    }
    let _serial = serial();
    let topo = topology_with("sd21", true);
    let bridge = |topo: &Topology| {
        let br = LinuxBridge::up(topo);
        let r = rtts_us(topo);
        drop(br);
        r
    };
    // A spell of the host's load through the linkem rows (the CI once saw
    // `delay 50us` at a median of 364 µs, p90 918, beside the bridge's 26)
    // measures all five rows again.
    within_attempts(
        &format!("{backend}: small delays beside the bridge"),
        3,
        |_| {
            let before = bridge(&topo);
            let mut linkem = Vec::new();
            // `delay 0us` is a pass-through: the kernel path forwards it, and with
            // `--kernel-path off` linkem's stage does, without an output wake-up.
            for (delay, extra) in [
                ("0us", None),
                ("0us", Some("--kernel-path=off")),
                ("50us", None),
            ] {
                let mut args = vec!["delay", delay];
                args.extend(extra);
                let b = Bridge::start(&topo, backend, &args);
                let r = rtts_us(&topo);
                // Idle, the stages sleep with no timeout: the stop must wake them
                // (`Bridge::stop` allows 10 s, and a stage left asleep never ends).
                std::thread::sleep(Duration::from_millis(300));
                let t = std::time::Instant::now();
                let stats = b.stop();
                let label = format!(
                    "{delay}{}",
                    extra.map(|e| format!(" {e}")).unwrap_or_default()
                );
                eprintln!(
                    "{backend} delay {label}: stopped {:?} after SIGINT",
                    t.elapsed()
                );
                linkem.push((delay, label, r, stats));
            }
            let after = bridge(&topo);
            let base_us = (median(before.clone()) + median(after.clone())) / 2.0;
            let mut report = format!(
                "{backend}: Linux bridge {} then {}",
                summary(&before),
                summary(&after)
            );
            for (_, label, r, stats) in &linkem {
                report += &format!(
                    "; linkem delay {label}: {} (a->b delivered {} late {}, b->a delivered {} \
                     late {})",
                    summary(r),
                    fate(stats, 0, "delivered"),
                    fate(stats, 0, "late"),
                    fate(stats, 1, "delivered"),
                    fate(stats, 1, "late"),
                );
            }
            eprintln!("{report}");
            for (delay, label, r, _) in &linkem {
                // Two directions of the link's delay are due on top of the bridge.
                let due_us = if *delay == "0us" { 0.0 } else { 100.0 };
                let bound_us = base_us + due_us + MARGIN_US;
                let med = median(r.clone());
                if med > bound_us {
                    return Err(format!(
                        "delay {label}: median RTT {med:.0} µs through linkem, more than the \
                         Linux bridge's {base_us:.0} µs + {due_us:.0} µs due + {MARGIN_US:.0} \
                         µs margin ({bound_us:.0} µs): {report}"
                    ));
                }
            }
            Ok(())
        },
    );
}

/// Request and answer exchanges of the echo test, 5 ms apart: a linger per
/// exchange stays well within the stage's share of a quarter of a core.
const EXCHANGES: u64 = 200;

/// The stage's wake-ups (`rx_wakeups`, one count for the stage of both
/// directions) over `EXCHANGES` UDP exchanges with an echo server in B,
/// through `linkem bridge ... delay 0us` with `extra` arguments, the
/// exchanges answered, and the stage's yields that lost its core
/// (`rx_yields_lost`).
fn echo_wakeups(topo: &Topology, backend: &str, extra: &[&str]) -> (u64, u64, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let (ns_b, addr_b) = (topo.ns_b.clone(), topo.addr_b);
    let stop_server = stop.clone();
    let server = std::thread::spawn(move || {
        netns::enter(&ns_b).expect("the namespace exists and we are root");
        let sock = UdpSocket::bind((addr_b, 7007)).expect("echo server binds");
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let mut buf = [0u8; 64];
        while !stop_server.load(Ordering::Relaxed) {
            if let Ok((n, from)) = sock.recv_from(&mut buf) {
                let _ = sock.send_to(&buf[..n], from);
            }
        }
    });
    // Through linkem: the kernel path would forward a pass-through itself.
    let mut args = vec!["delay", "0us", "--kernel-path", "off"];
    args.extend_from_slice(extra);
    let b = Bridge::start(topo, backend, &args);
    let answered = in_ns(&topo.ns_a, || {
        let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
        sock.connect((topo.addr_b, 7007)).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 64];
        let mut answered = 0;
        for _ in 0..EXCHANGES {
            sock.send(b"linger").unwrap();
            if sock.recv(&mut buf).is_ok() {
                answered += 1;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        answered
    });
    let stats = b.stop();
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
    let count = |key: &str| stats["directions"][0][key].as_u64().unwrap();
    (count("rx_wakeups"), answered, count("rx_yields_lost"))
}

/// Without lingering, each exchange wakes the stage twice: for the request,
/// and for the answer, which the server sends after its own wake-up, tens of
/// µs after the stage went back to sleep. Lingering (the default) takes the
/// answer in the request's wake-up. Counts, not times: robust on a loaded VM.
/// (`--linger 0` is run beside it for the report: about two per exchange.)
fn an_answer_from_a_host_process_costs_no_second_wake_up(backend: &str) {
    if skip() {
        return;
    }
    let _serial = serial();
    let topo = topology_with("lg21", true);
    // A linger long enough for any answer on this loaded VM: what is tested
    // is that an answer arriving while the stage lingers is taken without a
    // wake-up. How much the default (100us) catches depends on how soon the
    // server runs (in this test's debug build 23-54 % of the answers, with a C
    // echo server all of them: docs/numbers.md).
    let (lingering, answered, lost) = echo_wakeups(&topo, backend, &["--linger", "300us"]);
    let (sleeping, answered_sleeping, _) = echo_wakeups(&topo, backend, &["--linger", "0"]);
    let report = format!(
        "{backend}: {EXCHANGES} UDP exchanges; --linger 300us: {lingering} wake-ups of the \
         stage, {answered} answered, {lost} yields lost; --linger 0: {sleeping} wake-ups, \
         {answered_sleeping} answered"
    );
    eprintln!("{report}");
    assert!(
        answered >= EXCHANGES * 9 / 10,
        "answers went missing: {report}"
    );
    // Without lingering every exchange costs two wake-ups (395-404 here);
    // lingering, an answer the server sends within the linger costs none
    // (211-312 here, alone and under the whole test run). A stall of the
    // server past the linger costs one more, so the bound is against the run
    // without lingering, in the same test: at least a fifth of the exchanges
    // answered while the stage lingered. A linger that catches nothing saves
    // nothing and fails it. Two yields that lost the core to a busy task
    // beside (the CI's builds at idle priority) pause lingering: then the
    // answers wake the stage, as `a_busy_task_beside_costs_no_tick` shows,
    // and lingering may save nothing, but it never costs wake-ups.
    assert!(
        lingering <= sleeping + EXCHANGES / 10,
        "lingering cost wake-ups: {report}"
    );
    if lost >= 2 {
        return;
    }
    let saved = sleeping.saturating_sub(lingering);
    assert!(
        saved >= EXCHANGES / 5,
        "the stage woke {lingering} times for {EXCHANGES} exchanges lingering, {sleeping} \
         without: the answers were not taken while it lingered: {report}"
    );
}

/// What a sparse flow's run counted: linkem's threads' wake-ups (the
/// stage's `rx_wakeups` and both output threads' `tx_wakeups`), frames
/// received, the stage's turns that found it awake for the flow's beat, its
/// yields that lost the core to a busy task (`rx_yields_lost`), and the
/// 90th percentile of the frames' one-way delays.
struct Sparse {
    wakeups: u64,
    got: u64,
    on_beat: u64,
    yields_lost: u64,
    p90_us: u64,
}

/// [`SPARSE_FRAMES`] UDP frames 20 ms apart A→B through `delay`.
fn sparse_flow(topo: &Topology, backend: &str, delay: &str, extra: &[&str]) -> Sparse {
    let mut args = vec!["delay", delay];
    args.extend_from_slice(extra);
    let b = Bridge::start(topo, backend, &args);
    let arrived = udp_flow(
        topo,
        true,
        SPARSE_FRAMES as u32,
        64,
        Duration::from_millis(20),
    );
    let mut delays_ns: Vec<u64> = arrived.iter().flatten().copied().collect();
    delays_ns.sort_unstable();
    let stats = b.stop();
    let count = |dir: usize, key: &str| stats["directions"][dir][key].as_u64().unwrap();
    Sparse {
        wakeups: count(0, "rx_wakeups") + count(0, "tx_wakeups") + count(1, "tx_wakeups"),
        got: delays_ns.len() as u64,
        on_beat: count(0, "rx_on_beat"),
        yields_lost: count(0, "rx_yields_lost"),
        p90_us: delays_ns
            .get(delays_ns.len() * 9 / 10)
            .map_or(0, |d| d / 1000),
    }
}

/// A thread per core (two on this project's VM) that spins under
/// SCHED_IDLE (as the CI's builds beside the tests run) until dropped.
struct IdleBusy {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl IdleBusy {
    fn start() -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = (0..cores)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let param = libc::sched_param { sched_priority: 0 };
                    // Safety: sets the calling thread's policy from a valid sched_param.
                    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
                    assert_eq!(rc, 0, "SCHED_IDLE: {}", std::io::Error::last_os_error());
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        IdleBusy { stop, threads }
    }
}

impl Drop for IdleBusy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Frames of the sparse-hold test: 4 s at 50 per second.
const SPARSE_FRAMES: u64 = 200;

/// A frame held 500 µs on a sparse link is sent by the stage that took it,
/// which stays awake through the hold (the quiet before it pays, within the
/// spin budget): one wake-up per frame. The twin sleeps to each release, the
/// stage or (when awake for it) an output thread: two wake-ups per frame.
/// It needs `--linger 0`: a hold is counted from the frame's arrival stamp,
/// and when the stage's wake-up for it came late, the rest of the hold was
/// within the default linger (298 wake-ups for 200 frames once, with
/// `--spin-budget 0%` alone). And it needs `--spin-threshold 0`: by default
/// the stage spins before a timed event as long as its sleeps were seen to
/// overshoot. 500 µs, not 200: on days this VM's wake-ups take 150-250 µs,
/// a 200 µs hold was often over when the arrival's came, and the twin sent
/// such frames at once (274-294 wake-ups for 200 frames, against 404-418
/// through 500 µs). Counts, not times: robust on a loaded VM, where a stall
/// that outlasts a hold only adds a wake-up.
fn a_sparse_hold_costs_one_wake_up_per_frame(backend: &str) {
    if skip() {
        return;
    }
    let _serial = serial();
    let topo = topology_with("sh38", true);
    let Sparse {
        wakeups: staying,
        got,
        ..
    } = sparse_flow(&topo, backend, "500us", &[]);
    let Sparse {
        wakeups: sleeping,
        got: got_sleeping,
        ..
    } = sparse_flow(
        &topo,
        backend,
        "500us",
        &["--linger", "0", "--spin-threshold", "0"],
    );
    let report = format!(
        "{backend}: {SPARSE_FRAMES} frames 20 ms apart through delay 500us; defaults: \
         {staying} wake-ups of linkem's threads, {got} received; sleeping to releases: {sleeping} \
         wake-ups, {got_sleeping} received"
    );
    eprintln!("{report}");
    assert!(
        got.min(got_sleeping) >= SPARSE_FRAMES * 9 / 10,
        "frames went missing: {report}"
    );
    // One per frame, a few for the neighbour's resolution and the start,
    // and the output threads' own now and then (about 0.1 per frame here:
    // 228-229 for 200 frames); a stall past a hold adds one each.
    assert!(
        staying * 10 <= SPARSE_FRAMES * 14,
        "more than 1.4 wake-ups per frame: {report}"
    );
    assert!(
        sleeping >= staying + SPARSE_FRAMES / 2,
        "sleeping to each release did not cost a second wake-up: {report}"
    );
}

/// Frames that keep a beat (20 ms apart) find the stage awake for them:
/// it learns the beat from their receive stamps and polls through the
/// window the next is expected in, so a small delay is not spent on the
/// frame's own wake-up (`rx_on_beat` counts the turns that took frames in
/// such a window). `delay 1us`: a frame held longer than the stage takes
/// to wake gets no window (its arrival's wake-up fits in its hold), and on
/// a machine that wakes in 20 µs a `delay 50us` would be one. The window's wake-up replaces the arrival's: still about
/// one per frame. The twin, `--spin-budget 0%`, pays for no window. Counts,
/// not times: a stall makes a frame miss its window, and it wakes the stage
/// as without the beat; four frames go to learning it.
fn frames_on_a_beat_find_the_stage_awake(backend: &str) {
    if skip() {
        return;
    }
    let _serial = serial();
    let topo = topology_with("bt38", true);
    let awake = sparse_flow(&topo, backend, "1us", &[]);
    let without = sparse_flow(&topo, backend, "1us", &["--spin-budget", "0%"]);
    let report = format!(
        "{backend}: {SPARSE_FRAMES} frames 20 ms apart through delay 1us; defaults: {} on the \
         beat, {} wake-ups, {} yields lost, p90 {} µs, {} received; --spin-budget 0%: {} on \
         the beat, {} wake-ups, p90 {} µs, {} received",
        awake.on_beat,
        awake.wakeups,
        awake.yields_lost,
        awake.p90_us,
        awake.got,
        without.on_beat,
        without.wakeups,
        without.p90_us,
        without.got
    );
    eprintln!("{report}");
    assert!(
        awake.got.min(without.got) >= SPARSE_FRAMES * 9 / 10,
        "frames went missing: {report}"
    );
    if awake.yields_lost < 2 {
        // Quiet runs: 185-190 of 200 (docs/numbers.md, "A yield that
        // loses the core").
        assert!(
            awake.on_beat >= SPARSE_FRAMES / 2,
            "fewer than half the frames found the stage awake: {report}"
        );
    } else {
        // A busy task beside (the CI's builds at idle priority) took the
        // core at two yields: the windows paused, as
        // `a_busy_task_beside_costs_no_tick` shows, and the frames woke the
        // stage. Or the machine stalled: the run without windows (which
        // yields nothing) shows how slow it was.
        if let Err(e) = no_tick_lost(&awake, without.p90_us, &report) {
            panic!("{e}");
        }
    }
    assert_eq!(without.on_beat, 0, "a window paid from no budget: {report}");
    assert!(
        awake.wakeups * 10 <= SPARSE_FRAMES * 14,
        "more than 1.4 wake-ups per frame: {report}"
    );
}

/// Two flows through one port, each with a beat of its own (20 and 30 ms
/// apart, 4 s), through `delay 1us` as above: their arrivals interleave into
/// gaps of 5-20 ms that keep no beat, yet each flow's frames find the stage
/// awake, as one flow's do. Counts, not times, as above.
fn two_beats_through_one_port_are_each_kept(backend: &str) {
    if skip() {
        return;
    }
    let _serial = serial();
    let topo = topology_with("tb38", true);
    let b = Bridge::start(&topo, backend, &["delay", "1us"]);
    let port = 40000 + (std::process::id() % 20000) as u16;
    let (fast, slow) = std::thread::scope(|s| {
        let fast = s.spawn(|| udp_flow_to(&topo, true, 200, 64, Duration::from_millis(20), port));
        // Started 5 ms later: the two beats meet no sooner than every 60 ms.
        std::thread::sleep(Duration::from_millis(5));
        let slow = udp_flow_to(&topo, true, 133, 64, Duration::from_millis(30), port + 1);
        (fast.join().expect("first flow"), slow)
    });
    let stats = b.stop();
    let count = |key: &str| stats["directions"][0][key].as_u64().unwrap();
    let got = [&fast, &slow].map(|f| f.iter().flatten().count() as u64);
    let report = format!(
        "{backend}: 200 frames 20 ms apart and 133 frames 30 ms apart through delay 1us: {got:?} received, {} taken, {} on the beat, {} wake-ups of the stage, {} yields lost",
        count("received"),
        count("rx_on_beat"),
        count("rx_wakeups"),
        count("rx_yields_lost")
    );
    eprintln!("{report}");
    assert!(
        got[0] >= 180 && got[1] >= 120,
        "frames went missing: {report}"
    );
    // A third, not half as for one flow: the two beats' windows draw on one
    // credit. One beat per port found none (0 of 333); quiet runs 301-313.
    // A busy task beside that took the core at two yields pauses the
    // windows (`a_busy_task_beside_costs_no_tick`).
    if count("rx_yields_lost") < 2 {
        assert!(
            count("rx_on_beat") >= 333 / 3,
            "fewer than a third of the frames found the stage awake: {report}"
        );
    }
}

/// The 90th percentile of a sparse flow's one-way delays through `delay
/// 1us` is within a millisecond: no yield handed the stage's core to a busy
/// task until the tick (4 ms at HZ 250). The bridge's is 80-150 µs here,
/// linkem's 200-250 beside such a task. `machine_p90_us` is the same flow's
/// through a linkem that never yields, just before, if measured: a machine
/// that stalled that one to a millisecond or more (the CI once saw 1.8 ms
/// with no tick lost) allows twice that.
fn no_tick_lost(run: &Sparse, machine_p90_us: u64, report: &str) -> Result<(), String> {
    let bound_us = 1000.max(2 * machine_p90_us);
    if run.p90_us < bound_us {
        Ok(())
    } else {
        Err(format!(
            "the 90th percentile of one-way delays is {bound_us} µs or more: {report}"
        ))
    }
}

/// The twin of `frames_on_a_beat_find_the_stage_awake` with a busy task
/// beside: a thread per core spins under SCHED_IDLE, as the CI's builds
/// do. A yield of the stage while it is awake for a beat (or
/// lingers) hands its core to such a task, which keeps it until the tick:
/// without the pause that follows a lost yield, the frames' one-way delay
/// was 2.5-4.1 ms at the 90th percentile (the bridge's 143-155 µs). Counts
/// the lost yields, which pause the windows: two, after which each pause's
/// end finds every core taken and the pause goes on without losing one (7
/// in this run before that look, one as each pause ended).
///
/// The landing CI once saw a p90 of 6.7 ms with two yields lost (the
/// pause began as it should) and only 29 of 200 frames on the beat: the
/// host had taken the cores. Lateness and lost yields are measured again
/// then; a lost tick is in every run.
fn a_busy_task_beside_costs_no_tick(backend: &str) {
    if skip() {
        return;
    }
    let _serial = serial();
    let topo = topology_with("ib38", true);
    let what = format!("{backend}: a sparse flow beside a SCHED_IDLE spinner per core");
    within_attempts(&what, 3, |_| {
        let busy = IdleBusy::start();
        let run = sparse_flow(&topo, backend, "1us", &[]);
        drop(busy);
        let report = format!(
            "{backend}: {SPARSE_FRAMES} frames 20 ms apart through delay 1us beside a \
             SCHED_IDLE spinner per core: {} received, {} on the beat, {} yields lost, p90 {} \
             µs, {} wake-ups",
            run.got, run.on_beat, run.yields_lost, run.p90_us, run.wakeups
        );
        eprintln!("{report}");
        assert!(
            run.got >= SPARSE_FRAMES * 9 / 10,
            "frames went missing: {report}"
        );
        assert!(
            run.wakeups * 10 <= SPARSE_FRAMES * 14,
            "more than 1.4 wake-ups per frame: {report}"
        );
        no_tick_lost(&run, 0, &report)?;
        // Two start the pause; a stall of the machine may add one or two.
        if run.yields_lost > 4 {
            return Err(format!(
                "yields were lost while every core was taken: {report}"
            ));
        }
        Ok(())
    });
}

/// Each direction's counts show its output thread's `spin`: the budget given
/// (or the default 5 % of a core), what the thread learnt of this
/// machine's wake-ups and of its send path, and with `--spin-budget 0%` (or while every core of a
/// loaded machine is taken) a spin of 3 µs that covers none of them. Pings
/// 2 ms apart through `delay 5ms`: each release is beyond what the stage
/// sends itself, so the output threads sleep to them and learn.
/// Values the thread reports, not times: robust on a loaded VM.
fn each_direction_shows_its_spin_budget_and_what_it_learnt(backend: &str) {
    if skip() {
        return;
    }
    let _serial = serial();
    let topo = topology_with("sb38", true);
    for (extra, budget) in [(&[][..], 0.05), (&["--spin-budget", "0%"][..], 0.0)] {
        let mut args = vec!["delay", "5ms"];
        args.extend_from_slice(extra);
        let b = Bridge::start(&topo, backend, &args);
        let rtts = rtts_us(&topo);
        let stats = b.stop();
        let spins: Vec<&serde_json::Value> =
            (0..2).map(|d| &stats["directions"][d]["spin"]).collect();
        let report = format!(
            "{backend} delay 5ms {extra:?}: RTT {}; spin a->b {}, b->a {}",
            summary(&rtts),
            spins[0],
            spins[1]
        );
        eprintln!("{report}");
        for spin in spins {
            let num = |v: &serde_json::Value| {
                v.as_f64()
                    .unwrap_or_else(|| panic!("{v} is not a number: {report}"))
            };
            assert_eq!(num(&spin["budget"]), budget, "{report}");
            let (p50, p99) = (
                num(&spin["wake_late_us"]["p50"]),
                num(&spin["wake_late_us"]["p99"]),
            );
            assert!(
                p50 > 0.0 && p99 >= p50,
                "the output thread learnt nothing of its wake-ups: {report}"
            );
            // Both backends learn how long a frame takes from its send to
            // the host's stack: AF_PACKET's TX ring hands back the host's
            // stamp, AF_XDP's TX metadata the instant the host took the frame.
            let lead = num(&spin["send_lead_us"]);
            assert!(lead > 0.0 && lead <= 50.0, "no send lead learnt: {report}");
            if budget == 0.0 {
                assert_eq!(num(&spin["covers"]), 0.0, "{report}");
                assert_eq!(num(&spin["spin_us"]), 3.0, "{report}");
            } else if num(&spin["covers"]) == 0.0 {
                // Every core taken (a loaded machine): the spin is the least.
                assert_eq!(num(&spin["spin_us"]), 3.0, "{report}");
            } else {
                // Pings 2 ms apart spin a few % of a core: about the budget,
                // so the spin covers at least the median wake-up.
                assert!(num(&spin["covers"]) >= 0.5, "{report}");
                assert!(num(&spin["spin_us"]) > p50, "{report}");
            }
        }
    }
}

on_both_backends!(
    small_delays_cost_no_wake_up_floor,
    an_answer_from_a_host_process_costs_no_second_wake_up,
    a_sparse_hold_costs_one_wake_up_per_frame,
    frames_on_a_beat_find_the_stage_awake,
    two_beats_through_one_port_are_each_kept,
    a_busy_task_beside_costs_no_tick,
    each_direction_shows_its_spin_budget_and_what_it_learnt
);
