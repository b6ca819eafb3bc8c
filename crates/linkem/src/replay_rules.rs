//! `linkem replay IN OUT --rules FILE`: the capture through a node of ipfw
//! rules and Dummynet pipes ([`linkem_core::node`]) instead of one link.
//!
//! Every packet is taken as received on interface `a` (`in`, `a-to-b`)
//! unless `--rules-side b`. The rule file may also come from the TOML config
//! as `rules = """..."""`; the only link word allowed beside rules is `seed`.
//! Output order is by (release time, decision order) over all pipes, kept in
//! one [`ReleaseQueue`] of the packets in flight (see the node's module doc for why).

use crate::replay::{fresh_seed, read_distribution, ReplayArgs, SignalGuard};
use crate::StatsFormat;
use anyhow::{bail, Context, Result};
use linkem_core::config::toml::toml_error;
use linkem_core::node::{Decision, Node, NodeConfig, NodeFate, PacketIn};
use linkem_core::order::ReleaseQueue;
use linkem_core::pipe::{FlowMask, Instance, Pipe};
use linkem_core::rules::{parse_rules, FlowKey, L2Kind, RuleSet, Side};
use linkem_core::units::{format_rate_bps, format_time_ns};
use linkem_io::capture::{CaptureReader, CaptureWriter};
use linkem_io::infile;
use linkem_io::outfile::{self, FileUse, OutputFile};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::Instant;

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
    /// traffic sent to `pipe N` shares (unlike Dummynet; see README). Only `seed N`
    /// may follow the file names.
    #[arg(long = "rules", value_name = "FILE")]
    pub file: Option<std::path::PathBuf>,
    /// With --rules: most dynamic pipe and scheduler instances (masks) alive at once; a packet
    /// needing one more is dropped and counted as flow-limit.
    #[arg(long, value_name = "N", default_value_t = linkem_core::pipe::DEFAULT_MAX_FLOWS)]
    pub max_flows: usize,
    /// With --rules: most memory charged for dynamic instances and scheduler
    /// classes (fq_* flows, masked queues), each charged a fixed size when
    /// made (see README, "Limits"); a packet needing more is dropped and
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

/// `--max-flow-memory`: a size with a unit (`512MiB`, `1GB`), at most the
/// address space.
pub fn parse_flow_memory(text: &str) -> Result<usize, String> {
    let b = linkem_core::units::parse_size_bytes(text).map_err(|e| e.0)?;
    usize::try_from(b).map_err(|_| format!("'{text}' is more memory than this machine addresses"))
}

/// The rule text from `--rules FILE` or the config's `rules` key, and the seed
/// from the config's or the command line's `seed`.
fn rules_text(args: &ReplayArgs, rules: &RulesArgs) -> Result<Option<(String, Option<u64>)>> {
    rules_source(args.config.as_deref(), rules.file.as_deref(), &args.words)
}

