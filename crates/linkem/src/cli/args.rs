//! The arguments of `linkem replay` (one driver over any model: [`crate::replay`])
//! and `linkem bridge` (one command over any model: [`crate::bridge`]), with what is
//! derived from the arguments alone: the files a replay reads and writes,
//! the bridge's timing options.

use crate::bridge::backend::BackendKind;
use crate::control::ControlArgs;
use crate::StatsFormat;
use anyhow::Result;
use linkem_core::rules::Side;
use linkem_core::units::{parse_size_bytes, parse_time_ns};
use linkem_io::outfile::FileUse;
use linkem_runtime::pipeline::{
    DEFAULT_LINGER_NS, DEFAULT_MAX_LAG_NS, DEFAULT_SPIN_BUDGET_PPM, DEFAULT_SPIN_NS,
};
use std::path::PathBuf;

/// `linkem replay`'s arguments.
#[derive(clap::Args, Debug, Clone)]
#[command(
    mut_arg("log_a_to_b", |a| a.help(
        "Link log in mahimahi's format (`mm-link --uplink-log`) of the packets received on \
         side a (every packet, without `--rules-side b`); times in ms from the capture's \
         first packet"
    )),
    mut_arg("log_b_to_a", |a| a.help(
        "Link log of the packets received on side b (`--rules-side b`)"
    )),
)]
pub struct ReplayArgs {
    /// Input capture (pcap or pcapng), or the recording directory of a live run
    /// (`linkem bridge --record DIR`, of one pair or several), replayed with the
    /// model and changes it recorded.
    pub input: PathBuf,
    /// Output capture (nanosecond pcap). A file is replaced only if the whole replay
    /// succeeds (keeping its mode); a device or FIFO (/dev/null) is written directly.
    /// For the recording of several pairs (`linkem bridge --pair ... --pair ...
    /// --record DIR`, a lab), a folder (made if missing) that gets each link's
    /// capture as LINK.pcap; `--events` then holds JSON lines naming each
    /// line's link, and the link logs' paths take `{link}` where its name goes.
    pub output: PathBuf,
    /// Link words, e.g. `rate 10mbit delay 20ms loss 1%`.
    pub words: Vec<String>,
    /// Read link words from a TOML file (keys are words); words on the command line override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the counts per fate as text (default) or JSON.
    #[arg(long, value_enum, default_value = "text")]
    pub stats: StatsFormat,
    /// Write one line per decision, in decision order: index, arrival, length, fate, release,
    /// queue occupancy, copies, flipped bits, rule, pipe, flow, hops, queue, CE, side (a header
    /// line names the columns).
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,
    /// `--log-a-to-b`, `--log-b-to-a`: the link logs, worded for a capture.
    #[command(flatten)]
    pub logs: LinkLogArgs,
    /// Never show a progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// `--rules FILE` and its options (see [`crate::replay`]).
    #[command(flatten)]
    pub rules: RulesArgs,
}

/// What every replay reads whatever drives it: the capture and `--config`.
pub(crate) fn base_inputs(args: &ReplayArgs) -> Vec<FileUse> {
    let mut inputs = vec![FileUse::new("input capture", &args.input)];
    inputs.extend(args.config.iter().map(|p| FileUse::new("--config", p)));
    inputs
}

/// What a replay writes: the output capture, `--events` and the link logs.
pub(crate) fn outputs(args: &ReplayArgs) -> Vec<FileUse> {
    let mut outputs = vec![FileUse::new("output capture", &args.output)];
    outputs.extend(args.events.iter().map(|p| FileUse::new("--events", p)));
    outputs.extend(
        args.logs
            .log_a_to_b
            .iter()
            .map(|p| FileUse::new("--log-a-to-b", p)),
    );
    outputs.extend(
        args.logs
            .log_b_to_a
            .iter()
            .map(|p| FileUse::new("--log-b-to-a", p)),
    );
    outputs
}

