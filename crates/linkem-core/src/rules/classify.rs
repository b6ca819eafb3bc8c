//! The rule set compiled for matching.
//!
//! # Compilation (per-field bitsets)
//! For each field that some rule constrains (IP version + protocol, source and
//! destination address, source and destination port, receiving side), the
//! field's value space is cut at every bound any rule mentions; each piece
//! holds a bitset of the rules that piece can satisfy (rules that do not test
//! the field have their bit everywhere). A packet costs one binary search per
//! field (O(log bounds)) and an AND of the bitsets, O(fields · rules/64) word
//! operations, instead of trying every rule. The candidate bits are then tried
//! in order with the exact test of every option ([`rule_matches`]), which also
//! covers what the index leaves out (`not`, lengths, TTL, DSCP, TCP flags,
//! EtherType, fragments): the index only ever removes rules that cannot match,
//! so the result equals a plain linear scan (tested).
//!
//! Memory: pieces × rules/64 words per field, at most (2·bounds + 1) pieces.

use super::flow::FlowKey;
use super::parse::{Action, Cond, CondKind, Rule};
use super::Side;
use crate::rng::{Stream, StreamId};

/// What the rules decided, and which rule did it. `rule` is the rule's
/// index in evaluation order ([`Classifier::rules`]), not its number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hit {
    /// `pipe N`: the packet goes through pipe N.
    Pipe {
        /// Index of the matching rule in [`Classifier::rules`].
        rule: usize,
        /// The pipe number N.
        pipe: u32,
    },
    /// `queue N` (a queue under a scheduler).
    Queue {
        /// Index of the matching rule in [`Classifier::rules`].
        rule: usize,
        /// The queue number N.
        queue: u32,
    },
    /// `allow`: the packet passes unimpaired, released at its arrival.
    Allow {
        /// Index of the matching rule in [`Classifier::rules`].
        rule: usize,
    },
    /// `deny`: the packet is dropped.
    Deny {
        /// Index of the matching rule in [`Classifier::rules`].
        rule: usize,
    },
    /// No rule took the packet: it passes unimpaired.
    NoMatch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    VerProto,
    Src,
    Dst,
    SrcPort,
    DstPort,
    Side,
}

const FIELDS: [Field; 6] = [
    Field::VerProto,
    Field::Src,
    Field::Dst,
    Field::SrcPort,
    Field::DstPort,
    Field::Side,
];

#[inline]
fn has_l4_ports(k: &FlowKey) -> bool {
    k.has_ports && !matches!(k.proto, 1 | 58)
}

#[inline]
fn field_value(f: Field, k: &FlowKey, side: Side) -> u128 {
    match f {
        Field::VerProto => ((k.ip_version as u128) << 8) | k.proto as u128,
        Field::Src => k.src_ip,
        Field::Dst => k.dst_ip,
        Field::SrcPort => {
            if has_l4_ports(k) {
                k.src_port as u128 + 1
            } else {
                0
            }
        }
        Field::DstPort => {
            if has_l4_ports(k) {
                k.dst_port as u128 + 1
            } else {
                0
            }
        }
        Field::Side => side.index() as u128,
    }
}

/// The intervals a (non-negated) option allows on a field, if it maps to one.
fn intervals(c: &Cond) -> Option<(Field, Vec<(u128, u128)>)> {
    if c.not {
        return None;
    }
    Some(match &c.kind {
        CondKind::Version(bits) => (
            Field::VerProto,
            [4u128, 6]
                .iter()
                .filter(|v| bits & (1 << **v) != 0)
                .map(|v| (v << 8, (v << 8) | 255))
                .collect(),
        ),
        CondKind::Proto(list) => (
            Field::VerProto,
            list.iter()
                .flat_map(|&p| [(4u128 << 8) | p as u128, (6u128 << 8) | p as u128])
                .map(|x| (x, x))
                .collect(),
        ),
        CondKind::SrcIp(nets) => (Field::Src, nets.iter().map(|n| (n.lo, n.hi)).collect()),
        CondKind::DstIp(nets) => (Field::Dst, nets.iter().map(|n| (n.lo, n.hi)).collect()),
        CondKind::SrcPort(r) => (
            Field::SrcPort,
            r.iter()
                .map(|&(a, b)| (a as u128 + 1, b as u128 + 1))
                .collect(),
        ),
        CondKind::DstPort(r) => (
            Field::DstPort,
            r.iter()
                .map(|&(a, b)| (a as u128 + 1, b as u128 + 1))
                .collect(),
        ),
        CondKind::Recv(s) => (Field::Side, vec![(s.index() as u128, s.index() as u128)]),
        CondKind::Xmit(s) => {
            let o = 1 - s.index() as u128;
            (Field::Side, vec![(o, o)])
        }
        _ => return None,
    })
}

#[inline]
fn in_ranges(v: u16, r: &[(u16, u16)]) -> bool {
    r.iter().any(|&(a, b)| a <= v && v <= b)
}