/// The rule text from a rule file or a config's `rules` key (not both), and the
/// seed from the config's `seed` or the words `seed N`, the only link words
/// allowed beside rules (replay and bridge alike). `None` when neither holds rules.
pub fn rules_source(
    config: Option<&Path>,
    file: Option<&Path>,
    words: &[String],
) -> Result<Option<(String, Option<u64>)>> {
    let mut text = None;
    let mut seed = None;
    if let Some(path) = config {
        let raw = read_small("--config", path)?;
        let table: toml::Table = raw.parse().map_err(|e: toml::de::Error| {
            anyhow::anyhow!("--config {}: {}", path.display(), toml_error(&raw, &e))
        })?;
        if let Some(v) = table.get("rules") {
            let Some(s) = v.as_str() else {
                bail!(
                    "{}: 'rules' is a string of rule lines (rules = \"\"\"...\"\"\")",
                    path.display()
                );
            };
            text = Some(s.to_string());
            for (k, v) in &table {
                match k.as_str() {
                    "rules" => {}
                    "seed" => {
                        seed = Some(v.as_integer().filter(|i| *i >= 0).ok_or_else(|| {
                            anyhow::anyhow!("{}: seed is a whole number", path.display())
                        })? as u64)
                    }
                    _ => bail!(
                        "{}: '{k}': with rules, link words go in 'pipe N config' lines",
                        path.display()
                    ),
                }
            }
        }
    }
    if let Some(path) = file {
        if text.is_some() {
            bail!("rules given twice: --rules and the config's 'rules' key");
        }
        text = Some(read_small("--rules", path)?);
    }
    let Some(text) = text else { return Ok(None) };
    // A half-written file must not silently remove all emulation.
    if !linkem_core::rules::says_something(&text) {
        let from = match file {
            Some(p) => format!("--rules {}", p.display()),
            None => "the config's 'rules'".into(),
        };
        bail!(
            "{from}: no rule, pipe or 'flush' line: an empty rule set would pass every \
             packet unimpaired (write 'flush' to run one on purpose)"
        );
    }
    let words: Vec<&str> = words.iter().flat_map(|w| w.split_whitespace()).collect();
    match words.as_slice() {
        [] => {}
        ["seed", n] => {
            if seed.is_some() {
                bail!("seed given twice (config and command line)");
            }
            seed = Some(n.parse().with_context(|| format!("seed '{n}' is not a whole number"))?)
        }
        [w, ..] => bail!("'{w}': with --rules, link words go in 'pipe N config' lines (only 'seed N' is allowed here)"),
    }
    Ok(Some((text, seed)))
}

/// Whether this replay runs rules (`--rules` or a config with `rules`).
pub fn wanted(args: &ReplayArgs, rules: &RulesArgs) -> Result<bool> {
    if rules.file.is_some() {
        return Ok(true);
    }
    Ok(args.config.as_deref().is_some_and(config_has_rules))
}

/// Whether a TOML config holds a `rules` key. A config that cannot be read or
/// parsed is reported by the path that reads it for link words; here it only
/// means "no rules".
pub fn config_has_rules(path: &Path) -> bool {
    infile::read_text(path, infile::MAX_TEXT_BYTES)
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok())
        .is_some_and(|t| t.contains_key("rules"))
}

/// A rule file or config, read as every small input is (`linkem_io::infile`): a
/// regular file of bounded size, so `/dev/zero` or a FIFO is an error at once.
fn read_small(what: &str, path: &Path) -> Result<String> {
    infile::read_text(path, infile::MAX_TEXT_BYTES).map_err(|e| anyhow::anyhow!("{what} {e}"))
}

/// Parses a rule file, reading `profile` and `distribution` files relative to
/// `base` (the rule file's directory) or as given.
/// `sides`: the names `recv`/`xmit`/`via` accept for IF_A and IF_B besides `a` and `b`.
pub fn load_rules(text: &str, base: Option<&Path>, sides: [&str; 2]) -> Result<RuleSet> {
    load_rules_recording(text, None, base, sides, &mut Default::default())
}

/// [`load_rules`], keeping each file read by the name the rules gave it.
/// `text_file`: the file the rule text came from (`--rules` or `--config`), for
/// what an error may quote ([`load_rules_reading`]).
pub fn load_rules_recording(
    text: &str,
    text_file: Option<&Path>,
    base: Option<&Path>,
    sides: [&str; 2],
    read_files: &mut HashMap<String, String>,
) -> Result<RuleSet> {
    load_rules_reading(text, text_file, base, sides, read_files, &mut Vec::new())
}

