//! `linkem replay IN OUT --rules FILE`: the capture through a node of ipfw
//! rules and Dummynet pipes ([`linkem_core::node`]) instead of one link.
//!
//! Every packet is taken as received on interface `a` (`in`, `a-to-b`)
//! unless `--rules-side b`. The rule file may also come from the TOML config
//! as `rules = """..."""`; the only link word allowed beside rules is `seed`.
//! Output order is by (release time, decision order) over all pipes, kept in
//! one [`ReleaseQueue`] of the packets in flight (see the node's module doc for why).

use crate::args::{base_inputs, outputs, ReplayArgs, RulesArgs};
use crate::files::{config_has_rules, load_rules_reading, rules_source};
use crate::process::{fresh_seed, SignalGuard};
use crate::render::replay_stats::{report, Tally};
use anyhow::{bail, Context, Result};
use linkem_core::aqm::ecn::{mark_ce, mark_ce_at};
use linkem_core::node::{Decision, Node, NodeConfig, PacketIn};
use linkem_core::order::ReleaseQueue;
use linkem_core::rules::{FlowKey, L2Kind, Side};
use linkem_core::Fate;
use linkem_io::capture::{CaptureReader, CaptureWriter};
use linkem_io::outfile::{self, FileUse, OutputFile};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The rule text from `--rules FILE` or the config's `rules` key, and the seed
/// from the config's or the command line's `seed`.
fn rules_text(args: &ReplayArgs, rules: &RulesArgs) -> Result<Option<(String, Option<u64>)>> {
    rules_source(args.config.as_deref(), rules.file.as_deref(), &args.words)
}

/// Whether this replay runs rules (`--rules` or a config with `rules`).
pub fn wanted(args: &ReplayArgs, rules: &RulesArgs) -> Result<bool> {
    if rules.file.is_some() {
        return Ok(true);
    }
    Ok(args.config.as_deref().is_some_and(config_has_rules))
}

/// A packet the node has not decided yet: its capture time (ns), its length on
/// the wire and the bytes captured, kept to be written once it is delivered.
type Undecided = (u64, u32, Vec<u8>);

/// The state of one rules replay between two packets: the packets the node
/// holds undecided, the delivered ones waiting in release order, and the
/// output files.
struct RulesReplay {
    l2: L2Kind,
    /// Delivered packets (and copies) by (release time, decision order).
    heap: ReleaseQueue<(u32, Vec<u8>)>,
    /// Packets the node holds, by tag, until their decision.
    held: HashMap<u64, Undecided>,
    /// The packet being offered: most are decided at once, so it is moved
    /// into `held` only when the node keeps it.
    current: Option<Undecided>,
    /// The node's decisions not yet acted upon.
    out: Vec<Decision>,
    events: Option<OutputFile>,
    writer: CaptureWriter,
    tally: Tally,
}

