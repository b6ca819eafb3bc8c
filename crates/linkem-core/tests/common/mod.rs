//! What the node's integration tests share.

use linkem_core::node::{Decision, Node, PacketIn};
use linkem_core::rules::{FlowKey, Side};

/// Offers packets `(time, len, key)`, all received on side A and tagged by
/// their index, then decides everything the node still holds; returns one
/// decision per packet, in packet order.
pub fn feed(node: &mut Node, pkts: &[(u64, u32, FlowKey)]) -> Vec<Decision> {
    let mut out = Vec::new();
    for (i, &(t, len, key)) in pkts.iter().enumerate() {
        node.on_arrival(
            t,
            PacketIn {
                len_bytes: len,
                key,
                side: Side::A,
                tag: i as u64,
            },
            &mut out,
        );
    }
    node.poll(u64::MAX, &mut out);
    out.sort_by_key(|d| d.tag);
    assert_eq!(out.len(), pkts.len(), "every packet decided once");
    out
}
