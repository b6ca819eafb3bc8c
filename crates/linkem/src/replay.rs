//! `linkem replay`: a capture goes in, the capture as the emulated link would
//! deliver it comes out.
//!
//! Packets stream through the model in arrival order; delivered ones wait in a
//! `ReleaseQueue` (release time, then arrival order) and are written once no later
//! arrival can be released before them (every release is at or after its
//! arrival), so memory holds only the packets in flight, not the whole file.

use crate::StatsFormat;
use anyhow::{bail, Context, Result};
use linkem_core::order::ReleaseQueue;
use linkem_core::{Dialect, Fate, FateCounts, Link, LinkSpec, PacketMeta, TomlWords};
use linkem_io::capture::{CaptureReader, CaptureWriter, CapturedPacket};
use linkem_io::infile;
use linkem_io::outfile::{self, FileUse, OutputFile};
use serde_json::json;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// `linkem replay`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct ReplayArgs {
    /// Input capture (pcap or pcapng).
    pub input: PathBuf,
    /// Output capture (nanosecond pcap). A file is replaced only if the whole replay
    /// succeeds (keeping its mode); a device or FIFO (/dev/null) is written directly.
    pub output: PathBuf,
    /// Link words, e.g. `rate 10mbit delay 20ms loss 1%`.
    pub words: Vec<String>,
    /// Read link words from a TOML file (keys are words); words on the command line override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the counts per fate as text (default) or JSON.
    #[arg(long, value_enum, default_value = "text")]
    pub stats: StatsFormat,
    /// Write one line per input packet: index, arrival, length, fate, release, queue occupancy.
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,
    /// Never show a progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// `--rules FILE` and its options (see [`crate::replay_rules`]).
    #[command(flatten)]
    pub rules: crate::replay_rules::RulesArgs,
}

/// A delivered copy waiting for its turn in the output.
struct Pending {
    release_ns: u64,
    orig_len: u32,
    data: Vec<u8>,
}

/// Reads a file named in the link words or rules (a distribution, a profile):
/// a path, or a netem table name installed by iproute2
/// (`/usr/lib/tc/NAME.dist`). Read as every small input is
/// (`linkem_io::infile`): a regular file of at most 16 MiB. The error names
/// what was looked for; the word that named the file adds which kind it is.
pub fn load_distribution(name: &str) -> Result<String, String> {
    read_distribution(name, &mut Vec::new())
}

