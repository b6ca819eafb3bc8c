//! Many flow instances against a plain reference: one `Link` per masked flow,
//! removed when idle longer than the hold at an arrival to its pipe or at
//! the sweep of every pipe at each 100 ms of model time, a
//! node-wide cap on live instances, and a live `update` reconfiguring every
//! live link. A check on the flow index, the expiry heap and the instance
//! layout, which are tuned for speed: the node must decide exactly what the
//! reference decides.

mod common;

use common::{packet, parse};
use linkem_core::node::{Decision, Node, NodeConfig, EXPIRY_SWEEP_NS};
use linkem_core::pipe::{instance_seed, FlowMask, MaskedKey};
use linkem_core::rules::FlowKey;
use linkem_core::{Fate, Link, LinkConfig, PacketMeta};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};

const HOLD_NS: u64 = 2_000_000;
const MAX_FLOWS: usize = 12;

/// Rule file before and after the live update: same masks, other links.
fn rules(after: bool) -> String {
    let (w1, w2) = if after {
        (
            "bw 1Mbit/s delay 1ms 500us queue 4KBytes plr 0.02 burst 2k",
            "bw 8Mbit/s delay 2 queue 5 policer 4Mbit/s burst 3000B",
        )
    } else {
        (
            "bw 2Mbit/s delay 3 queue 6 plr 0.05 duplicate 3%",
            "bw 4Mbit/s delay 1 queue 3",
        )
    };
    format!(
        "pipe 1 config mask src-ip 0xffffffff {w1}\n\
         pipe 2 config mask src-ip 0xfffffff0 dst-port 0xffff {w2}\n\
         add 100 pipe 1 udp dst-port 0\n\
         add 200 deny udp dst-port 1\n\
         add 300 pipe 2 udp\n"
    )
}

fn key(src: u32, dport: u16) -> FlowKey {
    FlowKey {
        ip_len: 100,
        ..common::udp4(0x0a00_0000 | src, 0x0b00_0001, 4000, dport, 0)
    }
}

struct RefPipe {
    number: u32,
    mask: FlowMask,
    link: LinkConfig,
    burst_bytes: u64,
    /// Live instances: link and the time its last packet is released.
    flows: HashMap<MaskedKey, (Link, u64)>,
}

/// The straightforward model of masked pipes: a map per pipe, a full scan
/// for expiry.
struct Reference {
    seed: u64,
    pipes: BTreeMap<u32, RefPipe>,
    /// The next multiple of `EXPIRY_SWEEP_NS` not swept.
    next_sweep_ns: u64,
}

impl Reference {
    fn new(text: &str, seed: u64) -> Reference {
        let pipes = parse(text)
            .pipes
            .into_iter()
            .map(|(n, d)| {
                let p = RefPipe {
                    number: n,
                    mask: d.mask.expect("masked"),
                    link: d.link,
                    burst_bytes: d.burst_bytes,
                    flows: HashMap::new(),
                };
                (n, p)
            })
            .collect();
        Reference {
            seed,
            pipes,
            next_sweep_ns: 0,
        }
    }

    /// Before an input at `t`: the sweep at the last multiple of
    /// `EXPIRY_SWEEP_NS` it crosses, over every pipe.
    fn sweep(&mut self, t: u64) {
        if t < self.next_sweep_ns {
            return;
        }
        let at = t - t % EXPIRY_SWEEP_NS;
        self.next_sweep_ns = at + EXPIRY_SWEEP_NS;
        for p in self.pipes.values_mut() {
            p.flows
                .retain(|_, (_, idle)| idle.saturating_add(HOLD_NS) >= at);
        }
    }

    fn update(&mut self, text: &str, now_ns: u64) {
        self.sweep(now_ns);
        for (n, d) in parse(text).pipes {
            let p = self.pipes.get_mut(&n).expect("same pipes");
            p.link = d.link;
            p.burst_bytes = d.burst_bytes;
            for (link, _) in p.flows.values_mut() {
                link.reconfigure(now_ns, p.link.clone());
                link.set_burst(p.burst_bytes);
            }
        }
    }

    /// (fate, release, duplicate, flow id) of a packet.
    fn arrive(&mut self, t: u64, len: u32, k: &FlowKey) -> (Fate, u64, bool, u64) {
        self.sweep(t);
        let pipe = match k.dst_port {
            0 => 1,
            1 => return (Fate::Denied, t, false, 0),
            _ => 2,
        };
        let live: usize = self.pipes.values().map(|p| p.flows.len()).sum();
        let p = self.pipes.get_mut(&pipe).expect("pipe");
        let before = p.flows.len();
        p.flows
            .retain(|_, (_, idle)| idle.saturating_add(HOLD_NS) >= t);
        let live = live - (before - p.flows.len());
        let mk = p.mask.apply(k);
        let flow_id = mk.flow_id();
        if !p.flows.contains_key(&mk) && live >= MAX_FLOWS {
            return (Fate::FlowLimit, t, false, 0);
        }
        let (link, idle) = p.flows.entry(mk).or_insert_with(|| {
            let s = instance_seed(self.seed, p.number, flow_id, t);
            let mut link = Link::new(p.link.clone(), s, 0);
            link.set_burst(p.burst_bytes);
            (link, 0)
        });
        let v = link.on_arrival(t, PacketMeta { len_bytes: len });
        *idle = (*idle).max(v.release_ns);
        let fate = if v.fate == Fate::Delivered {
            Fate::Delivered
        } else {
            v.fate
        };
        (fate, v.release_ns, v.duplicate, flow_id)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn many_flows_with_expiry_cap_and_update_equal_one_link_per_flow(
        pkts in prop::collection::vec((0u64..300_000, 60u32..1500, 0u32..60, 0u16..4), 1..1500),
        update_at in 0usize..1500,
        seed in 0u64..1000,
    ) {
        let mut t = 0u64;
        let pkts: Vec<(u64, u32, FlowKey)> = pkts
            .into_iter()
            .map(|(gap, len, src, dport)| {
                t += gap;
                (t, len, key(src, dport))
            })
            .collect();
        let cfg = NodeConfig { seed, max_flows: MAX_FLOWS, idle_hold_ns: HOLD_NS, ..Default::default() };
        let mut reference = Reference::new(&rules(false), seed);
        let mut node = Node::new(parse(&rules(false)), cfg);
        let mut got = Vec::new();
        for (j, &(t, len, k)) in pkts.iter().enumerate() {
            if j == update_at {
                // Closed-form pipes hold nothing: the change decides nothing.
                node.update(parse(&rules(true)), t, &mut got);
            }
            node.on_arrival(t, packet(j, k, len), &mut got);
        }
        prop_assert_eq!(got.len(), pkts.len());
        for (j, (d, &(t, len, k))) in got.iter().zip(&pkts).enumerate() {
            if j == update_at {
                reference.update(&rules(true), t);
            }
            let (fate, release, dup, flow_id) = reference.arrive(t, len, &k);
            let d: &Decision = d;
            prop_assert_eq!(d.fate, fate, "packet {}", d.tag);
            prop_assert_eq!(d.release_ns, release, "packet {}", d.tag);
            prop_assert_eq!(d.duplicate, dup, "packet {}", d.tag);
            if fate != Fate::FlowLimit && fate != Fate::Denied {
                prop_assert_eq!(d.flow_id, flow_id, "packet {}", d.tag);
            }
        }
        let live: usize = reference.pipes.values().map(|p| p.flows.len()).sum();
        // The reference expires at arrivals to a pipe and at the sweeps, as the node does.
        prop_assert_eq!(node.live_flows(), live);
    }
}
