//! Dummynet pipes: a link (queue, rate, delay line, impairments: [`crate::Link`])
//! with Dummynet's `burst`, `profile` and `mask`.
//!
//! # Configuration
//! `pipe N config WORDS` takes Dummynet's words (a bare `delay 20` is 20 ms, a
//! bare `bw 640000` is bit/s, `queue 20` is slots and `queue 64KBytes` bytes, the
//! default queue is 50 slots, `plr 0.01` a probability) and every linkem link
//! word; plus `burst SIZE`, `profile FILE`, `mask ...`, `buckets N`. `pipe N
//! config` sets the whole pipe, as Dummynet does: a second `config` of the same
//! pipe replaces it, words not given take their defaults.
//!
//! # Instances
//! Without a mask a pipe is one instance. With a mask, every distinct masked
//! flow id (ip version, protocol, addresses, ports, IPv6 flow label, each ANDed
//! with the mask) gets its own instance: own queue, rate, delay line and random
//! streams, seeded by [`instance_seed`] from (seed, pipe, flow id, creation
//! time), so a run repeats exactly. An instance whose queue has emptied and
//! whose last packet has been released at `idle_at` is removed at the first
//! arrival to its pipe after `idle_at + hold` ([`FlowBudget::idle_hold_ns`]) and
//! its memory freed; a later packet of the same flow makes a fresh instance
//! (new streams: the creation time differs). The instances live in a
//! [`table::FlowTable`], as a masked scheduler's do: its module doc states the
//! slots, index, expiry heap (O(log n) per arrival amortised, whatever the
//! number of instances), compaction and charges.
//!
//! An instance holds only running state (256 bytes; a queue ring only once
//! two of its packets were queued at once): the pipe's link configuration is
//! compiled once and shared, and the random streams, policer, burst credit
//! and profile stream are allocated only when the configuration uses them. A
//! packet reads one line of the flow index ([`table::FlowIndex`]) and the lines of its
//! instance; the newest queued packet lives in the link itself, so a light
//! flow (at most one packet queued, the common case with many flows) never
//! touches a ring.
//!
//! With 100 000 live instances the cost per packet is bounded by cache misses,
//! and what decides them is the bytes per instance: at 357 bytes (256 + a
//! 64-byte ring in an 80-byte heap chunk + index + heap) 100 000 instances
//! overflowed the 32 MB last-level cache; at 290 (no ring, the index up to
//! 7/8 full) the instances, the index and the heap stay below it. A batch entry point that runs the
//! rules for 8 packets and then reads their index lines and instances ahead
//! (plain loads, since this crate has no `unsafe` for prefetch instructions)
//! was tried and measured: its bookkeeping cost about 20 ns per packet at
//! every flow count, more than the overlapped misses saved, so the node keeps
//! one packet per call.

pub mod profile;
pub mod table;

use crate::link::{Link, LinkExtra, LinkParams, PacketMeta, Verdict};
use crate::rng::{Stream, StreamId};
use crate::rules::flow::FlowKey;
pub use profile::Profile;

mod def;

pub(crate) use def::parse_mask;
pub use def::PipeDef;
use std::hash::Hasher;
use std::sync::Arc;
use table::{Flow, FlowTable};

/// Reads a file named in a rule file (`profile FILE`, `distribution FILE`).
pub type FileReader<'a> = crate::config::FileLoader<'a>;

/// Which bits of a packet's flow id select its instance (`mask FIELDS`).
///
/// Each field is ANDed with the packet's field ([`FlowMask::apply`]): a set
/// bit keeps the packet's bit, so packets that agree on every kept bit share
/// an instance; a field left 0 (the default) does not tell flows apart. `all`
/// sets every bit. As in ipfw, `/N` on an IPv4, port, `proto` or `flow-id`
/// mask means the N low bits, on an IPv6 mask an N-bit prefix.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowMask {
    /// Mask on the IP protocol number (`mask proto`, 8 bits).
    pub proto: u8,
    /// Mask on an IPv4 source address, as a host-order number (`mask src-ip
    /// 0xffffff00` keeps the /24).
    pub src_ip4: u32,
    /// Mask on an IPv4 destination address (`mask dst-ip`), as `src_ip4`.
    pub dst_ip4: u32,
    /// Mask on an IPv6 source address (`mask src-ip6 64` keeps the first 64
    /// bits).
    pub src_ip6: u128,
    /// Mask on an IPv6 destination address (`mask dst-ip6`), as `src_ip6`.
    pub dst_ip6: u128,
    /// Mask on the source port (`mask src-port`, 16 bits); for ICMP the type,
    /// which [`FlowKey`] keeps in the port.
    pub src_port: u16,
    /// Mask on the destination port (`mask dst-port`); for ICMP the code.
    pub dst_port: u16,
    /// Mask on the IPv6 flow label (`mask flow-id`, 20 bits).
    pub flow_label: u32,
}

