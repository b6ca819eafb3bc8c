//! AF_PACKET rings as a transparent layer-2 bridge between two network namespaces.
//!
//! Needs root (namespaces, veth, raw sockets); as another user every test prints
//! "skipped: needs root" and passes.

use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use linkem_core::port::TxOutcome;
use linkem_io::afpacket::{
    now_realtime_ns, poll_rx_any, AfPacket, AfPacketConfig, AfPacketStats, IoError,
};
use linkem_io::netns::{self, Topology};

const TAG: &str = "lkt";

fn root_or_skip() -> bool {
    if !netns::is_root() {
        println!("skipped: needs root");
        return false;
    }
    // Leftovers of killed earlier runs (their process is gone); live runs are left alone.
    netns::cleanup_dead(TAG).expect("cleanup of dead test topologies");
    true
}

fn assert_gone(prefix: &str) {
    let ns: Vec<String> = netns::list_namespaces()
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect();
    assert!(ns.is_empty(), "namespaces left behind: {ns:?}");
    // Namespace deletion is asynchronous in the kernel; give the veth a moment to vanish.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let links: Vec<String> = netns::list_links()
            .unwrap()
            .into_iter()
            .filter(|n| n.starts_with(prefix))
            .collect();
        if links.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "links left behind: {links:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Per-direction counters of the forwarding loop.
#[derive(Debug, Default, Clone, Copy)]
struct DirStats {
    frames: u64,
    bytes: u64,
    tx_full_drops: u64,
    truncated: u64,
    ts_inversions: u64,
    /// Largest |now - kernel stamp| seen, ns.
    max_ts_age_ns: u64,
    last_ts: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct FwdStats {
    a_to_b: DirStats,
    b_to_a: DirStats,
    sock_a: AfPacketStats,
    sock_b: AfPacketStats,
    /// The send lead each socket learnt (`AfPacket::send_lead_ns`).
    lead_a_ns: u64,
    lead_b_ns: u64,
}

fn forward(rx: &mut AfPacket, tx: &mut AfPacket, st: &mut DirStats) -> Result<usize, IoError> {
    let n = rx.rx_batch(64, |f| {
        let now = now_realtime_ns();
        st.max_ts_age_ns = st.max_ts_age_ns.max(now.abs_diff(f.ts_ns));
        if f.ts_ns < st.last_ts {
            st.ts_inversions += 1;
        }
        st.last_ts = f.ts_ns;
        st.frames += 1;
        st.bytes += f.data.len() as u64;
        if f.truncated() {
            st.truncated += 1;
        }
        if tx.tx_push(f.data) == TxOutcome::NoRoom {
            // Backpressure: flush once and retry, then drop.
            let _ = tx.tx_flush();
            if tx.tx_push(f.data) != TxOutcome::Queued {
                st.tx_full_drops += 1;
            }
        }
    });
    if n > 0 {
        tx.tx_flush()?;
    }
    Ok(n)
}

/// A forwarding thread bridging two sockets until stopped (or a hard time limit).
struct Bridge {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<FwdStats, IoError>>>,
}

impl Bridge {
    fn start(mut a: AfPacket, mut b: AfPacket, limit: Duration) -> Bridge {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let deadline = Instant::now() + limit;
            let mut st = FwdStats::default();
            while !flag.load(Ordering::Relaxed) && Instant::now() < deadline {
                let moved = forward(&mut a, &mut b, &mut st.a_to_b)?
                    + forward(&mut b, &mut a, &mut st.b_to_a)?;
                if moved == 0 {
                    // Sleep when idle instead of spinning (docs/platform.md pitfall 6).
                    poll_rx_any(&[&a, &b], Some(Duration::from_millis(20)))?;
                }
            }
            a.tx_flush()?;
            b.tx_flush()?;
            st.sock_a = a.stats();
            st.sock_b = b.stats();
            st.lead_a_ns = a.send_lead_ns();
            st.lead_b_ns = b.send_lead_ns();
            Ok(st)
        });
        Bridge {
            stop,
            handle: Some(handle),
        }
    }

    fn finish(mut self) -> FwdStats {
        self.stop.store(true, Ordering::Relaxed);
        let h = self.handle.take().unwrap();
        h.join()
            .expect("forwarder panicked")
            .expect("forwarder failed")
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn open_bridge(topo: &Topology) -> Bridge {
    let a = AfPacket::open(&topo.emu_a, AfPacketConfig::default()).expect("open emu_a");
    let b = AfPacket::open(&topo.emu_b, AfPacketConfig::default()).expect("open emu_b");
    Bridge::start(a, b, Duration::from_secs(60))
}

fn ping(topo: &Topology) -> (String, std::process::Output) {
    let dst = topo.addr_b.to_string();
    let out = topo
        .exec_in_a(&["ping", "-n", "-c", "5", "-i", "0.2", "-W", "2", &dst])
        .expect("run ping");
    (String::from_utf8_lossy(&out.stdout).into_owned(), out)
}

const RECEIVER: &str = r#"
import socket, sys
addr, port, expected = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE
except OSError:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.bind((addr, port))
print("ready", flush=True)
s.settimeout(10.0)
n = 0
try:
    while n < expected:
        s.recv(4096)
        n += 1
        s.settimeout(1.0)
except socket.timeout:
    pass
print(n, flush=True)
"#;

const SENDER: &str = r#"
import socket, sys
addr, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
payload = b"linkem" * 10
sent = 0
for i in range(count):
    try:
        s.sendto(payload, (addr, port))
        sent += 1
    except OSError:
        pass
print(sent, flush=True)
"#;

#[test]
fn bridges_ping_and_udp_burst() {
    if !root_or_skip() {
        return;
    }
    let prefix = netns::unique_prefix(TAG);
    {
        let topo = Topology::two_hosts(&prefix).expect("build topology");
        // Without the bridge the hosts cannot reach each other.
        let dst = topo.addr_b.to_string();
        let out = topo
            .exec_in_a(&["ping", "-n", "-c", "1", "-W", "1", &dst])
            .unwrap();
        assert!(!out.status.success(), "ping worked without the bridge");

        // That failed resolution left a FAILED neighbour entry, which would hold the next
        // packets back for a second: forget it.
        for ns in [&topo.ns_a, &topo.ns_b] {
            netns::exec_in(ns, &["ip", "neigh", "flush", "all"]).unwrap();
        }
        let bridge = open_bridge(&topo);

        let (text, out) = ping(&topo);
        println!("{text}");
        assert!(out.status.success(), "ping failed: {text}");
        assert!(
            text.contains(" 0% packet loss"),
            "ping lost packets: {text}"
        );
        let rtt = text
            .lines()
            .find(|l| l.starts_with("rtt"))
            .unwrap_or("no rtt line")
            .to_string();

        // UDP burst: receiver in B, sender in A.
        const COUNT: usize = 2000;
        let port = "40777";
        let mut receiver = topo
            .spawn_in_b(&[
                "python3",
                "-c",
                RECEIVER,
                &topo.addr_b.to_string(),
                port,
                &COUNT.to_string(),
            ])
            .expect("start receiver");
        let mut lines = BufReader::new(receiver.stdout.take().unwrap()).lines();
        let first = lines.next().and_then(|l| l.ok()).unwrap_or_default();
        if first != "ready" {
            let mut err = String::new();
            receiver
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .ok();
            panic!("receiver did not start: {first:?} {err}");
        }
        let t0 = Instant::now();
        let out = topo
            .exec_in_a(&[
                "python3",
                "-c",
                SENDER,
                &topo.addr_b.to_string(),
                port,
                &COUNT.to_string(),
            ])
            .expect("run sender");
        let send_time = t0.elapsed();
        assert!(
            out.status.success(),
            "sender failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let sent: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        let received: usize = lines
            .next()
            .and_then(|l| l.ok())
            .and_then(|l| l.trim().parse().ok())
            .expect("receiver count");
        let _ = receiver.wait();

        let st = bridge.finish();
        println!("ping {rtt}");
        println!(
            "udp: sent {sent}, received {received} of {COUNT} ({:.1} %), send took {:?}",
            received as f64 * 100.0 / COUNT as f64,
            send_time
        );
        println!("forwarder: {st:?}");
        assert!(
            received * 100 >= COUNT * 95,
            "only {received} of {COUNT} datagrams arrived"
        );
        for (name, d) in [("a->b", st.a_to_b), ("b->a", st.b_to_a)] {
            assert_eq!(d.ts_inversions, 0, "{name}: timestamps went backwards");
            assert!(
                d.max_ts_age_ns < 1_000_000_000,
                "{name}: a stamp was {} ns away from now",
                d.max_ts_age_ns
            );
            assert_eq!(d.truncated, 0, "{name}: truncated frames");
        }
        assert!(st.a_to_b.frames as usize >= COUNT + 5);
        // Every frame sent to host b's veth end came back stamped with the
        // instant host b's stack took it in: a lead of a few µs is learnt
        // (a loaded VM may make it tens; the learner takes none over 50 µs).
        assert!(
            (1..=50_000).contains(&st.lead_b_ns),
            "no send lead learnt from the frames sent to host b: {st:?}"
        );
        for s in [st.sock_a, st.sock_b] {
            assert_eq!(s.rx_csum_not_ready, 0, "hosts' checksum offload is not off");
            // Every transmitted slot came back (the kernel ORs timestamp bits into it).
            assert!(
                s.tx_completed + 64 >= s.tx_queued,
                "TX slots not reclaimed: {s:?}"
            );
        }
    }
    assert_gone(&prefix);
}

/// Receives raw frames on an interface and reports the VLAN tag of the first frame carrying
/// ethertype 0x88b5 and our marker. The stack moves a received tag into metadata, so it is
/// read from PACKET_AUXDATA.
const VLAN_RECEIVER: &str = r#"
import socket, struct, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((sys.argv[1], 0))
s.setsockopt(263, 8, 1)  # SOL_PACKET, PACKET_AUXDATA
s.settimeout(5.0)
print("ready", flush=True)
try:
    while True:
        data, anc, _, _ = s.recvmsg(4096, 1024)
        if b"linkem-vlan" not in data:
            continue
        for level, kind, blob in anc:
            if level == 263 and kind == 8:
                st, ln, snap, mac, net, tci, tpid = struct.unpack("IIIHHHH", blob[:20])
                vlan = tci & 0xFFF if st & (1 << 4) else -1
                print("vlan=%d tpid=%#x type=%s" % (vlan, tpid, data[12:14].hex()), flush=True)
                sys.exit(0)
except socket.timeout:
    print("timeout", flush=True)
"#;

/// Sends three 802.1Q-tagged (VLAN 100) broadcast frames with ethertype 0x88b5.
const VLAN_SENDER: &str = r#"
import socket, struct, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
frame = b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x01" + struct.pack("!HHH", 0x8100, 100, 0x88B5)
frame += b"linkem-vlan".ljust(46, b"\0")
for _ in range(3):
    s.send(frame)
    time.sleep(0.1)
"#;

#[test]
fn bridges_vlan_tagged_frames() {
    if !root_or_skip() {
        return;
    }
    let prefix = netns::unique_prefix(TAG);
    {
        let topo = Topology::two_hosts(&prefix).expect("build topology");
        let bridge = open_bridge(&topo);
        let mut rx = topo
            .spawn_in_b(&["python3", "-c", VLAN_RECEIVER, &topo.host_b])
            .unwrap();
        let mut lines = BufReader::new(rx.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().and_then(|l| l.ok()).as_deref(), Some("ready"));
        let out = topo
            .exec_in_a(&["python3", "-c", VLAN_SENDER, &topo.host_a])
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = lines.next().and_then(|l| l.ok()).unwrap_or_default();
        let _ = rx.wait();
        let st = bridge.finish();
        println!("vlan frame at B: {got}");
        // The tag reached B: the frame left the bridge tagged, although the socket at A saw
        // it untagged with the tag in metadata.
        assert_eq!(got, "vlan=100 tpid=0x8100 type=88b5", "{st:?}");
    }
    assert_gone(&prefix);
}

#[test]
fn open_reports_down_and_mtu_errors() {
    if !root_or_skip() {
        return;
    }
    let prefix = netns::unique_prefix(TAG);
    {
        let topo = Topology::two_hosts(&prefix).expect("build topology");
        let ip = |args: &[&str]| {
            let st = std::process::Command::new("ip")
                .args(args)
                .status()
                .unwrap();
            assert!(st.success(), "ip {args:?}");
        };
        ip(&["link", "set", &topo.emu_a, "down"]);
        let e = AfPacket::open(&topo.emu_a, AfPacketConfig::default()).unwrap_err();
        assert!(matches!(e, IoError::InterfaceDown { .. }), "{e}");
        assert!(e
            .to_string()
            .starts_with(&format!("interface '{}' is down", topo.emu_a)));

        ip(&["link", "set", &topo.emu_a, "mtu", "9000", "up"]);
        let e = AfPacket::open(&topo.emu_a, AfPacketConfig::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "MTU 9000 of '{}' exceeds the 2048-byte ring frame; raise --frame-size \
                 (MTU 9000 needs at least {} bytes)",
                topo.emu_a,
                linkem_io::afpacket::frame_size_for_mtu(9000)
            )
        );
        let cfg = AfPacketConfig {
            frame_size: linkem_io::afpacket::frame_size_for_mtu(9000),
            ..AfPacketConfig::default()
        };
        let s = AfPacket::open(&topo.emu_a, cfg).expect("jumbo frame size opens");
        assert_eq!(s.mtu(), 9000);
    }
    assert_gone(&prefix);
}

#[test]
fn topology_is_removed_after_a_panic() {
    if !root_or_skip() {
        return;
    }
    let prefix = netns::unique_prefix(TAG);
    let child = std::sync::Mutex::new(None);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let topo = Topology::two_hosts(&prefix).expect("build topology");
        assert!(netns::list_namespaces().unwrap().contains(&topo.ns_a));
        // A process left running inside keeps a namespace alive; teardown must kill it.
        *child.lock().unwrap() = Some(topo.spawn_in_b(&["sleep", "30"]).unwrap());
        panic!("deliberate failure inside a test");
    }));
    assert!(r.is_err());
    assert_gone(&prefix);
    let mut child = child.into_inner().unwrap().expect("child started");
    let t0 = Instant::now();
    let status = child.wait().unwrap();
    assert!(
        !status.success(),
        "the process in the namespace was not killed"
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
}

