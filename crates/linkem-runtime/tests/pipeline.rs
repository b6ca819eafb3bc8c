//! The pipeline over in-memory ports: real threads and the real clock, no
//! sockets. The plain link's direction a->b through the live stage, side b
//! idle.

use linkem_core::model::{Change, LinkModel};
use linkem_core::node::{Decision, Node, NodeConfig};
use linkem_core::rules::parse_rules;
use linkem_core::rules::Side;
use linkem_core::{Fate, LinkConfig, LinkSpec};
use linkem_runtime::clock::now_ns;
use linkem_runtime::pipeline::{
    DirectionOptions, DirectionStats, LiveBridge, LiveModel, LiveOptions, Tap,
};
use linkem_runtime::port::memory::{MemoryRx, MemoryTx, Sent};
use linkem_runtime::port::{RxPort, TxOutcome, TxPort};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Direction a->b of a plain link's live bridge, as the tests see it.
struct Direction {
    bridge: LiveBridge<LinkModel>,
    /// Keeps side b's (idle) receive port open.
    _idle: Sender<(u64, Vec<u8>)>,
}

impl Direction {
    /// Side a's link and the stages' options from `opts`; side b idle.
    fn start(
        opts: DirectionOptions,
        rx: Box<dyn RxPort>,
        tx: Box<dyn TxPort>,
    ) -> Result<Direction, String> {
        let mut live = LiveOptions::new(opts.buffer_bytes);
        live.spin_ns = opts.spin_ns;
        live.max_lag_ns = opts.max_lag_ns;
        live.batch = opts.batch;
        let model = LinkModel::new([opts.link.clone(), opts.link], opts.seed);
        let (idle, idle_rx) = channel();
        let (sink, _) = MemoryTx::new();
        let bridge = LiveBridge::start(
            live,
            model,
            [rx, Box::new(MemoryRx::new(idle_rx))],
            [tx, Box::new(sink)],
        )?;
        Ok(Direction {
            bridge,
            _idle: idle,
        })
    }

    fn stats(&self) -> DirectionStats {
        self.bridge.stats().swap_remove(0)
    }

    fn stop(mut self) -> DirectionStats {
        self.bridge.stop().swap_remove(0)
    }

    fn reconfigure(&self, link: LinkConfig) {
        let change = Change::Link {
            sides: [true, false],
            config: Box::new(link),
        };
        self.bridge.submit(vec![change]).unwrap();
    }
}

fn start(
    words: &str,
    tweak: impl FnOnce(&mut DirectionOptions),
) -> (Direction, Sender<(u64, Vec<u8>)>, Sent) {
    let spec = LinkSpec::parse(words).unwrap();
    let mut opts = DirectionOptions::new("a->b", spec.link, 1, 0);
    // These tests check order and timing, and must not count a descheduled
    // output thread on a loaded machine as loss; max-lag has its own tests.
    opts.max_lag_ns = None;
    tweak(&mut opts);
    let (tx_in, rx_in) = channel();
    let (tx, sent) = MemoryTx::new();
    let d = Direction::start(opts, Box::new(MemoryRx::new(rx_in)), Box::new(tx)).unwrap();
    (d, tx_in, sent)
}

fn frame(i: u32) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[..4].copy_from_slice(&i.to_be_bytes());
    f
}

fn id(f: &[u8]) -> u32 {
    u32::from_be_bytes([f[0], f[1], f[2], f[3]])
}

