//! The node stage over in-memory ports: one node for both directions, packets
//! decided at arrival and later (a scheduled pipe serves them as its link
//! frees), counts that add up per direction.

use linkem_core::model::Change;
use linkem_core::node::{Node, NodeConfig};
use linkem_core::rules::parse_rules;
use linkem_core::Fate;
use linkem_runtime::clock::now_ns;
use linkem_runtime::pipeline::{LiveOptions, NodeBridge, DEFAULT_SPIN_NS};
use linkem_runtime::port::memory::{MemoryRx, MemoryTx, Sent};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

/// An Ethernet + IPv4 + UDP frame of `len` bytes, numbered `id` in its payload.
fn udp(len: usize, src: [u8; 4], dst: [u8; 4], dst_port: u16, id: u32) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut f[14..];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((len - 14) as u16).to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&dst);
    ip[20..22].copy_from_slice(&4000u16.to_be_bytes());
    ip[22..24].copy_from_slice(&dst_port.to_be_bytes());
    ip[24..26].copy_from_slice(&((len - 34) as u16).to_be_bytes());
    ip[28..32].copy_from_slice(&id.to_be_bytes());
    f
}

fn id_of(f: &[u8]) -> u32 {
    u32::from_be_bytes([f[42], f[43], f[44], f[45]])
}

fn wait_for(sent: &Sent, n: usize) {
    let until = Instant::now() + Duration::from_secs(3);
    while sent.lock().unwrap().len() < n && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(2));
    }
}

type Feed = std::sync::mpsc::Sender<(u64, Vec<u8>)>;

/// A node bridge over in-memory ports: feeds for IF_A and IF_B, and what was
/// sent on IF_B (a->b) and IF_A (b->a).
fn start(text: &str) -> (NodeBridge, [Feed; 2], [Sent; 2]) {
    start_with(
        text,
        NodeConfig {
            seed: 1,
            ..Default::default()
        },
    )
}

/// [`start`] with the node's limits and idle hold as given.
fn start_with(text: &str, cfg: NodeConfig) -> (NodeBridge, [Feed; 2], [Sent; 2]) {
    let set = parse_rules(text, ["a", "b"], &mut |_: &str| Err("no files".into())).unwrap();
    let node = Node::new(set, cfg);
    let (in_a, rx_a) = channel::<(u64, Vec<u8>)>();
    let (in_b, rx_b) = channel::<(u64, Vec<u8>)>();
    let (tx_b, sent_b) = MemoryTx::new();
    let (tx_a, sent_a) = MemoryTx::new();
    let opts = LiveOptions {
        names: ["a->b".into(), "b->a".into()],
        buffer_bytes: [8 << 20; 2],
        spin_ns: DEFAULT_SPIN_NS,
        spin_always: false,
        spin_budget_ppm: linkem_runtime::pipeline::DEFAULT_SPIN_BUDGET_PPM,
        // Order and timing are checked here; a descheduled thread is not loss.
        max_lag_ns: None,
        batch: 32,
        linger_ns: 0,
        realtime_priority: None,
        realtime_input: false,
        coalesce_window_ns: None,
        realtime_timed_only: false,
        tap: None,
    };
    let bridge = NodeBridge::start(
        opts,
        node,
        [Box::new(MemoryRx::new(rx_a)), Box::new(MemoryRx::new(rx_b))],
        [Box::new(tx_b), Box::new(tx_a)],
    )
    .unwrap();
    (bridge, [in_a, in_b], [sent_b, sent_a])
}

#[test]
fn packets_of_different_pipes_leave_in_release_order() {
    // Pipe 1 holds its packets 30 ms, pipe 2 10 ms: of alternating arrivals,
    // pipe 2's leave first, each pipe's in order, all after their release.
    let (mut bridge, [in_a, _in_b], [sent_b, _]) = start(
        "pipe 1 config delay 30ms\n\
         pipe 2 config delay 10ms\n\
         add 100 pipe 1 udp from any to any dst-port 6000\n\
         add 200 pipe 2 udp from any to any dst-port 6001\n",
    );
    let (ha, hb) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    let t0 = now_ns();
    for i in 0..20u32 {
        let port = 6000 + (i % 2) as u16;
        in_a.send((t0 + u64::from(i) * 100_000, udp(200, ha, hb, port, i)))
            .unwrap();
    }
    wait_for(&sent_b, 20);
    let stats = bridge.stop();
    let sent = sent_b.lock().unwrap();
    let ids: Vec<u32> = sent.iter().map(|(_, f)| id_of(f)).collect();
    let odd: Vec<u32> = (0..20).filter(|i: &u32| !i.is_multiple_of(2)).collect();
    let even: Vec<u32> = (0..20).filter(|i: &u32| i.is_multiple_of(2)).collect();
    assert_eq!(ids, [odd, even].concat(), "release order over both pipes");
    for (at, f) in sent.iter() {
        let i = id_of(f);
        let delay = if i.is_multiple_of(2) {
            30_000_000
        } else {
            10_000_000
        };
        assert!(
            *at + 50_000 >= t0 + u64::from(i) * 100_000 + delay,
            "frame {i} early"
        );
    }
    assert!(stats[0].adds_up(), "{:?}", stats[0]);
    assert_eq!(stats[0].fates.get(Fate::Delivered), 20);
}