/// [`load_distribution`], adding the path it read to `read` (a replay must not
/// write its output over a table it read).
pub fn read_distribution(name: &str, read: &mut Vec<PathBuf>) -> Result<String, String> {
    let text = |p: &Path| infile::read_text(p, infile::MAX_TEXT_BYTES);
    match text(Path::new(name)) {
        Ok(t) => {
            read.push(PathBuf::from(name));
            return Ok(t);
        }
        Err(e) if !e.is_not_found() || name.contains('/') => return Err(e.to_string()),
        Err(_) => {}
    }
    for dir in ["/usr/lib/tc", "/usr/lib64/tc", "/usr/local/lib/tc"] {
        let p = Path::new(dir).join(format!("{name}.dist"));
        match text(&p) {
            Ok(t) => {
                read.push(p);
                return Ok(t);
            }
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(format!(
        "'{name}': no such file, nor /usr/lib/tc/{name}.dist (iproute2's tables)"
    ))
}

/// The link words of a TOML config file (`--config`), read as every small input is.
/// Errors name the file and the line and column, never the file's content.
pub fn config_words(path: &Path) -> Result<TomlWords> {
    let text = infile::read_text(path, infile::MAX_TEXT_BYTES)
        .map_err(|e| anyhow::anyhow!("--config {e}"))?;
    TomlWords::parse(&text).map_err(|e| anyhow::anyhow!("--config {}: {e}", path.display()))
}

/// Link words from an optional TOML file (`both`, then `a-to-b`) and then the
/// command line's, each a layer that overrides the one before, parsed into a spec.
pub fn link_spec(config: Option<&Path>, words: &[String]) -> Result<LinkSpec> {
    link_spec_reading(config, words, &mut Vec::new())
}

/// [`link_spec`], adding the distribution tables the words read to `read`.
pub fn link_spec_reading(
    config: Option<&Path>,
    words: &[String],
    read: &mut Vec<PathBuf>,
) -> Result<LinkSpec> {
    let mut layers: Vec<Vec<String>> = Vec::new();
    if let Some(path) = config {
        let toml = config_words(path)?;
        layers.push(toml.both);
        layers.push(toml.a_to_b);
    }
    layers.push(
        words
            .iter()
            .flat_map(|w| w.split_whitespace().map(str::to_string))
            .collect(),
    );
    let layers: Vec<&[String]> = layers.iter().map(Vec::as_slice).collect();
    LinkSpec::parse_layers(&layers, Dialect::Linkem, &mut |name: &str| {
        read_distribution(name, read)
    })
    .map_err(|e| anyhow::anyhow!("link words: {e}"))
}

/// A seed for runs that did not give one: different per run, printed so the run
/// can be repeated.
pub fn fresh_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    // Keep seeds short enough to type.
    (t ^ (std::process::id() as u64).rotate_left(32)) % 1_000_000_000
}

#[derive(Default)]
struct Summary {
    written: u64,
    first_arrival_ns: Option<u64>,
    last_release_ns: u64,
    sojourn_min_ns: u64,
    sojourn_max_ns: u64,
    sojourn_sum_ns: u128,
}

/// SIGINT and SIGTERM during a replay: the first sets a flag the packet loop checks, so
/// the run ends through the ordinary error path, which deletes the temporary output
/// (`linkem_io::outfile`); a second one terminates at once (for a replay stuck reading
/// a pipe). The handlers are installed once per process and stay: signal-hook cannot
/// give back the default action once removed, and a removed SIGINT handler would leave
/// in-process callers (benches) unable to be interrupted at all.
pub(crate) struct SignalGuard {
    flags: &'static [(i32, Arc<AtomicBool>); 2],
}

type SignalFlags = [(i32, Arc<AtomicBool>); 2];

static SIGNALS: std::sync::OnceLock<Result<SignalFlags, String>> = std::sync::OnceLock::new();

impl SignalGuard {
    pub(crate) fn install() -> Result<SignalGuard> {
        let installed = SIGNALS.get_or_init(|| {
            use signal_hook::consts::{SIGINT, SIGTERM};
            let flags = [
                (SIGINT, Arc::new(AtomicBool::new(false))),
                (SIGTERM, Arc::new(AtomicBool::new(false))),
            ];
            for (sig, flag) in &flags {
                // Order matters: the conditional default must see the flag before it is set.
                signal_hook::flag::register_conditional_default(*sig, flag.clone())
                    .and_then(|_| signal_hook::flag::register(*sig, flag.clone()))
                    .map_err(|e| e.to_string())?;
            }
            Ok(flags)
        });
        match installed {
            Ok(flags) => Ok(SignalGuard { flags }),
            Err(e) => bail!("cannot install the signal handler: {e}"),
        }
    }

    pub(crate) fn check(&self) -> Result<()> {
        for (sig, flag) in self.flags {
            if flag.load(Ordering::Relaxed) {
                return Err(crate::Interrupted { signal: *sig }.into());
            }
        }
        Ok(())
    }
}

/// The replay's state between packets: delivered copies wait in `heap` until no later
/// arrival can be released before them.
struct Replayer {
    link: Link,
    heap: ReleaseQueue<Pending>,
    index: u64,
    horizon_ns: u64,
    summary: Summary,
}

pub fn run(args: &ReplayArgs) -> Result<()> {
    if crate::replay_rules::wanted(args, &args.rules)? {
        return crate::replay_rules::run(args, &args.rules);
    }
    let mut tables = Vec::new();
    let spec = link_spec_reading(args.config.as_deref(), &args.words, &mut tables)?;
    let seed = spec.seed.unwrap_or_else(fresh_seed);
    if spec.seed.is_none() {
        eprintln!("linkem: seed {seed} (add 'seed {seed}' to repeat this run exactly)");
    }
    let link_text = spec.link.to_string();

    // Before anything is opened for writing: an output must not be an input.
    let mut inputs = base_inputs(args);
    inputs.extend(
        tables
            .into_iter()
            .map(|p| FileUse::new("distribution table named in the link words", p)),
    );
    outfile::check_distinct(&inputs, &outputs(args))?;

    let signals = SignalGuard::install()?;
    let mut reader = CaptureReader::open(&args.input).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut writer = CaptureWriter::create(&args.output, reader.link_type(), reader.snaplen())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut events = args.events.as_deref().map(open_events).transpose()?;

    let started = Instant::now();
    let mut r = Replayer {
        link: Link::new(spec.link, seed, 0),
        heap: ReleaseQueue::new(),
        index: 0,
        horizon_ns: 0,
        summary: Summary {
            sojourn_min_ns: u64::MAX,
            ..Default::default()
        },
    };
    let progress = progress_bar(args);
    let mut backwards = crate::arrival_order::Backwards::default();
    while let Some(packet) = reader.next_packet() {
        signals.check()?;
        let packet = packet.map_err(|e| anyhow::anyhow!("{e}"))?;
        backwards.on_packet(packet.ts_ns);
        r.on_packet(packet, events.as_mut())?;
        r.write_due(&mut writer, Some(r.horizon_ns), &signals)?;
        if let Some(pb) = &progress {
            if r.index.is_multiple_of(65_536) {
                pb.set_position(r.index);
            }
        }
    }
    r.write_due(&mut writer, None, &signals)?;
    if let Some(pb) = progress {
        pb.finish_and_clear();
    }
    if let Some(w) = backwards.warning(&args.input.display().to_string()) {
        eprintln!("{w}");
    }
    signals.check()?;
    if let Some(ev) = events {
        ev.commit()?;
    }
    writer.finish().map_err(|e| anyhow::anyhow!("{e}"))?;
    let elapsed = started.elapsed();

    let counts = *r.link.counts();
    if counts.arrived() != r.index {
        bail!(
            "internal error: {} packets read but {} decided",
            r.index,
            counts.arrived()
        );
    }
    print_stats(
        args,
        &link_text,
        seed,
        &counts,
        &r.summary,
        elapsed.as_secs_f64(),
    );
    Ok(())
}

/// What every replay reads whatever drives it: the capture and `--config`.
pub(crate) fn base_inputs(args: &ReplayArgs) -> Vec<FileUse> {
    let mut inputs = vec![FileUse::new("input capture", &args.input)];
    inputs.extend(args.config.iter().map(|p| FileUse::new("--config", p)));
    inputs
}

/// What a replay writes: the output capture and `--events`.
pub(crate) fn outputs(args: &ReplayArgs) -> Vec<FileUse> {
    let mut outputs = vec![FileUse::new("output capture", &args.output)];
    outputs.extend(args.events.iter().map(|p| FileUse::new("--events", p)));
    outputs
}

/// The `--events` file, with its header line.
fn open_events(path: &Path) -> Result<OutputFile> {
    let mut w = OutputFile::create(path, 1 << 20)?;
    writeln!(
        w,
        "# index\tarrival_ns\tlen_bytes\tfate\trelease_ns\tqueue_packets\tqueue_bytes\tcopies\tcorrupt_bit"
    )
    .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(w)
}

/// A spinner for long replays on a terminal.
fn progress_bar(args: &ReplayArgs) -> Option<indicatif::ProgressBar> {
    let size = std::fs::metadata(&args.input).map(|m| m.len()).unwrap_or(0);
    (!args.quiet && std::io::stderr().is_terminal() && size > 32 << 20).then(|| {
        let pb = indicatif::ProgressBar::new_spinner();
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {human_pos} packets {per_sec} {elapsed}",
            )
            .expect("the template is a constant"),
        );
        pb
    })
}