/// A packet's flow id after the mask: the key of its instance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct MaskedKey {
    /// The packet's IP version (0 not IP, 4, 6), never masked: IPv4 and IPv6
    /// packets never share an instance.
    pub ip_version: u8,
    /// IP protocol AND [`FlowMask::proto`].
    pub proto: u8,
    /// Source port (ICMP type) AND [`FlowMask::src_port`].
    pub src_port: u16,
    /// Destination port (ICMP code) AND [`FlowMask::dst_port`].
    pub dst_port: u16,
    /// IPv6 flow label AND [`FlowMask::flow_label`] (0 for IPv4).
    pub flow_label: u32,
    /// Masked source address: for IPv4 the 32-bit address AND `src_ip4` (in the
    /// low 32 bits, not in mapped form), for IPv6 the address AND `src_ip6`,
    /// 0 when not IP.
    pub src_ip: u128,
    /// Masked destination address, as `src_ip` with `dst_ip4`/`dst_ip6`.
    pub dst_ip: u128,
}

impl FlowMask {
    /// Every bit of every field (`mask all`): one instance per flow id.
    pub const ALL: FlowMask = FlowMask {
        proto: 0xff,
        src_ip4: !0,
        dst_ip4: !0,
        src_ip6: !0,
        dst_ip6: !0,
        src_port: 0xffff,
        dst_port: 0xffff,
        flow_label: 0xf_ffff,
    };

    /// The key of the instance a packet belongs to: each field of `k` ANDed
    /// with its mask, IPv4 addresses with the `*_ip4` masks and IPv6
    /// addresses with the `*_ip6` ones.
    #[inline]
    pub fn apply(&self, k: &FlowKey) -> MaskedKey {
        let (s, d) = match k.ip_version {
            4 => (
                (k.src_ip as u32 & self.src_ip4) as u128,
                (k.dst_ip as u32 & self.dst_ip4) as u128,
            ),
            6 => (k.src_ip & self.src_ip6, k.dst_ip & self.dst_ip6),
            _ => (0, 0),
        };
        MaskedKey {
            ip_version: k.ip_version,
            proto: k.proto & self.proto,
            src_port: k.src_port & self.src_port,
            dst_port: k.dst_port & self.dst_port,
            flow_label: k.flow_label & self.flow_label,
            src_ip: s,
            dst_ip: d,
        }
    }
}

impl MaskedKey {
    /// The addresses and the flow label as the words both hashes fold in, after the
    /// narrow fields.
    #[inline(always)]
    fn address_words(&self) -> [u64; 5] {
        [
            self.src_ip as u64,
            (self.src_ip >> 64) as u64,
            self.dst_ip as u64,
            (self.dst_ip >> 64) as u64,
            self.flow_label as u64,
        ]
    }

    /// A stable 64-bit id of the flow (no per-process hashing).
    pub fn flow_id(&self) -> u64 {
        let mut h = mix(self.ip_version as u64
            | (self.proto as u64) << 8
            | (self.src_port as u64) << 16
            | (self.dst_port as u64) << 32);
        for v in self.address_words() {
            h = mix(h ^ v);
        }
        h
    }
}

