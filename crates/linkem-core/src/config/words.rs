//! The link words: one table, [`WORDS`], from which the parser dispatches, the
//! help text is printed ([`words_help`]) and the guide's list
//! (docs/guide/link-words.md) is checked; and [`UNSUPPORTED`], the words of
//! netem and Dummynet that linkem refuses as not supported (rather than
//! unknown).

use super::dummynet::{self, QueueLimit};
use super::parser::{Cursor, Draft, RawSchedule, Slot};
use super::schedule;
use super::{
    ConfigError, Dialect, LossAt, PolicerConfig, SlotConfig, ETHERNET_OVERHEAD_BYTES,
    MAX_POLICER_BURST_BYTES,
};
use crate::dist::Distribution;
use crate::filetext::hide_content;
use crate::loss::LossConfig;
use crate::trace::Trace;
use crate::units;
use std::sync::Arc;

/// Reads one word's arguments (the word itself is at the given position).
pub(super) type Handler = fn(&mut Cursor<'_, '_, '_>, &mut Draft, usize) -> Result<(), ConfigError>;

/// One form of a link word.
pub struct WordDoc {
    /// The words this form starts with (aliases after the first).
    pub words: &'static [&'static str],
    /// How it is written, as the help shows it.
    pub usage: &'static str,
    /// What it does.
    pub meaning: &'static str,
    /// A complete example.
    pub example: &'static str,
    /// The dialects that read it.
    pub dialects: &'static [Dialect],
    pub(super) parse: Handler,
}

const BOTH: &[Dialect] = &[Dialect::Linkem, Dialect::Dummynet];
const DUMMYNET: &[Dialect] = &[Dialect::Dummynet];

