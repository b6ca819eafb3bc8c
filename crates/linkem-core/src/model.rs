//! One interface for every model linkem runs, so that each front end (replay,
//! the live bridge, later the host mode and the shell) is written once.
//!
//! # The interface
//! A [`Model`] takes packets ([`PacketIn`]: side, length, parsed header key,
//! the caller's tag), the time, and changes; it gives back [`Decision`]s:
//! the fate, the release time, and what to do to the frame. As smoltcp's
//! `poll`/`poll_at`:
//! - [`Model::on_arrival`] at `now_ns` (non-decreasing between calls) appends
//!   every decision known by then: the packet's own if it is decided at once,
//!   and those of events due before it;
//! - [`Model::next_event_ns`] says when a decision not tied to an arrival is
//!   due (a scheduler's next service, a packet re-entering the rules);
//!   [`Model::poll`] runs what is due by `now_ns`;
//! - [`Model::apply`] changes the model at `now_ns`, between two packets.
//!
//! Every input is a value with its instant, so a driver that keeps them (the
//! arrivals in the order given, and each change with its instant) can feed
//! them again and get the same decisions: replay is the oracle of live runs.
//! For that the driver must keep one rule: `poll(t)` before `apply(t, ..)`,
//! and no arrival, poll or change at an instant earlier than one already
//! given.
//!
//! # The two models
//! - [`LinkModel`]: the closed-form link of `linkem replay`/`bridge` without
//!   rules, one [`Link`] per side (side a's from direction 0 of the seed, side
//!   b's from direction 1). Every packet is decided at arrival; the decision
//!   carries no rule, pipe or flow.
//! - [`Node`]: Dummynet's node of rules and pipes ([`crate::node`]).
//!
//! The plain link stays its own model rather than a node of one pipe per side:
//! a node classifies each packet (a parse of its headers and a rule walk) that
//! the plain link never needs; [`Model::reads_headers`] lets a driver skip the
//! parse.
//!
//! # Events
//! [`EVENTS_HEADER`] and [`write_event`] give the one line format of
//! `--events` files for every model and front end.

pub use crate::change::{Change, ChangeError};
use crate::config::LinkConfig;
use crate::fate::Fate;
use crate::link::{Link, PacketMeta};
use crate::node::{Decision, Node, PacketIn};
use crate::rules::flow::L2Kind;
use crate::rules::Side;
use std::fmt::Write as _;

/// A model of what happens to packets: see the [module doc](self).
pub trait Model {
    /// Offers a packet arriving at `now_ns`; appends the decisions made by then.
    fn on_arrival(&mut self, now_ns: u64, pkt: PacketIn, out: &mut Vec<Decision>);

    /// When the next decision not tied to an arrival is due, if any.
    fn next_event_ns(&mut self) -> Option<u64>;

    /// Runs every event due by `now_ns`, appending the decisions made.
    fn poll(&mut self, now_ns: u64, out: &mut Vec<Decision>);

    /// Changes the model from `now_ns` on; decisions the change forces (the
    /// packets of a scheduler that goes away) are appended. On error nothing
    /// changed.
    fn apply(
        &mut self,
        now_ns: u64,
        change: Change,
        out: &mut Vec<Decision>,
    ) -> Result<(), ChangeError>;

    /// The model starts at `t0_ns`: a live run's start, which its recording
    /// stores, so that traces and schedules keep the same origin in a replay
    /// of it. Called once before any input; without it a link's trace and
    /// schedule start at its first arrival (a replay of a capture).
    fn start(&mut self, _t0_ns: u64) {}

    /// Whether decisions read [`PacketIn::key`]: when not, a driver may pass
    /// [`crate::rules::FlowKey::default`] and save the parse.
    fn reads_headers(&self) -> bool;

    /// Whether packets are held undecided (until [`Model::poll`]).
    fn holds_packets(&self) -> bool;

    /// Forgets per-flow state idle for longer than its hold; a no-op for models
    /// without flows.
    fn expire_idle(&mut self, _now_ns: u64) {}
}

/// The plain link: one closed-form [`Link`] per side.
#[derive(Debug)]
pub struct LinkModel {
    links: [Link; 2],
}

impl LinkModel {
    /// Side a's link from `configs[0]` and direction 0 of `seed`, side b's
    /// from `configs[1]` and direction 1.
    pub fn new(configs: [LinkConfig; 2], seed: u64) -> LinkModel {
        let [a, b] = configs;
        LinkModel {
            links: [Link::new(a, seed, 0), Link::new(b, seed, 1)],
        }
    }

    /// The link of packets received on `side`.
    pub fn link(&self, side: Side) -> &Link {
        &self.links[side.index()]
    }
}

impl Model for LinkModel {
    fn start(&mut self, t0_ns: u64) {
        for link in &mut self.links {
            link.start_at(t0_ns);
        }
    }