impl MaskedKey {
    /// The hash the flow index files the key under: cheaper than
    /// [`MaskedKey::flow_id`] (one multiply per word, one final mix), and
    /// never seen outside the index, so free to change.
    #[inline]
    fn index_hash(&self) -> u64 {
        // The fields are not placed as they lie in memory (version and
        // protocol swapped): otherwise the compiler merges the byte loads into
        // one wider load of the key just stored by `FlowMask::apply`, which
        // the store buffer cannot forward: perf showed that stall as the
        // costliest instruction of a lookup.
        let mut h = (self.proto as u64)
            | (self.ip_version as u64) << 8
            | (self.src_port as u64) << 16
            | (self.dst_port as u64) << 32;
        for v in self.address_words() {
            h = (h ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
        }
        mix(h)
    }
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The seed of an instance's link: (seed, pipe, flow id, creation time). A pipe
/// without a mask is flow 0 created at 0. Part of the determinism contract.
pub fn instance_seed(seed: u64, pipe: u32, flow_id: u64, created_ns: u64) -> u64 {
    mix(mix(mix(seed ^ 0x7069_7065) ^ pipe as u64) ^ flow_id) ^ created_ns
}

/// One instance of a pipe.
///
/// Laid out so that a packet touches few cache lines (`repr(C)` keeps the
/// order, 128-byte alignment keeps pairs of lines together for the adjacent
/// line prefetcher): the key the flow index checks, the counters and the
/// link's clocks fill the first 128 bytes, the link's pointers, queue and
/// serialisation memo most of the next; the link's configuration is shared
/// by the pipe's instances.
#[derive(Debug, Clone)]
#[repr(C, align(128))]
pub struct Instance {
    /// The masked flow this instance serves (all zero for a pipe without a
    /// mask).
    pub key: MaskedKey,
    /// No packet of this instance is queued or unreleased from here on.
    pub idle_at_ns: u64,
    /// Packets that arrived at this instance (ipfw's `Tot_pkt`).
    pub tot_pkts: u64,
    /// Bytes of those packets (ipfw's `bytes`).
    pub tot_bytes: u64,
    /// Of those packets, the ones the link dropped (queue full, loss,
    /// policer; ipfw's `Drp`).
    pub drops: u64,
    /// This instance's link: its own queue, serialiser, delay line and random
    /// streams, seeded by [`instance_seed`].
    pub link: Link,
    /// [`MaskedKey::flow_id`] of `key` (0 for a pipe without a mask).
    pub flow_id: u64,
    profile_stream: Option<Box<Stream>>,
}

impl Instance {
    fn new(
        def: &PipeDef,
        params: &Arc<LinkParams>,
        seed: u64,
        key: MaskedKey,
        flow_id: u64,
        created_ns: u64,
    ) -> Self {
        let s = instance_seed(seed, def.number, flow_id, created_ns);
        let mut link = Link::with_params(params.clone(), s, 0);
        link.set_burst(def.burst_bytes);
        Instance {
            key,
            idle_at_ns: 0,
            tot_pkts: 0,
            tot_bytes: 0,
            drops: 0,
            link,
            flow_id,
            profile_stream: def
                .profile
                .as_ref()
                .map(|_| Box::new(Stream::new(s, 0x7072_6f66, StreamId::Loss))),
        }
    }

    #[inline]
    fn arrive(&mut self, now_ns: u64, len_bytes: u32, profile: Option<&Profile>) -> Verdict {
        let meta = PacketMeta { len_bytes };
        let v = match (profile, self.profile_stream.as_deref_mut()) {
            (Some(p), Some(stream)) => {
                let extra = match p.draw(stream.next_u64()) {
                    Some(ns) => LinkExtra {
                        extra_busy_ns: ns,
                        lose_after_link: false,
                    },
                    None => LinkExtra {
                        extra_busy_ns: 0,
                        lose_after_link: true,
                    },
                };
                self.link.on_arrival_extra(now_ns, meta, extra)
            }
            _ => self.link.on_arrival(now_ns, meta),
        };
        self.tot_pkts += 1;
        self.tot_bytes += len_bytes as u64;
        if v.fate.is_drop() {
            self.drops += 1;
        }
        self.idle_at_ns = self.idle_at_ns.max(v.release_ns);
        v
    }

    /// Packets still queued at the last arrival.
    pub fn queued_packets(&self) -> usize {
        self.link.queued_packets()
    }
}

impl Flow for Instance {
    fn key(&self) -> &MaskedKey {
        &self.key
    }
    /// Busy until its last packet is released: the link's queue empties by then.
    fn idle_since_ns(&self, _now_ns: u64) -> u64 {
        self.idle_at_ns
    }
}

/// A cheap hasher for masked keys: the key is mixed once by [`MaskedKey::flow_id`]
/// semantics; SipHash's DoS resistance buys nothing against one's own traffic
/// file and costs more than the rest of the lookup.
#[derive(Default)]
pub struct KeyHasher(u64);
impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        mix(self.0)
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0 ^ u64::from_le_bytes(b))
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .rotate_left(29);
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64)
    }
    fn write_u16(&mut self, i: u16) {
        self.write_u64(i as u64)
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64)
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0 ^ i)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29);
    }
    fn write_u128(&mut self, i: u128) {
        self.write_u64(i as u64);
        self.write_u64((i >> 64) as u64);
    }
}