/// Every link word. Several forms of one word share its reader (the first form
/// listed dispatches).
pub const WORDS: &[WordDoc] = &[
    WordDoc {
        words: &["rate", "bw"],
        usage: "rate R | bw R | rate unlimited",
        meaning: "link rate: 10mbit, 1gbit, 3Mbit/s, 2MByte/s (never bps/mbps: tc reads bytes, \
                  ipfw bits); Dummynet's bw also 3M, 3000000 (bit/s), 0 (no limit); unlimited: \
                  no rate and no trace (the default)",
        example: "rate 10mbit",
        dialects: BOTH,
        parse: rate,
    },
    WordDoc {
        words: &["trace"],
        usage: "trace FILE",
        meaning: "mahimahi trace in place of a rate: one line per 1504-byte delivery opportunity, \
                  an offset in ms; loops (IP bytes are counted: the frame less 14 bytes)",
        example: "trace testdata/traces/12mbit.trace delay 20ms",
        dialects: BOTH,
        parse: trace,
    },
    WordDoc {
        words: &["trace-once"],
        usage: "trace-once FILE",
        meaning: "the trace played once; after it the link carries nothing (queue-full)",
        example: "trace-once testdata/traces/steps.trace",
        dialects: BOTH,
        parse: trace,
    },
    WordDoc {
        words: &["overhead"],
        usage: "overhead N | overhead ethernet",
        meaning: "bytes added per frame on the wire (ethernet = 24: preamble 8, gap 12, FCS 4)",
        example: "overhead ethernet",
        dialects: BOTH,
        parse: overhead,
    },
    WordDoc {
        words: &["queue", "limit"],
        usage: "queue N | limit N",
        meaning: "queue limit in packets (default 1000; Dummynet 50)",
        example: "queue 50",
        dialects: BOTH,
        parse: queue,
    },
    WordDoc {
        words: &["queue"],
        usage: "queue SIZE | queue unlimited",
        meaning: "queue limit in frame bytes: 64KiB, 100kB, 1500B (Dummynet also 64KBytes, 10K)",
        example: "queue 64KiB",
        dialects: BOTH,
        parse: queue,
    },
    WordDoc {
        words: &["delay"],
        usage: "delay D [J [C%]]",
        meaning: "delay, jitter, correlation of successive delays (Dummynet: delay 20 = 20 ms)",
        example: "delay 10ms 1ms 25%",
        dialects: BOTH,
        parse: delay,
    },
    WordDoc {
        words: &["jitter"],
        usage: "jitter J",
        meaning: "the jitter alone (the J of delay D J)",
        example: "delay 10ms jitter 1ms",
        dialects: BOTH,
        parse: jitter,
    },
    WordDoc {
        words: &["distribution"],
        usage: "distribution NAME|FILE",
        meaning: "uniform (default), normal, pareto, paretonormal, exponential, a netem .dist \
                  table, or a 'prob delay' CDF profile",
        example: "delay 10ms 2ms distribution normal",
        dialects: BOTH,
        parse: distribution,
    },
    WordDoc {
        words: &["jitter-mode"],
        usage: "jitter-mode packet|process [HOLD]",
        meaning: "packet (default): a draw per packet, releases in order (the mean rises with \
                  the packet rate); process: the delay is a process in time holding each draw \
                  for HOLD (default 100 x jitter, at least 1ms), in order with the configured \
                  distribution at any packet rate",
        example: "delay 10ms 2ms jitter-mode process",
        dialects: BOTH,
        parse: jitter_mode,
    },
    WordDoc {
        words: &["reorder"],
        usage: "reorder allow",
        meaning: "let jitter reorder (default: releases never go backwards)",
        example: "delay 10ms 5ms reorder allow",
        dialects: BOTH,
        parse: reorder,
    },
    WordDoc {
        words: &["reorder"],
        usage: "reorder P% [C%] [gap N]",
        meaning: "netem: one packet in N, with probability P, skips the delay",
        example: "delay 10ms reorder 25% 50% gap 5",
        dialects: BOTH,
        parse: reorder,
    },
    WordDoc {
        words: &["gap"],
        usage: "gap N",
        meaning: "the N of reorder P% gap N",
        example: "delay 10ms reorder 25% gap 5",
        dialects: BOTH,
        parse: gap,
    },
    WordDoc {
        words: &["loss", "drop"],
        usage: "loss [random] P% [C%] | loss none",
        meaning: "random loss, correlated by C (drop: netem's alias); none: no loss model \
                  (the default)",
        example: "loss 1% 25%",
        dialects: BOTH,
        parse: loss,
    },
    WordDoc {
        words: &["plr"],
        usage: "plr X",
        meaning: "random loss with probability X (0..1), Dummynet's word",
        example: "plr 0.01",
        dialects: BOTH,
        parse: plr,
    },
    WordDoc {
        words: &["loss"],
        usage: "loss ber X",
        meaning: "bit error rate over the wire bits",
        example: "loss ber 1e-6",
        dialects: BOTH,
        parse: loss,
    },
    WordDoc {
        words: &["loss"],
        usage: "loss gemodel p [r [1-h [1-k]]]",
        meaning: "Gilbert-Elliott (netem's meanings and defaults)",
        example: "loss gemodel 1% 10%",
        dialects: BOTH,
        parse: loss,
    },
    WordDoc {
        words: &["loss"],
        usage: "loss state p13 [p31 [p32 [p23 [p14]]]]",
        meaning: "4-state Markov (netem's)",
        example: "loss state 1% 30%",
        dialects: BOTH,
        parse: loss,
    },
    WordDoc {
        words: &["loss-at"],
        usage: "loss-at arrival|link",
        meaning: "drop before the queue (default) or after using the link",
        example: "loss 1% loss-at link",
        dialects: BOTH,
        parse: loss_at,
    },
    WordDoc {
        words: &["duplicate"],
        usage: "duplicate P% [C%]",
        meaning: "send a second copy",
        example: "duplicate 1%",
        dialects: BOTH,
        parse: duplicate,
    },
    WordDoc {
        words: &["corrupt"],
        usage: "corrupt P% [C%]",
        meaning: "flip one random bit",
        example: "corrupt 0.1%",
        dialects: BOTH,
        parse: corrupt,
    },
    WordDoc {
        words: &["policer", "police"],
        usage: "policer R burst SIZE | policer none",
        meaning:
            "token bucket: drop what exceeds R with bucket SIZE; none: no policer (the default)",
        example: "policer 2mbit burst 15kB",
        dialects: BOTH,
        parse: policer,
    },
    WordDoc {
        words: &["slot"],
        usage: "slot MIN [MAX] [packets N] [bytes M] | slot none",
        meaning: "netem: packets leave only in slots, the next one MIN..MAX (uniform) after, \
                  each carrying up to N packets and M bytes; none: no slots (the default)",
        example: "slot 800us 1200us packets 16 bytes 64KiB",
        dialects: BOTH,
        parse: slot,
    },
    WordDoc {
        words: &["slot"],
        usage: "slot distribution D DELAY JITTER [packets N] [bytes M]",
        meaning: "netem: as above, the time to the next slot DELAY + JITTER from D",
        example: "slot distribution normal 1ms 200us packets 8",
        dialects: BOTH,
        parse: slot,
    },
    WordDoc {
        words: &["schedule"],
        usage: "schedule FILE",
        meaning: "change the link at given instants: lines 'TIME WORDS', shapes ramp, square, \
                  walk, and 'TIME loop'; a FILE.csv holds TheaterQ's rows \
                  (KEEP_US,LATENCY_NS,RATE_BPS,LOSS,LIMIT; see docs/model.md)",
        example: "rate 10mbit schedule testdata/schedules/steps.sched",
        dialects: BOTH,
        parse: schedule,
    },
    WordDoc {
        words: &["droptail"],
        usage: "droptail",
        meaning: "tail drop, which is what linkem's queue does (for pasted lines)",
        example: "pipe 1 config bw 1M droptail",
        dialects: DUMMYNET,
        parse: nothing,
    },
    WordDoc {
        words: &["noerror"],
        usage: "noerror",
        meaning: "do not report drops to the sending socket, which linkem never does",
        example: "pipe 1 config bw 1M noerror",
        dialects: DUMMYNET,
        parse: nothing,
    },
    WordDoc {
        words: &["seed"],
        usage: "seed N",
        meaning: "seed of every random draw (printed when not given)",
        example: "seed 7",
        dialects: BOTH,
        parse: seed,
    },
];

