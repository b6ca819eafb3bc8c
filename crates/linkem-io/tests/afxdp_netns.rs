//! End-to-end tests of the AF_XDP backend in network namespaces: two hosts on
//! one /24, bridged at layer 2 by two forwarding threads over AF_XDP sockets
//! on the root namespace's veth ends. Needs root; prints "skipped: needs
//! root" otherwise.
//!
//! ```text
//!  ns a: ha <-veth-> ea [XdpRx a -> XdpTx b]  eb <-veth-> hb :ns b
//!                       [XdpTx a <- XdpRx b]
//! ```

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use linkem_core::port::TxOutcome;
use linkem_io::afxdp::{AfXdp, AfXdpConfig, XdpInfo, XdpRx, XdpTx};
use linkem_io::netns::{self, Topology};

/// The tests share two cores with each other and with builds: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn now_realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_nanos() as u64
}

/// What one forwarding direction saw.
#[derive(Debug, Default)]
struct DirectionReport {
    frames: u64,
    /// Stamps of the received frames, in receive order.
    stamps: Vec<u64>,
    /// Largest |stamp - CLOCK_REALTIME at the callback|, ns.
    max_stamp_skew_ns: u64,
    tx_refused: u64,
    /// The send lead the transmitting half learnt at the end (`XdpTx::send_lead_ns`).
    lead_ns: u64,
}