/// The node-wide limits on dynamic instances: a count and a memory bound.
///
/// Every dynamic instance (a masked pipe's, a masked scheduler's) and every
/// class a scheduler makes for traffic (an fq_* flow, a masked queue's
/// instance) is charged, when it is made, a fixed number of bytes computed
/// from type sizes ([`instance_memory_bytes`],
/// [`crate::sched::service::sched_instance_bytes`],
/// [`crate::sched::service::sched_class_bytes`]); a packet that would need
/// one beyond [`FlowBudget::max`] instances or [`FlowBudget::max_bytes`] bytes
/// is dropped (`flow-limit`) instead. The charge goes back when the instance
/// expires. Invariant: `bytes` is the sum of the charges of what is live.
#[derive(Debug, Clone, Copy)]
pub struct FlowBudget {
    /// Live instances over all pipes.
    pub live: usize,
    /// Most live instances (`--max-flows`); a packet that would need one more is dropped.
    pub max: usize,
    /// Bytes charged for the live instances and scheduler classes.
    pub bytes: usize,
    /// Most bytes charged (`--max-flow-memory`); a packet whose instance or
    /// class would take `bytes` beyond it is dropped.
    pub max_bytes: usize,
    /// An instance is removed once it has been idle (queue empty, every packet
    /// released) for longer than this. Dummynet sweeps idle instances about once
    /// a second; keeping a flow's instance over short pauses keeps its loss
    /// model's state (Gilbert-Elliott bursts) and its random streams going.
    pub idle_hold_ns: u64,
}

/// Default `--max-flows`.
pub const DEFAULT_MAX_FLOWS: usize = 1 << 20;
/// Default `--max-flow-memory`: 512 MiB charged for dynamic instances and
/// scheduler classes.
pub const DEFAULT_MAX_FLOW_BYTES: usize = 512 << 20;

impl FlowBudget {
    /// One more instance charged `bytes` fits both bounds.
    #[inline]
    pub fn admits_instance(&self, bytes: usize) -> bool {
        self.live < self.max && self.bytes.saturating_add(bytes) <= self.max_bytes
    }
    /// `bytes` more (a class inside an instance) fit the memory bound.
    #[inline]
    pub fn admits_bytes(&self, bytes: usize) -> bool {
        self.bytes.saturating_add(bytes) <= self.max_bytes
    }
}
/// Default idle time before an instance is removed: 1 s.
pub const DEFAULT_IDLE_HOLD_NS: u64 = 1_000_000_000;

impl Default for FlowBudget {
    fn default() -> Self {
        FlowBudget {
            live: 0,
            max: DEFAULT_MAX_FLOWS,
            bytes: 0,
            max_bytes: DEFAULT_MAX_FLOW_BYTES,
            idle_hold_ns: DEFAULT_IDLE_HOLD_NS,
        }
    }
}

/// What a pipe decided for one packet.
#[derive(Debug, Clone, Copy)]
pub enum PipeVerdict {
    /// The packet went through an instance's link.
    Link {
        /// The link's decision: fate, release time, duplicate, corruption.
        verdict: Verdict,
        /// The instance's [`MaskedKey::flow_id`] (0 for a pipe without a mask).
        flow_id: u64,
    },
    /// The packet's flow has no instance and one more would exceed the
    /// node's [`FlowBudget`] (count or bytes): the packet is dropped.
    FlowLimit,
}

