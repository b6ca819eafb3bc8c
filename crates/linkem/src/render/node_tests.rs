//! Tests of [`super`]: the bridge node listings.

use super::*;
use linkem_core::node::{NodeConfig, PacketIn};
use linkem_core::rules::{parse_rules, FlowKey, Side};

/// The bridge's periodic lines list a few instances of each pipe and
/// scheduler, with the counts; the full listing has every one.
#[test]
fn a_listing_of_at_most_n_instances_per_pipe_keeps_the_counts() {
    let text = "pipe 1 config delay 1ms mask src-ip 0xffffffff\n\
                pipe 2 config bw 10Mbit/s mask src-ip 0xffffffff\n\
                sched 2 config type fq_codel\n\
                add 100 pipe 1 udp from any to any dst-port 1\n\
                add 200 pipe 2 udp from any to any dst-port 2\n";
    let set = parse_rules(text, ["a", "b"], &mut linkem_core::config::no_files).unwrap();
    let mut node = Node::new(set, NodeConfig::default());
    let mut out = Vec::new();
    for i in 0..5u32 {
        for port in 1..=2u16 {
            let key = FlowKey {
                ip_version: 4,
                proto: 17,
                has_ports: true,
                dst_port: port,
                src_ip: linkem_core::rules::flow::v4_mapped(0x0a00_0001 + i),
                dst_ip: linkem_core::rules::flow::v4_mapped(0x0a00_0100),
                ..FlowKey::default()
            };
            let pkt = PacketIn {
                len_bytes: 100,
                key,
                side: Side::A,
                tag: u64::from(i * 2 + u32::from(port)),
            };
            node.on_arrival(1_000 * u64::from(i + 1), pkt, &mut out);
        }
    }
    let counts = |v: &serde_json::Value| {
        let p = |i: usize| &v["pipes"][i];
        (
            v["flow_instances"].as_u64().unwrap(),
            p(0)["instances"].as_u64().unwrap(),
            p(0)["flows"].as_array().unwrap().len(),
            p(1)["instances"].as_u64().unwrap(),
            v["schedulers"].as_array().unwrap().len(),
        )
    };
    let all = node_json(&node);
    assert_eq!(counts(&all), (10, 5, 5, 5, 5), "{all}");
    assert!(all["flow_memory_bytes"].as_u64().unwrap() > 0, "{all}");
    let few = node_json_listing(&node, 2);
    assert_eq!(counts(&few), (10, 5, 2, 5, 2), "{few}");
    let text = node_text_listing(&node, 2);
    assert!(text.contains("(3 more flows not listed)"), "{text}");
    assert_eq!(text.matches("00002: type FQ_CODEL").count(), 2, "{text}");
    let all = node_text(&node);
    assert_eq!(all.matches("00002: type FQ_CODEL").count(), 5, "{all}");
    assert!(!all.contains("not listed"), "{all}");
}