/// [`load_rules_recording`], adding the path of every file the rules read to
/// `paths` (a replay must not write over one). An error quotes no word of a
/// file that the user who started linkem may not read by its permission bits
/// (`linkem_io::infile::starter_may_read`), the rule file's or one it names:
/// with such a file involved, quoted words other than short plain ones are
/// replaced by their length, and so is every word of that file.
pub fn load_rules_reading(
    text: &str,
    text_file: Option<&Path>,
    base: Option<&Path>,
    sides: [&str; 2],
    read_files: &mut HashMap<String, String>,
    paths: &mut Vec<PathBuf>,
) -> Result<RuleSet> {
    let mut hidden: Vec<String> = Vec::new();
    if text_file.is_some_and(|f| !infile::starter_may_read(f)) {
        hidden.push(text.to_string());
    }
    let parsed = {
        let mut files = |name: &str| -> Result<String, String> {
            let mut got = |path: PathBuf, t: String| {
                if !infile::starter_may_read(&path) {
                    hidden.push(t.clone());
                }
                paths.push(path);
                read_files.insert(name.to_string(), t.clone());
                t
            };
            if let Some(b) = base {
                let p = b.join(name);
                match infile::read_text(&p, infile::MAX_TEXT_BYTES) {
                    Ok(t) => return Ok(got(p, t)),
                    Err(e) if !e.is_not_found() => return Err(e.to_string()),
                    Err(_) => {}
                }
            }
            let mut read = Vec::new();
            let t = read_distribution(name, &mut read)?;
            match read.pop() {
                Some(p) => Ok(got(p, t)),
                None => Ok(t),
            }
        };
        parse_rules(text, sides, &mut files)
    };
    parsed.map_err(|e| anyhow::anyhow!("rules: {}", redact(&e.to_string(), &hidden)))
}

/// A word an error may show from any file: short, of the characters numbers,
/// units and names are written with (as `linkem_core::dist` decides for tables).
fn plain_word(w: &str) -> bool {
    const MAX_SHOWN_BYTES: usize = 16;
    w.len() <= MAX_SHOWN_BYTES
        && w.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".+-%_,".contains(&b))
}

/// `message` without the content of the `hidden` texts: when there are any,
/// every quoted piece ('...', as the parsers quote words) that is not a
/// [`plain_word`], and every word of those texts, is replaced by its length.
fn redact(message: &str, hidden: &[String]) -> String {
    if hidden.is_empty() {
        return message.to_string();
    }
    let words: std::collections::HashSet<&str> = hidden
        .iter()
        .flat_map(|t| t.split_whitespace())
        .filter(|w| !plain_word(w))
        .collect();
    let quoted = message.split('\'').skip(1).step_by(2);
    let mut found: Vec<&str> = quoted
        .filter(|q| !plain_word(q))
        .chain(message.split_whitespace().filter(|w| words.contains(w)))
        .collect();
    // Longest first, so that a word inside a longer one is not replaced first.
    found.sort_by_key(|w| std::cmp::Reverse(w.len()));
    found.dedup();
    let mut out = message.to_string();
    for w in found.into_iter().filter(|w| !w.is_empty()) {
        out = out.replace(w, &format!("<{} bytes not shown>", w.len()));
    }
    out
}

/// A packet the node has not decided yet: its capture time (ns), its length on
/// the wire and the bytes captured, kept to be written once it is delivered.
type Undecided = (u64, u32, Vec<u8>);

/// What a rules replay counts, for the final report.
#[derive(Default)]
struct Tally {
    /// Decisions by fate name ([`NodeFate::name`]); sums to `arrived` at the end.
    fates: BTreeMap<&'static str, u64>,
    /// Packets read from the capture (also the next packet's tag).
    arrived: u64,
    /// Packets written to the output, copies included.
    written: u64,
    /// Copies made by `duplicate`.
    dup: u64,
    /// Delivered packets with at least one bit flipped.
    corrupted: u64,
}

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
    let mut inputs = crate::replay::base_inputs(args);
    inputs.extend(rargs.file.iter().map(|p| FileUse::new("--rules", p)));
    inputs.extend(
        named
            .into_iter()
            .map(|p| FileUse::new("file named in the rules", p)),
    );
    outfile::check_distinct(&inputs, &crate::replay::outputs(args))?;
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
            if d.fate == NodeFate::Delivered {
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
            crate::replay_sched::mark(&mut data, self.l2);
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
    let delivered = d.fate == NodeFate::Delivered;
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

/// Prints the final counts and the node's state as `--stats` asks.
fn report(args: &ReplayArgs, node: &Node, seed: u64, tally: &Tally, secs: f64) {
    match args.stats {
        StatsFormat::None => {}
        StatsFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&stats_json(args, node, seed, tally, secs))
                .expect("a JSON value always serialises")
        ),
        StatsFormat::Text => print!("{}", stats_text(args, node, seed, tally)),
    }
}