impl Replayer {
    /// Decides one packet's fate, logs it, and queues its delivered copies.
    fn on_packet(&mut self, packet: CapturedPacket, events: Option<&mut OutputFile>) -> Result<()> {
        self.horizon_ns = self.horizon_ns.max(packet.ts_ns);
        self.summary.first_arrival_ns.get_or_insert(packet.ts_ns);
        let v = self.link.on_arrival(
            packet.ts_ns,
            PacketMeta {
                len_bytes: packet.orig_len,
            },
        );
        if let Some(ev) = events {
            let delivered = v.fate == Fate::Delivered;
            let release = if delivered {
                v.release_ns.to_string()
            } else {
                "-".into()
            };
            let copies = if delivered { 1 + v.duplicate as u32 } else { 0 };
            let bit = v
                .corrupt_bit
                .map(|b| b.to_string())
                .unwrap_or_else(|| "-".into());
            writeln!(
                ev,
                "{}\t{}\t{}\t{}\t{release}\t{}\t{}\t{copies}\t{bit}",
                self.index, packet.ts_ns, packet.orig_len, v.fate, v.queue_packets, v.queue_bytes
            )
            .with_context(|| format!("cannot write {}", ev.name()))?;
        }
        self.index += 1;
        if v.fate != Fate::Delivered {
            return Ok(());
        }
        let s = &mut self.summary;
        let sojourn = v.release_ns - self.horizon_ns.min(v.release_ns);
        s.sojourn_min_ns = s.sojourn_min_ns.min(sojourn);
        s.sojourn_max_ns = s.sojourn_max_ns.max(sojourn);
        s.sojourn_sum_ns += sojourn as u128;
        let mut data = packet.data;
        // The copy leaves the link as it arrived: corruption hits the original only.
        let copy = v.duplicate.then(|| data.clone());
        if let Some(bit) = v.corrupt_bit {
            // Bits beyond the captured bytes were not captured; there is nothing to flip.
            if let Some(byte) = data.get_mut((bit / 8) as usize) {
                *byte ^= 0x80 >> (bit % 8);
            }
        }
        // The original first, then its copy: equal release times leave in push order.
        for data in std::iter::once(data).chain(copy) {
            let pending = Pending {
                release_ns: v.release_ns,
                orig_len: packet.orig_len,
                data,
            };
            self.heap.push(v.release_ns, pending);
        }
        Ok(())
    }

