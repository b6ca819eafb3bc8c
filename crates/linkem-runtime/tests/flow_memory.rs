//! The soak's bound, in one process: a flood of new flows at a masked
//! fq_codel pipe holds the resident size within the stated bound
//! (`--max-flow-memory`, here 64 MiB, plus a margin), and gives the memory
//! back once the instances expired by time and the heap was trimmed, as the
//! live stage does ([`linkem_runtime::mem`]).

use linkem_core::node::{Node, NodeConfig, PacketIn};
use linkem_core::rules::flow::v4_mapped;
use linkem_core::rules::{parse_rules, FlowKey, Side};
use linkem_core::Fate;
use linkem_runtime::mem::{release_free_memory, rss_bytes};

const MIB: u64 = 1 << 20;
const BOUND_BYTES: usize = 64 << 20;

#[test]
fn flood_of_new_flows_holds_rss_within_the_bound_and_gives_it_back() {
    let set = parse_rules(
        "pipe 1 config bw 100Mbit/s mask src-ip 0xffffffff\nsched 1 config type fq_codel flows 65536\nadd pipe 1 ip\n",
        ["a", "b"],
        &mut linkem_core::config::no_files,
    )
    .expect("rules");
    let mut node = Node::new(
        set,
        NodeConfig {
            max_flow_bytes: BOUND_BYTES,
            ..Default::default()
        },
    );
    let mut out = Vec::new();
    release_free_memory();
    let base = rss_bytes().expect("/proc/self/statm");
    let mut peak = base;
    let (mut limited, mut decided) = (0usize, 0usize);
    for i in 0..300_000u32 {
        let key = FlowKey {
            ip_version: 4,
            proto: 17,
            src_ip: v4_mapped(0x0a00_0000 + i),
            dst_ip: v4_mapped(0x0b00_0001),
            has_ports: true,
            src_port: 1000,
            dst_port: 2000,
            ..Default::default()
        };
        let pkt = PacketIn {
            len_bytes: 200,
            key,
            side: Side::A,
            tag: i as u64,
        };
        node.on_arrival(1_000_000 + i as u64 * 1000, pkt, &mut out);
        for d in out.drain(..) {
            decided += 1;
            limited += (d.fate == Fate::FlowLimit) as usize;
        }
        if i % 10_000 == 0 {
            peak = peak.max(rss_bytes().unwrap_or(0));
        }
    }
    // Every event, each at its time: a poll at a far instant would first
    // sweep away (node::EXPIRY_SWEEP_NS) the idle instances counted below.
    while let Some(t) = node.next_event_ns() {
        node.poll(t, &mut out);
    }
    decided += out.len();
    peak = peak.max(rss_bytes().unwrap_or(0));
    let live = node.live_flows();
    let charged = node.flow_memory_bytes();
    node.expire_idle(2_000_000_000_000);
    release_free_memory();
    let after = rss_bytes().unwrap_or(0);
    eprintln!(
        "flood of 300000 flows, bound {} MiB: {live} instances live ({} MiB charged), {limited} flow-limit; \
         RSS base {} MiB, peak {} MiB (+{}), after expiry {} MiB (+{})",
        BOUND_BYTES as u64 / MIB,
        charged as u64 / MIB,
        base / MIB,
        peak / MIB,
        (peak - base) / MIB,
        after / MIB,
        after.saturating_sub(base) / MIB
    );
    assert_eq!(decided, 300_000, "every packet decided");
    assert!(
        charged <= BOUND_BYTES && live > 10_000,
        "{live} live, {charged} bytes"
    );
    assert_eq!(
        limited,
        300_000 - live,
        "packets beyond the bound are flow-limit"
    );
    assert!(
        peak - base <= BOUND_BYTES as u64 * 5 / 4 + 16 * MIB,
        "RSS grew {} MiB with a {} MiB bound",
        (peak - base) / MIB,
        BOUND_BYTES as u64 / MIB
    );
    assert_eq!((node.live_flows(), node.flow_memory_bytes()), (0, 0));
    assert!(
        after.saturating_sub(base) <= (peak - base) / 4 + 4 * MIB,
        "after expiry RSS is {} MiB above its base (peak +{} MiB)",
        after.saturating_sub(base) / MIB,
        (peak - base) / MIB
    );
}
