//! What the node's integration tests share.
// Each test binary includes this module and uses part of it.
#![allow(dead_code)]

use linkem_core::config::no_files;
use linkem_core::node::{Decision, Node, PacketIn};
use linkem_core::rules::flow::v4_mapped;
use linkem_core::rules::{parse_rules, FlowKey, RuleSet, Side};

/// A rule file that must parse (sides named `a` and `b`, no files to read).
pub fn parse(text: &str) -> RuleSet {
    parse_rules(text, ["a", "b"], &mut no_files).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// The error of a rule file that must not parse.
pub fn parse_err(text: &str) -> String {
    parse_rules(text, ["a", "b"], &mut no_files)
        .expect_err(text)
        .to_string()
}

/// An IPv4 UDP flow key, TTL 64.
pub fn udp4(src: u32, dst: u32, sport: u16, dport: u16, ecn: u8) -> FlowKey {
    FlowKey {
        ip_version: 4,
        proto: 17,
        src_ip: v4_mapped(src),
        dst_ip: v4_mapped(dst),
        has_ports: true,
        src_port: sport,
        dst_port: dport,
        ether_type: 0x0800,
        ttl: 64,
        ecn,
        ..Default::default()
    }
}

/// Decides everything the node still holds: a poll at each next event, as
/// model time reaches it. (One poll at a far instant would decide the same,
/// but first sweep away every idle instance: `node::EXPIRY_SWEEP_NS`.)
pub fn drain(node: &mut Node, out: &mut Vec<Decision>) {
    while let Some(t) = node.next_event_ns() {
        node.poll(t, out);
    }
}

/// Offers packets `(time, len, key)`, all received on side A and tagged by
/// their index, then decides everything the node still holds; returns one
/// decision per packet, in packet order.
pub fn feed(node: &mut Node, pkts: &[(u64, u32, FlowKey)]) -> Vec<Decision> {
    let mut out = Vec::new();
    for (i, &(t, len, key)) in pkts.iter().enumerate() {
        node.on_arrival(t, packet(i, key, len), &mut out);
    }
    drain(node, &mut out);
    out.sort_by_key(|d| d.tag);
    assert_eq!(out.len(), pkts.len(), "every packet decided once");
    out
}

/// Packet `i` of a test stream (its tag), received on side A.
pub fn packet(i: usize, key: FlowKey, len_bytes: u32) -> PacketIn {
    PacketIn {
        len_bytes,
        key,
        side: Side::A,
        tag: i as u64,
    }
}