/// The exact test of one option (before `not`).
#[inline]
fn cond_holds(kind: &CondKind, k: &FlowKey, side: Side) -> bool {
    let ip = k.ip_version != 0;
    match kind {
        CondKind::Version(bits) => ip && bits & (1 << k.ip_version) != 0,
        CondKind::Proto(list) => ip && list.contains(&k.proto),
        CondKind::SrcIp(nets) => ip && nets.iter().any(|n| n.contains(k.ip_version, k.src_ip)),
        CondKind::DstIp(nets) => ip && nets.iter().any(|n| n.contains(k.ip_version, k.dst_ip)),
        CondKind::SrcPort(r) => has_l4_ports(k) && in_ranges(k.src_port, r),
        CondKind::DstPort(r) => has_l4_ports(k) && in_ranges(k.dst_port, r),
        CondKind::IpLen(r) => ip && in_ranges(k.ip_len, r),
        CondKind::IpTtl(r) => ip && in_ranges(k.ttl as u16, r),
        CondKind::Dscp(bits) => ip && bits & (1 << k.dscp) != 0,
        CondKind::TcpFlags { set, clear } => {
            ip && k.proto == 6
                && k.has_ports
                && k.tcp_flags & set == *set
                && k.tcp_flags & clear == 0
        }
        CondKind::MacType(r) => k.ether_type != 0 && in_ranges(k.ether_type, r),
        CondKind::Frag => k.later_fragment,
        CondKind::Uid(uid) => k.owner.is_some_and(|o| o.uid == *uid),
        CondKind::Gid(gid) => k.owner.is_some_and(|o| o.gid == *gid),
        CondKind::Recv(s) => side == *s,
        CondKind::Xmit(s) => side != *s,
        // Two ports: every packet is received on one and sent on the other.
        CondKind::Via(_) => true,
    }
}

/// Whether every option of `rule` holds for the packet (the reference test).
pub fn rule_matches(rule: &Rule, k: &FlowKey, side: Side) -> bool {
    rule.conds
        .iter()
        .all(|c| cond_holds(&c.kind, k, side) != c.not)
}

/// Inclusive value ranges a rule allows on one field.
type Intervals = Vec<(u128, u128)>;

#[derive(Debug, Clone)]
struct Dim {
    field: Field,
    starts: Vec<u128>,
    bits: Vec<u64>,
}

/// Rules compiled for matching, with their counters.
#[derive(Debug, Clone)]
pub struct Classifier {
    rules: Vec<Rule>,
    words: usize,
    dims: Vec<Dim>,
    all: Vec<u64>,
    scratch: Vec<u64>,
    skip_to: Vec<usize>,
    /// Packets and bytes each rule took (in evaluation order).
    pub counters: Vec<(u64, u64)>,
    prob_stream: Stream,
}

impl Classifier {
    /// Compiles `rules` (in evaluation order). `seed` seeds `prob`.
    pub fn new(rules: Vec<Rule>, seed: u64) -> Classifier {
        let n = rules.len();
        let words = n.div_ceil(64).max(1);
        let mut all = vec![0u64; words];
        for i in 0..n {
            all[i / 64] |= 1 << (i % 64);
        }
        let constraints: Vec<Vec<Option<Intervals>>> = rules
            .iter()
            .map(|r| {
                let mut per = vec![None; FIELDS.len()];
                for c in &r.conds {
                    if let Some((f, iv)) = intervals(c) {
                        let slot = &mut per[f as usize];
                        if slot.is_none() {
                            *slot = Some(iv);
                        }
                    }
                }
                per
            })
            .collect();
        let mut dims = Vec::new();
        for f in FIELDS {
            let fi = f as usize;
            if !constraints.iter().any(|c| c[fi].is_some()) {
                continue;
            }
            let mut starts = vec![0u128];
            for c in constraints.iter().filter_map(|c| c[fi].as_ref()) {
                for &(lo, hi) in c {
                    starts.push(lo);
                    if hi < u128::MAX {
                        starts.push(hi + 1);
                    }
                }
            }
            starts.sort_unstable();
            starts.dedup();
            let mut bits = vec![0u64; starts.len() * words];
            for (s, &start) in starts.iter().enumerate() {
                let row = &mut bits[s * words..(s + 1) * words];
                for (i, c) in constraints.iter().enumerate() {
                    let ok = match &c[fi] {
                        None => true,
                        Some(iv) => iv.iter().any(|&(lo, hi)| lo <= start && start <= hi),
                    };
                    if ok {
                        row[i / 64] |= 1 << (i % 64);
                    }
                }
            }
            dims.push(Dim {
                field: f,
                starts,
                bits,
            });
        }
        let skip_to = rules
            .iter()
            .map(|r| match r.action {
                Action::Skipto(n) => rules.partition_point(|x| x.number < n),
                _ => 0,
            })
            .collect();
        Classifier {
            counters: vec![(0, 0); n],
            words,
            dims,
            scratch: all.clone(),
            all,
            skip_to,
            prob_stream: Classifier::prob_stream(seed),
            rules,
        }
    }