/// Packets host B's interface has received, as its namespace counts them.
fn rx_packets_at_b(topo: &Topology) -> u64 {
    let path = format!("/sys/class/net/{}/statistics/rx_packets", topo.host_b);
    let out = topo.exec_in_b(&["cat", &path]).unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Issue 36: a port of one of many links (`Rings::Small`) sends without a TX
/// ring: a flush hands over at most a batch, a push beyond it waits for the
/// flush (NoRoom), every frame pushed arrives, and a frame over the MTU is
/// refused whole.
#[test]
fn a_small_port_sends_every_frame_in_batches_without_a_ring() {
    if !root_or_skip() {
        return;
    }
    let prefix = netns::unique_prefix(TAG);
    {
        let topo = Topology::two_hosts(&prefix).expect("build topology");
        let (_rx, mut tx, info) = linkem_io::afpacket::port::open(
            &topo.emu_b,
            1500,
            linkem_io::port::Rings::Small,
            false,
        )
        .expect("open the small port");
        assert!(info.contains("sendmmsg"), "{info}");
        // A broadcast frame of a protocol nobody speaks: host B counts it.
        let mut frame = vec![0xffu8; 6];
        frame.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x88, 0xb5]);
        frame.resize(60, 0);
        let before = rx_packets_at_b(&topo);
        let (mut queued, mut no_room) = (0, 0);
        while queued < 1000 {
            match tx.tx_push(&frame) {
                TxOutcome::Queued => queued += 1,
                TxOutcome::NoRoom => {
                    no_room += 1;
                    tx.tx_flush().unwrap();
                }
                other => panic!("{other:?}"),
            }
        }
        tx.tx_flush().unwrap();
        assert!(
            no_room >= 3,
            "1000 frames in batches of 256: {no_room} pushes found no room"
        );
        let big = vec![0u8; 1500 + 14 + 1];
        assert!(matches!(tx.tx_push(&big), TxOutcome::TooBig));
        let deadline = Instant::now() + Duration::from_secs(5);
        while rx_packets_at_b(&topo) < before + 1000 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(rx_packets_at_b(&topo) >= before + 1000);
        assert_eq!(tx.tx_errors(), 0);
    }
    assert_gone(&prefix);
}