/// Words of netem and Dummynet that linkem does not support yet: (word, tool,
/// what it is there).
pub const UNSUPPORTED: &[(&str, &str, &str)] = &[
    ("red", "Dummynet", "RED queue management"),
    ("gred", "Dummynet", "gentle RED queue management"),
    ("codel", "Dummynet", "CoDel queue management"),
    ("pie", "Dummynet", "PIE queue management"),
    ("fq_codel", "Dummynet", "the FQ-CoDel scheduler"),
    ("fq_pie", "Dummynet", "the FQ-PIE scheduler"),
    (
        "ecn",
        "netem and Dummynet",
        "marking ECN instead of dropping",
    ),
    ("noecn", "Dummynet", "an option of AQM"),
    ("weight", "Dummynet", "a queue weight of WF2Q+"),
    ("lmax", "Dummynet", "the maximum packet size of a queue"),
    ("maxlen", "Dummynet", "the maximum packet size of a queue"),
    ("pri", "Dummynet", "a queue priority"),
    ("pipe", "Dummynet", "a queue's parent pipe"),
    (
        "burst",
        "Dummynet",
        "a pipe's burst (a pipe word of the rules layer)",
    ),
    (
        "profile",
        "Dummynet",
        "a pipe's MAC profile (a pipe word of the rules layer)",
    ),
    (
        "mask",
        "Dummynet",
        "a flow mask (a pipe word of the rules layer)",
    ),
    (
        "buckets",
        "Dummynet",
        "the size of a flow table (a pipe word of the rules layer)",
    ),
    (
        "type",
        "Dummynet",
        "a scheduler type (a pipe word of the rules layer)",
    ),
    (
        "sched",
        "Dummynet",
        "a scheduler (a pipe word of the rules layer)",
    ),
];

/// Reads every word of the cursor's layer into `draft`, each by the reader of
/// its form in [`WORDS`].
pub(super) fn read_layer(c: &mut Cursor<'_, '_, '_>, draft: &mut Draft) -> Result<(), ConfigError> {
    c.skip_pasted_prefix();
    draft.dummynet |= c.dialect == Dialect::Dummynet;
    while let Some(word) = c.peek() {
        let at = c.next;
        c.next += 1;
        match find(word, c.dialect) {
            Some(entry) => (entry.parse)(c, draft, at)?,
            None => return Err(c.error(at, refusal(word, c.dialect))),
        }
    }
    Ok(())
}

