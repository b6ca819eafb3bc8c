//! The command line of `linkem`, as a library item so that tests parse
//! command lines (README's and the guide's among them) exactly as the binary does.

pub mod args;
pub mod bench;
pub mod lab;
pub mod shell;
pub mod tools;

use clap::{Parser, Subcommand};
use linkem_core::config::link_words_help;

#[derive(Parser)]
#[command(name = "linkem", version = crate::build_info::VERSION, about = "A precise, fast network link emulator", after_help = link_words_help())]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Replay a capture through an emulated link: OUT holds what the link delivers.
    ///
    /// IN is a pcap (µs or ns) or pcapng file; OUT is written as a nanosecond pcap
    /// with the delivered packets (duplicates included) stamped with their release
    /// times, in release order. Link words follow the file names.
    #[command(after_help = link_words_help())]
    Replay(args::ReplayArgs),
    /// Emulate the link live between two interfaces, in both directions, until
    /// SIGINT or SIGTERM; then print the counts per direction and fate.
    ///
    /// linkem is a transparent layer-2 bridge: every frame goes through the link
    /// model unchanged. Link words apply to both directions unless given per
    /// direction with --a-to-b / --b-to-a (which add to and override them).
    #[command(after_help = link_words_help())]
    Bridge(Box<args::BridgeArgs>),
    /// Run a command in a network namespace of its own whose only way out
    /// crosses an emulated link (as mahimahi's shells do), then remove it all.
    ///
    /// `linkem shell delay 20ms --b-to-a delay 5ms -- ./client`: a-to-b
    /// (--uplink) is what CMD sends, b-to-a (--downlink) what it receives.
    /// CMD reaches the caller's namespace directly and the rest through NAT
    /// (IPv4 and IPv6); its address is in LINKEM_SHELL_ADDR(6), the parent's
    /// in LINKEM_SHELL_PARENT(6) and MAHIMAHI_BASE (the outermost shell's, when
    /// shells nest, as mahimahi). linkem exits with CMD's status (127 when
    /// CMD is not found, 126 when it cannot be executed, as sh). As root it uses veths; as an ordinary user, a user namespace
    /// and pasta (passt) for the way out. Shells nest: each adds a hop.
    #[command(after_help = link_words_help())]
    Shell(Box<shell::ShellArgs>),
    /// Emulate this host's own traffic (netfilter queues; root, or CAP_NET_ADMIN and CAP_NET_RAW
    /// with iptables-nft): side a (`a-to-b`, ipfw `in`) is what it receives, side b what it sends.
    /// Fails open: if linkem dies, traffic flows unimpaired; if it stops answering, after
    /// --fail-open-after (1s).
    Host(Box<crate::host::HostArgs>),
    /// A whole network from one YAML file (Containerlab's topology keys,
    /// linkem's per-link impairments): `linkem lab up FILE` makes a network
    /// namespace per node, the bridges and veths, and runs one emulator for
    /// every link; `down`, `list`, `show`, `exec`, `netem set|show`.
    Lab(lab::LabArgs),
    /// Change or watch a running emulator through its control socket: its
    /// links (`link a-to-b delay 20ms loss 1%`), counters (`show`, `stats`,
    /// `watch 1s`, `zero`), batches (`-f FILE`: all or nothing), and the
    /// ipfw/dnctl words of a `linkem bridge --rules` (`pipe N config ...`,
    /// `pipe 1 show`, `add ...`, `delete N`, `list`; each object belongs to
    /// the uid that made it). `linkem ctl list-emulators` lists the running ones.
    Ctl(crate::control::client::CtlArgs),
    /// Measure a path: precisely paced UDP from a sender to a receiver (each in a
    /// network namespace if given), with one-way delay and its deviation, loss,
    /// duplicates, reordering, and the gaps between packets before and after.
    ///
    /// Times are CLOCK_TAI in ns; the receiver uses kernel receive timestamps.
    Probe(tools::ProbeArgs),
    /// Measure linkem's fidelity on this machine: builds its own namespaces, runs
    /// linkem (and the Linux bridge as the no-emulation baseline) with `linkem
    /// probe` through it, prints markdown tables.
    ///
    /// Scenarios: `delay` (accuracy of delay 10ms at low and high rates, 64 and
    /// 1500 bytes, bursts of 64, and gap preservation), `lossfree` (highest
    /// loss-free rate for delay, loss 1 %, rate at 90 % and all three) and `tail`
    /// (p99, p99.9 and worst delay beyond the Linux bridge for linkem's defaults,
    /// the defaults with --coalesce off, and each backend under each real-time
    /// policy). Default: all three.
    Bench(bench::BenchArgs),
    /// Draw throughput and per-packet delay over time from a link log in
    /// mahimahi's format (`--uplink-log`, or mahimahi's own), as
    /// mm-throughput-graph and mm-delay-graph do, as PNG and SVG.
    Plot(tools::PlotArgs),
    /// Write a synthetic capture of UDP frames (for demos, tests and benchmarks).
    Synth(tools::SynthArgs),
    /// Write the man pages or a shell's completions (for packagers).
    #[command(hide = true)]
    Generate(tools::GenerateArgs),
    /// `linkem host`'s watchdog (started by it): fails open when linkem stalls.
    #[command(hide = true, name = "host-watchdog")]
    HostWatchdog(crate::host::watchdog::WatchdogArgs),
}