/// The rule options of `linkem replay`.
#[derive(clap::Args, Debug, Clone)]
pub struct RulesArgs {
    /// Send packets through ipfw/dnctl rules and Dummynet pipes read from FILE
    /// (lines as typed after `ipfw` or `dnctl`: `pipe 1 config bw 1Mbit/s delay 20`,
    /// `add 100 pipe 1 dst-ip 10.0.0.0/8`, `set one-pass off`). `pipe N config` sets
    /// the whole pipe, as Dummynet does. Schedulers and AQM: `sched N config type
    /// wf2q+|qfq|rr|prio|fifo|fq_codel|fq_pie [mask ...]` (a mask: one scheduler
    /// instance with its own copy of the link per masked flow), `queue M config sched N weight W
    /// [lmax B] [codel|pie|red ...] [ecn] [mask ...]`, `add ... queue M`; `sched N`
    /// serves pipe N's link, which
    /// traffic sent to `pipe N` shares (unlike Dummynet; see docs/guide/schedulers.md). Only `seed N`
    /// may follow the file names.
    #[arg(long = "rules", value_name = "FILE")]
    pub file: Option<std::path::PathBuf>,
    /// With --rules: most dynamic pipe and scheduler instances (masks) alive at once; a packet
    /// needing one more is dropped and counted as flow-limit.
    #[arg(long, value_name = "N", default_value_t = linkem_core::pipe::DEFAULT_MAX_FLOWS)]
    pub max_flows: usize,
    /// With --rules: most memory charged for dynamic instances and scheduler
    /// classes (fq_* flows, masked queues), each charged a fixed size when
    /// made (see docs/guide/rules.md, "Limits"); a packet needing more is dropped and
    /// counted as flow-limit. Default 512MiB.
    #[arg(long, value_name = "SIZE", default_value = "512MiB", value_parser = parse_flow_memory)]
    pub max_flow_memory: usize,
    /// With --rules: the interface the capture's packets are taken as received on
    /// (a: `in`, `recv a`, `a-to-b`; b: `out`, `recv b`, `b-to-a`).
    #[arg(
        long = "rules-side",
        value_enum,
        default_value = "a",
        value_name = "SIDE"
    )]
    pub side: RulesSide,
}

/// The side a replayed capture is taken as received on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RulesSide {
    A,
    B,
}

impl From<RulesSide> for Side {
    fn from(s: RulesSide) -> Side {
        match s {
            RulesSide::A => Side::A,
            RulesSide::B => Side::B,
        }
    }
}

impl Default for RulesArgs {
    fn default() -> Self {
        RulesArgs {
            file: None,
            max_flows: linkem_core::pipe::DEFAULT_MAX_FLOWS,
            max_flow_memory: linkem_core::pipe::DEFAULT_MAX_FLOW_BYTES,
            side: RulesSide::A,
        }
    }
}

/// `--record-limit`: a size with a unit (`100MB`, `4GiB`), as `--buffer`.
pub fn parse_record_limit(text: &str) -> Result<u64, String> {
    linkem_core::units::parse_size_bytes(text).map_err(|e| e.0)
}

/// `--max-flow-memory`: a size with a unit (`512MiB`, `1GB`), at most the
/// address space.
pub fn parse_flow_memory(text: &str) -> Result<usize, String> {
    let b = linkem_core::units::parse_size_bytes(text).map_err(|e| e.0)?;
    usize::try_from(b).map_err(|_| format!("'{text}' is more memory than this machine addresses"))
}

/// Which stages run under SCHED_FIFO (see `DirectionOptions::realtime_priority`).
#[derive(Clone, Copy, clap::ValueEnum, PartialEq, Eq, Debug)]
pub enum Realtime {
    /// Neither: ordinary scheduling (lateness then depends on the machine's load).
    Off,
    /// The stages only while they wait for an instant (a release time, a
    /// scheduler's service); waiting for traffic they run at ordinary
    /// priority, so a flood wakes no real-time thread per frame.
    Timed,
    /// The output stages, which must wake at release times (default).
    Out,
    /// Output and input stages (a dedicated machine: the input stages then
    /// take their cores whenever traffic arrives).
    All,
}

/// A feature turned on or off.
#[derive(Clone, Copy, clap::ValueEnum, PartialEq, Eq, Debug)]
pub enum OnOff {
    /// On.
    On,
    /// Off.
    Off,
}

/// SCHED_FIFO priority of the stages: above ordinary tasks, below the kernel's
/// interrupt threads (50), which deliver the packets.
pub const REALTIME_PRIORITY: i32 = 10;