/// The first form that starts with `word` in `dialect`.
pub(super) fn find(word: &str, dialect: Dialect) -> Option<&'static WordDoc> {
    WORDS
        .iter()
        .find(|d| d.words.contains(&word) && d.dialects.contains(&dialect))
}

/// Whether `word` starts a link word in any dialect (or is one linkem knows
/// but does not support): an interface argument that is one was most
/// likely meant as a word (`linkem bridge veth-a delay 10ms`).
pub fn is_link_word(word: &str) -> bool {
    WORDS.iter().any(|d| d.words.contains(&word)) || UNSUPPORTED.iter().any(|(w, _, _)| *w == word)
}

/// Why a word that has no form in `dialect` is refused.
pub(super) fn refusal(word: &str, dialect: Dialect) -> String {
    if let Some((_, tool, what)) = UNSUPPORTED.iter().find(|(w, _, _)| *w == word) {
        return format!("not supported: {what} ({tool}) is not in linkem yet");
    }
    if dialect == Dialect::Linkem && find(word, Dialect::Dummynet).is_some() {
        return "a Dummynet word: give it in a line starting 'pipe N config'".into();
    }
    "unknown word (see 'linkem --help' for the words linkem reads)".into()
}

/// The whole block `linkem --help` prints and docs/guide/link-words.md shows: a heading, the
/// word list ([`words_help`]) at 96 columns, and the rules every word follows.
pub fn link_words_help() -> String {
    format!(
        "LINK WORDS (order does not matter; netem and Dummynet spellings are accepted):\n{}\
         Times are a number and a unit (ns, us, ms, s, min, h: 10ms, 1.5s, 2min), in words and\n\
         options alike; percentages need their % sign. A word given twice, or two words that set\n\
         the same thing, is an error. A line starting 'pipe N config' is read as ipfw/dnctl read\n\
         it: delay 20 is 20 ms, bw 3M is 3 Mbit/s, queue 50 slots by default, queue 64KBytes in\n\
         bytes.",
        words_help(96)
    )
}

/// The word list as `linkem --help` prints it: usage, then meaning, wrapped to
/// `width` columns.
pub fn words_help(width: usize) -> String {
    const COLUMN: usize = 33;
    let mut out = String::new();
    for d in WORDS {
        let mut line = format!("  {}", d.usage);
        if d.dialects == DUMMYNET {
            line += " (Dummynet)";
        }
        let mut pad = if line.len() + 1 < COLUMN {
            COLUMN - line.len()
        } else {
            2
        };
        for word in d.meaning.split_whitespace() {
            if line.len() + pad + word.len() > width && pad == 1 {
                out += &line;
                out.push('\n');
                line = " ".repeat(COLUMN - 1);
            }
            line += &" ".repeat(pad);
            line += word;
            pad = 1;
        }
        out += &line;
        out.push('\n');
    }
    out
}

fn nothing(_: &mut Cursor<'_, '_, '_>, _: &mut Draft, _: usize) -> Result<(), ConfigError> {
    Ok(())
}

fn rate(c: &mut Cursor<'_, '_, '_>, d: &mut Draft, at: usize) -> Result<(), ConfigError> {
    let word = c.word(at);
    let (a, v) = c.arg(word, "a rate such as 10mbit")?;
    let bps = if v == "unlimited" {
        None
    } else if c.dialect == Dialect::Dummynet && word == "bw" {
        c.unit(a, dummynet::bw_bps(v))?
    } else {
        Some(c.unit(a, units::parse_rate_bps(v))?)
    };
    c.set(d, Slot::Rate, at)?;
    d.link.rate_bps = bps;
    d.link.trace = None;
    Ok(())
}

fn trace(c: &mut Cursor<'_, '_, '_>, d: &mut Draft, at: usize) -> Result<(), ConfigError> {
    let word = c.word(at);
    let (a, name) = c.arg(word, "a trace file (mahimahi's format)")?;
    // The loader says what it looked for; the kind of file is named here.
    let text = (c.files)(name).map_err(|e| c.error(a, format!("{word} {e}")))?;
    let parsed = Trace::parse(name, &text, word == "trace-once")
        .map_err(|e| c.error(a, hide_content(&e, name, &text)))?;
    c.set(d, Slot::Rate, at)?;
    d.link.trace = Some(Arc::new(parsed));
    d.link.rate_bps = None;
    Ok(())
}