    /// Writes the queued copies released at or before `until_ns` (all with None).
    fn write_due(
        &mut self,
        writer: &mut CaptureWriter,
        until_ns: Option<u64>,
        signals: &SignalGuard,
    ) -> Result<()> {
        while let Some((_, p)) = match until_ns {
            Some(u) => self.heap.pop_due(u),
            None => self.heap.pop(),
        } {
            writer
                .write(p.release_ns, p.orig_len, &p.data)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            self.summary.written += 1;
            self.summary.last_release_ns = p.release_ns;
            if until_ns.is_none() && self.summary.written.is_multiple_of(4096) {
                signals.check()?;
            }
        }
        Ok(())
    }
}

fn print_stats(
    args: &ReplayArgs,
    link: &str,
    seed: u64,
    counts: &FateCounts,
    s: &Summary,
    secs: f64,
) {
    let replay_fates = [Fate::Delivered, Fate::QueueFull, Fate::Loss, Fate::Policed];
    let delivered = counts.get(Fate::Delivered);
    let mean_ns = if delivered > 0 {
        (s.sojourn_sum_ns / delivered as u128) as u64
    } else {
        0
    };
    let min_ns = if delivered > 0 { s.sojourn_min_ns } else { 0 };
    match args.stats {
        StatsFormat::None => {}
        StatsFormat::Json => {
            let fates: serde_json::Map<String, serde_json::Value> = replay_fates
                .iter()
                .map(|f| (f.name().to_string(), json!(counts.get(*f))))
                .collect();
            let out = json!({
                "input": args.input.display().to_string(),
                "output": args.output.display().to_string(),
                "link": link,
                "seed": seed,
                "arrived": counts.arrived(),
                "written": s.written,
                "fates": fates,
                "duplicated": counts.duplicated,
                "corrupted": counts.corrupted,
                "sojourn_ns": { "min": min_ns, "mean": mean_ns, "max": s.sojourn_max_ns },
                "first_arrival_ns": s.first_arrival_ns,
                "last_release_ns": s.last_release_ns,
                "elapsed_s": secs,
            });
            println!(
                "{}",
                serde_json::to_string_pretty(&out).expect("a JSON value always serialises")
            );
        }
        StatsFormat::Text => {
            println!(
                "linkem replay {} -> {}",
                args.input.display(),
                args.output.display()
            );
            println!("link      {link}");
            println!("seed      {seed}");
            println!("arrived   {:>10}", counts.arrived());
            for f in replay_fates {
                let n = counts.get(f);
                let pct = if counts.arrived() > 0 {
                    100.0 * n as f64 / counts.arrived() as f64
                } else {
                    0.0
                };
                println!("{:<10}{n:>10}  {pct:6.2} %", f.name());
            }
            println!("duplicated{:>10}", counts.duplicated);
            println!("corrupted {:>10}", counts.corrupted);
            println!(
                "written   {:>10}  packets in {}",
                s.written,
                args.output.display()
            );
            println!(
                "time in link (arrival to release): min {} mean {} max {}",
                fmt_ms(min_ns),
                fmt_ms(mean_ns),
                fmt_ms(s.sojourn_max_ns)
            );
        }
    }
}

fn fmt_ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}
