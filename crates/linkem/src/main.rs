//! The `linkem` command: offline replay of captures through an emulated link,
//! and live emulation between two interfaces.
//!
//! The model lives in `linkem-core` (pure, deterministic); capture files in
//! `linkem-io`. This binary wires them to the command line.

use anyhow::Result;
use clap::{Parser, Subcommand};
use linkem::backend::BackendKind;
use linkem::{bridge, replay, synth, StatsFormat};
use std::path::PathBuf;

const LINK_WORDS_HELP: &str = "\
LINK WORDS (order does not matter; netem and Dummynet spellings are accepted):
  rate R | bw R                  link rate: 10mbit, 1gbit, 3Mbit/s, 2MByte/s (never bps/mbps:
                                 tc reads bytes, ipfw bits)
  overhead N | overhead ethernet bytes added per frame on the wire (ethernet = 24)
  queue N | limit N              queue limit in packets (default 1000)
  queue SIZE | queue unlimited   queue limit in frame bytes: 64KiB, 100kB, 1500B
  delay D [J [C%]]               delay, jitter, correlation: delay 10ms 1ms 25%
  distribution NAME|FILE         uniform (default), normal, pareto, paretonormal, exponential,
                                 a netem .dist table, or a 'prob delay' CDF profile
  reorder allow                  let jitter reorder (default: releases never go backwards)
  reorder P% [C%] [gap N]        netem: one packet in N, with probability P, skips the delay
  loss P% [C%] | plr X           random loss (plr: probability 0..1)
  loss ber X                     bit error rate over the wire bits
  loss gemodel p [r [1-h [1-k]]] Gilbert-Elliott (netem's meanings and defaults)
  loss state p13 [p31 [p32 [p23 [p14]]]]  4-state Markov (netem's)
  loss-at arrival|link           drop before the queue (default) or after using the link
  duplicate P% [C%]              send a second copy
  corrupt P% [C%]                flip one random bit
  policer R burst SIZE           token bucket: drop what exceeds R with bucket SIZE
  seed N                         seed of every random draw (printed when not given)
Times need a unit (ns, us, ms, s); percentages need their % sign.";

#[derive(Parser)]
#[command(name = "linkem", version, about = "A precise, fast network link emulator", after_help = LINK_WORDS_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a capture through an emulated link: OUT holds what the link delivers.
    ///
    /// IN is a pcap (µs or ns) or pcapng file; OUT is written as a nanosecond pcap
    /// with the delivered packets (duplicates included) stamped with their release
    /// times, in release order. Link words follow the file names.
    #[command(after_help = LINK_WORDS_HELP)]
    Replay {
        /// Input capture (pcap or pcapng).
        input: PathBuf,
        /// Output capture (nanosecond pcap); written only if the whole replay succeeds.
        output: PathBuf,
        /// Link words, e.g. `rate 10mbit delay 20ms loss 1%`.
        words: Vec<String>,
        /// Read link words from a TOML file (keys are words); words on the command line override it.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Print the counts per fate as text (default) or JSON.
        #[arg(long, value_enum, default_value = "text")]
        stats: StatsFormat,
        /// Write one line per input packet: index, arrival, length, fate, release, queue occupancy.
        #[arg(long, value_name = "FILE")]
        events: Option<PathBuf>,
        /// Never show a progress bar.
        #[arg(long)]
        quiet: bool,
        /// Send packets through ipfw/dnctl rules and Dummynet pipes read from FILE
        /// (lines as typed after `ipfw` or `dnctl`: `pipe 1 config bw 1Mbit/s delay 20`,
        /// `add 100 pipe 1 dst-ip 10.0.0.0/8`, `set one-pass off`). `pipe N config` sets
        /// the whole pipe, as Dummynet does. Schedulers and AQM: `sched N config type
        /// wf2q+|rr|prio|fifo|fq_codel|fq_pie`, `queue M config sched N weight W [codel|pie|red
        /// ...] [ecn] [mask ...]`, `add ... queue M`; `sched N` serves pipe N's link, which
        /// traffic sent to `pipe N` shares (unlike Dummynet; see README). Only `seed N`
        /// may follow the file names.
        #[arg(long, value_name = "FILE")]
        rules: Option<PathBuf>,
        /// With --rules: most dynamic pipe instances (masks) alive at once; a packet
        /// needing one more is dropped and counted as flow-limit.
        #[arg(long, value_name = "N", default_value_t = linkem_core::pipe::DEFAULT_MAX_FLOWS)]
        max_flows: usize,
        /// With --rules: the interface the capture's packets are taken as received on
        /// (a: `in`, `recv a`, `a-to-b`; b: `out`, `recv b`, `b-to-a`).
        #[arg(long, value_enum, default_value = "a")]
        rules_side: RulesSide,
    },
    /// Emulate the link live between two interfaces, in both directions, until
    /// SIGINT or SIGTERM; then print the counts per direction and fate.
    ///
    /// linkem is a transparent layer-2 bridge: every frame goes through the link
    /// model unchanged. Link words apply to both directions unless given per
    /// direction with --a-to-b / --b-to-a (which add to and override them).
    #[command(after_help = LINK_WORDS_HELP)]
    Bridge {
        /// First interface (traffic received here goes a->b).
        if_a: String,
        /// Second interface (traffic received here goes b->a).
        if_b: String,
        /// Link words for both directions, e.g. `delay 10ms rate 50mbit`.
        words: Vec<String>,
        /// Link words for IF_A -> IF_B only.
        #[arg(long = "a-to-b", num_args = 1.., value_name = "WORDS")]
        a_to_b: Vec<String>,
        /// Link words for IF_B -> IF_A only.
        #[arg(long = "b-to-a", num_args = 1.., value_name = "WORDS")]
        b_to_a: Vec<String>,
        /// TOML file of link words (tables [a-to-b] and [b-to-a] for one direction).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Packet I/O: AF_XDP, AF_PACKET with mmap rings, or AF_XDP falling back to AF_PACKET.
        #[arg(long, value_enum, default_value = "auto")]
        backend: BackendKind,
        /// Print counts as text (default) or JSON lines.
        #[arg(long, value_enum, default_value = "text")]
        stats: StatsFormat,
        /// Also print the counts every SECONDS.
        #[arg(long, value_name = "SECONDS")]
        stats_interval: Option<f64>,
        /// The most the output stage spins before a release time (default 200us). It sleeps
        /// until then and spins only as long as its timed sleeps were recently seen to
        /// overshoot (learnt while running). Lower it to save CPU at the cost of precision.
        #[arg(long, value_name = "TIME")]
        spin_threshold: Option<String>,
        /// Drop (as 'late') a packet that cannot leave within TIME of its release time.
        #[arg(long, value_name = "TIME")]
        max_lag: Option<String>,
        /// Delay-line size per direction (default: from rate × delay), e.g. 2GiB.
        #[arg(long, value_name = "SIZE")]
        buffer: Option<String>,
        /// Frames received per batch.
        #[arg(long, default_value_t = 32)]
        batch: usize,
        /// Which stages run under SCHED_FIFO: 'out' (default) lets the output stages
        /// wake at release times even when traffic generators load the same cores.
        #[arg(long, value_enum, default_value = "out")]
        realtime: bridge::Realtime,
        /// Stop after SECONDS (default: run until SIGINT or SIGTERM).
        #[arg(long, value_name = "SECONDS")]
        duration: Option<f64>,
        /// Bypass the model: forward every frame at once, one thread per direction,
        /// on the same sockets. The baseline benchmarks compare the emulator with;
        /// takes no link words.
        #[arg(long)]
        forward_only: bool,
    },
    /// Measure a path: precisely paced UDP from a sender to a receiver (each in a
    /// network namespace if given), with one-way delay and its deviation, loss,
    /// duplicates, reordering, and the gaps between packets before and after.
    ///
    /// Times are CLOCK_TAI in ns; the receiver uses kernel receive timestamps.
    Probe(linkem::probe::ProbeArgs),
    /// Measure linkem's fidelity on this machine: builds its own namespaces, runs
    /// linkem (and the Linux bridge as the no-emulation baseline) with `linkem
    /// probe` through it, prints markdown tables.
    ///
    /// Scenarios: `delay` (accuracy of delay 10ms at low and high rates, 64 and
    /// 1500 bytes, bursts of 64, and gap preservation) and `lossfree` (highest
    /// loss-free rate for delay, loss 1 %, rate at 90 % and all three). Default: both.
    Bench(linkem::bench::BenchArgs),
    /// Write a synthetic capture of UDP frames (for demos, tests and benchmarks).
    Synth {
        /// Output capture (nanosecond pcap).
        output: PathBuf,
        /// Number of packets.
        #[arg(long, default_value_t = 1000)]
        packets: u64,
        /// Frame size in bytes (60..=9000).
        #[arg(long, default_value_t = 1000)]
        size: u32,
        /// Offered rate, e.g. 20mbit (times follow from size and rate).
        #[arg(long, default_value = "10mbit")]
        rate: String,
        /// Space packets as a Poisson process (seeded) instead of evenly.
        #[arg(long)]
        poisson: bool,
        /// Send bursts of N back-to-back frames at the same average rate.
        #[arg(long, default_value_t = 1)]
        burst: u32,
        /// Seed for --poisson.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Source IPv4:PORT (default 10.0.0.1:5000).
        #[arg(long, value_name = "IP:PORT")]
        src: Option<String>,
        /// Destination IPv4:PORT (default 10.0.0.2:5001).
        #[arg(long, value_name = "IP:PORT")]
        dst: Option<String>,
        /// Spread the frames over N flows (source ports PORT, PORT+1, ...).
        #[arg(long, default_value_t = 1)]
        flows: u32,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum RulesSide {
    A,
    B,
}

fn main() {
    let cli = Cli::parse();
    let result: Result<()> = match cli.command {
        Command::Replay {
            input,
            output,
            words,
            config,
            stats,
            events,
            quiet,
            rules,
            max_flows,
            rules_side,
        } => replay::run(&replay::ReplayArgs {
            input,
            output,
            words,
            config,
            stats,
            events,
            quiet,
            rules: linkem::replay_rules::RulesArgs {
                file: rules,
                max_flows,
                side: match rules_side {
                    RulesSide::A => linkem_core::rules::Side::A,
                    RulesSide::B => linkem_core::rules::Side::B,
                },
            },
        }),
        Command::Bridge {
            if_a,
            if_b,
            words,
            a_to_b,
            b_to_a,
            config,
            backend,
            stats,
            stats_interval,
            spin_threshold,
            max_lag,
            buffer,
            batch,
            realtime,
            duration,
            forward_only,
        } => bridge::run(&bridge::BridgeArgs {
            if_a,
            if_b,
            words,
            a_to_b,
            b_to_a,
            config,
            backend,
            stats,
            stats_interval,
            spin_threshold,
            max_lag,
            buffer,
            batch,
            realtime,
            duration,
            forward_only,
        }),
        Command::Probe(args) => linkem::probe::run_cli(&args),
        Command::Bench(args) => linkem::bench::run(&args),
        Command::Synth {
            output,
            packets,
            size,
            rate,
            poisson,
            burst,
            seed,
            src,
            dst,
            flows,
        } => synth::run(&synth::SynthArgs {
            output,
            packets,
            size,
            rate,
            poisson,
            burst,
            seed,
            src,
            dst,
            flows,
        }),
    };
    if let Err(e) = result {
        eprintln!("linkem: {e:#}");
        std::process::exit(1);
    }
}
