//! A bridge of several pairs in one set of threads (`LiveBridge::start_group`),
//! on in-memory ports: each pair's frames leave by its own ports after its
//! own delay, its counts add up on their own, a change reaches its pair only,
//! and a pair decides as a one-pair bridge with the pair's seed does.

use linkem_core::model::{Change, LinkModel};
use linkem_core::rng::pair_seed;
use linkem_core::{Fate, LinkSpec};
use linkem_runtime::clock::now_ns;
use linkem_runtime::pipeline::{GroupPair, LiveBridge, LiveOptions};
use linkem_runtime::port::memory::{MemoryRx, MemoryTx, Sent};
use std::sync::mpsc::{channel, Sender};
use std::time::Duration;

type Input = Sender<(u64, Vec<u8>)>;

/// A pair's test ends: what goes in on each side, what leaves on each.
struct Ends {
    input: [Input; 2],
    sent: [Sent; 2],
}

fn pair(words: &str, seed: u64) -> (GroupPair<LinkModel>, Ends) {
    let spec = LinkSpec::parse(words).unwrap();
    let model = LinkModel::new([spec.link.clone(), spec.link], seed);
    let (in_a, rx_a) = channel();
    let (in_b, rx_b) = channel();
    let (tx_b, sent_b) = MemoryTx::new();
    let (tx_a, sent_a) = MemoryTx::new();
    let p = GroupPair {
        names: ["a->b".into(), "b->a".into()],
        buffer_bytes: [1 << 20; 2],
        model,
        rx: [Box::new(MemoryRx::new(rx_a)), Box::new(MemoryRx::new(rx_b))],
        // a->b leaves by IF_B's send half.
        tx: [Box::new(tx_b), Box::new(tx_a)],
    };
    let ends = Ends {
        input: [in_a, in_b],
        sent: [sent_b, sent_a],
    };
    (p, ends)
}

fn options() -> LiveOptions {
    let mut opts = LiveOptions::new(1 << 20);
    // Order and timing are checked here, not lateness on a loaded machine.
    opts.max_lag_ns = None;
    opts
}

/// A frame naming its pair, side and number.
fn frame(pair: u8, side: u8, i: u16) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[0] = pair;
    f[1] = side;
    f[2..4].copy_from_slice(&i.to_be_bytes());
    f
}