/// A pipe with its instances.
#[derive(Debug)]
pub struct Pipe {
    /// The pipe's configuration, as parsed.
    pub def: Arc<PipeDef>,
    /// `def.link` compiled once, shared by every instance.
    params: Arc<LinkParams>,
    seed: u64,
    single: Option<Instance>,
    flows: FlowTable<Instance>,
    /// Packets refused because the instance cap was reached.
    pub flow_limit_drops: u64,
    /// Instances removed when idle.
    pub expired: u64,
    /// Packets, bytes and drops of the instances removed, so that the
    /// pipe's totals ([`Pipe::totals`]) never go back.
    gone: (u64, u64, u64),
    /// The origin of the link's trace and schedule in every instance
    /// ([`Pipe::start`]); None: each instance's first packet.
    origin_ns: Option<u64>,
}

impl Pipe {
    /// A pipe as `def` configures it, its instances seeded from the node's
    /// `seed`. A pipe without a mask has its one instance from the start
    /// (flow 0, created at 0); a masked pipe makes instances as flows arrive.
    pub fn new(def: PipeDef, seed: u64) -> Pipe {
        let params = LinkParams::new(def.link.clone());
        let single = def
            .mask
            .is_none()
            .then(|| Instance::new(&def, &params, seed, MaskedKey::default(), 0, 0));
        Pipe {
            def: Arc::new(def),
            params,
            seed,
            single,
            flows: FlowTable::new(instance_memory_bytes(), 0),
            flow_limit_drops: 0,
            expired: 0,
            gone: (0, 0, 0),
            origin_ns: None,
        }
    }

    /// The pipe's link starts at `t0_ns` (the node's start live, or a
    /// change that made the pipe on a running node): its trace and schedule
    /// count from there in every instance, made now or later, as a single
    /// link's do ([`Link::start_at`]). Called before the pipe's first packet;
    /// a later call changes nothing.
    pub fn start(&mut self, t0_ns: u64) {
        let t0 = *self.origin_ns.get_or_insert(t0_ns);
        if let Some(inst) = &mut self.single {
            inst.link.start_at(t0);
        }
    }

    /// `pipe N config` on a running pipe: `def` becomes its configuration and
    /// every live instance's link is reconfigured at `now_ns`
    /// ([`Link::reconfigure`]): the packets it has queued keep their release
    /// times and the next arrival queues behind them. Only for a `def` with
    /// the same mask and profile presence ([`Pipe::can_reconfigure`]).
    pub fn reconfigure(&mut self, def: PipeDef, now_ns: u64) {
        debug_assert!(self.can_reconfigure(&def));
        self.params = LinkParams::new(def.link.clone());
        // A new trace or schedule starts at the change, in the instances
        // made later too (the live ones start it there themselves).
        let old = &self.def.link;
        if old.trace != def.link.trace || old.schedule != def.link.schedule {
            self.origin_ns = self.origin_ns.map(|_| now_ns);
        }
        for inst in self.single.iter_mut().chain(self.flows.values_mut()) {
            inst.link.reconfigure_params(now_ns, self.params.clone());
            inst.link.set_burst(def.burst_bytes);
        }
        self.def = Arc::new(def);
    }

    /// Whether `def` can take over this pipe's instances: the same mask (so
    /// the same flows) and a profile where there was one (its random stream).
    pub fn can_reconfigure(&self, def: &PipeDef) -> bool {
        def.mask == self.def.mask && def.profile.is_some() == self.def.profile.is_some()
    }

    /// Packets, bytes and link drops over every instance the pipe had, live
    /// or expired (ipfw's `Tot_pkt`, `bytes`, `Drp` summed).
    pub fn totals(&self) -> (u64, u64, u64) {
        self.instances().fold(self.gone, |(p, b, d), i| {
            (p + i.tot_pkts, b + i.tot_bytes, d + i.drops)
        })
    }

    /// Live instances of a pipe with a mask (0 without one).
    pub fn active_instances(&self) -> usize {
        self.flows.len()
    }

    /// Every live instance (the one instance of a pipe without mask).
    pub fn instances(&self) -> impl Iterator<Item = &Instance> {
        self.single
            .iter()
            .chain(self.flows.iter().map(|(_, inst)| inst))
    }