fn proto_name(p: u8) -> String {
    match p {
        0 => "ip".into(),
        1 => "icmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        58 => "ipv6-icmp".into(),
        132 => "sctp".into(),
        _ => p.to_string(),
    }
}

pub(crate) fn addr(version: u8, a: u128) -> String {
    match version {
        6 => Ipv6Addr::from(a).to_string(),
        _ => Ipv4Addr::from(a as u32).to_string(),
    }
}

fn bw_text(p: &Pipe) -> String {
    match p.def.link.rate_bps {
        None => "unlimited     ".into(),
        Some(b) if b >= 1_000_000 => format!("{:7.3} Mbit/s", b as f64 / 1e6),
        Some(b) if b >= 1_000 => format!("{:7.3} Kbit/s", b as f64 / 1e3),
        Some(b) => format!("{:7.3} bit/s ", b as f64),
    }
}

fn queue_text(p: &Pipe) -> String {
    match (p.def.link.queue_packets, p.def.link.queue_bytes) {
        (_, Some(b)) if b >= 8192 => format!("{} KB", b / 1024),
        (_, Some(b)) => format!("{b} B"),
        (Some(n), None) => format!("{n:3} sl."),
        (None, None) => "unlimited".into(),
    }
}

fn mask_text(m: &FlowMask) -> String {
    if m.src_ip6 != 0 || m.dst_ip6 != 0 || m.flow_label != 0 {
        format!(
            "mask: proto: 0x{:02x}, flow_id: 0x{:08x}, {}/0x{:04x} -> {}/0x{:04x}",
            m.proto,
            m.flow_label,
            Ipv6Addr::from(m.src_ip6),
            m.src_port,
            Ipv6Addr::from(m.dst_ip6),
            m.dst_port
        )
    } else {
        format!(
            "mask: 0x{:02x} 0x{:08x}/0x{:04x} -> 0x{:08x}/0x{:04x}",
            m.proto, m.src_ip4, m.src_port, m.dst_ip4, m.dst_port
        )
    }
}

fn flow_line(i: &Instance) -> String {
    let k = &i.key;
    let v6 = k.ip_version == 6;
    let w = if v6 { 39 } else { 15 };
    format!(
        "{:3} {:<4} {:>w$}/{:<5} {:>w$}/{:<5} {:4} {:8} {:3} {:4}",
        i.flow_id & 0xff,
        proto_name(k.proto),
        addr(k.ip_version, k.src_ip),
        k.src_port,
        addr(k.ip_version, k.dst_ip),
        k.dst_port,
        i.tot_pkts,
        i.tot_bytes,
        i.queued_packets(),
        i.drops,
    )
}

fn stats_text(args: &ReplayArgs, node: &Node, seed: u64, tally: &Tally) -> String {
    let Tally {
        fates,
        arrived,
        written,
        dup,
        corrupted,
    } = tally;
    let mut s = String::new();
    use std::fmt::Write as _;
    let _ = writeln!(
        s,
        "linkem replay {} -> {} (rules)",
        args.input.display(),
        args.output.display()
    );
    let _ = writeln!(s, "seed      {seed}");
    let _ = writeln!(
        s,
        "one-pass  {}",
        if node.one_pass() { "on" } else { "off" }
    );
    let _ = writeln!(s, "arrived   {arrived:>10}");
    for (f, n) in fates {
        let _ = writeln!(s, "{f:<10}{n:>10}");
    }
    let _ = writeln!(
        s,
        "duplicated{dup:>10}\ncorrupted {corrupted:>10}\nwritten   {written:>10}  packets in {}",
        args.output.display()
    );
    s.push_str(&node_text(node));
    s
}

/// The node's pipes with their flows (`ipfw pipe show`), rules with their
/// counters (`ipfw -a list`) and schedulers (`ipfw sched show`), as
/// `--stats` prints them after a replay or a bridge run.
pub fn node_text(node: &Node) -> String {
    node_text_listing(node, usize::MAX)
}