/// `linkem bridge`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct BridgeArgs {
    /// First interface (traffic received here goes a->b).
    #[arg(
        required_unless_present = "pair",
        default_value = "",
        hide_default_value = true
    )]
    pub if_a: String,
    /// Second interface (traffic received here goes b->a).
    #[arg(
        required_unless_present = "pair",
        default_value = "",
        hide_default_value = true
    )]
    pub if_b: String,
    /// Link words for both directions, e.g. `delay 10ms rate 50mbit`.
    pub words: Vec<String>,
    /// One interface pair and its link words (both directions), in place of
    /// IF_A IF_B WORDS; repeated, one process serves every pair with three
    /// threads: `--pair eth1 eth2 delay 5ms --pair eth3 eth4 delay 10ms loss 1%`.
    /// Each pair has its own link, counts (`--stats` lists them by pair) and
    /// control socket (named IF_A-IF_B, as a bridge of its own); a pair
    /// without `seed N` gets one derived from the run's seed and its place.
    /// `rules FILE` among a pair's words makes it a node of Dummynet rules
    /// (as `--rules`, which with several pairs gives every pair without
    /// words that file). With several pairs, `--record DIR` records them all
    /// (one folder per pair, `linkem replay DIR OUTDIR` replays each),
    /// `--events FILE` is one file of JSON lines naming each line's pair,
    /// and the link logs' paths take `{link}` where each pair's name goes.
    #[arg(
        long = "pair",
        num_args = 2..,
        value_names = ["IF_A", "IF_B", "WORDS"],
        action = clap::ArgAction::Append
    )]
    pub pair: Vec<String>,
    /// `--pair`'s values grouped by occurrence, one list per pair (what the
    /// bridge reads; set by [`BridgeArgs::group_pairs`]).
    #[arg(skip)]
    pub pairs: Vec<Vec<String>>,
    /// Link words for IF_A -> IF_B only.
    #[arg(long = "a-to-b", num_args = 1.., value_name = "WORDS")]
    pub a_to_b: Vec<String>,
    /// Link words for IF_B -> IF_A only.
    #[arg(long = "b-to-a", num_args = 1.., value_name = "WORDS")]
    pub b_to_a: Vec<String>,
    /// TOML file of link words (tables [a-to-b] and [b-to-a] for one direction).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Packet I/O: AF_XDP, AF_PACKET with mmap rings, or auto: AF_PACKET while
    /// --coalesce is on (only it can hand the hosts super-frames), else AF_XDP
    /// falling back to AF_PACKET.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendKind,
    /// Hand the receiving host consecutive TCP frames of one flow, due within
    /// --coalesce-window of each other, as one super-frame (GSO) that its
    /// stack handles once, as its own GRO would on a real NIC. Every frame is
    /// still decided alone (delay, loss, rate...); a run never spans frames
    /// whose decisions differ. AF_PACKET only ('off': every wire frame alone).
    #[arg(long, value_enum, default_value = "on")]
    pub coalesce: OnOff,
    /// The longest a frame waits for the next of its flow to join it: frames
    /// due within TIME of the first frame held may join (default 20us, about a
    /// NIC's interrupt moderation, within which a receiver's GRO merges). A
    /// host's TSO burst without `rate` is due at one instant and leaves whole
    /// with any window, 0 included.
    #[arg(long, value_name = "TIME", value_parser = linkem_core::units::checked_time)]
    pub coalesce_window: Option<String>,
    /// Let the kernel forward a direction whose link is a pass-through (no
    /// delay, rate, loss or anything else; nothing recorded), as the Linux
    /// bridge would, in the sender's own context: no wake-up of linkem per
    /// packet. A tc program on each interface (tcx, Linux 6.6+, CAP_BPF),
    /// switched on and off as changes make the link a pass-through or not;
    /// its frames are counted as delivered. 'off': every frame through linkem.
    #[arg(long, value_enum, default_value = "on")]
    pub kernel_path: OnOff,
    /// How the emulator runs, what it prints and writes: the options every
    /// live front end shares (bridge, host; the shell sets its own).
    #[command(flatten)]
    pub run: RunArgs,
    /// Send frames through ipfw/dnctl rules and Dummynet pipes read from FILE
    /// instead of one link per direction (lines as typed after `ipfw` or
    /// `dnctl`: `pipe 1 config bw 10Mbit/s delay 20`, `add 100 pipe 1 ip from
    /// any to 10.0.0.2 in`; `in`/`a-to-b`/`recv IF_A`: received on IF_A). One
    /// node thread takes frames from both interfaces: a pipe fed from both
    /// directions is one shared medium. `pipe N config` sets the whole pipe, as
    /// Dummynet does. Takes no link words but `seed N`. `linkem ctl` changes
    /// the running pipes and rules (pipe N config|delete, add, delete, flush,
    /// set one-pass; queued packets keep their release times); SIGHUP re-reads
    /// FILE, replacing such changes. See `linkem replay --help` and docs/guide/rules.md.
    #[arg(long = "rules", value_name = "FILE")]
    pub rules: Option<PathBuf>,
    /// Bypass the model: forward every frame at once, one thread per direction,
    /// on the same sockets. The baseline benchmarks compare the emulator with;
    /// takes no link words.
    #[arg(long)]
    pub forward_only: bool,
    /// Control socket, audit log, metrics (see `crate::control`).
    #[command(flatten)]
    pub control: ControlArgs,
}

