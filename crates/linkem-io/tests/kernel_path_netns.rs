//! The kernel path on its own, in network namespaces: the tc program on each
//! of the emulator's interfaces forwards to the other while engaged, counts
//! what it forwarded as wire frames and bytes, and forwards nothing once
//! disengaged. The hosts keep their offloads (stock veths), so bulk TCP
//! crosses as super-frames. Needs root; prints "skipped: needs root"
//! otherwise.
//!
//! ```text
//!  ns a: ha <-veth-> ea [tc: -> eb]  eb <-veth-> hb :ns b
//!                       [eb: -> ea]
//! ```

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use linkem_core::port::{KernelCounts, KernelPath};
use linkem_io::afpacket::{poll_rx_any, AfPacket, AfPacketConfig};
use linkem_io::bpf::GATE_SKIP;
use linkem_io::kernel_path::{Gate, Kernel};
use linkem_io::netns::{self, Topology};

static SERIAL: Mutex<()> = Mutex::new(());

/// Two stock hosts with static neighbours, held by one test at a time;
/// `None` without root.
fn two_hosts(tag: &str) -> Option<(MutexGuard<'static, ()>, Topology)> {
    if !netns::is_root() {
        return None;
    }
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let topo = Topology::two_hosts_stock(&netns::unique_prefix(tag)).expect("namespaces and veths");
    topo.pin_neighbours().expect("static neighbours");
    Some((serial, topo))
}

fn ifindex(name: &str) -> u32 {
    let c = std::ffi::CString::new(name).expect("no NUL");
    // Safety: a valid NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    assert_ne!(i, 0, "{name} exists");
    i
}

fn ping(topo: &Topology, count: &str) -> (bool, String) {
    let dst = topo.addr_b.to_string();
    let out = topo
        .exec_in_a(&["ping", "-n", "-c", count, "-i", "0.05", "-W", "1", &dst])
        .expect("ping starts");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    (out.status.success(), text)
}

