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
use linkem_io::capture::{CaptureReader, CaptureWriter};
use serde_json::json;
use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

pub struct ReplayArgs {
    pub input: PathBuf,
    pub output: PathBuf,
    pub words: Vec<String>,
    pub config: Option<PathBuf>,
    pub stats: StatsFormat,
    pub events: Option<PathBuf>,
    pub quiet: bool,
    /// `--rules FILE` and its options (see [`crate::replay_rules`]).
    pub rules: crate::replay_rules::RulesArgs,
}

/// A delivered copy waiting for its turn in the output.
struct Pending {
    release_ns: u64,
    orig_len: u32,
    data: Vec<u8>,
}

/// Reads a distribution file named in the link words: a path, or a netem table
/// name installed by iproute2 (`/usr/lib/tc/NAME.dist`).
pub fn load_distribution(name: &str) -> Result<String, String> {
    let direct = std::fs::read_to_string(name);
    if let Ok(text) = direct {
        return Ok(text);
    }
    if !name.contains('/') {
        for dir in ["/usr/lib/tc", "/usr/lib64/tc", "/usr/local/lib/tc"] {
            if let Ok(text) = std::fs::read_to_string(format!("{dir}/{name}.dist")) {
                return Ok(text);
            }
        }
    }
    Err(format!(
        "cannot read distribution file '{name}': {}",
        direct.err().map(|e| e.to_string()).unwrap_or_default()
    ))
}

/// Link words from an optional TOML file (`both`, then `a-to-b`) and then the
/// command line's, each a layer that overrides the one before, parsed into a spec.
pub fn link_spec(config: Option<&Path>, words: &[String]) -> Result<LinkSpec> {
    let mut layers: Vec<Vec<String>> = Vec::new();
    if let Some(path) = config {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let toml =
            TomlWords::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
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
    LinkSpec::parse_layers(&layers, Dialect::Linkem, &mut load_distribution)
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

pub fn run(args: &ReplayArgs) -> Result<()> {
    if crate::replay_rules::wanted(args, &args.rules)? {
        return crate::replay_rules::run(args, &args.rules);
    }
    let spec = link_spec(args.config.as_deref(), &args.words)?;
    let seed = spec.seed.unwrap_or_else(fresh_seed);
    if spec.seed.is_none() {
        eprintln!("linkem: seed {seed} (add 'seed {seed}' to repeat this run exactly)");
    }
    let link_text = spec.link.to_string();
    let mut link = Link::new(spec.link, seed, 0);

    let mut reader = CaptureReader::open(&args.input).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut writer = CaptureWriter::create(&args.output, reader.link_type(), reader.snaplen())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut events = match &args.events {
        Some(path) => {
            let file =
                File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
            let mut w = BufWriter::with_capacity(1 << 20, file);
            writeln!(
                w,
                "# index\tarrival_ns\tlen_bytes\tfate\trelease_ns\tqueue_packets\tqueue_bytes\tcopies\tcorrupt_bit"
            )?;
            Some(w)
        }
        None => None,
    };

    let size = std::fs::metadata(&args.input).map(|m| m.len()).unwrap_or(0);
    let progress = (!args.quiet && std::io::stderr().is_terminal() && size > 32 << 20).then(|| {
        let pb = indicatif::ProgressBar::new_spinner();
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {human_pos} packets {per_sec} {elapsed}",
            )
            .expect("the template is a constant"),
        );
        pb
    });

    let started = Instant::now();
    let mut heap: ReleaseQueue<Pending> = ReleaseQueue::new();
    let mut index: u64 = 0;
    let mut summary = Summary {
        sojourn_min_ns: u64::MAX,
        ..Default::default()
    };
    let mut horizon_ns: u64 = 0;

    while let Some(packet) = reader.next_packet() {
        let packet = packet.map_err(|e| anyhow::anyhow!("{e}"))?;
        horizon_ns = horizon_ns.max(packet.ts_ns);
        summary.first_arrival_ns.get_or_insert(packet.ts_ns);
        let v = link.on_arrival(
            packet.ts_ns,
            PacketMeta {
                len_bytes: packet.orig_len,
            },
        );
        if let Some(ev) = events.as_mut() {
            let release = if v.fate == Fate::Delivered {
                v.release_ns.to_string()
            } else {
                "-".into()
            };
            let copies = if v.fate == Fate::Delivered {
                1 + v.duplicate as u32
            } else {
                0
            };
            let bit = v
                .corrupt_bit
                .map(|b| b.to_string())
                .unwrap_or_else(|| "-".into());
            writeln!(
                ev,
                "{index}\t{}\t{}\t{}\t{release}\t{}\t{}\t{copies}\t{bit}",
                packet.ts_ns, packet.orig_len, v.fate, v.queue_packets, v.queue_bytes
            )?;
        }
        index += 1;
        if v.fate == Fate::Delivered {
            let sojourn = v.release_ns - horizon_ns.min(v.release_ns);
            summary.sojourn_min_ns = summary.sojourn_min_ns.min(sojourn);
            summary.sojourn_max_ns = summary.sojourn_max_ns.max(sojourn);
            summary.sojourn_sum_ns += sojourn as u128;
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
                heap.push(v.release_ns, pending);
            }
        }
        while let Some((_, p)) = heap.pop_due(horizon_ns) {
            write_pending(&mut writer, &p, &mut summary)?;
        }
        if let Some(pb) = &progress {
            if index % 65_536 == 0 {
                pb.set_position(index);
            }
        }
    }
    while let Some((_, p)) = heap.pop() {
        write_pending(&mut writer, &p, &mut summary)?;
    }
    if let Some(pb) = progress {
        pb.finish_and_clear();
    }
    if let Some(mut ev) = events {
        ev.flush().context("cannot write the events file")?;
    }
    writer.finish().map_err(|e| anyhow::anyhow!("{e}"))?;
    let elapsed = started.elapsed();

    let counts = *link.counts();
    if counts.arrived() != index {
        bail!(
            "internal error: {} packets read but {} decided",
            index,
            counts.arrived()
        );
    }
    print_stats(
        args,
        &link_text,
        seed,
        &counts,
        &summary,
        elapsed.as_secs_f64(),
    );
    Ok(())
}

fn write_pending(writer: &mut CaptureWriter, p: &Pending, summary: &mut Summary) -> Result<()> {
    writer
        .write(p.release_ns, p.orig_len, &p.data)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    summary.written += 1;
    summary.last_release_ns = p.release_ns;
    Ok(())
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