/// Forwards `rx` to `tx` until `stop`.
fn forward(
    mut rx: XdpRx,
    mut tx: XdpTx,
    stop: Arc<AtomicBool>,
) -> JoinHandle<Result<DirectionReport, String>> {
    std::thread::spawn(move || {
        let mut rep = DirectionReport::default();
        while !stop.load(Ordering::Relaxed) {
            let n = rx
                .rx_batch(64, |frame, len, ts| {
                    assert_eq!(frame.len() as u32, len);
                    let now = now_realtime_ns();
                    rep.stamps.push(ts);
                    if ts != 0 {
                        rep.max_stamp_skew_ns = rep.max_stamp_skew_ns.max(now.abs_diff(ts));
                    }
                    if tx.tx_push(frame) != TxOutcome::Queued {
                        rep.tx_refused += 1;
                    }
                })
                .map_err(|e| format!("rx_batch: {e}"))?;
            rep.frames += n as u64;
            tx.tx_flush().map_err(|e| format!("tx_flush: {e}"))?;
            if n == 0 {
                // Sleep when idle: busy-polling starves the kernel's receive work (pitfall 6).
                rx.wait_rx(1_000_000).map_err(|e| format!("wait_rx: {e}"))?;
            }
        }
        // Let the last frames leave before the socket closes.
        for _ in 0..10 {
            tx.tx_flush().map_err(|e| format!("tx_flush: {e}"))?;
            if tx.in_flight() == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        rep.lead_ns = tx.send_lead_ns();
        Ok(rep)
    })
}

/// The bridge: two AF_XDP sockets and two forwarding threads.
struct Bridge {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Result<DirectionReport, String>>>,
    info: (XdpInfo, XdpInfo),
}

impl Bridge {
    fn start(topo: &Topology, cfg: AfXdpConfig) -> Bridge {
        let (rx_a, tx_a) = AfXdp::open(&topo.emu_a, cfg.clone()).expect("AF_XDP on the A side");
        let (rx_b, tx_b) = AfXdp::open(&topo.emu_b, cfg).expect("AF_XDP on the B side");
        let info = (rx_a.info().clone(), rx_b.info().clone());
        eprintln!("{}\n{}", info.0, info.1);
        let stop = Arc::new(AtomicBool::new(false));
        let threads = vec![
            forward(rx_a, tx_b, stop.clone()),
            forward(rx_b, tx_a, stop.clone()),
        ];
        Bridge {
            stop,
            threads,
            info,
        }
    }

    /// Stops the threads (which drop the sockets) and returns A->B and B->A.
    fn stop(mut self) -> (DirectionReport, DirectionReport) {
        self.stop.store(true, Ordering::Relaxed);
        let mut reps = self.threads.drain(..).map(|t| {
            t.join()
                .expect("forwarder panicked")
                .expect("forwarder failed")
        });
        (reps.next().unwrap(), reps.next().unwrap())
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        // On a panic in the test: stop the threads so the sockets and links close.
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn check_stamps(name: &str, rep: &DirectionReport) {
    assert!(rep.frames > 0, "{name}: no frames");
    assert!(
        rep.stamps.iter().all(|&t| t != 0),
        "{name}: a frame without stamp"
    );
    for w in rep.stamps.windows(2) {
        assert!(
            w[0] <= w[1],
            "{name}: stamps go backwards: {} then {}",
            w[0],
            w[1]
        );
    }
    assert!(
        rep.max_stamp_skew_ns < 1_000_000_000,
        "{name}: a stamp {} ns away from CLOCK_REALTIME",
        rep.max_stamp_skew_ns
    );
}

fn link_has_xdp(ifname: &str) -> bool {
    let out = Command::new("ip")
        .args(["link", "show", "dev", ifname])
        .output()
        .expect("ip runs");
    let text = String::from_utf8_lossy(&out.stdout);
    text.contains("xdp") || text.contains("prog/")
}

fn setup(tag: &str) -> Option<(std::sync::MutexGuard<'static, ()>, Topology)> {
    if !netns::is_root() {
        println!("skipped: needs root");
        return None;
    }
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let topo = Topology::two_hosts(&netns::unique_prefix(tag)).expect("namespaces and veth pairs");
    Some((guard, topo))
}

/// After the sockets are closed: no XDP left; after the topology: no namespaces left.
fn check_clean(topo: Topology) {
    assert!(!link_has_xdp(&topo.emu_a), "XDP left on {}", topo.emu_a);
    assert!(!link_has_xdp(&topo.emu_b), "XDP left on {}", topo.emu_b);
    let (ns_a, ns_b) = (topo.ns_a.clone(), topo.ns_b.clone());
    drop(topo);
    let left = netns::list_namespaces().expect("ip netns list");
    assert!(
        !left.contains(&ns_a) && !left.contains(&ns_b),
        "namespaces left: {left:?}"
    );
}

fn ping(topo: &Topology, count: &str, interval: &str) -> std::process::Output {
    let dst = topo.addr_b.to_string();
    topo.exec_in_a(&["ping", "-n", "-c", count, "-i", interval, "-W", "1", &dst])
        .expect("ping starts")
}

/// Five pings through the bridge; returns the average RTT in ms.
fn ping_through_bridge(cfg: AfXdpConfig, tag: &str) {
    let Some((_serial, topo)) = setup(tag) else {
        return;
    };
    let bridge = Bridge::start(&topo, cfg.clone());
    if let Some(mode) = cfg.xdp_mode {
        assert_eq!(bridge.info.0.xdp_mode, mode);
    }
    let out = ping(&topo, "5", "0.2");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let info = bridge.info.clone();
    let (ab, ba) = bridge.stop();
    eprintln!("{text}");
    eprintln!(
        "A->B {} frames, B->A {} frames, stamp skew <= {} us",
        ab.frames,
        ba.frames,
        ab.max_stamp_skew_ns.max(ba.max_stamp_skew_ns) / 1000
    );
    assert!(
        out.status.success(),
        "ping failed through {}:\n{text}",
        info.0
    );
    assert!(text.contains(" 0% packet loss"), "{text}");
    // 5 echo requests, plus ARP; and the same back.
    assert!(
        ab.frames >= 6 && ba.frames >= 6,
        "A->B {} B->A {}",
        ab.frames,
        ba.frames
    );
    check_stamps("A->B", &ab);
    check_stamps("B->A", &ba);
    check_clean(topo);
}

#[test]
fn ping_crosses_the_afxdp_bridge_with_rx_stamps() {
    ping_through_bridge(AfXdpConfig::default(), "xp");
}

#[test]
fn ping_crosses_the_bridge_with_generic_xdp_and_4k_frames() {
    let cfg = AfXdpConfig {
        frame_size: 4096,
        frame_count: 256,
        xdp_mode: Some(linkem_io::bpf::XdpMode::Generic),
        ..Default::default()
    };
    ping_through_bridge(cfg, "xg");
}

#[test]
fn both_program_variants_pass_the_verifier() {
    use linkem_io::bpf::{self, RxClock};
    use std::os::fd::AsRawFd;
    if !netns::is_root() {
        println!("skipped: needs root");
        return;
    }
    let map = bpf::create_xskmap("t", 4).expect("XSKMAP");
    for clock in [RxClock::Tai, RxClock::Monotonic] {
        let prog = bpf::xdp_redirect_program(map.as_raw_fd(), clock);
        bpf::load_xdp_program("t", &prog).unwrap_or_else(|e| panic!("{clock:?}: {e}"));
    }
    // And a broken one is refused with the verifier's explanation.
    let mut bad = bpf::xdp_redirect_program(map.as_raw_fd(), RxClock::Tai);
    bad.remove(8); // the bounds check
    let e = bpf::load_xdp_program("t", &bad).expect_err("the verifier refuses");
    let text = e.to_string();
    assert!(
        text.starts_with("BPF_PROG_LOAD on 'XDP program t'"),
        "{text}"
    );
    assert!(text.contains("verifier log:"), "{text}");
}

/// Python in host B counting datagrams on a port until 1.5 s of silence.
const RECEIVER: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
s.bind((sys.argv[1], int(sys.argv[2])))
print('ready', flush=True)
s.settimeout(10)
n = 0
try:
    while True:
        s.recv(2048)
        n += 1
        s.settimeout(1.5)
except socket.timeout:
    pass
print(n, flush=True)
"#;

/// Python in host A sending N 200-byte datagrams in bursts of 50 with 1 ms
/// pauses (at most 50 kpps, within what one forwarding core moves on veth).
const SENDER: &str = r#"
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
d = (sys.argv[1], int(sys.argv[2]))
b = b'x' * 200
for i in range(int(sys.argv[3])):
    s.sendto(b, d)
    if i % 50 == 49:
        time.sleep(0.001)
"#;

#[test]
fn bulk_udp_crosses_the_afxdp_bridge() {
    use std::io::{BufRead, BufReader, Read};
    const N: u64 = 5000;
    let Some((_serial, topo)) = setup("xb") else {
        return;
    };
    let bridge = Bridge::start(&topo, AfXdpConfig::default());
    // Resolve ARP first, so the burst is not held behind it.
    assert!(ping(&topo, "1", "0.2").status.success(), "warm-up ping");
    let dst = topo.addr_b.to_string();
    let mut rx = topo
        .spawn_in_b(&["python3", "-c", RECEIVER, &dst, "9999"])
        .expect("receiver starts");
    let mut lines = BufReader::new(rx.stdout.take().expect("piped"));
    let mut ready = String::new();
    lines.read_line(&mut ready).expect("receiver speaks");
    assert_eq!(ready.trim(), "ready");
    let t0 = Instant::now();
    let sent = topo
        .exec_in_a(&["python3", "-c", SENDER, &dst, "9999", &N.to_string()])
        .expect("sender runs");
    let send_time = t0.elapsed();
    assert!(
        sent.status.success(),
        "sender: {}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let mut count = String::new();
    lines.read_to_string(&mut count).expect("receiver reports");
    rx.wait().expect("receiver exits");
    let (ab, ba) = bridge.stop();
    let received: u64 = count.trim().parse().expect("a count");
    eprintln!(
        "{N} datagrams sent in {:.0} ms, {received} received ({:.1} %); A->B forwarded {} frames, \
         {} refused by tx, send lead {} ns; B->A {}",
        send_time.as_secs_f64() * 1e3,
        received as f64 * 100.0 / N as f64,
        ab.frames,
        ab.tx_refused,
        ab.lead_ns,
        ba.frames
    );
    assert!(
        received * 100 >= N * 95,
        "only {received} of {N} datagrams arrived"
    );
    // On a veth the kernel stamps each sampled frame as the host's stack
    // takes it (TX metadata, Linux 6.8+): a lead of a few µs is learnt.
    assert!(
        (1..=50_000).contains(&ab.lead_ns),
        "no send lead learnt towards host b: {} ns",
        ab.lead_ns
    );
    check_stamps("A->B", &ab);
    check_clean(topo);
}

#[test]
fn a_taken_interface_is_refused_plainly_and_freed_on_close() {
    use linkem_io::bpf;
    use std::os::fd::AsFd;
    let Some((_serial, topo)) = setup("xe") else {
        return;
    };

    // A second socket on the same queue.
    let first = AfXdp::open(&topo.emu_a, AfXdpConfig::default()).expect("first socket");
    let err = AfXdp::open(&topo.emu_a, AfXdpConfig::default()).expect_err("second open fails");
    let text = err.to_string();
    eprintln!("{text}");
    assert!(
        text.contains(&topo.emu_a) && text.contains("another AF_XDP socket"),
        "{text}"
    );
    drop(first);
    assert!(
        !link_has_xdp(&topo.emu_a),
        "XDP left after the sockets closed"
    );
    // The queue is free again (after the kernel's deferred release).
    let t0 = Instant::now();
    let again = AfXdp::open(&topo.emu_a, AfXdpConfig::default()).expect("reopen");
    eprintln!("reopened after {:?}", t0.elapsed());
    drop(again);

    // Someone else's XDP program on the interface.
    let prog = bpf::load_xdp_program("other", &bpf::xdp_pass_program()).expect("load XDP_PASS");
    let ifindex = std::fs::read_to_string(format!("/sys/class/net/{}/ifindex", topo.emu_b))
        .expect("ifindex")
        .trim()
        .parse()
        .expect("a number");
    let link = bpf::link_xdp(prog.as_fd(), ifindex, &topo.emu_b, bpf::XdpMode::Native)
        .expect("attach XDP_PASS");
    let err =
        AfXdp::open(&topo.emu_b, AfXdpConfig::default()).expect_err("open on a taken hook fails");
    let text = err.to_string();
    eprintln!("{text}");
    assert!(
        text.starts_with(&format!("BPF_LINK_CREATE on '{}'", topo.emu_b)),
        "{text}"
    );
    assert!(text.contains("already attached"), "{text}");
    drop(link);
    assert!(
        !link_has_xdp(&topo.emu_b),
        "the BPF link detached its program when closed"
    );
    check_clean(topo);
}

/// Frames the kernel drops because nobody takes them (a full rx ring) are
/// reported by `kernel_drops`, summed over the queues.
#[test]
fn kernel_receive_drops_are_counted() {
    let Some((_serial, topo)) = setup("xk") else {
        return;
    };
    let (rx, tx) = AfXdp::open(
        &topo.emu_a,
        AfXdpConfig {
            frame_count: 64,
            ..Default::default()
        },
    )
    .expect("open");
    assert_eq!(rx.kernel_drops(), 0);
    // 32 receive frames and nobody reading them: most of 200 frames are dropped.
    let dst = topo.addr_b.to_string();
    // A static neighbour: no reply ever comes, so ARP would stop the pings.
    topo.exec_in_a(&[
        "ip",
        "neigh",
        "replace",
        &dst,
        "lladdr",
        "02:00:00:00:00:01",
        "dev",
        &topo.host_a,
        "nud",
        "permanent",
    ])
    .expect("ip neigh");
    topo.exec_in_a(&["ping", "-q", "-f", "-c", "200", "-W", "0.1", &dst])
        .expect("ping runs");
    let drops = rx.kernel_drops();
    let k = rx.kernel_stats().unwrap();
    eprintln!("kernel drops {drops}: {k:?}");
    // Each lost frame once (copy mode counts it in two of the kernel's counters).
    assert!((200 - 32..=200).contains(&drops), "{drops}: {k:?}");
    drop((rx, tx));
    check_clean(topo);
}

/// Waiting to receive must not drive the transmit ring. In copy mode the
/// kernel's poll of a socket with a tx ring runs that ring's transmit under
/// the socket's lock (`xsk_poll` -> `__xsk_generic_xmit`), so a receiving
/// thread polling the socket another thread sends on fights it for that
/// lock at every wait. Each such pass over an empty ring is counted in
/// `tx_ring_empty_descs`; the receive half polls a socket without a tx ring,
/// so that count stays where it is however often it waits.
#[test]
fn waiting_to_receive_never_runs_the_transmit_ring() {
    let Some((_serial, topo)) = setup("xw") else {
        return;
    };
    let (mut rx, tx) = AfXdp::open(&topo.emu_a, AfXdpConfig::default()).expect("open");
    let before = tx.kernel_stats().expect("tx stats").tx_ring_empty_descs;
    for _ in 0..20 {
        rx.wait_rx(200_000).expect("wait_rx");
    }
    let after = tx.kernel_stats().expect("tx stats").tx_ring_empty_descs;
    assert_eq!(
        after - before,
        0,
        "20 receive waits ran the transmit ring {} times ({})",
        after - before,
        rx.info()
    );
    drop((rx, tx));
    check_clean(topo);
}
