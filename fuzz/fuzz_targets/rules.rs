//! Rule files as users type them, and frames as they arrive: parsing must refuse
//! bad lines with an error naming the line, never a panic; a rule set that parses
//! must run frames (parsed by `FlowKey::parse` from arbitrary bytes) through the
//! node, one-pass on or off, and decide every one of them exactly once.
//!
//! Input: rule text, then a NUL byte and bytes cut into frames (each: a length
//! byte, a gap byte, a side bit in the gap's top bit, the frame bytes). Profiles
//! named by the rules read the seed profile of the paper.

#![no_main]

use libfuzzer_sys::fuzz_target;
use linkem_core::node::{Node, NodeConfig, PacketIn};
use linkem_core::rules::{parse_rules, FlowKey, L2Kind, Side};

const PROFILE: &str = "name p\nbandwidth 2Mbit/s\nloss-level 0.99\nsamples 5\nprob delay\n\
                       0.2 0.1\n0.4 0.13\n0.5 0.13\n0.8 1.5\n0.98 2\n";

fuzz_target!(|data: &[u8]| {
    let (text, frames) = match data.iter().position(|&b| b == 0) {
        Some(nul) => (&data[..nul], &data[nul + 1..]),
        None => (data, &[][..]),
    };
    let text = String::from_utf8_lossy(text);
    let mut files = |name: &str| {
        if name.starts_with('p') {
            Ok(PROFILE.to_string())
        } else {
            Err(format!("no file {name}"))
        }
    };
    let set = match parse_rules(&text, ["a", "b"], &mut files) {
        Ok(set) => set,
        Err(e) => {
            assert!(e.line >= 1 && e.line <= text.lines().count().max(1), "{e}");
            return;
        }
    };
    let mut node = Node::new(set, NodeConfig { seed: 1, max_flows: 64, idle_hold_ns: 1_000_000, ..NodeConfig::default() });
    let mut out = Vec::new();
    let (mut t, mut n, mut rest) = (0u64, 0u64, frames);
    let kinds = [L2Kind::Ethernet, L2Kind::RawIp, L2Kind::LinuxSll, L2Kind::LinuxSll2, L2Kind::Null];
    while rest.len() >= 2 && n < 256 {
        let len = rest[0] as usize;
        let gap = rest[1];
        let body = &rest[2..];
        let frame = &body[..len.min(body.len())];
        rest = &body[frame.len()..];
        t += u64::from(gap & 0x7f) * 100_000;
        let key = FlowKey::parse(frame, kinds[(n % 5) as usize]);
        let side = if gap & 0x80 != 0 { Side::B } else { Side::A };
        node.on_arrival(t, PacketIn { len_bytes: frame.len() as u32 + 14, key, side, tag: n }, &mut out);
        n += 1;
    }
    node.poll(u64::MAX, &mut out);
    assert_eq!(out.len() as u64, n, "every packet is decided once");
    assert!(node.next_event_ns().is_none());
});