/// [`node_text`] listing at most `most` instances of each pipe and scheduler
/// (see [`node_json_listing`]).
pub fn node_text_listing(node: &Node, most: usize) -> String {
    let mut s = String::new();
    use std::fmt::Write as _;
    let _ = writeln!(s, "\n# ipfw pipe show");
    s.push_str(&pipes_text_listing(node, None, most));
    let _ = writeln!(s, "\n# ipfw -a list");
    s.push_str(&rule_counters_text(node));
    s.push_str(&crate::replay_sched::stats_text_listing(node, most));
    s
}

/// The rules with their counters, as `ipfw -a list` prints them.
pub fn rule_counters_text(node: &Node) -> String {
    let mut s = String::new();
    use std::fmt::Write as _;
    let c = node.classifier();
    for (r, (pk, by)) in c.rules().iter().zip(&c.counters) {
        let text = r.text.strip_prefix("add").unwrap_or(&r.text).trim_start();
        let text = text
            .strip_prefix(&r.number.to_string())
            .unwrap_or(text)
            .trim_start();
        let _ = writeln!(s, "{:05} {pk:>10} {by:>12} {text}", r.number);
    }
    let _ = writeln!(s, "unmatched {:>10} (passed unimpaired)", node.unmatched);
    s
}

/// Pipe `idx`'s instances expired and packets refused for want of a new
/// one (`flow-limit`): a scheduled pipe's instances are its scheduler's, so
/// are their counts.
fn expired_and_refused(node: &Node, idx: usize) -> (u64, u64) {
    match node.sched.links.get(idx) {
        Some(Some(sp)) => (sp.expired, sp.flow_limit_drops),
        _ => {
            let p = &node.pipes()[idx];
            (p.expired, p.flow_limit_drops)
        }
    }
}

/// The pipes (or pipe `only`) with their flows, as `ipfw pipe show` prints them.
pub fn pipes_text(node: &Node, only: Option<u32>) -> String {
    pipes_text_listing(node, only, usize::MAX)
}

/// [`pipes_text`] with at most `most` flows of each pipe, and a line saying
/// how many more there are.
fn pipes_text_listing(node: &Node, only: Option<u32>, most: usize) -> String {
    let mut s = String::new();
    use std::fmt::Write as _;
    for (idx, p) in node
        .pipes()
        .iter()
        .enumerate()
        .filter(|(_, p)| only.is_none_or(|n| n == p.def.number))
    {
        let d = &p.def;
        let _ = writeln!(
            s,
            "{:05}: {} {:>4} burst {}",
            d.number,
            bw_text(p),
            format_time_ns(d.link.delay_ns),
            d.burst_bytes
        );
        let plr = match d.link.loss {
            linkem_core::LossConfig::Random { p, .. } if p > 0.0 => format!(" plr {p:.6}"),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "q{:05} {}{} {} flows ({} buckets) droptail  [{}]",
            d.number,
            queue_text(p),
            plr,
            p.instances().count(),
            d.buckets,
            d.words
        );
        if let Some(pf) = &d.profile {
            let _ = writeln!(
                s,
                "\t profile: name \"{}\" loss {:.6} samples {}",
                pf.name,
                pf.loss_level,
                pf.table_ns.len()
            );
        }
        if let Some(m) = &d.mask {
            let _ = writeln!(s, "    {}", mask_text(m));
            let (expired, refused) = expired_and_refused(node, idx);
            let _ = writeln!(s, "    expired {expired} flow-limit drops {refused}");
        }
        let _ = writeln!(
            s,
            "BKT Prot ___Source IP/port____ ____Dest. IP/port____ Tot_pkt/bytes Pkt Drp"
        );
        for i in p.instances().take(most) {
            let _ = writeln!(s, "{}", flow_line(i));
        }
        let more = p.active_instances().saturating_sub(most);
        if more > 0 {
            let _ = writeln!(s, "    ({more} more flows not listed)");
        }
    }
    s
}