fn wait_for(sent: &Sent, n: usize, limit: Duration) {
    let until = std::time::Instant::now() + limit;
    while sent.lock().unwrap().len() < n && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn packets_leave_at_their_release_time_and_counts_add_up() {
    let (d, input, sent) = start("delay 5ms", |_| {});
    let mut arrivals = Vec::new();
    for i in 0..200u32 {
        let t = now_ns();
        arrivals.push(t);
        input.send((t, frame(i))).unwrap();
        std::thread::sleep(Duration::from_micros(300));
    }
    wait_for(&sent, 200, Duration::from_secs(5));
    let stats = d.stop();
    let sent = sent.lock().unwrap();
    assert_eq!(sent.len(), 200, "{:?}", stats.fates);
    for (k, (t_sent, f)) in sent.iter().enumerate() {
        let i = id(f) as usize;
        assert_eq!(i, k, "FIFO order");
        let release = arrivals[i] + 5_000_000;
        assert!(
            *t_sent >= release,
            "packet {i} left {} ns early",
            release - t_sent
        );
    }
    assert_eq!(stats.received, 200);
    assert_eq!(stats.fates.get(Fate::Delivered), 200);
    assert_eq!(stats.in_flight, 0);
    assert!(stats.adds_up());
    assert_eq!(stats.lateness.len(), 200);
    // Generous bound: a shared CI VM may deschedule the output thread.
    assert!(
        stats.lateness.value_at_quantile(0.5) < 2_000_000,
        "median lateness {}",
        stats.lateness.value_at_quantile(0.5)
    );
}

#[test]
fn a_changed_delay_takes_effect_without_losing_queued_packets() {
    let (d, input, sent) = start("delay 50ms", |_| {});
    let t0 = now_ns();
    for i in 0..100u32 {
        input.send((t0 + i as u64 * 10_000, frame(i))).unwrap();
    }
    std::thread::sleep(Duration::from_millis(10));
    let mut faster = LinkSpec::parse("delay 20ms").unwrap().link;
    faster.queue_packets = Some(1000);
    d.reconfigure(faster);
    std::thread::sleep(Duration::from_millis(5));
    let t1 = now_ns();
    for i in 100..200u32 {
        input
            .send((t1 + (i - 100) as u64 * 10_000, frame(i)))
            .unwrap();
    }
    wait_for(&sent, 200, Duration::from_secs(5));
    let stats = d.stop();
    let sent = sent.lock().unwrap();
    assert_eq!(sent.len(), 200, "nothing queued was lost");
    let ids: Vec<u32> = sent.iter().map(|(_, f)| id(f)).collect();
    assert_eq!(
        ids,
        (0..200).collect::<Vec<_>>(),
        "no reordering across the change"
    );
    // The first batch kept 50 ms; the second waited behind it (releases never go
    // backwards), and left no later than 50 ms after the first batch.
    assert!(sent[0].0 >= t0 + 50_000_000);
    assert!(sent[100].0 >= t1 + 20_000_000);
    assert!(sent[199].0 >= t1 + 20_000_000);
    assert!(stats.adds_up());
}

#[test]
fn a_full_delay_line_drops_as_backpressure_and_never_stalls() {
    // 2 MiB holds about 1365 records of 1500-byte frames; the delay keeps them all.
    let (d, input, _sent) = start("delay 10s queue unlimited", |o| o.buffer_bytes = 1);
    let t = now_ns();
    for i in 0..3000u32 {
        let mut f = frame(i);
        f.resize(1500, 0);
        input.send((t, f)).unwrap();
    }
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while d.stats().received < 3000 && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    let stats = d.stop();
    assert_eq!(stats.received, 3000);
    let bp = stats.fates.get(Fate::Backpressure);
    assert!((1500..=1700).contains(&bp), "backpressure {bp}");
    assert_eq!(stats.in_flight, 3000 - bp);
    assert!(stats.adds_up());
}

struct SlowTx(MemoryTx);

impl TxPort for SlowTx {
    fn tx_push(&mut self, frame: &[u8]) -> TxOutcome {
        self.0.tx_push(frame)
    }
    fn tx_flush(&mut self) -> std::io::Result<()> {
        std::thread::sleep(Duration::from_millis(3));
        self.0.tx_flush()
    }
    fn max_frame_bytes(&self) -> usize {
        self.0.max_frame_bytes()
    }
}

#[test]
fn packets_later_than_max_lag_are_dropped_as_late() {
    let spec = LinkSpec::parse("delay 1ms").unwrap();
    let mut opts = DirectionOptions::new("a->b", spec.link, 1, 0);
    opts.max_lag_ns = Some(500_000);
    let (tx_in, rx_in) = channel();
    let (tx, sent) = MemoryTx::new();
    let d = Direction::start(opts, Box::new(MemoryRx::new(rx_in)), Box::new(SlowTx(tx))).unwrap();
    let t = now_ns();
    for i in 0..50u32 {
        // One every 100 µs; each flush takes 3 ms, so most fall behind by more than 0.5 ms.
        tx_in.send((t + i as u64 * 100_000, frame(i))).unwrap();
    }
    std::thread::sleep(Duration::from_millis(400));
    let stats = d.stop();
    let late = stats.fates.get(Fate::Late);
    let delivered = stats.fates.get(Fate::Delivered);
    let shed = stats.fates.get(Fate::Backpressure);
    // A frame the stage takes while the output is already more than max-lag
    // behind is shed as backpressure instead (a stall of this test's thread
    // between its sends lets the output fall behind before the last arrive).
    let where_they_went =
        format!("delivered {delivered}, late {late}, backpressure {shed}: {stats:?}");
    assert!(late > 0, "none late: {where_they_went}");
    assert!(late + shed > 10, "{where_they_went}");
    assert_eq!(
        sent.lock().unwrap().len() as u64,
        delivered,
        "{where_they_went}"
    );
    assert_eq!(delivered + late + shed, 50, "{where_they_went}");
    assert!(stats.adds_up(), "{where_they_went}");
}

#[test]
fn reordering_links_send_in_release_order() {
    let (d, input, sent) = start("delay 20ms 15ms reorder allow seed 5", |_| {});
    let t = now_ns();
    for i in 0..100u32 {
        input.send((t + i as u64 * 100_000, frame(i))).unwrap();
    }
    wait_for(&sent, 100, Duration::from_secs(5));
    let stats = d.stop();
    let sent = sent.lock().unwrap();
    assert_eq!(sent.len(), 100);
    let ids: Vec<u32> = sent.iter().map(|(_, f)| id(f)).collect();
    assert!(
        ids.windows(2).any(|w| w[1] < w[0]),
        "15 ms jitter on 0.1 ms spacing reorders"
    );
    assert!(stats.adds_up());
}

// ---- Counting: every frame taken in ends in exactly one fate ----

use linkem_core::wire::{CsumPartial, Gso, GsoKind, Offload};
use linkem_runtime::port::memory::MemFrame;
use std::sync::atomic::Ordering;

/// Starts a direction over memory ports taking [`MemFrame`]s; `tx` set up by `tweak_tx`.
fn start_mem(
    words: &str,
    tweak: impl FnOnce(&mut DirectionOptions),
    tweak_tx: impl FnOnce(&mut MemoryTx),
) -> (
    Direction,
    Sender<MemFrame>,
    Sent,
    std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    let spec = LinkSpec::parse(words).unwrap();
    let mut opts = DirectionOptions::new("a->b", spec.link, 1, 0);
    opts.max_lag_ns = None;
    tweak(&mut opts);
    let (tx_in, rx_in) = channel::<MemFrame>();
    let (mut tx, sent) = MemoryTx::new();
    tweak_tx(&mut tx);
    let rx = MemoryRx::new(rx_in);
    let drops = rx.kernel_drops.clone();
    let d = Direction::start(opts, Box::new(rx), Box::new(tx)).unwrap();
    (d, tx_in, sent, drops)
}

fn settle(d: &Direction, received: u64) -> DirectionStats {
    let until = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let s = d.stats();
        if (s.received >= received && s.in_flight == 0) || std::time::Instant::now() > until {
            return s;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// RFC 1071 sum of 16-bit big-endian words, written from the RFC (not from linkem's code).
fn ones_sum(data: &[u8], mut sum: u32) -> u32 {
    for c in data.chunks(2) {
        sum += (c[0] as u32) << 8 | *c.get(1).unwrap_or(&0) as u32;
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Ethernet + IPv4 + TCP with `payload` bytes and the TCP checksum field holding the
/// folded pseudo-header sum, as a host with checksum offload hands it over.
fn tcp4_partial(payload: usize, seq: u32) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + 20 + payload];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((20 + 20 + payload) as u16).to_be_bytes());
    ip[4..6].copy_from_slice(&7u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
    let c = !fold(ones_sum(ip, 0));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let tcp = &mut f[34..54];
    tcp[0..2].copy_from_slice(&1234u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&80u16.to_be_bytes());
    tcp[4..8].copy_from_slice(&seq.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x18; // PSH ACK
    tcp[14..16].copy_from_slice(&1000u16.to_be_bytes());
    for (i, b) in f[54..].iter_mut().enumerate() {
        *b = (i * 7 + 3) as u8;
    }
    let pseudo = fold(ones_sum(
        &[10, 0, 0, 1, 10, 0, 0, 2, 0, 6],
        (20 + payload) as u32,
    ));
    f[50..52].copy_from_slice(&pseudo.to_be_bytes());
    f
}

/// True when the TCP/IPv4 checksum of an Ethernet frame verifies.
fn tcp4_verifies(f: &[u8]) -> bool {
    let tcp_len = u16::from_be_bytes([f[16], f[17]]) as usize - 20;
    let mut pseudo = Vec::from(&f[26..34]);
    pseudo.extend_from_slice(&[0, 6]);
    pseudo.extend_from_slice(&(tcp_len as u16).to_be_bytes());
    fold(ones_sum(&f[34..34 + tcp_len], ones_sum(&pseudo, 0))) == 0xffff
}

#[test]
fn too_big_frames_are_counted_never_sent_and_counts_add_up() {
    let (d, input, sent, _) = start_mem("delay 1ms", |_| {}, |_| {});
    let t = now_ns();
    for i in 0..30u32 {
        let mut f = frame(i);
        f.resize(if i % 3 == 0 { 1515 } else { 1514 }, 0);
        input.send((t, f).into()).unwrap();
    }
    let stats = settle(&d, 30);
    let stats_final = d.stop();
    assert_eq!(stats.fates.get(Fate::TooBig), 10, "{:?}", stats.fates);
    assert_eq!(stats_final.fates.get(Fate::Delivered), 20);
    assert!(sent.lock().unwrap().iter().all(|(_, f)| f.len() == 1514));
    assert!(stats_final.adds_up(), "{stats_final:?}");
}

#[test]
fn frames_the_kernel_refuses_move_from_delivered_to_tx_error() {
    let (d, input, sent, drops) =
        start_mem("delay 1ms", |_| {}, |tx| tx.refuse = |f| f[3] % 4 == 0);
    drops.store(17, Ordering::Relaxed);
    let t = now_ns();
    for i in 0..40u32 {
        input.send((t, frame(i)).into()).unwrap();
    }
    let _ = settle(&d, 40);
    // The output stage publishes its counts when it has time to spare.
    std::thread::sleep(Duration::from_millis(150));
    let stats = d.stop();
    assert_eq!(stats.received, 40);
    assert_eq!(stats.fates.get(Fate::TxError), 10, "{:?}", stats.fates);
    assert_eq!(stats.fates.get(Fate::Delivered), 30);
    assert_eq!(sent.lock().unwrap().len(), 30);
    assert_eq!(stats.rx_kernel_drops, 17);
    assert!(stats.adds_up(), "{stats:?}");
}

#[test]
fn a_super_frame_is_cut_before_the_model_and_each_wire_frame_counted() {
    // 10 × 1000 payload bytes at MSS 1000, one frame of 1514 bytes too big without
    // segmentation metadata, and one frame with only its checksum left to finish.
    let (d, input, sent, _) = start_mem("rate 10mbit", |_| {}, |_| {});
    let t = now_ns();
    let csum = Some(CsumPartial {
        start: 34,
        offset: 16,
    });
    input
        .send(MemFrame {
            ts_ns: t,
            data: tcp4_partial(10_000, 1_000_000),
            offload: Offload {
                csum,
                gso: Some(Gso {
                    kind: GsoKind::TcpV4,
                    size: 1000,
                }),
            },
        })
        .unwrap();
    input.send((t, tcp4_partial(3000, 5)).into()).unwrap();
    input
        .send(MemFrame {
            ts_ns: t,
            data: tcp4_partial(200, 9),
            offload: Offload { csum, gso: None },
        })
        .unwrap();
    wait_for(&sent, 11, Duration::from_secs(5));
    let stats = settle(&d, 3);
    let stats = if stats.in_flight == 0 {
        std::thread::sleep(Duration::from_millis(150));
        d.stop()
    } else {
        stats
    };
    let sent = sent.lock().unwrap();
    assert_eq!(stats.received, 3);
    assert_eq!(stats.segmented, 9);
    assert_eq!(stats.fates.get(Fate::TooBig), 1);
    assert_eq!(stats.fates.get(Fate::Delivered), 11, "{:?}", stats.fates);
    assert!(stats.adds_up(), "{stats:?}");
    assert_eq!(sent.len(), 11);
    let mut payload = Vec::new();
    for (k, (_, f)) in sent[..10].iter().enumerate() {
        assert_eq!(f.len(), 14 + 40 + 1000, "segment {k}");
        assert!(tcp4_verifies(f), "segment {k} checksum");
        let seq = u32::from_be_bytes([f[38], f[39], f[40], f[41]]);
        assert_eq!(seq, 1_000_000 + 1000 * k as u32);
        payload.extend_from_slice(&f[54..]);
    }
    assert_eq!(payload, tcp4_partial(10_000, 0)[54..]);
    // The rate applies per wire frame: 10 frames of 1054 bytes (+ overhead) at
    // 10 Mbit/s are released about 0.85 ms apart (7.6 ms in all), not at once; a
    // descheduled output thread on a loaded machine may send two together, so
    // only half of that is required.
    let spread = sent[9].0 - sent[0].0;
    assert!(spread >= 9 * 400_000, "segments spread over {spread} ns");
    assert!(tcp4_verifies(&sent[10].1), "checksum finished in place");
}

#[test]
fn an_output_stage_behind_by_max_lag_sheds_load_at_the_input() {
    let spec = LinkSpec::parse("delay 1ms").unwrap();
    let mut opts = DirectionOptions::new("a->b", spec.link, 1, 0);
    opts.max_lag_ns = Some(500_000);
    let (tx_in, rx_in) = channel();
    let (tx, sent) = MemoryTx::new();
    let d = Direction::start(opts, Box::new(MemoryRx::new(rx_in)), Box::new(SlowTx(tx))).unwrap();
    let t0 = now_ns();
    let n = 3000u32;
    for i in 0..n {
        // 20 kpps for 150 ms, far beyond what a 3 ms flush lets out.
        let t = t0 + i as u64 * 50_000;
        while now_ns() < t {
            std::thread::sleep(Duration::from_micros(20));
        }
        tx_in.send((t, frame(i))).unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    let stats = d.stop();
    let (late, shed) = (
        stats.fates.get(Fate::Late),
        stats.fates.get(Fate::Backpressure),
    );
    assert!(shed > 0, "the input stage shed nothing: {:?}", stats.fates);
    assert_eq!(
        sent.lock().unwrap().len() as u64,
        stats.fates.get(Fate::Delivered)
    );
    assert!(stats.adds_up(), "{stats:?}");
    assert!(
        stats.lateness.max() <= 500_000 + 10_000,
        "sent later than max-lag: {} (late {late})",
        stats.lateness.max()
    );
}

// ---- Coalescing on transmit: super-frames to the receiving host ----

use linkem_runtime::port::memory::Supers;

/// The plain link of `words` (side a->b) over memory ports whose send port
/// takes super-frames, coalescing with `window_ns` (`None`: off).
fn start_gso(
    words: &str,
    window_ns: Option<u64>,
) -> (LiveBridge<LinkModel>, [Sender<MemFrame>; 2], Sent, Supers) {
    let spec = LinkSpec::parse(words).unwrap();
    let mut live = LiveOptions::new(8 << 20);
    live.max_lag_ns = None;
    live.coalesce_window_ns = window_ns;
    let model = LinkModel::new([spec.link.clone(), spec.link], 7);
    let (in_a, rx_a) = channel::<MemFrame>();
    let (in_b, rx_b) = channel::<MemFrame>();
    let (mut tx, sent) = MemoryTx::new();
    let supers = Supers::default();
    tx.supers = Some(supers.clone());
    let (sink, _) = MemoryTx::new();
    let bridge = LiveBridge::start(
        live,
        model,
        [Box::new(MemoryRx::new(rx_a)), Box::new(MemoryRx::new(rx_b))],
        [Box::new(tx), Box::new(sink)],
    )
    .unwrap();
    (bridge, [in_a, in_b], sent, supers)
}

/// A host's TSO burst: `n` segments of 1000 bytes from `seq`, checksum left
/// to finish, as a veth hands it over.
fn tso_burst(ts_ns: u64, n: usize, seq: u32) -> MemFrame {
    MemFrame {
        ts_ns,
        data: tcp4_partial(n * 1000, seq),
        offload: Offload {
            csum: Some(CsumPartial {
                start: 34,
                offset: 16,
            }),
            gso: Some(Gso {
                kind: GsoKind::TcpV4,
                size: 1000,
            }),
        },
    }
}

fn seq_of(f: &[u8]) -> u32 {
    u32::from_be_bytes([f[38], f[39], f[40], f[41]])
}

/// Stops the bridge once `n` frames were sent (or 5 s passed).
fn finish_gso(mut bridge: LiveBridge<LinkModel>, sent: &Sent, n: usize) -> DirectionStats {
    wait_for(sent, n, Duration::from_secs(5));
    // The output stage publishes its counts when it has time to spare.
    std::thread::sleep(Duration::from_millis(150));
    bridge.stop().swap_remove(0)
}

#[test]
fn without_rate_a_tso_burst_leaves_whole_and_counts_stay_per_wire_frame() {
    let (bridge, input, sent, supers) = start_gso("delay 1ms", Some(0));
    let t = now_ns();
    input[0].send(tso_burst(t, 10, 1_000_000)).unwrap();
    let stats = finish_gso(bridge, &sent, 10);
    let supers = supers.lock().unwrap();
    let sent = sent.lock().unwrap();
    assert_eq!(supers.len(), 1, "one super-frame");
    assert_eq!(supers[0].1.len(), 10);
    assert_eq!(stats.coalesced, 10);
    assert_eq!(stats.super_frames, 1);
    assert_eq!(stats.whole, 10, "stored whole, never cut");
    assert_eq!(stats.received, 1);
    assert_eq!(stats.segmented, 9);
    assert_eq!(stats.fates.get(Fate::Delivered), 10, "{:?}", stats.fates);
    assert!(stats.adds_up(), "{stats:?}");
    // What the receiver cuts back is exactly the wire frames the model saw.
    for (k, (_, f)) in sent.iter().enumerate() {
        assert!(tcp4_verifies(f), "frame {k} checksum");
        assert_eq!(seq_of(f), 1_000_000 + 1000 * k as u32);
    }
    // Lateness per wire frame: ten records.
    assert_eq!(stats.lateness.len(), 10);
    // Not late by the window: released after 1 ms.
    assert!(supers[0].0 >= t + 1_000_000);
}

#[test]
fn coalescing_off_or_a_port_without_it_sends_wire_frames() {
    let (bridge, input, sent, supers) = start_gso("delay 1ms", None);
    input[0].send(tso_burst(now_ns(), 10, 5)).unwrap();
    let stats = finish_gso(bridge, &sent, 10);
    assert!(supers.lock().unwrap().is_empty());
    assert_eq!((stats.coalesced, stats.super_frames), (0, 0));
    assert_eq!(stats.fates.get(Fate::Delivered), 10);
}

#[test]
fn a_wire_frame_that_arrives_with_a_bad_checksum_never_rides_inside_a_super_frame() {
    // Six wire frames of one flow sent one by one by the host, checksums
    // complete; the fourth's payload was damaged on the way in. linkem did
    // not compute these checksums, so it verifies each before merging: the
    // fourth leaves alone, as it came, between two super-frames.
    let (bridge, input, sent, supers) = start_gso("delay 1ms", Some(1_000_000));
    let t = now_ns();
    let mut frames = Vec::new();
    for i in 0..6u32 {
        let mut f = tcp4_partial(1000, i * 1000);
        f[47] = 0x10; // ACK only: PSH would end a run
        f[18..20].copy_from_slice(&(i as u16).to_be_bytes());
        f[24..26].copy_from_slice(&[0, 0]);
        let c = !fold(ones_sum(&f[14..34], 0));
        f[24..26].copy_from_slice(&c.to_be_bytes());
        linkem_core::wire::complete_checksum(
            &mut f,
            CsumPartial {
                start: 34,
                offset: 16,
            },
        )
        .unwrap();
        assert!(tcp4_verifies(&f));
        frames.push(f);
    }
    frames[3][500] ^= 0x40;
    for f in &frames {
        input[0].send((t, f.clone()).into()).unwrap();
    }
    let stats = finish_gso(bridge, &sent, 6);
    let supers = supers.lock().unwrap();
    let runs: Vec<Vec<u32>> = supers
        .iter()
        .map(|(_, s)| s.iter().map(|f| seq_of(f)).collect())
        .collect();
    assert_eq!(
        runs,
        [vec![0, 1000, 2000], vec![4000, 5000]],
        "super-frames by sequence number; {} sent alone",
        sent.lock().unwrap().len() - runs.iter().map(Vec::len).sum::<usize>()
    );
    let sent: Vec<_> = sent
        .lock()
        .unwrap()
        .iter()
        .map(|(_, f)| f.clone())
        .collect();
    assert_eq!(sent[3], frames[3], "the damaged frame left as it came");
    assert_eq!((stats.coalesced, stats.whole), (5, 0));
}

#[test]
fn frames_of_another_flow_in_between_are_never_merged_across() {
    let (bridge, input, sent, supers) = start_gso("delay 1ms", Some(1_000_000));
    let t = now_ns();
    // Flows A and B alternate, each frame alone (checksums already finished).
    let finished = |seq: u32, port: u16| {
        let mut f = tcp4_partial(1000, seq);
        f[34..36].copy_from_slice(&port.to_be_bytes());
        f[47] = 0x10; // ACK only: PSH would end a run
        let pseudo = fold(ones_sum(&[10, 0, 0, 1, 10, 0, 0, 2, 0, 6], 1020));
        f[50..52].copy_from_slice(&pseudo.to_be_bytes());
        linkem_core::wire::complete_checksum(
            &mut f,
            CsumPartial {
                start: 34,
                offset: 16,
            },
        )
        .unwrap();
        assert!(tcp4_verifies(&f));
        f
    };
    let mut frames = Vec::new();
    for i in 0..4u32 {
        frames.push(finished(i * 1000, 1111));
        frames.push(finished(i * 1000, 2222));
    }
    // IP IDs must count up per flow for merging; give them their own.
    for (k, f) in frames.iter_mut().enumerate() {
        f[18..20].copy_from_slice(&((k / 2) as u16).to_be_bytes());
        f[24..26].copy_from_slice(&[0, 0]);
        let c = !fold(ones_sum(&f[14..34], 0));
        f[24..26].copy_from_slice(&c.to_be_bytes());
    }
    for f in &frames {
        input[0].send((t, f.clone()).into()).unwrap();
    }
    let stats = finish_gso(bridge, &sent, 8);
    assert!(
        supers.lock().unwrap().is_empty(),
        "A and B alternate: no run"
    );
    assert_eq!(stats.coalesced, 0);
    let sent: Vec<_> = sent
        .lock()
        .unwrap()
        .iter()
        .map(|(_, f)| f.clone())
        .collect();
    assert_eq!(sent, frames, "release order kept");

    // The same frames, A's first and then B's: two super-frames of four.
    let (bridge, input, sent, supers) = start_gso("delay 1ms", Some(1_000_000));
    let t = now_ns();
    let (a, b): (Vec<_>, Vec<_>) = frames.iter().enumerate().partition(|(k, _)| k % 2 == 0);
    for (_, f) in a.iter().chain(&b) {
        input[0].send((t, (*f).clone()).into()).unwrap();
    }
    let stats = finish_gso(bridge, &sent, 8);
    let supers = supers.lock().unwrap();
    assert_eq!(supers.len(), 2);
    assert!(supers.iter().all(|(_, s)| s.len() == 4));
    assert_eq!(stats.coalesced, 8);
}

#[test]
fn loss_duplicates_and_corruption_never_ride_inside_a_super_frame() {
    // Half the frames lost, corrupted or duplicated: a super-frame still
    // holds only frames that follow each other and verify.
    let (bridge, input, sent, supers) =
        start_gso("delay 1ms loss 20% duplicate 20% corrupt 20%", Some(0));
    let t = now_ns();
    for i in 0..20u32 {
        input[0]
            .send(tso_burst(t + u64::from(i), 20, i * 20_000))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    let stats = finish_gso(bridge, &sent, usize::MAX);
    let supers = supers.lock().unwrap();
    let sent = sent.lock().unwrap();
    assert!(stats.adds_up(), "{stats:?}");
    assert!(stats.fates.get(Fate::Loss) > 0 && stats.fates.corrupted > 0);
    assert!(stats.copies_sent > 0);
    let in_supers: usize = supers.iter().map(|(_, s)| s.len()).sum();
    assert_eq!(in_supers as u64, stats.coalesced);
    assert!(stats.coalesced > 0, "some runs survive: {stats:?}");
    for (_, s) in supers.iter() {
        for w in s.windows(2) {
            assert_eq!(seq_of(&w[1]), seq_of(&w[0]) + 1000, "a run has no gap");
        }
        assert!(
            s.iter().all(|f| tcp4_verifies(f)),
            "no corrupt frame inside"
        );
    }
    // Every corrupt frame that was delivered left alone.
    let bad = sent.iter().filter(|(_, f)| !tcp4_verifies(f)).count();
    assert!(bad > 0);
    assert_eq!(
        sent.len() as u64,
        stats.fates.get(Fate::Delivered) + stats.copies_sent
    );
}

#[test]
fn with_a_rate_the_window_decides_what_merges_and_lateness_counts_each_frame() {
    // 10 frames of 1054 bytes at 100 Mbit/s leave ~86 µs apart: a 20 µs
    // window merges none of them, a 2 ms one all.
    let (bridge, input, sent, supers) = start_gso("rate 100mbit", Some(20_000));
    input[0].send(tso_burst(now_ns(), 10, 0)).unwrap();
    let stats = finish_gso(bridge, &sent, 10);
    assert!(supers.lock().unwrap().is_empty());
    assert_eq!(stats.coalesced, 0);

    let (bridge, input, sent, supers) = start_gso("rate 100mbit", Some(2_000_000));
    input[0].send(tso_burst(now_ns(), 10, 0)).unwrap();
    let stats = finish_gso(bridge, &sent, 10);
    let supers = supers.lock().unwrap();
    assert_eq!(supers.len(), 1);
    assert_eq!(stats.coalesced, 10);
    assert_eq!(stats.lateness.len(), 10);
    // All ten left together, each late by its own release: the first by
    // ~9 × 86 µs more than the last (whatever the wake-up cost both).
    let (max, min) = (stats.lateness.max(), stats.lateness.min());
    assert!((600_000..1_000_000).contains(&(max - min)), "{min}..{max}");
}

#[test]
fn a_bridge_of_several_pairs_coalesces_per_pair_and_sends_what_it_holds_when_nothing_follows() {
    use linkem_runtime::pipeline::GroupPair;
    // Two pairs, each a TSO burst of 10 at 100 Mbit/s (~86 us apart) and a
    // 2 ms window: each pair's ten frames merge into one super-frame of its
    // own, which must leave once its last frame is due and nothing follows,
    // not when the bridge stops.
    let mut live = LiveOptions::new(8 << 20);
    live.max_lag_ns = None;
    live.coalesce_window_ns = Some(2_000_000);
    let mut pairs = Vec::new();
    let mut ends = Vec::new();
    for k in 0..2u64 {
        let spec = LinkSpec::parse("rate 100mbit").unwrap();
        let (in_a, rx_a) = channel::<MemFrame>();
        let (_in_b, rx_b) = channel::<MemFrame>();
        let (mut tx, sent) = MemoryTx::new();
        let supers = Supers::default();
        tx.supers = Some(supers.clone());
        let (sink, _) = MemoryTx::new();
        pairs.push(GroupPair {
            names: ["a->b".into(), "b->a".into()],
            buffer_bytes: [8 << 20; 2],
            model: LinkModel::new([spec.link.clone(), spec.link], 7 + k),
            rx: [Box::new(MemoryRx::new(rx_a)), Box::new(MemoryRx::new(rx_b))],
            tx: [Box::new(tx), Box::new(sink)],
        });
        ends.push((in_a, _in_b, sent, supers));
    }
    let (mut bridges, mut group) = LiveBridge::start_group(live, pairs).unwrap();
    let t = now_ns();
    for (k, (input, _, _, _)) in ends.iter().enumerate() {
        input.send(tso_burst(t, 10, 1_000_000 * k as u32)).unwrap();
    }
    let mut seen_ns = Vec::new();
    for (k, (_, _, sent, _)) in ends.iter().enumerate() {
        wait_for(sent, 10, Duration::from_secs(2));
        seen_ns.push(now_ns());
        let n = sent.lock().unwrap().len();
        assert_eq!(
            n, 10,
            "pair {k}: {n} of 10 frames left while the bridge ran"
        );
    }
    std::thread::sleep(Duration::from_millis(150));
    group.stop();
    for (k, (bridge, (_, _, sent, supers))) in bridges.iter_mut().zip(&ends).enumerate() {
        let stats = bridge.stop().swap_remove(0);
        let supers = supers.lock().unwrap();
        let sizes: Vec<usize> = supers.iter().map(|s| s.1.len()).collect();
        // One super-frame of its own; a stall of the output between two of
        // the burst's releases (~86 us apart) sends what it holds, so the
        // burst may leave in two or three, never frame by frame.
        assert!(
            (1..=3).contains(&supers.len()),
            "pair {k}: the burst left in super-frames of {sizes:?} frames"
        );
        // It left on its own, before the test saw all ten and long before
        // the stop. A time bound from the burst would fail whenever the
        // machine stalls (one CI run: 134 ms), so the stamp is compared with
        // the moment the test saw the frames, which a stall moves as well.
        let left_ns = supers[supers.len() - 1].0;
        assert!(
            left_ns <= seen_ns[k],
            "pair {k}: the super-frame left {} ns after the burst, after the test saw it ({} ns)",
            left_ns - t,
            seen_ns[k] - t
        );
        for (i, (_, f)) in sent.lock().unwrap().iter().enumerate() {
            assert_eq!(
                seq_of(f),
                1_000_000 * k as u32 + 1000 * i as u32,
                "pair {k}"
            );
            assert!(tcp4_verifies(f), "pair {k} frame {i} checksum");
        }
        assert_eq!(
            (stats.coalesced as usize, stats.super_frames as usize),
            (sizes.iter().sum::<usize>(), supers.len()),
            "pair {k}"
        );
        assert_eq!(stats.fates.get(Fate::Delivered), 10, "pair {k}");
        assert_eq!(
            stats.lateness.len(),
            10,
            "pair {k}: lateness per wire frame"
        );
        assert!(stats.adds_up(), "pair {k}: {stats:?}");
    }
}

// ---- Whole pass-through: a TSO burst whose wire frames get one plain decision ----

/// What a [`Tap`] saw: each wire frame given to the model and each decision.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Frame(u64, Vec<u8>),
    Decision(u64, u32, Decision),
}

struct SeenTap(Arc<Mutex<Vec<Seen>>>);

impl Tap for SeenTap {
    fn frame(&mut self, _side: Side, ts_ns: u64, bytes: &[u8]) {
        self.0
            .lock()
            .unwrap()
            .push(Seen::Frame(ts_ns, bytes.to_vec()));
    }
    fn decision(&mut self, arrival_ns: u64, len_bytes: u32, d: &Decision) {
        let mut d = d.clone();
        // Tags count per bridge; what matters is the decision itself.
        d.tag = 0;
        self.0
            .lock()
            .unwrap()
            .push(Seen::Decision(arrival_ns, len_bytes, d));
    }
    fn changes(&mut self, _at_ns: u64, _changes: &[Change]) {}
}

/// One run of `bursts` TSO bursts (20 wire frames each) through the plain
/// link of `words` (seed 7), coalescing on (`whole`: the stage may store a
/// burst whole) or off (every burst cut before the delay line, as before
/// whole pass-through), optionally tapped. Returns the counts, the wire
/// frames sent in order, and what the tap saw.
fn run_bursts(
    words: &str,
    whole: bool,
    tap: bool,
    bursts: u32,
) -> (DirectionStats, Vec<Vec<u8>>, Vec<Seen>) {
    let spec = LinkSpec::parse(words).unwrap();
    let model = LinkModel::new([spec.link.clone(), spec.link], 7);
    run_bursts_through(model, whole, tap, bursts)
}

/// [`run_bursts`] through any model: a link's, or a node's rules.
fn run_bursts_through<M: LiveModel>(
    model: M,
    whole: bool,
    tap: bool,
    bursts: u32,
) -> (DirectionStats, Vec<Vec<u8>>, Vec<Seen>) {
    let mut live = LiveOptions::new(32 << 20);
    live.max_lag_ns = None;
    live.coalesce_window_ns = whole.then_some(0);
    let seen = Arc::new(Mutex::new(Vec::new()));
    if tap {
        live.tap = Some(Box::new(SeenTap(seen.clone())));
    }
    let (in_a, rx_a) = channel::<MemFrame>();
    let (_in_b, rx_b) = channel::<MemFrame>();
    let (mut tx, sent) = MemoryTx::new();
    tx.supers = Some(Supers::default());
    let (sink, _) = MemoryTx::new();
    let mut bridge = LiveBridge::start(
        live,
        model,
        [Box::new(MemoryRx::new(rx_a)), Box::new(MemoryRx::new(rx_b))],
        [Box::new(tx), Box::new(sink)],
    )
    .unwrap();
    // Stamps ahead of the bridge's start, the same in every run relative to
    // it, 100 µs apart. Far enough ahead that a stall of this thread while
    // it feeds the bursts does not let the stage's clock pass a stamp not
    // yet taken (a stamp is never before the stage's last instant, so it
    // would differ between runs): 50 ms, not 1 ms (which failed once).
    let t = now_ns() + 50_000_000;
    for i in 0..bursts {
        let burst = tso_burst(t + 100_000 * u64::from(i), 20, i * 20_000);
        in_a.send(burst).unwrap();
    }
    // Every frame is released within ~5 ms; wait for the counts to settle.
    let until = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let st = bridge.stats().swap_remove(0);
        if st.received == u64::from(bursts) && st.in_flight == 0 && st.adds_up() {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "frames still in flight after 10 s: {st:?}"
        );
    }
    std::thread::sleep(Duration::from_millis(150));
    let mut stats = bridge.stop().swap_remove(0);
    // Only the model's decisions and the wire frames matter below.
    stats.lateness.reset();
    let sent = sent
        .lock()
        .unwrap()
        .iter()
        .map(|(_, f)| f.clone())
        .collect();
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    (stats, sent, seen)
}

#[test]
fn an_unimpaired_link_passes_each_tso_burst_whole_and_counts_every_wire_frame() {
    for words in ["delay 0ms", "delay 2ms"] {
        let (stats, sent, _) = run_bursts(words, true, false, 30);
        let n = 30 * 20;
        assert_eq!(stats.received, 30, "{words}");
        assert_eq!(stats.segmented, 30 * 19, "{words}");
        assert_eq!(stats.fates.get(Fate::Delivered), n, "{words}: {stats:?}");
        assert_eq!(
            stats.whole, n,
            "{words}: every burst stored whole: {stats:?}"
        );
        assert_eq!(stats.super_frames, 30, "{words}");
        assert_eq!(stats.coalesced, n, "{words}");
        assert!(stats.adds_up(), "{words}: {stats:?}");
        // Bytes per wire frame with its headers, whole or not: what the
        // receiver cuts back.
        let wire_bytes: u64 = sent.iter().map(|f| f.len() as u64).sum();
        assert_eq!(stats.received_bytes, wire_bytes, "{words}");
        assert_eq!(stats.delivered_bytes, wire_bytes, "{words}");
        assert_eq!(stats.delay.len(), n, "{words}");
        let want_ns = if words == "delay 2ms" { 2_000_000 } else { 1 };
        assert!(
            stats.delay.max().abs_diff(want_ns) <= want_ns / 100,
            "{words}: {}",
            stats.delay.max()
        );
        // What the receiver cuts back: every wire frame, in order, verified.
        assert_eq!(sent.len() as u64, n, "{words}");
        for (k, f) in sent.iter().enumerate() {
            assert_eq!(seq_of(f), 1000 * k as u32, "{words}: frame {k}");
            assert!(tcp4_verifies(f), "{words}: frame {k} checksum");
        }
    }
}

#[test]
fn a_burst_carrying_cwr_is_cut_so_that_only_its_first_wire_frame_keeps_cwr() {
    let (bridge, input, sent, _supers) = start_gso("delay 1ms", Some(0));
    let mut burst = tso_burst(now_ns(), 5, 0);
    burst.data[47] |= 0x80; // CWR
    input[0].send(burst).unwrap();
    let stats = finish_gso(bridge, &sent, 5);
    assert_eq!(stats.whole, 0, "cut, not stored whole");
    let cwr: Vec<bool> = sent
        .lock()
        .unwrap()
        .iter()
        .map(|(_, f)| f[47] & 0x80 != 0)
        .collect();
    assert_eq!(cwr, [true, false, false, false, false]);
    assert_eq!(stats.fates.get(Fate::Delivered), 5);
}

#[test]
fn decisions_that_differ_fall_back_to_cutting_and_deliver_what_cutting_first_does() {
    // Loss, copies and corrupt bits hit single wire frames; a rate gives each
    // its own release; both must deliver byte for byte what the path that
    // cuts every burst first delivers, with the same fates.
    for (words, some_whole) in [
        ("delay 1ms loss 2% duplicate 2% corrupt 2%", true),
        ("delay 1ms rate 2gbit", false),
    ] {
        let (whole, whole_sent, _) = run_bursts(words, true, false, 40);
        let (cut, cut_sent, _) = run_bursts(words, false, false, 40);
        assert_eq!(whole.fates, cut.fates, "{words}: the same fates");
        assert_eq!(whole.copies_sent, cut.copies_sent, "{words}");
        assert_eq!(whole.segmented, cut.segmented, "{words}");
        assert_eq!(cut.whole, 0, "{words}: coalescing off stores nothing whole");
        let first_diff = whole_sent.iter().zip(&cut_sent).position(|(a, b)| a != b);
        assert_eq!(
            (whole_sent.len(), first_diff),
            (cut_sent.len(), None),
            "{words}: the same wire frames in the same order"
        );
        if some_whole {
            assert!(
                whole.whole > 0 && whole.whole < whole.fates.get(Fate::Delivered),
                "{words}: bursts untouched cross whole, the others are cut: {whole:?}"
            );
            assert!(whole.fates.get(Fate::Loss) > 0 && whole.fates.corrupted > 0);
        } else {
            assert_eq!(whole.whole, 0, "{words}: each frame its own release");
        }
        assert!(whole.adds_up() && cut.adds_up(), "{whole:?} {cut:?}");
    }
}

#[test]
fn rules_read_each_wire_frame_key_of_a_burst_that_crosses_whole() {
    // Every TCP frame through one pipe: the bursts cross whole. A rule on
    // the flags sends each burst's last wire frame (the one with PSH) to a
    // pipe of its own: the bursts are cut after all, and deliver what
    // cutting first delivers. A rule on the IP length reads each wire
    // frame's (1040 bytes), not the burst's (20040): nothing is denied.
    let node = |rules: &str| {
        let set = parse_rules(rules, ["a", "b"], &mut |_: &str| Err("no files".into())).unwrap();
        Node::new(
            set,
            NodeConfig {
                seed: 7,
                ..Default::default()
            },
        )
    };
    let pipes = "pipe 1 config delay 1ms\npipe 2 config delay 2ms\n";
    for (rules, all_whole) in [
        (format!("{pipes}add 100 pipe 1 tcp from any to any\n"), true),
        (
            format!("{pipes}add 100 pipe 2 tcp from any to any tcpflags psh\nadd 200 pipe 1 tcp from any to any\n"),
            false,
        ),
        (
            format!("{pipes}add 100 deny tcp from any to any iplen 20040\nadd 200 pipe 1 tcp from any to any\n"),
            true,
        ),
    ] {
        let (whole, whole_sent, _) = run_bursts_through(node(&rules), true, false, 30);
        let (cut, cut_sent, _) = run_bursts_through(node(&rules), false, false, 30);
        let n = 30 * 20;
        assert_eq!(whole.fates.get(Fate::Delivered), n, "{rules}: {whole:?}");
        assert_eq!(whole.fates, cut.fates, "{rules}: the same fates");
        let first_diff = whole_sent.iter().zip(&cut_sent).position(|(a, b)| a != b);
        assert_eq!(
            (whole_sent.len(), first_diff),
            (cut_sent.len(), None),
            "{rules}: the same wire frames in the same order"
        );
        let want_whole = if all_whole { n } else { 0 };
        assert_eq!(whole.whole, want_whole, "{rules}: {whole:?}");
        assert!(whole.adds_up() && cut.adds_up(), "{whole:?} {cut:?}");
    }
}

#[test]
fn a_recording_sees_the_same_frames_and_decisions_whether_bursts_cross_whole_or_cut() {
    let words = "delay 1ms loss 3% corrupt 2%";
    let (whole, _, whole_seen) = run_bursts(words, true, true, 20);
    let (cut, _, cut_seen) = run_bursts(words, false, true, 20);
    assert!(whole.whole > 0, "some bursts crossed whole: {whole:?}");
    assert_eq!(whole.fates, cut.fates);
    // Stamps are the bridge's own (each run starts at its own instant):
    // compare them relative to the first.
    let rel = |seen: &[Seen]| -> Vec<Seen> {
        let t0 = match seen.first() {
            Some(Seen::Frame(t, _)) => *t,
            _ => 0,
        };
        seen.iter()
            .map(|e| match e {
                Seen::Frame(t, b) => Seen::Frame(t - t0, b.clone()),
                Seen::Decision(t, l, d) => {
                    let mut d = d.clone();
                    d.release_ns -= t0;
                    Seen::Decision(t - t0, *l, d)
                }
            })
            .collect()
    };
    let (a, b) = (rel(&whole_seen), rel(&cut_seen));
    assert_eq!(
        a.len(),
        20 * 20 * 2,
        "a frame and a decision per wire frame"
    );
    let first_diff = a.iter().zip(&b).position(|(x, y)| x != y);
    assert_eq!(
        (a.len(), first_diff),
        (b.len(), None),
        "the tap's record, in order"
    );
}

/// A port that gives back the packet it lent, once (as host mode's netfilter
/// verdicts do): it cannot send a copy.
struct OneCopyTx(MemoryTx);

impl TxPort for OneCopyTx {
    fn tx_push(&mut self, frame: &[u8]) -> TxOutcome {
        self.0.tx_push(frame)
    }
    fn tx_flush(&mut self) -> std::io::Result<()> {
        self.0.tx_flush()
    }
    fn max_frame_bytes(&self) -> usize {
        self.0.max_frame_bytes()
    }
    fn no_copies(&self) -> Option<&'static str> {
        Some("on this port: one verdict per packet")
    }
}

#[test]
fn a_change_that_duplicates_is_refused_when_a_port_cannot_send_a_copy() {
    let spec = LinkSpec::parse("delay 1ms").unwrap();
    let opts = DirectionOptions::new("a->b", spec.link, 1, 0);
    let (_input, rx_in) = channel::<(u64, Vec<u8>)>();
    let (tx, _sent) = MemoryTx::new();
    let d = Direction::start(
        opts,
        Box::new(MemoryRx::new(rx_in)),
        Box::new(OneCopyTx(tx)),
    )
    .unwrap();
    let change = |words: &str| Change::Link {
        sides: [true, true],
        config: Box::new(LinkSpec::parse(words).unwrap().link),
    };
    let refused = d
        .bridge
        .submit(vec![change("delay 2ms"), change("delay 2ms duplicate 1%")])
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "'duplicate' is not available on this port: one verdict per packet"
    );
    // Nothing of the refused request applied; a change without duplication does.
    assert_eq!(
        d.bridge
            .with_model(|m| m.link(linkem_core::rules::Side::A).config().delay_ns),
        1_000_000
    );
    d.bridge.submit(vec![change("delay 3ms")]).unwrap();
    assert_eq!(
        d.bridge
            .with_model(|m| m.link(linkem_core::rules::Side::A).config().delay_ns),
        3_000_000
    );
    d.stop();
}