#[test]
fn scheduled_pipe_releases_later_and_counts_add_up_both_ways() {
    // 1000-byte frames through an 8 Mbit/s scheduled pipe: one every 1 ms,
    // decided by the node's poll as its link frees, not at arrival.
    let text = "pipe 1 config bw 8Mbit/s queue 20 type fifo\n\
                add 50 deny udp from any to any dst-port 9\n\
                add 100 pipe 1 udp from any to any in\n";
    let (mut bridge, [in_a, in_b], [sent_b, sent_a]) = start(text);
    let (ha, hb) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    let t0 = now_ns();
    for i in 0..10 {
        in_a.send((t0, udp(1000, ha, hb, 5000, i))).unwrap();
    }
    in_a.send((t0, udp(100, ha, hb, 9, 99))).unwrap(); // denied
    in_b.send((t0, udp(100, hb, ha, 5000, 100))).unwrap(); // no rule: passes at once
    wait_for(&sent_b, 10);
    wait_for(&sent_a, 1);
    let stats = bridge.stop();
    let (b, a) = (sent_b.lock().unwrap(), sent_a.lock().unwrap());
    let ids: Vec<u32> = b.iter().map(|(_, f)| id_of(f)).collect();
    assert_eq!(ids, (0..10).collect::<Vec<_>>(), "a->b in order");
    for (k, (at, _)) in b.iter().enumerate() {
        let due = t0 + (k as u64 + 1) * 1_000_000;
        assert!(
            *at + 50_000 >= due,
            "frame {k} left {} us before its link time",
            (due - at) / 1000
        );
    }
    assert_eq!(a.len(), 1);
    assert_eq!(id_of(&a[0].1), 100);
    assert_eq!(stats[0].fates.get(Fate::Denied), 1);
    assert_eq!(stats[0].fates.get(Fate::Delivered), 10);
    assert_eq!(stats[1].fates.get(Fate::Delivered), 1);
    for s in &stats {
        assert!(s.adds_up(), "{}: {s:?}", s.name);
        assert_eq!(s.in_flight, 0, "{}", s.name);
    }
    let rules = bridge.with_model(|n| n.classifier().counters.clone());
    assert_eq!(rules, vec![(1, 100), (10, 10_000)]);
}