fn stats_json(
    args: &ReplayArgs,
    node: &Node,
    seed: u64,
    tally: &Tally,
    secs: f64,
) -> serde_json::Value {
    let Tally {
        fates,
        arrived,
        written,
        dup,
        corrupted,
    } = tally;
    let mut v = json!({
        "input": args.input.display().to_string(),
        "output": args.output.display().to_string(),
        "seed": seed,
        "arrived": arrived,
        "written": written,
        "fates": fates,
        "duplicated": dup,
        "corrupted": corrupted,
        "elapsed_s": secs,
    });
    if let (Some(o), serde_json::Value::Object(n)) = (v.as_object_mut(), node_json(node)) {
        o.extend(n);
    }
    v
}

/// [`node_text`] as JSON: `one_pass`, `unmatched`, `flow_instances` (live
/// dynamic instances, pipe and scheduler), `flow_memory_bytes` (what they and
/// their scheduler classes are charged against `--max-flow-memory`), `pipes`,
/// `rules`, `schedulers`. Every live instance is listed.
pub fn node_json(node: &Node) -> serde_json::Value {
    node_json_listing(node, usize::MAX)
}

/// [`node_json`] listing at most `most` instances of each pipe (its `flows`)
/// and of each scheduled pipe (its entries under `schedulers`); each pipe's
/// `instances` gives how many are live. The bridge's periodic lines list a
/// few: the listing is built under the node's lock, and a flood of flows
/// would otherwise stall forwarding and take memory in proportion to the
/// flows at every line.
pub fn node_json_listing(node: &Node, most: usize) -> serde_json::Value {
    let pipes: Vec<_> = node
        .pipes()
        .iter()
        .enumerate()
        .map(|(idx, p)| {
            let d = &p.def;
            let (expired, flow_limit_drops) = expired_and_refused(node, idx);
            let instances = match node.sched.links.get(idx) {
                Some(Some(sp)) => sp.active_instances(),
                _ => p.active_instances(),
            };
            let flows: Vec<_> = p
                .instances()
                .take(most)
                .map(|i| {
                    json!({
                        "flow_id": format!("{:016x}", i.flow_id),
                        "proto": i.key.proto,
                        "src": format!("{}/{}", addr(i.key.ip_version, i.key.src_ip), i.key.src_port),
                        "dst": format!("{}/{}", addr(i.key.ip_version, i.key.dst_ip), i.key.dst_port),
                        "packets": i.tot_pkts,
                        "bytes": i.tot_bytes,
                        "queued": i.queued_packets(),
                        "drops": i.drops,
                    })
                })
                .collect();
            let (packets, bytes, drops) = p.totals();
            json!({
                "pipe": d.number,
                "config": d.words,
                "packets": packets,
                "bytes": bytes,
                "drops": drops,
                "rate_bps": d.link.rate_bps,
                "rate": d.link.rate_bps.map(format_rate_bps),
                "delay_ns": d.link.delay_ns,
                "queue_packets": d.link.queue_packets,
                "queue_bytes": d.link.queue_bytes,
                "burst_bytes": d.burst_bytes,
                "profile": d.profile.as_ref().map(|pf| json!({"name": pf.name, "loss_level": pf.loss_level, "samples": pf.table_ns.len()})),
                "mask": d.mask.as_ref().map(mask_text),
                "instances": instances,
                "expired": expired,
                "flow_limit_drops": flow_limit_drops,
                "flows": flows,
            })
        })
        .collect();
    let c = node.classifier();
    let rules: Vec<_> = c
        .rules()
        .iter()
        .zip(&c.counters)
        .map(|(r, (pk, by))| json!({"number": r.number, "line": r.line, "rule": r.text, "packets": pk, "bytes": by}))
        .collect();
    json!({
        "one_pass": node.one_pass(),
        "unmatched": node.unmatched,
        "flow_instances": node.live_flows(),
        "flow_memory_bytes": node.flow_memory_bytes(),
        "pipes": pipes,
        "rules": rules,
        "schedulers": crate::replay_sched::stats_json_listing(node, most),
    })
}