impl BridgeArgs {
    /// Groups the values of `--pair` by occurrence from the parsed `matches`
    /// (the derived field holds them in one list): `--pair a1 b1 delay 5ms
    /// --pair a2 b2` gives `[[a1, b1, delay, 5ms], [a2, b2]]`.
    pub fn group_pairs(&mut self, matches: &clap::ArgMatches) {
        self.pairs = matches
            .get_occurrences::<String>("pair")
            .map(|o| o.map(|g| g.cloned().collect()).collect())
            .unwrap_or_default();
    }
}

/// The options of a live emulator that do not depend on where its packets come
/// from: flattened into `linkem bridge`'s and `linkem host`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Print counts as text (default) or JSON lines.
    #[arg(long, value_enum, default_value = "text")]
    pub stats: StatsFormat,
    /// Also print the counts every TIME (1s, 500ms, 1min; a bare number is seconds).
    #[arg(long, value_name = "TIME", value_parser = linkem_core::units::parse_seconds)]
    pub stats_interval: Option<f64>,
    /// With `--stats json --stats-interval TIME`, also one line per
    /// direction and interval (throughput, arrivals, delay, drops, queue: the
    /// time series), between the counts' lines.
    #[arg(long, requires = "stats_interval")]
    pub series: bool,
    /// The most the output stage spins before a release time (default 200us), and the
    /// emulating stage before a release it sends itself (a packet due within 1 ms while
    /// the output stage is idle: sparse traffic then costs one wake-up per packet). It
    /// sleeps until then and spins only as long as its timed sleeps were recently seen to
    /// overshoot (learnt while running). Lower it to save CPU at the cost of precision.
    /// By default it does not spin while every core is taken (more tasks ready to run
    /// than cores: spinning would take one from a host); given, it spins regardless, as
    /// on cores that are linkem's alone.
    #[arg(long, value_name = "TIME", value_parser = linkem_core::units::checked_time)]
    pub spin_threshold: Option<String>,
    /// The most of a core each output stage spends spinning before release times
    /// (default 5%; '0%' spins 3 µs at most per release): every spin is paid from a
    /// credit that grows by this share of the time (up to 100 ms's worth). Within it,
    /// the spin covers 99% of the wake-ups the stage has learnt of this machine; a 10 ms
    /// window over it, or whose spin the credit cut short, steps down to 90%, then 50%,
    /// then none, and one under half of it steps back up when the learnt wake-ups say
    /// the step's spin fits: a busy link trades the tail of its lateness for CPU, a
    /// sparse one stays exact.
    /// `--stats json` shows each direction's `spin`. The emulating stage lingers
    /// through a sparse link's holds, and wakes for frames that keep a beat,
    /// within the same share of its time (--linger).
    #[arg(long, value_name = "PERCENT", value_parser = parse_spin_budget)]
    pub spin_budget: Option<u32>,
    /// Drop (as 'late') a packet that cannot leave within TIME of its release time
    /// (default 5ms; 'off' never drops, letting a backlog grow under overload).
    #[arg(long, value_name = "TIME", value_parser = linkem_core::units::checked_time_or_off)]
    pub max_lag: Option<String>,
    /// Delay-line size per direction (default: from rate × delay), e.g. 2GiB.
    #[arg(long, value_name = "SIZE")]
    pub buffer: Option<String>,
    /// Frames received per batch.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// How long the emulating stage keeps polling for frames after frames it
    /// took leave (at once, or within this time) before it sleeps (default
    /// 100us; '0' sleeps at once): an answer coming back within that time is
    /// taken without a wake-up. Lingering is charged to the stage's spin
    /// budget and takes at most a quarter of a core; an idle link never lingers.
    /// A frame held for a later release (a delay) is lingered through only on
    /// sparse traffic: when the hold is due within 1 ms and a credit that grows
    /// by --spin-budget's share of the time (5% by default: 200us holds at 100
    /// packets per second) pays for it, so each such frame costs one wake-up;
    /// denser traffic sleeps to its releases. Frames of a flow that keeps a beat
    /// of 2 ms or more (a ping, a keep-alive; up to 4 flows per port) find the
    /// stage polling for them, from the
    /// same credit: it wakes shortly before the next is due, so a small delay
    /// is not spent on the frame's own wake-up (`rx_on_beat` counts them). It
    /// lingers after departures at ordinary priority, so that a host answering
    /// on the same core runs first (through a hold, where nothing can answer
    /// yet, it keeps the policy it woke in); a busy task that keeps the core
    /// past such a yield (`rx_yields_lost`), twice within 2 s, pauses all
    /// lingering for 0.1-10 s, renewed while more tasks are ready to run than
    /// there are cores. '0' never lingers and keeps the stage waiting
    /// under SCHED_FIFO (for cores that are linkem's alone).
    #[arg(long, value_name = "TIME", value_parser = linkem_core::units::checked_time)]
    pub linger: Option<String>,
    /// Which stages run under SCHED_FIFO: 'out' (default) lets the output stages
    /// wake at release times, and the input stages take frames in, at once even when
    /// traffic generators load the same cores (a stage busy for 1 ms without a pause
    /// returns to ordinary scheduling until it next waits); 'all' keeps the input
    /// stages real-time even when busy; 'timed' holds it only while a stage waits
    /// for an instant (a release, a scheduler's service), not for traffic.
    #[arg(long, value_enum, default_value = "out")]
    pub realtime: Realtime,
    /// Stop after TIME (10s, 2min, 1h; a bare number is seconds; default: run
    /// until SIGINT or SIGTERM).
    #[arg(long, value_name = "TIME", value_parser = linkem_core::units::parse_seconds)]
    pub duration: Option<f64>,
    /// With --rules: most dynamic pipe and scheduler instances (masks) alive at
    /// once; a packet needing one more is dropped and counted as flow-limit.
    #[arg(long, value_name = "N", default_value_t = linkem_core::pipe::DEFAULT_MAX_FLOWS)]
    pub max_flows: usize,
    /// With --rules: most memory charged for dynamic instances and scheduler
    /// classes (fq_* flows, masked queues), each charged a fixed size when
    /// made (see docs/guide/rules.md, "Limits"); a packet needing more is dropped and
    /// counted as flow-limit. Default 512MiB.
    #[arg(long, value_name = "SIZE", default_value = "512MiB",
          value_parser = parse_flow_memory)]
    pub max_flow_memory: usize,
    /// Write one line per decision of the model, in the format of `linkem
    /// replay --events` (index, arrival, length, fate, release, queue, rule,
    /// pipe, flow, side...), from a thread of its own: decisions it cannot
    /// keep up with are skipped and counted, never waited for.
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,
    /// Record what the model is fed (every frame with its stamp and side, every
    /// change at its instant, the seed and start configuration) into the new or
    /// empty directory DIR, for `linkem replay DIR OUT`, which makes the same
    /// decisions. Written from a thread of its own: frames it cannot keep up
    /// with are skipped and counted, and the recording says it is incomplete.
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,
    /// With --record: the most DIR/frames.pcapng and the copies of the files
    /// the run read (DIR/files/) may hold together (e.g. 100MB, 4GiB);
    /// when reached, recording stops, linkem says so and goes on forwarding.
    #[arg(long, value_name = "SIZE", default_value = "1GiB", requires = "record",
          value_parser = parse_record_limit)]
    pub record_limit: u64,
    /// `--log-a-to-b` and `--log-b-to-a`.
    #[command(flatten)]
    pub logs: LinkLogArgs,
}