fn wait_until(f: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(3);
    while !f() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn update_keeps_a_held_scheduler_and_flushes_a_deleted_one() {
    // 1000-byte frames through a 500 kbit/s scheduled pipe: 16 ms each. A
    // change to pipe 2 leaves pipe 1's backlog held and its link busy, so
    // frames arriving after the change queue behind the held ones; deleting
    // pipe 1 decides its held frames and flushes them.
    let text = |delay2: &str| {
        format!(
            "pipe 1 config bw 500kbit/s queue 100 type fifo\n\
             pipe 2 config delay {delay2}\n\
             add 100 pipe 1 udp from any to any dst-port 5000\n\
             add 200 pipe 2 udp from any to any dst-port 5001\n"
        )
    };
    let parse = |t: &str| {
        let set = parse_rules(t, ["a", "b"], &mut |_: &str| Err("no files".into())).unwrap();
        vec![Change::Rules {
            set: Box::new(set),
            text: t.into(),
            files: Vec::new(),
        }]
    };
    let (mut bridge, [in_a, _in_b], [sent_b, _]) = start(&text("1ms"));
    let (ha, hb) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    let t0 = now_ns();
    for i in 0..10 {
        in_a.send((t0, udp(1000, ha, hb, 5000, i))).unwrap();
    }
    wait_until(|| bridge.with_model(|n| n.holds_packets()));
    assert!(bridge.submit(parse(&text("2ms"))).is_ok());
    assert!(
        bridge.with_model(|n| n.holds_packets()),
        "pipe 1's backlog stays held"
    );
    let t1 = now_ns();
    for i in 10..15 {
        in_a.send((t1, udp(1000, ha, hb, 5000, i))).unwrap();
    }
    wait_for(&sent_b, 15);
    {
        let b = sent_b.lock().unwrap();
        let ids: Vec<u32> = b.iter().map(|(_, f)| id_of(f)).collect();
        assert_eq!(ids, (0..15).collect::<Vec<_>>(), "in order");
        // One link: frame k leaves k + 1 link times after t0, those that
        // came after the change too.
        for (k, (at, _)) in b.iter().enumerate() {
            assert!(
                *at + 50_000 >= t0 + (k as u64 + 1) * 16_000_000,
                "frame {k} early"
            );
        }
    }
    // Deleting pipe 1 (and its rule) with a backlog: its held frames are
    // decided at the change and flushed with those already released.
    for i in 20..30 {
        in_a.send((now_ns(), udp(1000, ha, hb, 5000, i))).unwrap();
    }
    wait_until(|| bridge.with_model(|n| n.holds_packets()));
    let gone = "pipe 2 config delay 2ms\nadd 200 pipe 2 udp from any to any dst-port 5001\n";
    assert!(bridge.submit(parse(gone)).is_ok());
    assert!(!bridge.with_model(|n| n.holds_packets()));
    in_a.send((now_ns(), udp(100, ha, hb, 5000, 99))).unwrap(); // no rule now: passes
    wait_for(&sent_b, 16);
    std::thread::sleep(Duration::from_millis(250));
    let stats = bridge.stop();
    let b = sent_b.lock().unwrap();
    assert_eq!(id_of(&b.last().unwrap().1), 99);
    assert_eq!(b.len(), 16, "pipe 1's frames after the deletion not sent");
    let s = &stats[0];
    assert!(s.adds_up(), "{s:?}");
    assert_eq!(s.in_flight, 0);
    assert_eq!(s.fates.get(Fate::Flushed), 10, "{s:?}");
}

#[test]
fn idle_instances_expire_by_time_with_no_further_packet() {
    // 40 sources through a masked pipe and 40 through a masked fq_codel
    // pipe, one frame each, then nothing: every instance (and every fq flow
    // class in them) goes once its hold (300 ms here) has passed, by the
    // stage's periodic sweep alone, since no packet comes to either pipe to
    // expire them at its arrival.
    const SOURCES: u32 = 40;
    const HOLD_NS: u64 = 300_000_000;
    let text = "pipe 1 config delay 1ms mask src-ip 0xffffffff\n\
                pipe 2 config bw 100Mbit/s mask src-ip 0xffffffff\n\
                sched 2 config type fq_codel\n\
                add 100 pipe 1 udp from any to any dst-port 6000\n\
                add 200 pipe 2 udp from any to any dst-port 6001\n";
    let (mut bridge, [in_a, _in_b], [sent_b, _]) = start_with(
        text,
        NodeConfig {
            seed: 1,
            idle_hold_ns: HOLD_NS,
            ..Default::default()
        },
    );
    let hb = [10, 0, 0, 200];
    let t0 = now_ns();
    for i in 0..SOURCES {
        let src = [10, 1, 0, i as u8 + 1];
        in_a.send((t0, udp(200, src, hb, 6000, i))).unwrap();
        in_a.send((t0, udp(200, src, hb, 6001, 100 + i))).unwrap();
    }
    wait_for(&sent_b, 2 * SOURCES as usize);
    let live_after_traffic = bridge.with_model(|n| {
        (
            n.pipes()[0].active_instances(),
            n.sched.instances().count(),
            n.live_flows(),
            n.flow_memory_bytes(),
        )
    });
    let last_ns = sent_b.lock().unwrap().iter().map(|(at, _)| *at).max();
    let (pipe_live, sched_live, live, charged) = live_after_traffic;
    assert_eq!(
        sent_b.lock().unwrap().len(),
        2 * SOURCES as usize,
        "every frame sent a->b"
    );
    // Unless the machine stalled past the hold, all are still there.
    if now_ns() < t0 + HOLD_NS {
        assert_eq!(
            (pipe_live, sched_live, live),
            (SOURCES as usize, SOURCES as usize, 2 * SOURCES as usize),
            "one instance per source in each pipe"
        );
        assert!(charged > 0, "instances charged no memory");
    }
    // Hold + one sweep period + margin for a loaded machine, polled.
    let until = Instant::now() + Duration::from_nanos(HOLD_NS) + Duration::from_secs(3);
    let counts = || {
        bridge.with_model(|n| {
            (
                n.pipes()[0].active_instances(),
                n.sched.instances().count(),
                n.live_flows(),
                n.flow_memory_bytes(),
            )
        })
    };
    while counts() != (0, 0, 0, 0) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let gone_after_ms = (now_ns() - last_ns.unwrap_or(t0)) / 1_000_000;
    let (pipe_left, sched_left, live_left, charged_left) = counts();
    let expired = bridge.with_model(|n| n.pipes()[0].expired);
    let stats = bridge.stop();
    assert_eq!(
        stats[0].received,
        2 * SOURCES as u64,
        "no packet came after the traffic"
    );
    assert_eq!(
        (pipe_left, sched_left, live_left, charged_left),
        (0, 0, 0, 0),
        "{gone_after_ms} ms after the last frame (hold {} ms) without further packets: \
         pipe 1 instances, pipe 2 scheduler instances, live instances, charged bytes \
         (after the traffic: {live_after_traffic:?})",
        HOLD_NS / 1_000_000
    );
    assert_eq!(
        expired,
        u64::from(SOURCES),
        "pipe 1's instances counted expired"
    );
    assert!(stats[0].adds_up(), "{:?}", stats[0]);
}

/// A port that lends its frames (as the netfilter queue does): it wants the
/// frames not sent back, and tells the owner of every frame's socket.
struct Lending {
    inner: MemoryRx,
    discarded: std::sync::Arc<std::sync::Mutex<Vec<u32>>>,
}

impl linkem_runtime::port::RxPort for Lending {
    fn rx_batch(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(linkem_runtime::port::RxFrame<'_>),
    ) -> std::io::Result<usize> {
        self.inner.rx_batch(max, &mut |mut fr| {
            fr.owner = Some(linkem_core::rules::SocketOwner { uid: 7, gid: 70 });
            f(fr)
        })
    }

    fn wait_rx(&mut self, timeout_ns: u64) -> std::io::Result<()> {
        self.inner.wait_rx(timeout_ns)
    }

    fn wants_discards(&self) -> bool {
        true
    }

    fn discard(&mut self, frame: &[u8]) {
        self.discarded.lock().unwrap().push(id_of(frame));
    }
}

#[test]
fn a_lending_port_gets_back_every_frame_the_model_drops_and_owners_match() {
    let text = "pipe 1 config delay 1ms\n\
                add 80 deny udp dst-port 9\n\
                add 90 deny udp dst-port 7 uid 7\n\
                add 91 deny udp dst-port 8 uid 8\n\
                add 200 pipe 1 ip\n";
    let set = parse_rules(text, ["a", "b"], &mut |_: &str| Err("no files".into())).unwrap();
    let node = Node::new(set, NodeConfig::default());
    let (in_a, rx_a) = channel::<(u64, Vec<u8>)>();
    let (_in_b, rx_b) = channel::<(u64, Vec<u8>)>();
    let (tx_b, sent_b) = MemoryTx::new();
    let (tx_a, _sent_a) = MemoryTx::new();
    let discarded = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut opts = LiveOptions::new(8 << 20);
    opts.max_lag_ns = None;
    let mut bridge = NodeBridge::start(
        opts,
        node,
        [
            Box::new(Lending {
                inner: MemoryRx::new(rx_a),
                discarded: discarded.clone(),
            }),
            Box::new(MemoryRx::new(rx_b)),
        ],
        [Box::new(tx_b), Box::new(tx_a)],
    )
    .unwrap();
    // Ids 0..4 to port 9 (denied), 10..14 to port 7 (uid 7: denied),
    // 20..24 to port 8 (uid 8: not this socket's; delivered), 30..34 to 80.
    for (base, port) in [(0, 9), (10, 7), (20, 8), (30, 80)] {
        for i in 0..5 {
            let f = udp(100, [10, 0, 0, 1], [10, 0, 0, 2], port, base + i);
            in_a.send((now_ns(), f)).unwrap();
        }
    }
    wait_for(&sent_b, 10);
    std::thread::sleep(Duration::from_millis(20));
    bridge.stop();
    let mut got: Vec<u32> = discarded.lock().unwrap().clone();
    got.sort();
    let want: Vec<u32> = (0..5).chain(10..15).collect();
    assert_eq!(got, want, "the denied frames, each handed back once");
    let mut sent: Vec<u32> = sent_b
        .lock()
        .unwrap()
        .iter()
        .map(|(_, f)| id_of(f))
        .collect();
    sent.sort();
    let want: Vec<u32> = (20..25).chain(30..35).collect();
    assert_eq!(sent, want, "the others delivered");
}
