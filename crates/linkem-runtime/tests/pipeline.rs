//! The pipeline over in-memory ports: real threads and the real clock, no sockets.

use linkem_core::{Fate, LinkSpec};
use linkem_runtime::clock::now_ns;
use linkem_runtime::pipeline::{Direction, DirectionOptions};
use linkem_runtime::port::memory::{MemoryRx, MemoryTx, Sent};
use linkem_runtime::port::{TxOutcome, TxPort};
use std::sync::mpsc::{channel, Sender};
use std::time::Duration;

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
    assert!(late > 10, "late {late}");
    assert_eq!(
        sent.lock().unwrap().len() as u64,
        stats.fates.get(Fate::Delivered)
    );
    assert_eq!(stats.fates.get(Fate::Delivered) + late, 50);
    assert!(stats.adds_up());
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