fn overhead(c: &mut Cursor<'_, '_, '_>, d: &mut Draft, at: usize) -> Result<(), ConfigError> {
    let (a, v) = c.arg("overhead", "a byte count or 'ethernet'")?;
    let bytes = match v {
        "ethernet" => ETHERNET_OVERHEAD_BYTES,
        _ => {
            let n = c.unit(a, units::parse_count(v))?;
            if n > 65_535 {
                return Err(c.error(a, "an overhead is at most 65535 bytes"));
            }
            n as u32
        }
    };
    c.set(d, Slot::Overhead, at)?;
    d.link.overhead_bytes = bytes;
    Ok(())
}

fn queue(c: &mut Cursor<'_, '_, '_>, d: &mut Draft, at: usize) -> Result<(), ConfigError> {
    let word = c.word(at);
    let (a, v) = c.arg(word, "a packet count or a size such as 64KiB")?;
    if v == "unlimited" && word == "queue" {
        c.set(d, Slot::QueuePackets, at)?;
        c.set(d, Slot::QueueBytes, at)?;
        d.queue_packets = Some(None);
        d.queue_bytes = Some(None);
        return Ok(());
    }
    let limit = if c.dialect == Dialect::Dummynet && word == "queue" {
        c.unit(a, dummynet::queue(v))?
    } else if v.bytes().all(|b| b.is_ascii_digit()) {
        QueueLimit::Slots(c.unit(a, units::parse_count(v))?)
    } else if word == "limit" {
        return Err(c.error(a, "limit takes a packet count (use 'queue SIZE' for bytes)"));
    } else {
        QueueLimit::Bytes(c.unit(a, units::parse_size_bytes(v))?)
    };
    match limit {
        QueueLimit::Slots(0) => {
            Err(c.error(a, format!("{word} 0: a queue holds at least one packet")))
        }
        QueueLimit::Slots(n) if n > u64::from(u32::MAX) => {
            Err(c.error(a, format!("{word} {v}: too many packets")))
        }
        QueueLimit::Slots(n) => {
            c.set(d, Slot::QueuePackets, at)?;
            d.queue_packets = Some(Some(n as u32));
            Ok(())
        }
        QueueLimit::Bytes(0) => Err(c.error(a, "queue 0B: a queue holds at least one byte")),
        QueueLimit::Bytes(n) => {
            c.set(d, Slot::QueueBytes, at)?;
            d.queue_bytes = Some(Some(n));
            Ok(())
        }
    }
}

fn starts_with_digit(w: &str) -> bool {
    w.as_bytes()
        .first()
        .is_some_and(|b| b.is_ascii_digit() || *b == b'.')
}

fn delay(c: &mut Cursor<'_, '_, '_>, d: &mut Draft, at: usize) -> Result<(), ConfigError> {
    let (a, v) = c.arg("delay", "a time such as 10ms")?;
    let delay_ns = c.time_ns(a, v)?;
    c.set(d, Slot::Delay, at)?;
    d.link.delay_ns = delay_ns;
    if let Some(j) = c
        .peek()
        .filter(|j| starts_with_digit(j) && !j.ends_with('%'))
    {
        c.next += 1;
        let jitter_ns = c.time_ns(c.next - 1, j)?;
        c.set(d, Slot::Jitter, at)?;
        d.link.jitter_ns = jitter_ns;
        if let Some(correlation) = c.optional_percent()? {
            c.set(d, Slot::DelayCorrelation, at)?;
            d.link.delay_correlation = correlation;
        }
    }
    Ok(())
}

fn jitter(c: &mut Cursor<'_, '_, '_>, d: &mut Draft, at: usize) -> Result<(), ConfigError> {
    let (a, v) = c.arg("jitter", "a time such as 1ms")?;
    let jitter_ns = c.time_ns(a, v)?;
    c.set(d, Slot::Jitter, at)?;
    d.link.jitter_ns = jitter_ns;
    Ok(())
}

