//! Packet schedulers: which queue of a pipe sends next when its link is free
//! (Dummynet Revisited §3.6, Dummynet's `sched N config type T`).
//!
//! # Model
//! A pipe with a scheduler holds **classes**: queue instances (a `queue N`
//! object, one instance per masked flow id when it has a mask; or one flow of
//! fq_codel / fq_pie). Each class is a FIFO of [`Pkt`] handles (an index into
//! the owner's packet store, never a copy of the bytes) managed by its AQM
//! ([`crate::aqm`]). The scheduler orders the backlogged classes; when the
//! link is free the owner calls [`Sched::dequeue`] and sends what it returns
//! (see [`service`]).
//!
//! | type | algorithm | cost per packet | module |
//! |---|---|---|---|
//! | `fifo` | one FIFO over all classes in arrival order | O(1) | [`fifo`] |
//! | `wf2q+` | WF²Q+ (Bennett & Zhang 1997), virtual times | O(log N) | [`wf2q`] |
//! | `qfq` | QFQ (Checconi, Rizzo, Valente 2013), grouped slots | O(1) | [`qfq`] |
//! | `rr` | Deficit Round Robin (Shreedhar & Varghese 1995) | O(1) | [`drr`] |
//! | `prio` | strict priority, round robin within a level | O(1) | [`prio`] |
//! | `fq_codel` | RFC 8290 with CoDel per flow | O(1) (overflow: O(flows)) | [`fq`] |
//! | `fq_pie` | RFC 8290's structure with PIE per flow | O(1) (overflow: O(flows)) | [`fq`] |
//!
//! Written by hand: the scheduler is the product, each must follow its paper
//! exactly (tests/sched_reference.rs compares each one packet by packet with
//! a reference written from the paper), and a handle-based design keeps a
//! packet's bytes where they were received.
//!
//! # Conventions
//! Ties go to the lower class number. Packet lengths are frame bytes (what
//! the link serialises, without the pipe's `overhead`).

pub mod drr;
pub mod fifo;
pub mod fq;
pub mod prio;
pub mod qfq;
pub mod service;
pub mod wf2q;
pub mod words;

use crate::aqm::{Admit, AqmConfig, AqmState, DropCause};
use std::collections::VecDeque;

/// A packet waiting in a queue: a handle into the owner's store plus what the
/// scheduler and the AQM read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pkt {
    pub handle: u32,
    pub len_bytes: u32,
    pub enq_ns: u64,
    /// ECN-capable transport (ECT(0), ECT(1) or CE).
    pub ect: bool,
    /// Marked CE at enqueue (RED, PIE).
    pub ce: bool,
}

/// A FIFO of packets with its byte count.
#[derive(Debug, Clone, Default)]
pub struct Fifo {
    q: VecDeque<Pkt>,
    pub bytes: u64,
    /// Largest packet this queue has held (CoDel's maxpacket).
    pub max_len: u32,
}

impl Fifo {
    #[inline]
    pub fn push(&mut self, p: Pkt) {
        self.bytes += p.len_bytes as u64;
        self.max_len = self.max_len.max(p.len_bytes);
        self.q.push_back(p);
    }
    #[inline]
    pub fn pop(&mut self) -> Option<Pkt> {
        let p = self.q.pop_front()?;
        self.bytes -= p.len_bytes as u64;
        Some(p)
    }
    #[inline]
    pub fn head(&self) -> Option<&Pkt> {
        self.q.front()
    }
    #[inline]
    pub fn len(&self) -> usize {
        self.q.len()
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
}

/// Sojourn times in a log-linear histogram: 8 bins per octave (≤ 12.5 %
/// relative error), exact below 16 ns, plus exact min, max and sum.
#[derive(Debug, Clone, Default)]
pub struct SojournHist {
    bins: Vec<u32>,
    pub count: u64,
    pub sum_ns: u128,
    pub max_ns: u64,
}

impl SojournHist {
    fn bin(v: u64) -> usize {
        if v < 16 {
            v as usize
        } else {
            let e = 63 - v.leading_zeros() as usize; // ≥ 4
            (e - 2) * 8 + ((v >> (e - 3)) & 7) as usize
        }
    }
    fn low(b: usize) -> u64 {
        if b < 16 {
            b as u64
        } else {
            let e = b / 8 + 2;
            (8 + (b % 8) as u64) << (e - 3)
        }
    }
    pub fn record(&mut self, v: u64) {
        let b = Self::bin(v);
        if self.bins.len() <= b {
            self.bins.resize(b + 1, 0);
        }
        self.bins[b] += 1;
        self.count += 1;
        self.sum_ns += v as u128;
        self.max_ns = self.max_ns.max(v);
    }
    /// The q-quantile (0..=1): the midpoint of its bin (None when empty).
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0u64;
        for (b, &n) in self.bins.iter().enumerate() {
            seen += n as u64;
            if seen >= rank {
                let (lo, hi) = (Self::low(b), Self::low(b + 1));
                return Some(((lo + hi) / 2).min(self.max_ns));
            }
        }
        Some(self.max_ns)
    }
}