/// Sends `bytes` of TCP from host a to host b; returns what b received.
fn tcp_transfer(topo: &Topology, bytes: usize) -> usize {
    let server = "import socket\n\
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
s.bind(('0.0.0.0', 5299)); s.listen(1); c, _ = s.accept(); n = 0\n\
while True:\n    d = c.recv(1 << 16)\n    if not d: break\n    n += len(d)\n\
print(n)\n";
    let mut srv = topo
        .spawn_in_b(&["python3", "-c", server])
        .expect("server starts");
    std::thread::sleep(Duration::from_millis(300));
    let client = format!(
        "import socket\nc = socket.create_connection(('{}', 5299), timeout=5)\n\
c.sendall(b'x' * {bytes})\nc.close()\n",
        topo.addr_b
    );
    let out = topo
        .exec_in_a(&["python3", "-c", &client])
        .expect("client runs");
    assert!(
        out.status.success(),
        "client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut stdout = String::new();
    use std::io::Read;
    srv.stdout
        .take()
        .expect("piped")
        .read_to_string(&mut stdout)
        .expect("server output");
    let _ = srv.wait();
    stdout.trim().parse().unwrap_or(0)
}

/// TCP segments host a sent again so far (`TcpRetransSegs` of its namespace).
fn retransmitted(topo: &Topology) -> u64 {
    nstat(
        topo.exec_in_a(&["nstat", "-az", "TcpRetransSegs"]),
        "TcpRetransSegs",
    )
}

/// Echo requests host b received so far (`IcmpInEchos` of its namespace).
fn echo_requests_at_b(topo: &Topology) -> u64 {
    nstat(
        topo.exec_in_b(&["nstat", "-az", "IcmpInEchos"]),
        "IcmpInEchos",
    )
}

fn nstat(out: Result<std::process::Output, netns::NetnsError>, name: &str) -> u64 {
    let out = out.expect("nstat runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            l.strip_prefix(name)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("nstat prints {name}"))
}

#[test]
fn kernel_path_forwards_and_counts_while_engaged_only() {
    let Some((_serial, topo)) = two_hosts("kp") else {
        println!("skipped: needs root");
        return;
    };
    let (ia, ib) = (ifindex(&topo.emu_a), ifindex(&topo.emu_b));
    let mut ka = Kernel::open(&topo.emu_a, ia, Gate::PacketSocket).expect("tc program on ea");
    let mut kb = Kernel::open(&topo.emu_b, ib, Gate::PacketSocket).expect("tc program on eb");

    // Not yet switched on: no program on the interfaces, nothing forwards
    // (the hosts cannot reach each other).
    assert!(!ka.attached() && !kb.attached());
    let programs = || [ia, ib].map(|i| linkem_io::bpf::tcx_ingress_programs(i).unwrap());
    assert_eq!(programs(), [0, 0], "nothing on the interfaces yet");
    let (ok, text) = ping(&topo, "2");
    assert!(!ok, "nothing should forward yet:\n{text}");
    assert_eq!(ka.counter().counts().unwrap(), KernelCounts::default());

    ka.engage(ib).unwrap();
    kb.engage(ia).unwrap();
    assert!(ka.attached() && kb.attached());
    assert_eq!(programs(), [1, 1], "the kernel lists the tc programs");
    let (ok, text) = ping(&topo, "5");
    assert!(ok, "ping through the kernel path:\n{text}");
    assert!(text.contains(" 0% packet loss"), "{text}");
    let (a, b) = (
        ka.counter().counts().unwrap(),
        kb.counter().counts().unwrap(),
    );
    // 5 requests of 98 bytes one way, 5 replies the other (and perhaps the
    // hosts' own IPv6 chatter).
    for (c, dir) in [(a, "a->b"), (b, "b->a")] {
        assert!(c.frames >= 5 && c.wire_frames >= c.frames, "{dir}: {c:?}");
        assert!(c.wire_bytes >= 5 * 98, "{dir}: {c:?}");
    }

    // Bulk TCP: super-frames, each counted as the wire frames it becomes,
    // each with its headers (Ethernet 14 + IPv4 20 + TCP 20-60). Segments the
    // sender sent again (a burst dropped at the receiving veth's backlog) are
    // on the wire too: their payload is taken out with the sender's count.
    let payload = 4_000_000;
    let before = ka.counter().counts().unwrap();
    let retrans_before = retransmitted(&topo);
    assert_eq!(tcp_transfer(&topo, payload), payload, "every byte arrives");
    let retrans = retransmitted(&topo) - retrans_before;
    let after = ka.counter().counts().unwrap();
    let frames = after.frames - before.frames;
    let wire = after.wire_frames - before.wire_frames;
    let bytes = after.wire_bytes - before.wire_bytes;
    assert!(
        wire > frames,
        "stock hosts send super-frames: {frames} packets, {wire} wire frames"
    );
    let resent = retrans * 1448;
    let header = (bytes as f64 - payload as f64 - resent as f64) / wire as f64;
    assert!(
        (54.0..=80.0).contains(&header),
        "{bytes} bytes for {payload} of payload and {retrans} segments sent again in {wire} \
         wire frames: {header:.1} bytes of headers each"
    );

    // Longer than the egress MTU: dropped and counted, never forwarded.
    let mtu = |m: &str| {
        let o = std::process::Command::new("ip")
            .args(["link", "set", &topo.emu_b, "mtu", m])
            .output()
            .expect("ip runs");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    mtu("1000");
    let dst = topo.addr_b.to_string();
    let big = topo
        .exec_in_a(&[
            "ping", "-n", "-c", "3", "-i", "0.05", "-W", "1", "-s", "1200", &dst,
        ])
        .expect("ping starts");
    assert!(
        !big.status.success(),
        "1242-byte frames crossed an MTU of 1000"
    );
    assert_eq!(ka.counter().counts().unwrap().too_big, 3);
    mtu("1500");

    // Switched off again: nothing forwards, the counts stay.
    // It stays attached, switched off by the gate, and switches on again.
    ka.disengage().unwrap();
    kb.disengage().unwrap();
    assert!(ka.attached() && kb.attached());
    let still = ka.counter().counts().unwrap();
    let (ok, text) = ping(&topo, "2");
    assert!(!ok, "disengaged, nothing should forward:\n{text}");
    assert_eq!(ka.counter().counts().unwrap().frames, still.frames);
    ka.engage(ib).unwrap();
    kb.engage(ia).unwrap();
    assert_eq!(programs(), [1, 1], "attached once");
    let (ok, text) = ping(&topo, "2");
    assert!(ok, "engaged again, ping through the kernel path:\n{text}");
    drop((ka, kb));
    assert_eq!(programs(), [0, 0], "closed: detached");
    topo.teardown();
}

/// Echo requests to host b among the frames the AF_PACKET socket `rx` holds
/// or receives within `wait`.
fn echo_requests_taken(rx: &mut AfPacket, wait: Duration) -> usize {
    let is_request =
        |d: &[u8]| d.len() > 34 && d[12..14] == [0x08, 0x00] && d[23] == 1 && d[34] == 8;
    let deadline = Instant::now() + wait;
    let mut n = 0;
    while Instant::now() < deadline {
        rx.rx_batch(64, |f| n += usize::from(is_request(f.data)));
        let _ = poll_rx_any(&[&*rx], Some(Duration::from_millis(20)));
    }
    n
}

/// With AF_PACKET the socket's filter and the tc program each read the gate,
/// the socket first, so switching writes two entries. A frame that arrives
/// between the two writes (the target set, the socket not yet kept from its
/// frames) must go one way only: to user space, where the socket took it,
/// and not also out of the other interface. The test holds the gate in that
/// state, where a frame could otherwise only fall in by chance.
#[test]
fn a_frame_between_the_gates_two_writes_goes_one_way() {
    let Some((_serial, topo)) = two_hosts("kg") else {
        println!("skipped: needs root");
        return;
    };
    let ib = ifindex(&topo.emu_b);
    let mut rx = AfPacket::open(&topo.emu_a, AfPacketConfig::default()).expect("socket on ea");
    let mut ka = Kernel::open(&topo.emu_a, ifindex(&topo.emu_a), Gate::PacketSocket)
        .expect("tc program on ea");
    ka.attach_socket_filter(rx.fd()).expect("socket filter");
    let skip = |k: &Kernel, v: u32| {
        linkem_io::bpf::map_update_u32(k.gate_fd(), GATE_SKIP, v).expect("gate written")
    };

    // Host b's own count of echo requests tells where the requests went:
    // the kernel's count also holds the hosts' own frames (IPv6 chatter on
    // a fresh link). Host b's answers have no way back throughout.
    let requests = || echo_requests_at_b(&topo);
    // Sends 4 pings: whether any was answered, and where the requests went
    // (taken by the socket, received by host b).
    let four_pings = |rx: &mut AfPacket| {
        let at_start = requests();
        let (ok, text) = ping(&topo, "4");
        let at_b = requests() - at_start;
        let taken = echo_requests_taken(rx, Duration::from_millis(200));
        (ok, text, taken, at_b)
    };

    // Engaged: the kernel forwards, the socket gets nothing.
    ka.engage(ib).unwrap();
    let (ok, text, taken, at_b) = four_pings(&mut rx);
    assert!(!ok, "host b's answers have no way back:\n{text}");
    assert_eq!(
        (taken, at_b),
        (0, 4),
        "engaged: the socket took {taken} of 4 requests, host b received {at_b}"
    );

    // Between the two writes: the target still set, the socket taking frames
    // again (as after the first write of switching off, or before the second
    // of switching on).
    let kernel_before = ka.counter().counts().unwrap().frames;
    skip(&ka, 0);
    let (_, _, taken, at_b) = four_pings(&mut rx);
    let forwarded = ka.counter().counts().unwrap().frames - kernel_before;
    assert_eq!(
        (taken, at_b),
        (4, 0),
        "between the writes each of 4 requests must go one way: the socket took {taken}, \
         host b received {at_b} (the kernel forwarded {forwarded} frames in all)"
    );

    // Engaged again: the kernel's alone.
    skip(&ka, 1);
    let (_, _, taken, at_b) = four_pings(&mut rx);
    assert_eq!(
        (taken, at_b),
        (0, 4),
        "engaged again: the socket took {taken} of 4 requests, host b received {at_b}"
    );
    drop((ka, rx));
    topo.teardown();
}
