//! The live stage's interface: what it needs of a model ([`LiveModel`]) and of
//! a tap ([`Tap`]), what it starts with ([`LiveOptions`]) and why a change is
//! refused ([`SubmitError`]).

use super::*;

/// What the live stage needs of a model beyond [`Model`]: checking a change
/// before any of a request is applied, and the objects a change may delete.
pub trait LiveModel: Model + Send + 'static {
    /// Whether `change` would apply; [`Model::apply`] of a change that passed
    /// does not fail. Checked for every change of a request before the first
    /// is applied, so a request applies whole or not at all.
    fn check(&self, change: &Change) -> Result<(), ChangeError>;

    /// Numbers of the pipes the model has now (their packets in the delay
    /// line are flushed when a change deletes them).
    fn pipe_numbers(&self) -> Vec<u32> {
        Vec::new()
    }

    /// Memory charged for per-flow state, bytes.
    fn flow_memory_bytes(&self) -> usize {
        0
    }

    /// Whether the model leaves every packet received on `side` (0: A, 1:
    /// B) as it came, at the instant it came, and changes nothing by seeing
    /// it: then the kernel may forward that direction itself (see the
    /// `kernel` module). Default: no.
    fn passes_through(&self, side: usize) -> bool {
        let _ = side;
        false
    }
}

impl LiveModel for LinkModel {
    fn check(&self, change: &Change) -> Result<(), ChangeError> {
        match change {
            Change::Link { .. } => Ok(()),
            _ => Err(ChangeError::NoRuleSet),
        }
    }

    fn passes_through(&self, side: usize) -> bool {
        let side = if side == 0 { Side::A } else { Side::B };
        self.link(side).passes_through()
    }
}

impl LiveModel for Node {
    fn check(&self, change: &Change) -> Result<(), ChangeError> {
        match change {
            Change::Link { .. } => Err(ChangeError::NoLink),
            _ => Ok(()),
        }
    }

    fn pipe_numbers(&self) -> Vec<u32> {
        self.pipes().iter().map(|p| p.def.number).collect()
    }

    fn flow_memory_bytes(&self) -> usize {
        Node::flow_memory_bytes(self)
    }
}

/// What sees the model's inputs and outputs as they happen, on the stage's
/// thread (the `--events` writer, the `--record` recorder): it must only copy
/// into a bounded queue, never block.
pub trait Tap: Send {
    /// A wire frame given to the model: its side, the stamp the model got,
    /// its bytes as cut (before any checksum is finished).
    fn frame(&mut self, side: Side, ts_ns: u64, bytes: &[u8]);
    /// A decision of the model, in decision order, for a packet that arrived
    /// at `arrival_ns` with `len_bytes`.
    fn decision(&mut self, arrival_ns: u64, len_bytes: u32, d: &Decision);
    /// A request of changes the model took at `at_ns`, before they apply.
    fn changes(&mut self, at_ns: u64, changes: &[Change]);
    /// The instant the stage started, which is the model's start
    /// ([`Model::start`]) and the earliest stamp: given once, before any
    /// frame, on the thread that starts the bridge.
    fn start(&mut self, _t0_ns: u64) {}
}

/// Why [`LiveBridge::submit`] applied nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// A change does not fit the model.
    #[error("{0}")]
    Refused(#[from] ChangeError),
    /// The stage has stopped (the bridge is ending).
    #[error("the bridge is stopping: change not applied")]
    Stopped,
    /// [`MAX_PENDING_CHANGES`] requests are waiting already.
    #[error("too many changes waiting for the emulator: try again")]
    Busy,
    /// A change would make the model duplicate packets and a send port
    /// cannot send a packet twice ([`TxPort::no_copies`], the reason given).
    #[error("'duplicate' is not available {0}")]
    NoCopies(&'static str),
}

/// What the live stage starts with; per direction `[a->b, b->a]`.
pub struct LiveOptions {
    /// For messages and stats: the names of the two directions ("a->b", "b->a").
    pub names: [String; 2],
    /// Size of each direction's delay line, as
    /// [`crate::pipeline::DirectionOptions::buffer_bytes`].
    pub buffer_bytes: [usize; 2],
    /// The most the output stages (and the live stage, waiting for the
    /// model's next event) spin before a deadline, as
    /// [`crate::pipeline::DirectionOptions::spin_ns`].
    pub spin_ns: u64,
    /// Whether the output stages spin to releases even while every core of
    /// the machine is taken (`--spin-threshold` given); otherwise they sleep
    /// to them then (see `wait::CoreWatch`).
    pub spin_always: bool,
    /// The share of a core each output thread may spend spinning before
    /// releases, ppm (`--spin-budget`; default
    /// [`crate::pipeline::DEFAULT_SPIN_BUDGET_PPM`]): past it, its spin
    /// covers fewer of its wake-ups (see `wake`).
    pub spin_budget_ppm: u32,
    /// As [`crate::pipeline::DirectionOptions::max_lag_ns`], for both output stages;
    /// the live stage sheds arrivals of a direction whose output stage is
    /// that far behind.
    pub max_lag_ns: Option<u64>,
    /// Frames taken per receive call from each port, as
    /// [`crate::pipeline::DirectionOptions::batch`].
    pub batch: usize,
    /// How long the stage keeps polling its ports after the last arrival
    /// before it sleeps ([`wait::Linger`]); 0: it sleeps as soon as a turn
    /// takes nothing. Default [`wait::DEFAULT_LINGER_NS`].
    pub linger_ns: u64,
    /// As [`crate::pipeline::DirectionOptions::realtime_priority`], for the live stage
    /// (while it waits) and the output stages.
    pub realtime_priority: Option<i32>,
    /// The live stage stays under SCHED_FIFO even when busy.
    pub realtime_input: bool,
    /// Coalesce TCP wire frames of one flow due within this window into
    /// super-frames on transmit, where the send port can
    /// ([`crate::port::TxPort::sends_super_frames`]); `None`: off. Default
    /// [`crate::pipeline::DEFAULT_COALESCE_WINDOW_NS`].
    pub coalesce_window_ns: Option<u64>,
    /// With `realtime_priority`: the stages hold SCHED_FIFO only while they
    /// wait for an instant (a release, a scheduler's service), not while
    /// they wait for traffic (`wait::Realtime`).
    pub realtime_timed_only: bool,
    /// Sees every frame, decision and change ([`Tap`]), if any.
    pub tap: Option<Box<dyn Tap>>,
}

impl LiveOptions {
    /// The defaults of [`crate::pipeline::DirectionOptions::new`] for both directions,
    /// with delay lines of `buffer_bytes` each.
    pub fn new(buffer_bytes: usize) -> LiveOptions {
        LiveOptions {
            names: ["a->b".into(), "b->a".into()],
            buffer_bytes: [buffer_bytes; 2],
            spin_ns: wait::DEFAULT_SPIN_NS,
            spin_always: false,
            spin_budget_ppm: crate::pipeline::DEFAULT_SPIN_BUDGET_PPM,
            max_lag_ns: Some(crate::pipeline::DEFAULT_MAX_LAG_NS),
            batch: crate::pipeline::DEFAULT_BATCH,
            linger_ns: wait::DEFAULT_LINGER_NS,
            realtime_priority: None,
            realtime_input: false,
            coalesce_window_ns: Some(crate::pipeline::DEFAULT_COALESCE_WINDOW_NS),
            realtime_timed_only: false,
            tap: None,
        }
    }
}