/// Counters of one class.
#[derive(Debug, Clone, Default)]
pub struct ClassStats {
    pub enqueued: u64,
    pub enqueued_bytes: u64,
    pub dequeued: u64,
    pub dequeued_bytes: u64,
    pub drops_tail: u64,
    pub drops_early: u64,
    pub drops_aqm: u64,
    pub drops_loss: u64,
    pub marked: u64,
    pub sojourn: SojournHist,
}

impl ClassStats {
    pub fn drops(&self) -> u64 {
        self.drops_tail + self.drops_early + self.drops_aqm + self.drops_loss
    }
    fn count_drop(&mut self, c: DropCause) {
        match c {
            DropCause::Tail => self.drops_tail += 1,
            DropCause::Early => self.drops_early += 1,
            DropCause::Aqm => self.drops_aqm += 1,
            DropCause::Loss => self.drops_loss += 1,
        }
    }
}

/// What a queue (a `queue N config` object) sets for each of its instances.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueParams {
    pub weight: u32,
    /// QFQ: the largest packet of the queue (`lmax`); None: the default.
    pub lmax_bytes: Option<u32>,
    /// PRIO level (higher is served first).
    pub pri: u32,
    pub limit_packets: Option<u32>,
    pub limit_bytes: Option<u64>,
    pub aqm: AqmConfig,
    /// Loss probability at enqueue (`plr`).
    pub plr: f64,
}

impl Default for QueueParams {
    fn default() -> Self {
        QueueParams {
            weight: 1,
            lmax_bytes: None,
            pri: 0,
            limit_packets: Some(50),
            limit_bytes: None,
            aqm: AqmConfig::DropTail,
            plr: 0.0,
        }
    }
}

/// One queue instance.
#[derive(Debug, Clone)]
pub struct Class {
    pub fifo: Fifo,
    pub aqm: AqmState,
    pub params: std::sync::Arc<QueueParams>,
    pub stats: ClassStats,
    /// Caller's labels: queue number and masked flow id.
    pub queue: u32,
    pub flow_id: u64,
}

/// A dropped packet and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    pub class: u32,
    pub pkt: Pkt,
    pub cause: DropCause,
}

/// The classes of one scheduler.
#[derive(Debug, Clone, Default)]
pub struct Queues {
    pub classes: Vec<Class>,
    /// Transmission time of a 1500-byte packet (RED's idle decay unit).
    pub red_s_ns: u64,
    pub total_packets: u64,
}

impl Queues {
    #[inline]
    pub fn head_len(&self, c: u32) -> Option<u32> {
        self.classes[c as usize].fifo.head().map(|p| p.len_bytes)
    }

    #[inline]
    pub fn is_empty(&self, c: u32) -> bool {
        self.classes[c as usize].fifo.is_empty()
    }

    /// Runs a class's enqueue checks (plr, limit, RED/PIE) and queues the packet.
    /// `extra` is the occupancy of this class outside its FIFO (the packet on
    /// the wire, which counts until it has left, as in [`crate::link`]).
    pub fn push(
        &mut self,
        now: u64,
        c: u32,
        mut pkt: Pkt,
        extra: (u32, u64),
        draw: &mut dyn FnMut() -> f64,
    ) -> Result<bool, DropCause> {
        let red_s = self.red_s_ns;
        let cl = &mut self.classes[c as usize];
        let p = &*cl.params;
        let res = (|| {
            if p.plr > 0.0 && draw() < p.plr {
                return Err(DropCause::Loss);
            }
            let n = cl.fifo.len() as u64 + extra.0 as u64;
            let b = cl.fifo.bytes + extra.1;
            if p.limit_packets.is_some_and(|l| n >= l as u64)
                || p.limit_bytes.is_some_and(|l| b + pkt.len_bytes as u64 > l)
            {
                return Err(DropCause::Tail);
            }
            let admit = match (&p.aqm, &mut cl.aqm) {
                (AqmConfig::Red(cfg), AqmState::Red(r)) => {
                    let q = if p.limit_bytes.is_some() { b } else { n };
                    r.arrive(cfg, now, q, red_s, pkt.ect, draw)
                }
                (AqmConfig::Pie(cfg), AqmState::Pie(s)) => {
                    s.catch_up(cfg, now, cl.fifo.head().map(|h| h.enq_ns));
                    s.arrive(cfg, cl.fifo.bytes, pkt.ect, draw)
                }
                _ => Admit::Accept,
            };
            match admit {
                Admit::Accept => Ok(false),
                Admit::Mark => Ok(true),
                Admit::Drop(c) => Err(c),
            }
        })();
        match res {
            Ok(mark) => {
                pkt.enq_ns = now;
                pkt.ce = mark;
                cl.fifo.push(pkt);
                cl.stats.enqueued += 1;
                cl.stats.enqueued_bytes += pkt.len_bytes as u64;
                if mark {
                    cl.stats.marked += 1;
                }
                self.total_packets += 1;
            }
            Err(cause) => cl.stats.count_drop(cause),
        }
        res
    }