fn distribution(c: &mut Cursor<'_, '_, '_>, d: &mut Draft, at: usize) -> Result<(), ConfigError> {
    let (a, v) = c.arg(
        "distribution",
        "a name (uniform, normal, pareto, paretonormal, exponential) or a file",
    )?;
    let dist = match Distribution::builtin(v) {
        Some(dist) => dist,
        None => {
            // The loader says what it looked for; the kind of file is named here.
            let text = (c.files)(v).map_err(|e| c.error(a, format!("distribution {e}")))?;
            Distribution::parse_file(v, &text)
                .map_err(|e| c.error(a, hide_content(&e, v, &text)))?
        }
    };
    c.set(d, Slot::Distribution, at)?;
    d.distribution = Some(dist);
    Ok(())
}

fn jitter_mode(c: &mut Cursor<'_, '_, '_>, d: &mut Draft, at: usize) -> Result<(), ConfigError> {
    let (a, mode) = c.arg("jitter-mode", "'packet' or 'process [HOLD]'")?;
    let hold = match mode {
        "packet" => None,
        "process" => Some(match c.peek().filter(|w| starts_with_digit(w)) {
            Some(w) => {
                c.next += 1;
                let ns = c.time_ns(c.next - 1, w)?;
                if ns == 0 {
                    return Err(c.error(c.next - 1, "a hold is longer than 0"));
                }
                Some(ns)
            }
            None => None,
        }),
        _ => return Err(c.error(a, "jitter-mode is 'packet' or 'process [HOLD]'")),
    };
    c.set(d, Slot::JitterMode, at)?;
    d.jitter_hold = hold;
    Ok(())
}

fn reorder(c: &mut Cursor<'_, '_, '_>, d: &mut Draft, at: usize) -> Result<(), ConfigError> {
    if c.peek() == Some("allow") {
        c.next += 1;
        c.set(d, Slot::ReorderAllow, at)?;
        d.link.reorder_allow = true;
        return Ok(());
    }
    let p = c.percent("reorder")?;
    let correlation = c.optional_percent()?.unwrap_or(0.0);
    c.set(d, Slot::Reorder, at)?;
    d.link.reorder_probability = p;
    d.link.reorder_correlation = correlation;
    Ok(())
}

fn gap(c: &mut Cursor<'_, '_, '_>, d: &mut Draft, at: usize) -> Result<(), ConfigError> {
    let (a, v) = c.arg("gap", "a packet count")?;
    let n = c.unit(a, units::parse_count(v))?;
    if n == 0 || n > u64::from(u32::MAX) {
        return Err(c.error(a, format!("gap is a packet count 1..{}", u32::MAX)));
    }
    c.set(d, Slot::ReorderGap, at)?;
    d.link.reorder_gap = n as u32;
    Ok(())
}

fn loss(c: &mut Cursor<'_, '_, '_>, d: &mut Draft, at: usize) -> Result<(), ConfigError> {
    let model = loss_model(c, c.word(at))?;
    c.set(d, Slot::Loss, at)?;
    d.link.loss = model;
    Ok(())
}

fn plr(c: &mut Cursor<'_, '_, '_>, d: &mut Draft, at: usize) -> Result<(), ConfigError> {
    let (a, v) = c.arg("plr", "a probability such as 0.01")?;
    let p = c.unit(a, units::parse_probability(v))?;
    c.set(d, Slot::Loss, at)?;
    d.link.loss = LossConfig::Random {
        p,
        correlation: 0.0,
    };
    Ok(())
}

fn loss_model(c: &mut Cursor<'_, '_, '_>, word: &str) -> Result<LossConfig, ConfigError> {
    match c.peek() {
        // Not `loss 0%`: a random loss of 0 still draws, and so moves the
        // random streams of the decisions after it.
        Some("none") => {
            c.next += 1;
            Ok(LossConfig::None)
        }
        Some("gemodel") => {
            c.next += 1;
            let p = c.percent("loss gemodel")?;
            Ok(LossConfig::GilbertElliott {
                p,
                r: c.optional_percent()?.unwrap_or(1.0 - p),
                loss_bad: c.optional_percent()?.unwrap_or(1.0),
                loss_good: c.optional_percent()?.unwrap_or(0.0),
            })
        }
        Some("state") => {
            c.next += 1;
            four_state(c)
        }
        Some("ber") => {
            c.next += 1;
            let (a, v) = c.arg("loss ber", "a bit error rate such as 1e-6 or 0.000001")?;
            let ber = parse_ber(v).map_err(|m| c.error(a, m))?;
            Ok(LossConfig::Ber { ber })
        }
        Some("random") => {
            c.next += 1;
            let p = c.percent("loss random")?;
            let correlation = c.optional_percent()?.unwrap_or(0.0);
            Ok(LossConfig::Random { p, correlation })
        }
        _ => {
            let p = c.percent(word)?;
            let correlation = c.optional_percent()?.unwrap_or(0.0);
            Ok(LossConfig::Random { p, correlation })
        }
    }
}