    /// The rules in evaluation order: by number, equal numbers in file order.
    /// [`Hit`]'s `rule` and [`Classifier::counters`] index this.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Whether `rules` are the rules it holds: each rule's number, text and
    /// meaning alike (only the line in its file may differ).
    pub fn same_rules(&self, rules: &[Rule]) -> bool {
        self.rules.len() == rules.len()
            && self.rules.iter().zip(rules).all(|(a, b)| {
                (a.number, &a.text, a.prob, &a.action, a.log, &a.conds)
                    == (b.number, &b.text, b.prob, &b.action, b.log, &b.conds)
            })
    }

    /// For `rules` that are [`Classifier::same_rules`]: keeps the compiled
    /// form and the counters, takes their lines, and decides from then on
    /// exactly as `Classifier::new(rules, seed)` would (the `prob` stream
    /// starts anew from `seed`). A control plane changing a pipe hands the
    /// node an unchanged rule set, whose compilation would cost more than the
    /// change.
    pub fn renew(self, rules: Vec<Rule>, seed: u64) -> Classifier {
        debug_assert!(self.same_rules(&rules));
        Classifier {
            rules,
            prob_stream: Classifier::prob_stream(seed),
            ..self
        }
    }

    /// Takes the counters of `old`'s rules for its rules of the same number
    /// and text, in order (a rule that stays keeps its counts).
    pub fn carry_counters(&mut self, old: &Classifier) {
        let mut old_counts: Vec<(u32, &str, (u64, u64))> = old
            .rules
            .iter()
            .zip(&old.counters)
            .map(|(r, c)| (r.number, r.text.as_str(), *c))
            .collect();
        for (r, c) in self.rules.iter().zip(self.counters.iter_mut()) {
            if let Some(i) = old_counts
                .iter()
                .position(|(n, t, _)| *n == r.number && *t == r.text)
            {
                *c = old_counts.remove(i).2;
            }
        }
    }

    /// The `prob` draws start anew from `seed`, as in a classifier just
    /// compiled: what every change to a node does, whatever it changed.
    pub fn restart_draws(&mut self, seed: u64) {
        self.prob_stream = Classifier::prob_stream(seed);
    }

    /// The rules and their counters, the compiled form dropped: for a change
    /// that edits the list and compiles it again.
    pub fn into_parts(self) -> (Vec<Rule>, Vec<(u64, u64)>) {
        (self.rules, self.counters)
    }

    fn prob_stream(seed: u64) -> Stream {
        Stream::new(seed, 0x7275_6c65, StreamId::Loss)
    }

    /// Runs the rules from position `start` (0 for a new packet; the rule after
    /// the sending one for a packet leaving a pipe with one-pass off).
    #[inline]
    pub fn classify(&mut self, k: &FlowKey, side: Side, len_bytes: u32, start: usize) -> Hit {
        if start >= self.rules.len() {
            return Hit::NoMatch;
        }
        self.scratch.copy_from_slice(&self.all);
        for d in &self.dims {
            let v = field_value(d.field, k, side);
            let seg = d.starts.partition_point(|&s| s <= v) - 1;
            let row = &d.bits[seg * self.words..(seg + 1) * self.words];
            for (a, b) in self.scratch.iter_mut().zip(row) {
                *a &= b;
            }
        }
        let mut pos = start;
        loop {
            let Some(i) = next_bit(&self.scratch, pos) else {
                return Hit::NoMatch;
            };
            let rule = &self.rules[i];
            if !rule_matches(rule, k, side) {
                pos = i + 1;
                continue;
            }
            if let Some(p) = rule.prob {
                if self.prob_stream.unit() >= p {
                    pos = i + 1;
                    continue;
                }
            }
            let c = &mut self.counters[i];
            c.0 += 1;
            c.1 += len_bytes as u64;
            match rule.action {
                Action::Count => pos = i + 1,
                Action::Skipto(_) => pos = self.skip_to[i],
                Action::Pipe(pipe) => return Hit::Pipe { rule: i, pipe },
                Action::Queue(queue) => return Hit::Queue { rule: i, queue },
                Action::Allow => return Hit::Allow { rule: i },
                Action::Deny => return Hit::Deny { rule: i },
            }
        }
    }
}

#[inline]
fn next_bit(words: &[u64], from: usize) -> Option<usize> {
    let mut w = from / 64;
    if w >= words.len() {
        return None;
    }
    let mut cur = words[w] & (u64::MAX << (from % 64));
    loop {
        if cur != 0 {
            return Some(w * 64 + cur.trailing_zeros() as usize);
        }
        w += 1;
        if w >= words.len() {
            return None;
        }
        cur = words[w];
    }
}