    /// Takes the next packet of class `c` through its AQM (CoDel may drop
    /// packets on the way: they go to `drops`). Returns the packet and whether
    /// to mark it CE.
    pub fn pop(&mut self, now: u64, c: u32, drops: &mut Vec<Dropped>) -> Option<(Pkt, bool)> {
        let cl = &mut self.classes[c as usize];
        let before = cl.fifo.len();
        let out = match (&cl.params.aqm, &mut cl.aqm) {
            (AqmConfig::CoDel(cfg), AqmState::CoDel(s)) => {
                let stats = &mut cl.stats;
                s.dequeue(cfg, now, &mut cl.fifo, &mut |pkt| {
                    stats.drops_aqm += 1;
                    drops.push(Dropped {
                        class: c,
                        pkt,
                        cause: DropCause::Aqm,
                    });
                })
            }
            (AqmConfig::Pie(cfg), AqmState::Pie(s)) => {
                s.catch_up(cfg, now, cl.fifo.head().map(|h| h.enq_ns));
                cl.fifo.pop().map(|p| (p, false))
            }
            (_, AqmState::Red(r)) => {
                let p = cl.fifo.pop();
                if cl.fifo.is_empty() {
                    r.emptied(now);
                }
                p.map(|p| (p, false))
            }
            _ => cl.fifo.pop().map(|p| (p, false)),
        };
        self.total_packets -= (before - cl.fifo.len()) as u64;
        if let Some((p, mark)) = out {
            cl.stats.dequeued += 1;
            cl.stats.dequeued_bytes += p.len_bytes as u64;
            if mark {
                cl.stats.marked += 1;
            }
            cl.stats.sojourn.record(now.saturating_sub(p.enq_ns));
        }
        out.map(|(p, mark)| (p, mark || p.ce))
    }

    /// Drops the head of class `c` (FQ's overflow).
    pub fn drop_head(&mut self, c: u32, cause: DropCause) -> Option<Pkt> {
        let cl = &mut self.classes[c as usize];
        let p = cl.fifo.pop()?;
        cl.stats.count_drop(cause);
        self.total_packets -= 1;
        Some(p)
    }
}

/// A packet scheduler over the classes of a [`Queues`].
pub trait Scheduler: std::fmt::Debug + Send {
    /// Class `class` exists (classes are numbered densely from 0).
    fn add_class(&mut self, class: u32, params: &QueueParams);
    /// A packet has been added to `class`'s FIFO (already in `qs`).
    fn enqueued(&mut self, class: u32, qs: &Queues);
    /// The next packet to send at `now`, with its class and CE mark; AQM drops
    /// on the way go to `drops`.
    fn dequeue(
        &mut self,
        now: u64,
        qs: &mut Queues,
        drops: &mut Vec<Dropped>,
    ) -> Option<(u32, Pkt, bool)>;
    fn is_empty(&self) -> bool;
}

/// Scheduler types (`sched N config type T`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedKind {
    Fifo,
    Wf2q,
    Qfq,
    Rr,
    Prio,
    FqCodel,
    FqPie,
}

