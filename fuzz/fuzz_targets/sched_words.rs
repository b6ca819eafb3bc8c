//! Scheduler, queue and AQM words (`sched N config`, `queue N config`,
//! `pipe N config ... type T codel ...`): parsing must refuse bad words with an
//! error, never a panic; a rule set that parses must run packets through the
//! node (event-driven service, every AQM) with every packet decided once.
//!
//! Input: rule text, optionally followed by a NUL byte and bytes that drive
//! the packets (without the NUL, the text's own bytes drive them).

#![no_main]

use libfuzzer_sys::fuzz_target;
use linkem_core::config::no_files;
use linkem_core::node::{Node, NodeConfig, PacketIn};
use linkem_core::rules::flow::v4_mapped;
use linkem_core::rules::{parse_rules, FlowKey, Side};

const MAX_PACKETS: usize = 512;

fuzz_target!(|data: &[u8]| {
    let (text, drive) = match data.iter().position(|&b| b == 0) {
        Some(nul) => (&data[..nul], &data[nul + 1..]),
        None => (data, data),
    };
    let text = String::from_utf8_lossy(text);
    let Ok(set) = parse_rules(&text, ["a", "b"], &mut no_files) else {
        return;
    };
    let mut node = Node::new(set, NodeConfig { seed: 1, max_flows: 1000, ..Default::default() });
    let mut out = Vec::new();
    let mut t = 0u64;
    let mut n = 0u64;
    for c in drive.chunks_exact(5).take(MAX_PACKETS) {
        t += u64::from(u16::from_le_bytes([c[0], c[1]])) * 1_000;
        let key = FlowKey {
            ip_version: 4,
            proto: if c[4] & 1 == 0 { 17 } else { 6 },
            src_ip: v4_mapped(0x0a08_0500 | (c[4] >> 4) as u32),
            dst_ip: v4_mapped(0x0a00_0002),
            has_ports: true,
            src_port: (c[4] & 0x0e) as u16,
            dst_port: 9,
            ether_type: 0x0800,
            ecn: c[4] >> 6,
            ..Default::default()
        };
        let len = 40 + u32::from(u16::from_le_bytes([c[2], c[3]]) % 9000);
        let side = if c[4] & 0x20 == 0 { Side::A } else { Side::B };
        node.on_arrival(t, PacketIn { len_bytes: len, key, side, tag: n }, &mut out);
        n += 1;
    }
    node.poll(u64::MAX, &mut out);
    assert_eq!(out.len() as u64, n, "every packet decided exactly once");
    assert!(node.next_event_ns().is_none(), "nothing left after the final poll");
});