    #[inline]
    fn on_arrival(&mut self, now_ns: u64, pkt: PacketIn, out: &mut Vec<Decision>) {
        let v = self.links[pkt.side.index()].on_arrival(
            now_ns,
            PacketMeta {
                len_bytes: pkt.len_bytes,
            },
        );
        out.push(Decision {
            fate: v.fate,
            queue_packets: v.queue_packets,
            queue_bytes: v.queue_bytes,
            duplicate: v.duplicate,
            corrupt_bits: v.corrupt_bit.into_iter().collect(),
            ..Decision::delivered(pkt.tag, pkt.side, v.release_ns)
        });
    }

    fn next_event_ns(&mut self) -> Option<u64> {
        None
    }

    fn poll(&mut self, _now_ns: u64, _out: &mut Vec<Decision>) {}

    fn apply(
        &mut self,
        now_ns: u64,
        change: Change,
        _out: &mut Vec<Decision>,
    ) -> Result<(), ChangeError> {
        match change {
            Change::Link { sides, config } => {
                for (link, _) in self.links.iter_mut().zip(sides).filter(|(_, on)| *on) {
                    link.reconfigure(now_ns, (*config).clone());
                }
                Ok(())
            }
            _ => Err(ChangeError::NoRuleSet),
        }
    }

    fn reads_headers(&self) -> bool {
        false
    }

    fn holds_packets(&self) -> bool {
        false
    }
}

impl Model for Node {
    fn start(&mut self, t0_ns: u64) {
        Node::start(self, t0_ns)
    }

    #[inline]
    fn on_arrival(&mut self, now_ns: u64, pkt: PacketIn, out: &mut Vec<Decision>) {
        Node::on_arrival(self, now_ns, pkt, out)
    }

    fn next_event_ns(&mut self) -> Option<u64> {
        Node::next_event_ns(self)
    }

    fn poll(&mut self, now_ns: u64, out: &mut Vec<Decision>) {
        Node::poll(self, now_ns, out)
    }

    fn apply(
        &mut self,
        now_ns: u64,
        change: Change,
        out: &mut Vec<Decision>,
    ) -> Result<(), ChangeError> {
        self.change(change, now_ns, out)
    }

    fn reads_headers(&self) -> bool {
        true
    }

    fn holds_packets(&self) -> bool {
        Node::holds_packets(self)
    }

    fn expire_idle(&mut self, now_ns: u64) {
        Node::expire_idle(self, now_ns)
    }
}

impl Decision {
    /// Applies the decision to a delivered frame of link type `l2`: the CE mark
    /// an AQM set (the IPv4 header checksum updated), then every corrupted bit
    /// (bits beyond the frame's captured bytes were not captured: nothing to
    /// flip). A duplicate is the caller's to make, from the frame as it was
    /// before this call: the copy leaves as it arrived.
    pub fn apply_to_frame(&self, frame: &mut [u8], l2: L2Kind) {
        if self.ce {
            use crate::aqm::ecn::{mark_ce, mark_ce_at};
            let _ = match l2 {
                L2Kind::Ethernet => mark_ce(frame, false),
                L2Kind::RawIp | L2Kind::Ipv4 | L2Kind::Ipv6 => mark_ce_at(frame, 0),
                L2Kind::Null => mark_ce_at(frame, 4),
                L2Kind::LinuxSll => mark_ce_at(frame, 16),
                L2Kind::LinuxSll2 => mark_ce_at(frame, 20),
            };
        }
        for bit in &self.corrupt_bits {
            if let Some(byte) = frame.get_mut((bit / 8) as usize) {
                *byte ^= 0x80 >> (bit % 8);
            }
        }
    }
}

/// The header line of every `--events` file (tab-separated columns).
///
/// - `index`: the packet's number in arrival order (its [`PacketIn::tag`]);
/// - `arrival_ns`, `len_bytes`: when it arrived and its length on the wire;
/// - `fate`: [`Fate::name`]; `release_ns`: when it leaves (`-` for a drop);
/// - `queue_packets`, `queue_bytes`: the backlog of the link it joined;
/// - `copies`: copies sent (0 dropped, 2 with a duplicate);
/// - `corrupt_bits`: flipped bits, comma-separated, or `-`;
/// - `rule`, `pipe`, `flow` (hex flow id), `hops`, `queue`, `ce`: where the
///   node sent it (`-` without rules);
/// - `side`: `a` or `b`, the interface it was received on.
pub const EVENTS_HEADER: &str = "# index\tarrival_ns\tlen_bytes\tfate\trelease_ns\tqueue_packets\tqueue_bytes\tcopies\tcorrupt_bits\trule\tpipe\tflow\thops\tqueue\tce\tside";

