//! Tests of [`super`]: the scheduler listings.

use super::*;
use linkem_core::node::{NodeConfig, PacketIn};
use linkem_core::rules::{parse_rules, FlowKey, Side};

/// Two schedulers, three queues, a packet through each queue.
fn node() -> Node {
    let text = "pipe 1 config bw 10Mbit/s\npipe 2 config bw 10Mbit/s\n\
                sched 1 config type wf2q+\nsched 2 config type wf2q+\n\
                queue 1 config sched 1 weight 1\nqueue 2 config sched 1 weight 3\n\
                queue 3 config sched 2 weight 1\n\
                add 100 queue 1 udp from any to any dst-port 1\n\
                add 200 queue 2 udp from any to any dst-port 2\n\
                add 300 queue 3 udp from any to any dst-port 3\n";
    let set = parse_rules(text, ["a", "b"], &mut linkem_core::config::no_files).unwrap();
    let mut node = Node::new(set, NodeConfig::default());
    let mut out = Vec::new();
    for port in 1..=3u16 {
        let key = FlowKey {
            ip_version: 4,
            proto: 17,
            has_ports: true,
            dst_port: port,
            src_ip: linkem_core::rules::flow::v4_mapped(0x0a00_0001),
            dst_ip: linkem_core::rules::flow::v4_mapped(0x0a00_0002),
            ..FlowKey::default()
        };
        let pkt = PacketIn {
            len_bytes: 100,
            key,
            side: Side::A,
            tag: port as u64,
        };
        node.on_arrival(1_000 * port as u64, pkt, &mut out);
    }
    node
}

fn queues(v: &serde_json::Value) -> Vec<(u64, u64)> {
    v.as_array()
        .unwrap()
        .iter()
        .flat_map(|l| {
            let p = l["pipe"].as_u64().unwrap();
            l["queues"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |q| (p, q["queue"].as_u64().unwrap()))
        })
        .collect()
}

#[test]
fn only_shows_the_named_scheduler_or_queue() {
    let n = node();
    assert_eq!(queues(&stats_json(&n)), [(1, 1), (1, 2), (2, 3)]);
    let one = |sched, queue| stats_json_only(&n, Only { sched, queue });
    assert_eq!(queues(&one(Some(2), None)), [(2, 3)]);
    assert_eq!(queues(&one(Some(1), None)), [(1, 1), (1, 2)]);
    assert_eq!(queues(&one(None, Some(2))), [(1, 2)]);
    assert_eq!(queues(&one(Some(9), None)), []);
    let text = stats_text_only(
        &n,
        Only {
            sched: None,
            queue: Some(3),
        },
    );
    assert!(text.contains("00002: type WF2Q+"), "{text}");
    assert!(!text.contains("00001: type"), "{text}");
}