fn wait_for(sent: &Sent, n: usize, limit: Duration) {
    let until = std::time::Instant::now() + limit;
    while sent.lock().unwrap().len() < n && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn each_pair_sends_by_its_own_ports_after_its_own_delay_and_counts_add_up() {
    const PAIRS: u8 = 6;
    const FRAMES: u16 = 50;
    let mut pairs = Vec::new();
    let mut ends = Vec::new();
    for k in 0..PAIRS {
        let (p, e) = pair(&format!("delay {}ms", k + 1), pair_seed(7, k as u64));
        pairs.push(p);
        ends.push(e);
    }
    let (mut bridges, mut group) = LiveBridge::start_group(options(), pairs).unwrap();
    let mut sent_at = Vec::new();
    for i in 0..FRAMES {
        for (k, e) in ends.iter().enumerate() {
            for side in 0..2u8 {
                let t = now_ns();
                sent_at.push(((k as u8, side, i), t));
                e.input[side as usize]
                    .send((t, frame(k as u8, side, i)))
                    .unwrap();
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    for e in &ends {
        for s in &e.sent {
            wait_for(s, FRAMES as usize, Duration::from_secs(5));
        }
    }
    group.stop();
    let sent_at: std::collections::HashMap<_, _> = sent_at.into_iter().collect();
    for (k, (bridge, e)) in bridges.iter_mut().zip(&ends).enumerate() {
        let stats = bridge.stop();
        for side in 0..2 {
            let s = &stats[side];
            assert!(s.adds_up(), "pair {k} {}: {:?}", s.name, s.fates);
            assert_eq!(s.received, FRAMES as u64, "pair {k} {}", s.name);
            assert_eq!(s.fates.get(Fate::Delivered), FRAMES as u64, "pair {k}");
            let out = e.sent[side].lock().unwrap();
            assert_eq!(out.len(), FRAMES as usize, "pair {k} side {side}");
            let delay_ns = (k as u64 + 1) * 1_000_000;
            for (n, (t_out, f)) in out.iter().enumerate() {
                assert_eq!(
                    (f[0], f[1]),
                    (k as u8, side as u8),
                    "pair {k} side {side} sent a frame of pair {} side {}",
                    f[0],
                    f[1]
                );
                let i = u16::from_be_bytes([f[2], f[3]]);
                assert_eq!(i as usize, n, "pair {k} side {side}: FIFO order");
                let release = sent_at[&(k as u8, side as u8, i)] + delay_ns;
                assert!(
                    *t_out >= release,
                    "pair {k} frame {i} left {} ns early",
                    release - t_out
                );
            }
        }
    }
}

#[test]
fn a_change_reaches_its_pair_only() {
    let (p0, e0) = pair("delay 1ms", 1);
    let (p1, e1) = pair("delay 1ms", 2);
    let (bridges, mut group) = LiveBridge::start_group(options(), vec![p0, p1]).unwrap();
    let slow = LinkSpec::parse("delay 40ms").unwrap().link;
    bridges[1]
        .submit(vec![Change::Link {
            sides: [true, true],
            config: Box::new(slow),
        }])
        .unwrap();
    let t = now_ns();
    e0.input[0].send((t, frame(0, 0, 0))).unwrap();
    e1.input[0].send((t, frame(1, 0, 0))).unwrap();
    wait_for(&e0.sent[0], 1, Duration::from_secs(5));
    wait_for(&e1.sent[0], 1, Duration::from_secs(5));
    group.stop();
    let t0 = e0.sent[0].lock().unwrap()[0].0 - t;
    let t1 = e1.sent[0].lock().unwrap()[0].0 - t;
    assert!(
        (1_000_000..40_000_000).contains(&t0),
        "pair 0 kept 1 ms: {t0} ns"
    );
    assert!(t1 >= 40_000_000, "pair 1 took 40 ms: {t1} ns");
}

/// Which of `n` frames a bridge delivers on side a->b, the frames given
/// stamps in order.
fn delivered(sent: &Sent) -> Vec<u16> {
    let mut ids: Vec<u16> = sent
        .lock()
        .unwrap()
        .iter()
        .map(|(_, f)| u16::from_be_bytes([f[2], f[3]]))
        .collect();
    ids.sort();
    ids
}

#[test]
fn a_pair_decides_as_a_one_pair_bridge_with_its_seed() {
    const FRAMES: u16 = 400;
    let words = "delay 1ms loss 30%";
    let (p0, e0) = pair(words, pair_seed(99, 0));
    let (p1, e1) = pair(words, pair_seed(99, 1));
    let (p2, e2) = pair(words, pair_seed(99, 2));
    let (_bridges, mut group) = LiveBridge::start_group(options(), vec![p0, p1, p2]).unwrap();
    for i in 0..FRAMES {
        let t = now_ns();
        for (k, e) in [&e0, &e1, &e2].iter().enumerate() {
            e.input[0].send((t, frame(k as u8, 0, i))).unwrap();
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    group.stop();
    let in_group: Vec<Vec<u16>> = [&e0, &e1, &e2]
        .iter()
        .map(|e| delivered(&e.sent[0]))
        .collect();
    assert_ne!(
        in_group[1], in_group[2],
        "pairs draw from streams of their own"
    );
    // Pair 2 alone, with the seed it had in the group.
    let (alone, e) = pair(words, pair_seed(99, 2));
    let spec = LinkSpec::parse(words).unwrap();
    let mut opts = options();
    opts.buffer_bytes = alone.buffer_bytes;
    let mut bridge = LiveBridge::start(
        opts,
        LinkModel::new([spec.link.clone(), spec.link], pair_seed(99, 2)),
        alone.rx,
        alone.tx,
    )
    .unwrap();
    for i in 0..FRAMES {
        e.input[0].send((now_ns(), frame(2, 0, i))).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    bridge.stop();
    assert_eq!(delivered(&e.sent[0]), in_group[2]);
}