    /// Sends a packet through the pipe.
    #[inline]
    pub fn arrive(
        &mut self,
        now_ns: u64,
        len_bytes: u32,
        key: &FlowKey,
        flows: &mut FlowBudget,
    ) -> PipeVerdict {
        if let Some(inst) = &mut self.single {
            let verdict = inst.arrive(now_ns, len_bytes, self.def.profile.as_deref());
            return PipeVerdict::Link {
                verdict,
                flow_id: 0,
            };
        }
        let mask = self
            .def
            .mask
            .expect("a pipe without an instance has a mask");
        self.expire(now_ns, flows);
        let mk = mask.apply(key);
        let (def, params, seed) = (&self.def, &self.params, self.seed);
        let origin_ns = self.origin_ns;
        let Some((_, inst)) = self.flows.get_or_insert(&mk, now_ns, flows, || {
            let mut inst = Instance::new(def, params, seed, mk, mk.flow_id(), now_ns);
            if let Some(t0) = origin_ns {
                inst.link.start_at(t0);
            }
            inst
        }) else {
            self.flow_limit_drops += 1;
            return PipeVerdict::FlowLimit;
        };
        let verdict = inst.arrive(now_ns, len_bytes, def.profile.as_deref());
        PipeVerdict::Link {
            verdict,
            flow_id: inst.flow_id,
        }
    }

    /// Bytes charged to the node's [`FlowBudget`] for this pipe's instances.
    pub fn charged_bytes(&self) -> usize {
        self.flows.charged_bytes()
    }

    /// Removes the instances idle for longer than the budget's hold at
    /// `now_ns` (an instance is also removed at the first arrival to its pipe
    /// after that time): their count and charge go back to `flows`, their
    /// counters to the pipe's totals ([`table::FlowTable::expire`]).
    pub fn expire(&mut self, now_ns: u64, flows: &mut FlowBudget) {
        let gone = &mut self.gone;
        let done = self.flows.expire(now_ns, flows, |inst| {
            gone.0 += inst.tot_pkts;
            gone.1 += inst.tot_bytes;
            gone.2 += inst.drops;
        });
        self.expired += done.removed;
    }
}

/// Bytes one live dynamic instance holds, computed from type sizes, for a
/// pipe that draws no random numbers (no loss, jitter, reorder, duplicate or
/// corrupt; add [`instance_random_bytes`] for one that does) and has no
/// policer, `burst` or `profile` (each a small allocation of its own): the instance
/// itself, its flow index entry at the index's emptiest (8 bytes at 7/16 full:
/// 18 bytes) and its expiry heap entry. An instance that has had two packets
/// queued at once also keeps its link queue's ring (64 bytes at its smallest,
/// 4 entries of 16 bytes). The configuration is shared by the pipe's
/// instances. An expired instance holds nothing: its slot is reused.
pub fn instance_memory_bytes() -> usize {
    FlowTable::<Instance>::slot_bytes()
}

/// Bytes an instance of a pipe that draws random numbers holds on top of
/// [`instance_memory_bytes`]: its random streams and chains.
pub fn instance_random_bytes() -> usize {
    crate::link::random_state_bytes()
}

#[cfg(test)]
mod layout_tests {
    use super::*;

    #[test]
    fn a_mask_field_given_twice_is_refused_by_name() {
        let err = |w: &str| {
            let words: Vec<&str> = w.split_whitespace().collect();
            parse_mask(&words, 3, "mask").unwrap_err()
        };
        let e = err("src-ip 0xff dst-ip 0xff src-ip 0xffff");
        assert_eq!((e.line, e.word.as_str()), (3, "src-ip"));
        assert!(e.message.contains("given twice"), "{e}");
        // Two spellings of one field are one field.
        let e = err("src-ip6 64 src-ipv6 48");
        assert_eq!(e.word, "src-ipv6");
        let e = err("all dst-port 0xff");
        assert_eq!(e.word, "dst-port");
        assert!(e.message.contains("'all'"), "{e}");
        let e = err("proto 0xff all");
        assert_eq!(e.word, "all");
        // Distinct fields, then a word that ends the mask.
        let words = ["src-ip", "0xff", "dst-port", "0xffff", "bw", "1Mbit/s"];
        let (m, used) = parse_mask(&words, 1, "mask").unwrap();
        assert_eq!((m.src_ip4, m.dst_port, used), (0xff, 0xffff, 4));
    }

    #[test]
    fn hot_fields_of_an_instance_fill_its_first_128_bytes() {
        assert_eq!(std::mem::offset_of!(Instance, link), 80);
        assert!(std::mem::size_of::<Option<Instance>>() <= 256);
    }
}
