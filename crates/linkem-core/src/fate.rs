//! What happens to a packet. One enum, one set of names, used by every count,
//! log, event file and metric, for the plain link and the node of rules alike.
//!
//! Every packet that reaches linkem ends in exactly one fate, counted once:
//! the counting invariant of replay and of the live pipeline sums
//! [`FateCounts::arrived`] over all of them.

use std::fmt;

/// The fate of one packet. The names ([`Fate::name`]) are stable: scripts read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fate {
    /// Sent on at its release time.
    Delivered,
    /// Dropped at arrival: the queue held its limit in packets or bytes.
    QueueFull,
    /// Dropped by the random loss model (`loss`, `plr`, `gemodel`, `state`, `ber`).
    Loss,
    /// Dropped by the token-bucket policer: not enough tokens.
    Policed,
    /// Live only: the emulator's buffer toward the output had no room.
    Backpressure,
    /// Live only: the packet could not be sent within `max-lag` of its release time.
    Late,
    /// Live only: the frame (after segmentation) was larger than the egress port can
    /// send (its MTU plus the Ethernet header); never truncated.
    TooBig,
    /// Live only: handed to the kernel for sending, which then refused it (e.g. a
    /// malformed frame on the AF_PACKET transmit ring).
    TxError,
    /// Rules only: dropped by a `deny` rule.
    Denied,
    /// Rules only: its pipe or scheduler instance, or its scheduler class, would
    /// have been one beyond `--max-flows` instances or `--max-flow-memory` bytes
    /// ([`crate::pipe::FlowBudget`]).
    FlowLimit,
    /// Rules only: RED/GRED's early drop at a queue.
    RedDrop,
    /// Rules only: dropped by a queue's CoDel or PIE.
    AqmDrop,
    /// Rules, live only: taken by a pipe that was then deleted (`ctl pipe N
    /// delete`, `flush`) while the packet waited: not sent.
    Flushed,
}

impl Fate {
    /// Every fate, in the order of the enum. `Fate::ALL[f as usize] == f`: the
    /// index of a fate is its slot in [`FateCounts`], and this order is the
    /// order in which counts are listed.
    pub const ALL: [Fate; 13] = [
        Fate::Delivered,
        Fate::QueueFull,
        Fate::Loss,
        Fate::Policed,
        Fate::Backpressure,
        Fate::Late,
        Fate::TooBig,
        Fate::TxError,
        Fate::Denied,
        Fate::FlowLimit,
        Fate::RedDrop,
        Fate::AqmDrop,
        Fate::Flushed,
    ];

    /// The fates a run lists: every fate with rules, the first eight (those a
    /// plain link can give) without, so a plain link's `--stats`, metrics and
    /// control replies name exactly the fates it can have.
    pub fn listed(rules: bool) -> &'static [Fate] {
        if rules {
            &Fate::ALL
        } else {
            &Fate::ALL[..8]
        }
    }

    /// The stable lower-case name used in stats, event files and metrics
    /// (`delivered`, `queue-full`, `loss`, `policed`, `backpressure`, `late`,
    /// `too-big`, `tx-error`, `denied`, `flow-limit`, `red-drop`, `aqm-drop`,
    /// `flushed`); also what [`Display`](fmt::Display) prints.
    pub const fn name(self) -> &'static str {
        match self {
            Fate::Delivered => "delivered",
            Fate::QueueFull => "queue-full",
            Fate::Loss => "loss",
            Fate::Policed => "policed",
            Fate::Backpressure => "backpressure",
            Fate::Late => "late",
            Fate::TooBig => "too-big",
            Fate::TxError => "tx-error",
            Fate::Denied => "denied",
            Fate::FlowLimit => "flow-limit",
            Fate::RedDrop => "red-drop",
            Fate::AqmDrop => "aqm-drop",
            Fate::Flushed => "flushed",
        }
    }

    /// The fate named `name` ([`Fate::name`]), as event files and stats print it.
    pub fn from_name(name: &str) -> Option<Fate> {
        Fate::ALL.iter().copied().find(|f| f.name() == name)
    }

    /// Whether the packet was not sent on: every fate but [`Fate::Delivered`].
    pub fn is_drop(self) -> bool {
        self != Fate::Delivered
    }
}

impl From<crate::aqm::DropCause> for Fate {
    /// A queue's drop under the name users know: a full queue and the queue's
    /// own `plr` count as the link's `queue-full` and `loss`.
    fn from(c: crate::aqm::DropCause) -> Fate {
        use crate::aqm::DropCause;
        match c {
            DropCause::Tail => Fate::QueueFull,
            DropCause::Loss => Fate::Loss,
            DropCause::Early => Fate::RedDrop,
            DropCause::Aqm => Fate::AqmDrop,
        }
    }
}

impl fmt::Display for Fate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Packets counted by fate, plus the copies and corruptions that ride on
/// delivered packets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FateCounts {
    by_fate: [u64; Fate::ALL.len()],
    /// Extra copies sent by `duplicate` (not included in `arrived`).
    pub duplicated: u64,
    /// Delivered packets with a bit flipped by `corrupt`.
    pub corrupted: u64,
}

impl FateCounts {
    /// No packet counted.
    pub const ZERO: FateCounts = FateCounts {
        by_fate: [0; Fate::ALL.len()],
        duplicated: 0,
        corrupted: 0,
    };

    /// Counts one packet with fate `fate`.
    #[inline]
    pub fn add(&mut self, fate: Fate) {
        self.by_fate[fate as usize] += 1;
    }

    /// Packets counted with fate `fate`.
    pub fn get(&self, fate: Fate) -> u64 {
        self.by_fate[fate as usize]
    }

    /// Every packet that reached the model.
    pub fn arrived(&self) -> u64 {
        self.by_fate.iter().sum()
    }

    /// Packets not delivered: [`FateCounts::arrived`] minus the delivered ones,
    /// i.e. the sum over every fate for which [`Fate::is_drop`] holds.
    pub fn dropped(&self) -> u64 {
        self.arrived() - self.get(Fate::Delivered)
    }

    /// Each fate with its count, in [`Fate::ALL`] order (zero counts included).
    pub fn iter(&self) -> impl Iterator<Item = (Fate, u64)> + '_ {
        Fate::ALL.iter().map(move |&f| (f, self.get(f)))
    }

    /// Overrides one count: the live pipeline learns later than the model which
    /// accepted packets were sent, dropped for lack of room, or too late.
    pub fn set(&mut self, fate: Fate, n: u64) {
        self.by_fate[fate as usize] = n;
    }
}