fn four_state(c: &mut Cursor<'_, '_, '_>) -> Result<LossConfig, ConfigError> {
    let at = c.next;
    let p13 = c.percent("loss state")?;
    let p31 = c.optional_percent()?.unwrap_or(1.0 - p13);
    let p32 = c.optional_percent()?.unwrap_or(0.0);
    let p23 = c.optional_percent()?.unwrap_or(1.0);
    let p14 = c.optional_percent()?.unwrap_or(0.0);
    if p13 + p14 > 1.0 + 1e-12 {
        return Err(c.error(at, "p13 + p14 exceed 100%: they leave state 1 together"));
    }
    if p31 + p32 > 1.0 + 1e-12 {
        return Err(c.error(at, "p31 + p32 exceed 100%: they leave state 3 together"));
    }
    Ok(LossConfig::FourState {
        p13,
        p31,
        p32,
        p23,
        p14,
    })
}

fn parse_ber(v: &str) -> Result<f64, String> {
    let x: f64 = v
        .parse()
        .map_err(|_| format!("'{v}' is not a bit error rate (e.g. 1e-6)"))?;
    if !(0.0..1.0).contains(&x) {
        return Err(format!("a bit error rate is in [0, 1), not {v}"));
    }
    Ok(x)
}

fn loss_at(c: &mut Cursor<'_, '_, '_>, d: &mut Draft, at: usize) -> Result<(), ConfigError> {
    let (a, v) = c.arg("loss-at", "'arrival' or 'link'")?;
    let where_ = match v {
        "arrival" => LossAt::Arrival,
        "link" => LossAt::Link,
        _ => return Err(c.error(a, "loss-at is 'arrival' or 'link'")),
    };
    c.set(d, Slot::LossAt, at)?;
    d.link.loss_at = where_;
    Ok(())
}

fn duplicate(c: &mut Cursor<'_, '_, '_>, d: &mut Draft, at: usize) -> Result<(), ConfigError> {
    let p = c.percent("duplicate")?;
    let correlation = c.optional_percent()?.unwrap_or(0.0);
    c.set(d, Slot::Duplicate, at)?;
    d.link.duplicate = p;
    d.link.duplicate_correlation = correlation;
    Ok(())
}

fn corrupt(c: &mut Cursor<'_, '_, '_>, d: &mut Draft, at: usize) -> Result<(), ConfigError> {
    let p = c.percent("corrupt")?;
    let correlation = c.optional_percent()?.unwrap_or(0.0);
    c.set(d, Slot::Corrupt, at)?;
    d.link.corrupt = p;
    d.link.corrupt_correlation = correlation;
    Ok(())
}

fn policer(c: &mut Cursor<'_, '_, '_>, d: &mut Draft, at: usize) -> Result<(), ConfigError> {
    let word = c.word(at);
    let (a, v) = c.arg(word, "a rate such as 10mbit")?;
    if v == "none" {
        c.set(d, Slot::Policer, at)?;
        d.link.policer = None;
        return Ok(());
    }
    let rate_bps = c.unit(a, units::parse_rate_bps(v))?;
    let (b, kw) = c.arg(word, "'burst SIZE'")?;
    if kw != "burst" {
        return Err(c.error(b, "expected 'burst SIZE' after the policer rate"));
    }
    let (s, size) = c.arg("burst", "a size such as 15kB")?;
    let burst_bytes = c.unit(s, units::parse_size_bytes(size))?;
    if burst_bytes == 0 || burst_bytes > MAX_POLICER_BURST_BYTES {
        return Err(c.error(s, "a policer burst is between 1B and 1GiB"));
    }
    c.set(d, Slot::Policer, at)?;
    d.link.policer = Some(PolicerConfig {
        rate_bps,
        burst_bytes,
    });
    Ok(())
}