/// Appends the `--events` line of decision `d` (columns as [`EVENTS_HEADER`],
/// with its newline) for a packet that arrived at `arrival_ns` with
/// `len_bytes` on the wire.
pub fn write_event(line: &mut String, arrival_ns: u64, len_bytes: u32, d: &Decision) {
    let delivered = d.fate == Fate::Delivered;
    let _ = write!(line, "{}\t{arrival_ns}\t{len_bytes}\t{}\t", d.tag, d.fate);
    let _ = if delivered {
        write!(line, "{}", d.release_ns)
    } else {
        write!(line, "-")
    };
    let copies = if delivered { 1 + d.duplicate as u32 } else { 0 };
    let _ = write!(line, "\t{}\t{}\t{copies}\t", d.queue_packets, d.queue_bytes);
    if d.corrupt_bits.is_empty() {
        line.push('-');
    }
    for (i, b) in d.corrupt_bits.iter().enumerate() {
        let _ = write!(line, "{}{b}", if i > 0 { "," } else { "" });
    }
    let opt = |line: &mut String, o: Option<u32>| {
        let _ = match o {
            Some(v) => write!(line, "\t{v}"),
            None => write!(line, "\t-"),
        };
    };
    opt(line, d.rule);
    opt(line, d.pipe);
    let _ = match d.pipe {
        Some(_) => write!(line, "\t{:016x}", d.flow_id),
        None => write!(line, "\t-"),
    };
    let _ = write!(line, "\t{}", d.hops);
    opt(line, d.queue);
    let side = match d.side {
        Side::A => 'a',
        Side::B => 'b',
    };
    let _ = writeln!(line, "\t{}\t{side}", d.ce as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::FlowKey;
    use crate::LinkSpec;

    fn pkt(side: Side, tag: u64) -> PacketIn {
        PacketIn {
            len_bytes: 100,
            key: FlowKey::default(),
            side,
            tag,
        }
    }

    #[test]
    fn link_model_decides_as_one_link_per_side() {
        let spec = LinkSpec::parse("rate 1Mbit delay 5ms loss 10% duplicate 5%").unwrap();
        let mut m = LinkModel::new([spec.link.clone(), spec.link.clone()], 7);
        let mut a = Link::new(spec.link.clone(), 7, 0);
        let mut b = Link::new(spec.link, 7, 1);
        let mut out = Vec::new();
        for i in 0..2000u64 {
            let side = if i % 3 == 0 { Side::B } else { Side::A };
            let t = i * 100_000;
            m.on_arrival(t, pkt(side, i), &mut out);
            let link = if side == Side::A { &mut a } else { &mut b };
            let v = link.on_arrival(t, PacketMeta { len_bytes: 100 });
            let d = out.pop().unwrap();
            assert!(out.is_empty());
            assert_eq!(
                (d.tag, d.fate, d.release_ns, d.duplicate, d.side),
                (i, v.fate, v.release_ns, v.duplicate, side)
            );
            assert_eq!(
                d.corrupt_bits,
                v.corrupt_bit.into_iter().collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn link_change_reaches_only_the_sides_named() {
        let slow = LinkSpec::parse("delay 10ms").unwrap().link;
        let fast = LinkSpec::parse("delay 1ms").unwrap().link;
        let mut m = LinkModel::new([slow.clone(), slow], 1);
        let mut out = Vec::new();
        let change = Change::Link {
            sides: [false, true],
            config: Box::new(fast),
        };
        m.apply(0, change, &mut out).unwrap();
        m.on_arrival(0, pkt(Side::A, 0), &mut out);
        m.on_arrival(0, pkt(Side::B, 1), &mut out);
        let releases: Vec<u64> = out.iter().map(|d| d.release_ns).collect();
        assert_eq!(releases, [10_000_000, 1_000_000]);
        let text = "pipe 1 config delay 1ms\nadd pipe 1 ip from any to any\n";
        let set = crate::rules::parse_rules(text, ["a", "b"], &mut |_| Err("no files".into()));
        let rules = Change::Rules {
            set: Box::new(set.unwrap()),
            text: text.into(),
            files: Vec::new(),
        };
        assert_eq!(m.apply(0, rules, &mut out), Err(ChangeError::NoRuleSet));
    }

    #[test]
    fn event_line_has_a_column_per_header_word() {
        let spec = LinkSpec::parse("delay 1ms").unwrap();
        let mut m = LinkModel::new([spec.link.clone(), spec.link], 1);
        let mut out = Vec::new();
        m.on_arrival(5, pkt(Side::B, 3), &mut out);
        let mut line = String::new();
        write_event(&mut line, 5, 100, &out[0]);
        assert_eq!(
            line,
            "3\t5\t100\tdelivered\t1000005\t0\t0\t1\t-\t-\t-\t-\t0\t-\t0\tb\n"
        );
        let columns = EVENTS_HEADER.trim_start_matches("# ").split('\t').count();
        assert_eq!(line.trim_end().split('\t').count(), columns);
    }
}