/// The link logs a live run writes in mahimahi's format: flattened into
/// [`RunArgs`] and `linkem shell`'s arguments (which word the help of each
/// direction as what its command sends and receives).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LinkLogArgs {
    /// Write a link log of side a -> b (IF_A -> IF_B; in host mode what the host
    /// receives) in mahimahi's format (as `mm-link
    /// --uplink-log`: `T + BYTES` arrivals, `T - BYTES DELAY` departures, ms),
    /// for `linkem plot`, `mm-throughput-graph` and `mm-delay-graph`.
    #[arg(long = "log-a-to-b", visible_alias = "uplink-log", value_name = "FILE")]
    pub log_a_to_b: Option<PathBuf>,
    /// The same for side b -> a (as `mm-link --downlink-log`).
    #[arg(
        long = "log-b-to-a",
        visible_alias = "downlink-log",
        value_name = "FILE"
    )]
    pub log_b_to_a: Option<PathBuf>,
}

impl LinkLogArgs {
    /// Whether either log is written.
    pub fn any(&self) -> bool {
        self.log_a_to_b.is_some() || self.log_b_to_a.is_some()
    }
}

/// `--spin-budget`: a percentage with its sign, as parts per million of a core.
pub(crate) fn parse_spin_budget(text: &str) -> Result<u32, String> {
    let share = linkem_core::units::parse_percent(text).map_err(|e| e.to_string())?;
    Ok((share * 1_000_000.0).round() as u32)
}