/// Runs the replay through rules; called when [`wanted`] says rules were asked for.
pub fn run(args: &ReplayArgs, rargs: &RulesArgs) -> Result<()> {
    let (mut node, seed, named) = build_node(args, rargs)?;
    // Before anything is opened for writing: an output must not be an input.
    let mut inputs = base_inputs(args);
    inputs.extend(rargs.file.iter().map(|p| FileUse::new("--rules", p)));
    inputs.extend(
        named
            .into_iter()
            .map(|p| FileUse::new("file named in the rules", p)),
    );
    outfile::check_distinct(&inputs, &outputs(args))?;
    let signals = SignalGuard::install().context("cannot install the signal handler")?;

    let mut reader = CaptureReader::open(&args.input).map_err(|e| anyhow::anyhow!("{e}"))?;
    let l2 = L2Kind::from_dlt(reader.link_type().dlt())
        .with_context(|| format!("link type {} cannot be classified", reader.link_type()))?;
    let writer = CaptureWriter::create(&args.output, reader.link_type(), reader.snaplen())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let events = args.events.as_deref().map(open_events).transpose()?;
    let started = Instant::now();
    let mut replay = RulesReplay {
        l2,
        heap: ReleaseQueue::new(),
        held: HashMap::new(),
        current: None,
        out: Vec::new(),
        events,
        writer,
        tally: Tally::default(),
    };
    let mut horizon = 0u64;
    let mut backwards = crate::arrival_order::Backwards::default();
    while let Some(packet) = reader.next_packet() {
        signals.check()?;
        let packet = packet.map_err(|e| anyhow::anyhow!("{e}"))?;
        backwards.on_packet(packet.ts_ns);
        horizon = horizon.max(packet.ts_ns);
        replay.offer(&mut node, rargs.side.into(), packet)?;
        // Decisions still to come (at the node's next event or a later arrival)
        // release no earlier than this: what is due by then can be written.
        let limit = node.next_event_ns().map_or(horizon, |e| e.min(horizon));
        replay.write_due(limit)?;
    }
    if let Some(w) = backwards.warning(&args.input.display().to_string()) {
        eprintln!("{w}");
    }
    node.poll(u64::MAX, &mut replay.out);
    replay.settle(u64::MAX)?;
    replay.write_rest()?;
    if !replay.held.is_empty() {
        bail!(
            "internal error: {} packets left undecided",
            replay.held.len()
        );
    }
    signals.check()?;
    if let Some(ev) = replay.events {
        ev.commit()?;
    }
    replay.writer.finish().map_err(|e| anyhow::anyhow!("{e}"))?;
    let secs = started.elapsed().as_secs_f64();
    let tally = replay.tally;
    let decided: u64 = tally.fates.values().sum();
    if decided != tally.arrived {
        bail!(
            "internal error: {} packets read but {decided} decided",
            tally.arrived
        );
    }
    report(args, &node, seed, &tally, secs);
    Ok(())
}

/// The node of the rules (from `--rules` or the config), the seed it draws
/// from (the one given, or a fresh one, printed so the run can be repeated) and
/// the files the rules named.
fn build_node(args: &ReplayArgs, rargs: &RulesArgs) -> Result<(Node, u64, Vec<PathBuf>)> {
    let (text, seed) = rules_text(args, rargs)?.expect("called when rules are wanted");
    let base = rargs.file.as_deref().and_then(Path::parent);
    let text_file = rargs.file.as_deref().or(args.config.as_deref());
    let mut named = Vec::new();
    let set = load_rules_reading(
        &text,
        text_file,
        base,
        ["a", "b"],
        &mut HashMap::new(),
        &mut named,
    )?;
    let seed = seed.unwrap_or_else(|| {
        let s = fresh_seed();
        eprintln!("linkem: seed {s} (add 'seed {s}' to repeat this run exactly)");
        s
    });
    let node = Node::new(
        set,
        NodeConfig {
            seed,
            max_flows: rargs.max_flows,
            max_flow_bytes: rargs.max_flow_memory,
            ..Default::default()
        },
    );
    Ok((node, seed, named))
}

/// The `--events` file, with its header line.
fn open_events(path: &Path) -> Result<OutputFile> {
    let mut w = OutputFile::create(path, 1 << 20)?;
    writeln!(w, "# index\tarrival_ns\tlen_bytes\tfate\trelease_ns\trule\tpipe\tflow\thops\tcopies\tcorrupt_bits\tqueue\tce")?;
    Ok(w)
}

impl RulesReplay {
    /// Offers one captured packet to the node, as received on `side`, and
    /// acts on the decisions it gives at once; keeps the packet if its own
    /// decision is yet to come.
    fn offer(
        &mut self,
        node: &mut Node,
        side: Side,
        packet: linkem_io::capture::CapturedPacket,
    ) -> Result<()> {
        let index = self.tally.arrived;
        let pkt = PacketIn {
            len_bytes: packet.orig_len,
            key: FlowKey::parse(&packet.data, self.l2),
            side,
            tag: index,
        };
        self.current = Some((packet.ts_ns, packet.orig_len, packet.data));
        node.on_arrival(packet.ts_ns, pkt, &mut self.out);
        self.settle(index)?;
        if let Some(c) = self.current.take() {
            self.held.insert(index, c);
        }
        self.tally.arrived += 1;
        Ok(())
    }