fn slot(c: &mut Cursor<'_, '_, '_>, d: &mut Draft, at: usize) -> Result<(), ConfigError> {
    if c.peek() == Some("none") {
        c.next += 1;
        c.set(d, Slot::Slots, at)?;
        d.link.slot = None;
        return Ok(());
    }
    let mut cfg = SlotConfig {
        min_ns: 0,
        max_ns: 0,
        distribution: None,
        packets: None,
        bytes: None,
    };
    if c.peek() == Some("distribution") {
        c.next += 1;
        let (a, name) = c.arg("slot distribution", "a distribution name or file")?;
        let dist = match Distribution::builtin(name) {
            Some(dist) => dist,
            None => {
                let text = (c.files)(name).map_err(|e| c.error(a, format!("distribution {e}")))?;
                Distribution::parse_file(name, &text)
                    .map_err(|e| c.error(a, hide_content(&e, name, &text)))?
            }
        };
        let (a, v) = c.arg("slot distribution D", "a delay such as 1ms")?;
        let delay_ns = c.time_ns(a, v)?;
        let (a, v) = c.arg("slot distribution D DELAY", "a jitter such as 200us")?;
        let jitter_ns = c.time_ns(a, v)?;
        cfg.distribution = Some((Arc::new(dist), delay_ns, jitter_ns));
    } else {
        let (a, v) = c.arg("slot", "a time such as 1ms")?;
        cfg.min_ns = c.time_ns(a, v)?;
        cfg.max_ns = cfg.min_ns;
        if let Some(w) = c.peek().filter(|w| starts_with_digit(w)) {
            c.next += 1;
            cfg.max_ns = c.time_ns(c.next - 1, w)?;
            if cfg.max_ns < cfg.min_ns {
                return Err(c.error(c.next - 1, "the slot's MAX is below its MIN"));
            }
        }
    }
    loop {
        match c.peek() {
            Some("packets") if cfg.packets.is_none() => {
                c.next += 1;
                let (a, v) = c.arg("slot packets", "a packet count")?;
                let n = c.unit(a, units::parse_count(v))?;
                if n == 0 || n > u64::from(u32::MAX) {
                    return Err(c.error(a, format!("a slot carries 1..{} packets", u32::MAX)));
                }
                cfg.packets = Some(n as u32);
            }
            Some("bytes") if cfg.bytes.is_none() => {
                c.next += 1;
                let (a, v) = c.arg("slot bytes", "a size such as 64KiB")?;
                let n = c.unit(a, units::parse_size_bytes(v))?;
                if n == 0 {
                    return Err(c.error(a, "a slot carries at least one byte"));
                }
                cfg.bytes = Some(n);
            }
            _ => break,
        }
    }
    let dist_zero = cfg
        .distribution
        .as_ref()
        .is_some_and(|(_, d, j)| *d == 0 && *j == 0);
    if cfg.max_ns == 0 && (cfg.distribution.is_none() || dist_zero) {
        return Err(c.error(at, "a slot needs a time to the next slot above 0"));
    }
    c.set(d, Slot::Slots, at)?;
    d.link.slot = Some(cfg);
    Ok(())
}

fn schedule(c: &mut Cursor<'_, '_, '_>, d: &mut Draft, at: usize) -> Result<(), ConfigError> {
    let (a, name) = c.arg("schedule", "a schedule file")?;
    let text = (c.files)(name).map_err(|e| c.error(a, format!("schedule {e}")))?;
    let (changes, period_ns) =
        schedule::read_any(name, &text).map_err(|e| c.error(a, hide_content(&e, name, &text)))?;
    c.set(d, Slot::Schedule, at)?;
    d.schedule = Some(RawSchedule {
        name: name.to_string(),
        changes,
        period_ns,
        position: c.position(a),
        word: name.to_string(),
        text,
    });
    Ok(())
}

fn seed(c: &mut Cursor<'_, '_, '_>, d: &mut Draft, at: usize) -> Result<(), ConfigError> {
    let (a, v) = c.arg("seed", "a whole number")?;
    let seed = c.unit(a, units::parse_count(v))?;
    c.set(d, Slot::Seed, at)?;
    d.seed = Some(seed);
    Ok(())
}