/// The options the emulating paths (links or rules) share.
pub(crate) struct Timing {
    pub spin_ns: u64,
    /// `--spin-budget`, ppm of a core.
    pub spin_budget_ppm: u32,
    /// `--spin-threshold` given: spin to it even while every core is taken.
    pub spin_always: bool,
    pub linger_ns: u64,
    pub max_lag_ns: Option<u64>,
    pub buffer: Option<usize>,
    /// `None`: coalescing off.
    pub coalesce_window_ns: Option<u64>,
}

pub(crate) fn timing(args: &BridgeArgs) -> Result<Timing> {
    let spin_ns = match &args.run.spin_threshold {
        Some(t) => parse_time_ns(t).map_err(|e| anyhow::anyhow!("--spin-threshold {e}"))?,
        None => DEFAULT_SPIN_NS,
    };
    let linger_ns = match args.run.linger.as_deref() {
        Some(t) => parse_time_ns(t).map_err(|e| anyhow::anyhow!("--linger {e}"))?,
        None => DEFAULT_LINGER_NS,
    };
    let max_lag_ns = match args.run.max_lag.as_deref() {
        Some("off") => None,
        Some(t) => Some(parse_time_ns(t).map_err(|e| anyhow::anyhow!("--max-lag {e}"))?),
        None => Some(DEFAULT_MAX_LAG_NS),
    };
    let buffer = match &args.run.buffer {
        Some(s) => Some(parse_size_bytes(s).map_err(|e| anyhow::anyhow!("--buffer {e}"))? as usize),
        None => None,
    };
    let coalesce_window_ns = match (args.coalesce, &args.coalesce_window) {
        (OnOff::Off, _) => None,
        (OnOff::On, Some(t)) => {
            Some(parse_time_ns(t).map_err(|e| anyhow::anyhow!("--coalesce-window {e}"))?)
        }
        (OnOff::On, None) => Some(linkem_runtime::pipeline::DEFAULT_COALESCE_WINDOW_NS),
    };
    Ok(Timing {
        spin_ns,
        spin_budget_ppm: args.run.spin_budget.unwrap_or(DEFAULT_SPIN_BUDGET_PPM),
        spin_always: args.run.spin_threshold.is_some(),
        linger_ns,
        max_lag_ns,
        buffer,
        coalesce_window_ns,
    })
}