    /// Acts on the node's decisions: counts each, logs it to `--events`, and
    /// queues what is delivered (with its copy, flipped bits and CE mark) for
    /// writing at its release time. `cur_tag`: the tag of `current`.
    fn settle(&mut self, cur_tag: u64) -> Result<()> {
        // Taken out and put back, so its allocation is reused for every packet.
        let mut out = std::mem::take(&mut self.out);
        for d in out.drain(..) {
            let (ts, orig_len, data) = if d.tag == cur_tag && self.current.is_some() {
                self.current.take().expect("checked")
            } else {
                self.held
                    .remove(&d.tag)
                    .expect("every undecided packet is held")
            };
            *self.tally.fates.entry(d.fate.name()).or_default() += 1;
            if let Some(ev) = self.events.as_mut() {
                write_event(ev, &d, ts, orig_len)?;
            }
            if d.fate == Fate::Delivered {
                self.queue_delivered(&d, orig_len, data);
            }
        }
        self.out = out;
        Ok(())
    }

    /// Applies a delivery's changes to the frame and queues it, and its copy,
    /// at its release time.
    fn queue_delivered(&mut self, d: &Decision, orig_len: u32, mut data: Vec<u8>) {
        let copy = d.duplicate.then(|| data.clone());
        if !d.corrupt_bits.is_empty() {
            self.tally.corrupted += 1;
        }
        if d.ce {
            mark(&mut data, self.l2);
        }
        for bit in &d.corrupt_bits {
            if let Some(byte) = data.get_mut((bit / 8) as usize) {
                *byte ^= 0x80 >> (bit % 8);
            }
        }
        self.heap.push(d.release_ns, (orig_len, data));
        // The copy leaves as it arrived (uncorrupted), right after the original.
        if let Some(copy) = copy {
            self.tally.dup += 1;
            self.heap.push(d.release_ns, (orig_len, copy));
        }
    }

    /// Writes every queued packet released at or before `limit_ns`.
    fn write_due(&mut self, limit_ns: u64) -> Result<()> {
        while let Some((release_ns, (orig_len, data))) = self.heap.pop_due(limit_ns) {
            self.writer
                .write(release_ns, orig_len, &data)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            self.tally.written += 1;
        }
        Ok(())
    }

    /// Writes every packet still queued, once the node has decided them all.
    fn write_rest(&mut self) -> Result<()> {
        while let Some((release_ns, (orig_len, data))) = self.heap.pop() {
            self.writer
                .write(release_ns, orig_len, &data)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            self.tally.written += 1;
        }
        Ok(())
    }
}

/// One decision as a line of the `--events` file (columns as its header).
fn write_event(ev: &mut OutputFile, d: &Decision, ts: u64, orig_len: u32) -> Result<()> {
    let delivered = d.fate == Fate::Delivered;
    let opt = |o: Option<u32>| o.map_or("-".to_string(), |v| v.to_string());
    writeln!(
        ev,
        "{}\t{ts}\t{orig_len}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
        d.tag,
        d.fate.name(),
        if delivered {
            d.release_ns.to_string()
        } else {
            "-".into()
        },
        opt(d.rule),
        opt(d.pipe),
        if d.pipe.is_some() {
            format!("{:016x}", d.flow_id)
        } else {
            "-".into()
        },
        d.hops,
        if delivered { 1 + d.duplicate as u32 } else { 0 },
        if d.corrupt_bits.is_empty() {
            "-".to_string()
        } else {
            d.corrupt_bits
                .iter()
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
                .join(",")
        },
        opt(d.queue),
        d.ce as u8
    )?;
    Ok(())
}

/// Sets CE on a frame an AQM marked (the IPv4 checksum is updated).
fn mark(frame: &mut [u8], l2: L2Kind) {
    let _ = match l2 {
        L2Kind::Ethernet => mark_ce(frame, false),
        L2Kind::RawIp | L2Kind::Ipv4 | L2Kind::Ipv6 => mark_ce_at(frame, 0),
        L2Kind::Null => mark_ce_at(frame, 4),
        L2Kind::LinuxSll => mark_ce_at(frame, 16),
        L2Kind::LinuxSll2 => mark_ce_at(frame, 20),
    };
}
