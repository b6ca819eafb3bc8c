//! The byte counts and the model's delay histogram of a direction, over
//! in-memory ports, for the plain link (through a change of its delay), a
//! bridge of several pairs, a node of rules and the plain forwarder: the
//! bytes are those of the frames given and sent, the delays those the model
//! gave (release − arrival, exact since the stamps are the test's own).

use linkem_core::model::{Change, LinkModel};
use linkem_core::node::{Node, NodeConfig};
use linkem_core::rules::parse_rules;
use linkem_core::{Fate, LinkSpec};
use linkem_runtime::clock::now_ns;
use linkem_runtime::pipeline::{
    Direction, DirectionOptions, DirectionStats, GroupPair, LiveBridge, LiveOptions, NodeBridge,
};
use linkem_runtime::port::memory::{MemoryRx, MemoryTx, Sent};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

fn wait_for(sent: &Sent, n: usize) {
    let until = Instant::now() + Duration::from_secs(5);
    while sent.lock().unwrap().len() < n && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn sent_bytes(sent: &Sent) -> u64 {
    sent.lock()
        .unwrap()
        .iter()
        .map(|(_, f)| f.len() as u64)
        .sum()
}

/// Whether `got_ns` is `want_ns` within the histogram's 1 % precision.
fn near(got_ns: u64, want_ns: u64) -> bool {
    got_ns.abs_diff(want_ns) <= want_ns / 100
}

fn options() -> LiveOptions {
    let mut opts = LiveOptions::new(8 << 20);
    // A descheduled output thread on a loaded machine is not loss here.
    opts.max_lag_ns = None;
    opts
}

/// An Ethernet + IPv4 + UDP frame of `len` bytes to `dst_port`.
fn udp(len: usize, dst_port: u16) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut f[14..];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((len - 14) as u16).to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
    ip[20..22].copy_from_slice(&4000u16.to_be_bytes());
    ip[22..24].copy_from_slice(&dst_port.to_be_bytes());
    ip[24..26].copy_from_slice(&((len - 34) as u16).to_be_bytes());
    f
}

#[test]
fn a_link_counts_the_bytes_given_and_sent_and_the_delays_it_gave() {
    let spec = LinkSpec::parse("delay 5ms").unwrap();
    let model = LinkModel::new([spec.link.clone(), spec.link], 1);
    let (in_a, rx_a) = channel();
    let (_in_b, rx_b) = channel::<(u64, Vec<u8>)>();
    let (tx_b, sent) = MemoryTx::new();
    let (tx_a, _) = MemoryTx::new();
    let mut bridge = LiveBridge::start(
        options(),
        model,
        [Box::new(MemoryRx::new(rx_a)), Box::new(MemoryRx::new(rx_b))],
        [Box::new(tx_b), Box::new(tx_a)],
    )
    .unwrap();
    // 100 frames of 100 bytes at 5 ms, then 300 of 1000 bytes at 20 ms.
    for _ in 0..100 {
        in_a.send((now_ns(), vec![0u8; 100])).unwrap();
        std::thread::sleep(Duration::from_micros(100));
    }
    wait_for(&sent, 100);
    let twenty = LinkSpec::parse("delay 20ms").unwrap().link;
    bridge
        .submit(vec![Change::Link {
            sides: [true, false],
            config: Box::new(twenty),
        }])
        .unwrap();
    for _ in 0..300 {
        in_a.send((now_ns(), vec![0u8; 1000])).unwrap();
        std::thread::sleep(Duration::from_micros(100));
    }
    wait_for(&sent, 400);
    // The output stage publishes its counts when it has time to spare.
    std::thread::sleep(Duration::from_millis(150));
    let running = bridge.stats().swap_remove(0);
    let stats = bridge.stop().swap_remove(0);
    assert_eq!(stats.fates.get(Fate::Delivered), 400, "{stats:?}");
    assert_eq!(stats.received_bytes, 100 * 100 + 300 * 1000);
    assert_eq!(stats.delivered_bytes, 100 * 100 + 300 * 1000);
    assert_eq!(stats.delivered_bytes, sent_bytes(&sent));
    // Published while running, not only at the stop.
    assert_eq!(running.delay.len(), 400);
    assert_eq!(running.delivered_bytes, stats.delivered_bytes);
    assert_eq!(stats.delay.len(), 400);
    let q = |q: f64| stats.delay.value_at_quantile(q);
    assert!(near(q(0.2), 5_000_000), "p20 {}", q(0.2));
    assert!(near(q(0.5), 20_000_000), "p50 {}", q(0.5));
    assert!(near(q(0.99), 20_000_000), "p99 {}", q(0.99));
    assert!(near(stats.delay.max(), 20_000_000));
    assert!(near(stats.delay.min(), 5_000_000));
}

