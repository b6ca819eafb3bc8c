//! Active queue management for one queue: what happens to a packet at
//! enqueue (droptail, RED/GRED, PIE) and at dequeue (CoDel), and ECN marking.
//!
//! Every AQM is a pure state machine over (time in ns, queue length, packet
//! length, a uniform draw from the queue's own random stream); the queue
//! itself ([`crate::queue::Fifo`]) and the scheduler above it are elsewhere.
//! Written by hand: the decisions are the product, and each one must be
//! exactly the one the paper or RFC states so that a reference written from
//! that text agrees packet by packet (tests/sched_reference.rs).
//!
//! | AQM | decides at | reference | module |
//! |---|---|---|---|
//! | droptail | enqueue | — | here |
//! | RED, GRED (`gred` = gentle) | enqueue | Floyd & Jacobson 1993; Floyd 2000 (gentle) | [`red`] |
//! | CoDel | dequeue | RFC 8289 | [`codel`] |
//! | PIE | enqueue (+ update every `tupdate`) | RFC 8033 | [`pie`] |
//!
//! With `ecn`, where an AQM would drop an ECT packet it marks it CE instead
//! ([`ecn`]); not-ECT packets are dropped as before; tail drops are drops.

pub mod codel;
pub mod ecn;
pub mod pie;
pub mod red;

pub use codel::{CoDel, CoDelConfig};
pub use pie::{Pie, PieConfig};
pub use red::{Red, RedConfig};

/// Why a queue dropped a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropCause {
    /// The queue held its limit (slots or bytes), or FQ's total limit.
    Tail,
    /// RED/GRED's early drop.
    Early,
    /// CoDel or PIE.
    Aqm,
    /// The queue's own `plr`.
    Loss,
}

impl DropCause {
    /// The stable name counted in stats and event files: `queue-full` (the
    /// same name as [`crate::Fate::QueueFull`]), `red-drop`, `aqm-drop`, `loss`.
    pub const fn name(self) -> &'static str {
        match self {
            DropCause::Tail => "queue-full",
            DropCause::Early => "red-drop",
            DropCause::Aqm => "aqm-drop",
            DropCause::Loss => "loss",
        }
    }
}

/// A queue's management, as configured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AqmConfig {
    /// `droptail` (the default): no early decision; a packet is dropped only
    /// when the queue is at its limit in packets or bytes.
    DropTail,
    /// `red` or `gred` (`gentle` set): early drop at enqueue from the averaged
    /// queue length.
    Red(RedConfig),
    /// `codel`: drops at dequeue from the head packet's sojourn time.
    CoDel(CoDelConfig),
    /// `pie`: early drop at enqueue with a drop probability updated every
    /// `tupdate` from the queueing delay.
    Pie(PieConfig),
}

impl AqmConfig {
    /// The AQM's word as users type it: `droptail`, `red`, `gred`, `codel`,
    /// `pie`.
    pub fn name(&self) -> &'static str {
        match self {
            AqmConfig::DropTail => "droptail",
            AqmConfig::Red(r) if r.gentle => "gred",
            AqmConfig::Red(_) => "red",
            AqmConfig::CoDel(_) => "codel",
            AqmConfig::Pie(_) => "pie",
        }
    }

    /// Whether ECN marking is on: an ECT packet the AQM would drop early is
    /// marked CE instead. Always false for droptail (tail drops are drops).
    pub fn ecn(&self) -> bool {
        match self {
            AqmConfig::DropTail => false,
            AqmConfig::Red(r) => r.ecn,
            AqmConfig::CoDel(c) => c.ecn,
            AqmConfig::Pie(p) => p.ecn,
        }
    }
}

/// A queue's management state.
#[derive(Debug, Clone)]
pub enum AqmState {
    /// Droptail keeps no state.
    DropTail,
    /// RED's average queue length and count since the last drop.
    Red(Red),
    /// CoDel's dropping state and control-law schedule.
    CoDel(CoDel),
    /// PIE's drop probability, burst allowance and update clock.
    Pie(Pie),
}

impl AqmState {
    /// The state of a fresh, empty queue managed as `cfg` says (PIE's burst
    /// allowance starts full, its first update is due at `tupdate`).
    pub fn new(cfg: &AqmConfig) -> Self {
        match cfg {
            AqmConfig::DropTail => AqmState::DropTail,
            AqmConfig::Red(_) => AqmState::Red(Red::new()),
            AqmConfig::CoDel(_) => AqmState::CoDel(CoDel::new()),
            AqmConfig::Pie(c) => AqmState::Pie(Pie::new(c)),
        }
    }
}

/// An enqueue decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Queue the packet unchanged.
    Accept,
    /// Accept with CE set.
    Mark,
    /// Do not queue the packet; the cause says which mechanism refused it.
    Drop(DropCause),
}

/// Early decision helper shared by RED and PIE: drop, or mark an ECT packet
/// when ECN is on.
#[inline]
pub(crate) fn drop_or_mark(ecn: bool, ect: bool, cause: DropCause) -> Admit {
    if ecn && ect {
        Admit::Mark
    } else {
        Admit::Drop(cause)
    }
}
