//! `linkem replay`: a capture goes in, the capture as the emulated link would
//! deliver it comes out.
//!
//! Packets stream through the model in arrival order; delivered ones wait in a
//! `ReleaseQueue` (release time, then arrival order) and are written once no later
//! arrival can be released before them (every release is at or after its
//! arrival), so memory holds only the packets in flight, not the whole file.

use crate::args::{base_inputs, outputs, ReplayArgs};
use crate::files::link_spec_reading;
use crate::process::{fresh_seed, SignalGuard};
use crate::render::replay_stats::{print_stats, Summary};
use anyhow::{bail, Context, Result};
use linkem_core::order::ReleaseQueue;
use linkem_core::{Fate, Link, PacketMeta};
use linkem_io::capture::{CaptureReader, CaptureWriter, CapturedPacket};
use linkem_io::outfile::{self, FileUse, OutputFile};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Instant;

/// A delivered copy waiting for its turn in the output.
struct Pending {
    release_ns: u64,
    orig_len: u32,
    data: Vec<u8>,
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