impl SchedKind {
    pub fn parse(w: &str) -> Option<SchedKind> {
        Some(match w.to_ascii_lowercase().as_str() {
            "fifo" => SchedKind::Fifo,
            "wf2q+" | "wf2q" | "wf2qp" => SchedKind::Wf2q,
            "qfq" => SchedKind::Qfq,
            "rr" | "drr" => SchedKind::Rr,
            "prio" => SchedKind::Prio,
            "fq_codel" | "fq-codel" => SchedKind::FqCodel,
            "fq_pie" | "fq-pie" => SchedKind::FqPie,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            SchedKind::Fifo => "FIFO",
            SchedKind::Wf2q => "WF2Q+",
            SchedKind::Qfq => "QFQ",
            SchedKind::Rr => "RR",
            SchedKind::Prio => "PRIO",
            SchedKind::FqCodel => "FQ_CODEL",
            SchedKind::FqPie => "FQ_PIE",
        }
    }
    pub fn is_fq(self) -> bool {
        matches!(self, SchedKind::FqCodel | SchedKind::FqPie)
    }
}

/// Parameters of a scheduler (`sched N config ...`).
#[derive(Debug, Clone, PartialEq)]
pub struct SchedParams {
    pub kind: SchedKind,
    /// rr: bytes per weight unit per round; fq_*: bytes per round (1514).
    pub quantum_bytes: u32,
    /// fq_*: packets over all flows (10240).
    pub limit_packets: u32,
    /// fq_*: number of flow queues (1024).
    pub flows: u32,
    /// fq_*: the AQM of each flow.
    pub flow_aqm: AqmConfig,
}

impl SchedParams {
    pub fn new(kind: SchedKind) -> Self {
        let flow_aqm = match kind {
            SchedKind::FqPie => AqmConfig::Pie(crate::aqm::PieConfig {
                ecn: true,
                ..Default::default()
            }),
            _ => AqmConfig::CoDel(crate::aqm::CoDelConfig {
                ecn: true,
                ..Default::default()
            }),
        };
        SchedParams {
            kind,
            quantum_bytes: 1514,
            limit_packets: 10240,
            flows: 1024,
            flow_aqm,
        }
    }
}

/// Makes the scheduler of a kind.
pub fn make(p: &SchedParams) -> Box<dyn Scheduler> {
    match p.kind {
        SchedKind::Fifo => Box::new(fifo::FifoSched::default()),
        SchedKind::Wf2q => Box::new(wf2q::Wf2q::default()),
        SchedKind::Qfq => Box::new(qfq::Qfq::default()),
        SchedKind::Rr => Box::new(drr::Drr::new(p.quantum_bytes)),
        SchedKind::Prio => Box::new(prio::Prio::default()),
        SchedKind::FqCodel | SchedKind::FqPie => Box::new(fq::Fq::new(p.quantum_bytes)),
    }
}

/// A scheduler with its classes: the object a pipe owns.
#[derive(Debug)]
pub struct Sched {
    pub params: SchedParams,
    pub qs: Queues,
    s: Box<dyn Scheduler>,
}

impl Sched {
    pub fn new(params: SchedParams) -> Sched {
        let s = make(&params);
        Sched {
            params,
            qs: Queues::default(),
            s,
        }
    }

    /// Adds a class; returns its number.
    pub fn add_class(
        &mut self,
        params: std::sync::Arc<QueueParams>,
        queue: u32,
        flow_id: u64,
    ) -> u32 {
        let c = self.qs.classes.len() as u32;
        self.s.add_class(c, &params);
        self.qs.classes.push(Class {
            fifo: Fifo::default(),
            aqm: AqmState::new(&params.aqm),
            params,
            stats: ClassStats::default(),
            queue,
            flow_id,
        });
        c
    }

    /// Offers a packet to class `c` at `now`. Ok(true): accepted and to be
    /// marked CE. A drop returns the cause (the packet is not kept). With
    /// fq_*, an overflow of the total limit drops the head of the fattest
    /// flow instead: returned in `drops`.
    pub fn enqueue(
        &mut self,
        now: u64,
        c: u32,
        pkt: Pkt,
        extra: (u32, u64),
        draw: &mut dyn FnMut() -> f64,
        drops: &mut Vec<Dropped>,
    ) -> Result<bool, DropCause> {
        let mark = self.qs.push(now, c, pkt, extra, draw)?;
        self.s.enqueued(c, &self.qs);
        if self.params.kind.is_fq() && self.qs.total_packets > self.params.limit_packets as u64 {
            // RFC 8290 §4.1: drop from the head of the flow with the most bytes.
            let fat = (0..self.qs.classes.len())
                .max_by_key(|&i| (self.qs.classes[i].fifo.bytes, std::cmp::Reverse(i)))
                .expect("a packet is queued") as u32;
            if let Some(p) = self.qs.drop_head(fat, DropCause::Tail) {
                drops.push(Dropped {
                    class: fat,
                    pkt: p,
                    cause: DropCause::Tail,
                });
            }
        }
        Ok(mark)
    }

    #[inline]
    pub fn dequeue(&mut self, now: u64, drops: &mut Vec<Dropped>) -> Option<(u32, Pkt, bool)> {
        self.s.dequeue(now, &mut self.qs, drops)
    }

    /// No packet waits (some schedulers keep empty flows listed until they
    /// next pass them).
    pub fn is_empty(&self) -> bool {
        self.qs.total_packets == 0
    }
}