#[test]
fn each_pair_of_a_group_counts_its_own_bytes_and_delays() {
    let mut pairs = Vec::new();
    let mut feeds = Vec::new();
    let mut outs = Vec::new();
    for k in 0..3u64 {
        let spec = LinkSpec::parse(&format!("delay {}ms", k + 1)).unwrap();
        let (in_a, rx_a) = channel();
        let (in_b, rx_b) = channel();
        let (tx_b, sent_b) = MemoryTx::new();
        let (tx_a, sent_a) = MemoryTx::new();
        pairs.push(GroupPair {
            names: ["a->b".into(), "b->a".into()],
            buffer_bytes: [1 << 20; 2],
            model: LinkModel::new([spec.link.clone(), spec.link], k),
            rx: [Box::new(MemoryRx::new(rx_a)), Box::new(MemoryRx::new(rx_b))],
            tx: [Box::new(tx_b), Box::new(tx_a)],
        });
        feeds.push([in_a, in_b]);
        outs.push([sent_b, sent_a]);
    }
    let (mut bridges, mut group) = LiveBridge::start_group(options(), pairs).unwrap();
    for i in 0..20usize {
        for (k, f) in feeds.iter().enumerate() {
            // Pair k's frames are 100 (k + 1) bytes a->b, 50 bytes b->a.
            f[0].send((now_ns(), vec![0u8; 100 * (k + 1)])).unwrap();
            f[1].send((now_ns(), vec![i as u8; 50])).unwrap();
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    for o in outs.iter().flatten() {
        wait_for(o, 20);
    }
    std::thread::sleep(Duration::from_millis(150));
    group.stop();
    for (k, (bridge, o)) in bridges.iter_mut().zip(&outs).enumerate() {
        let stats = bridge.stop();
        let want = [20 * 100 * (k as u64 + 1), 20 * 50];
        for side in 0..2 {
            let s = &stats[side];
            assert_eq!(s.received_bytes, want[side], "pair {k} {}", s.name);
            assert_eq!(s.delivered_bytes, want[side], "pair {k} {}", s.name);
            assert_eq!(s.delivered_bytes, sent_bytes(&o[side]));
            assert_eq!(s.delay.len(), 20, "pair {k} {}", s.name);
            let delay_ns = (k as u64 + 1) * 1_000_000;
            assert!(near(s.delay.value_at_quantile(0.5), delay_ns), "pair {k}");
            assert!(near(s.delay.max(), delay_ns), "pair {k}");
        }
    }
}

#[test]
fn a_node_of_rules_counts_the_bytes_and_each_pipes_delay() {
    let text = "pipe 1 config delay 30ms\n\
                pipe 2 config delay 10ms\n\
                add 100 pipe 1 udp from any to any dst-port 6000\n\
                add 200 pipe 2 udp from any to any dst-port 6001\n";
    let set = parse_rules(text, ["a", "b"], &mut |_: &str| Err("no files".into())).unwrap();
    let node = Node::new(
        set,
        NodeConfig {
            seed: 1,
            ..Default::default()
        },
    );
    let (in_a, rx_a) = channel();
    let (_in_b, rx_b) = channel::<(u64, Vec<u8>)>();
    let (tx_b, sent_b) = MemoryTx::new();
    let (tx_a, _) = MemoryTx::new();
    let mut opts = options();
    opts.names = ["a->b".into(), "b->a".into()];
    let mut bridge = NodeBridge::start(
        opts,
        node,
        [Box::new(MemoryRx::new(rx_a)), Box::new(MemoryRx::new(rx_b))],
        [Box::new(tx_b), Box::new(tx_a)],
    )
    .unwrap();
    // Three in four to pipe 2 (10 ms), one in four to pipe 1 (30 ms).
    for i in 0..40u16 {
        let port = if i % 4 == 0 { 6000 } else { 6001 };
        in_a.send((now_ns(), udp(200, port))).unwrap();
        std::thread::sleep(Duration::from_micros(100));
    }
    wait_for(&sent_b, 40);
    std::thread::sleep(Duration::from_millis(150));
    let stats = bridge.stop().swap_remove(0);
    assert_eq!(stats.received_bytes, 40 * 200);
    assert_eq!(stats.delivered_bytes, 40 * 200);
    assert_eq!(stats.delay.len(), 40);
    assert!(near(stats.delay.value_at_quantile(0.5), 10_000_000));
    assert!(near(stats.delay.max(), 30_000_000));
}

#[test]
fn a_plain_forwarder_counts_bytes_and_no_delay() {
    let link = LinkSpec::parse("delay 0ms").unwrap().link;
    let opts = DirectionOptions::new("a->b", link, 1, 0);
    let (input, rx) = channel();
    let (tx, sent) = MemoryTx::new();
    let d = Direction::start_forwarder(opts, Box::new(MemoryRx::new(rx)), Box::new(tx)).unwrap();
    for len in [60usize, 600, 1500] {
        input.send((now_ns(), vec![1u8; len])).unwrap();
    }
    wait_for(&sent, 3);
    let stats: DirectionStats = d.stop();
    assert_eq!(stats.received_bytes, 2160);
    assert_eq!(stats.delivered_bytes, 2160);
    assert!(stats.delay.is_empty());
}
