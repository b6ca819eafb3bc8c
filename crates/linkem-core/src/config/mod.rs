//! Link configuration: the words users type (netem's and Dummynet's), and the
//! same options from a TOML file.
//!
//! # Words
//! Every word is listed once, in [`WORDS`] (word, arguments, meaning, example,
//! dialects); the parser dispatches from that table, `linkem --help` prints it
//! ([`words_help`]) and a test holds the guide's list
//! (docs/guide/link-words.md) to it. Order does not matter. A word given
//! twice, or two words that set the same thing (`loss 1% plr 0.5`, `rate` and
//! `bw`, `delay 10ms 1ms` and `jitter 2ms`), is an error naming both: never a
//! silent override. Words of netem or Dummynet that linkem does not support
//! yet ([`UNSUPPORTED`]) are refused as "not supported", not as unknown.
//!
//! # Layers
//! Words may come in layers ([`LinkSpec::parse_layers`]): a TOML file, then the
//! command line, then one direction's words. Inside a layer the rule above holds;
//! a later layer replaces what an earlier one set, which is how the command line
//! overrides a file and `--a-to-b` the words of both directions.
//!
//! # Dialects
//! [`Dialect::Linkem`] reads units as linkem does (see [`crate::units`]): a time
//! or a percentage without its unit is refused, because tc and ipfw read it
//! differently. [`Dialect::Dummynet`] reads a line as typed after `pipe N config`
//! in ipfw/dnctl means there: `delay 20` is 20 ms, `bw 3M`/`bw 3000000` bit/s,
//! `bw 1MByte/s` bytes, `bw 0` no limit, `queue 50` slots (the default, 50) and
//! `queue 64KBytes`/`queue 10K` kibibytes; `plr` a probability. A leading `pipe N
//! config` switches a line to the Dummynet dialect; a leading `netem` is skipped.
//!
//! # Modules
//! [`words`] holds the table, the reading of each word and the loop that
//! dispatches a layer's words, `parser` the cursor over the words and the
//! draft that tracks who set what (below `words`, which uses it), `dummynet` Dummynet's
//! units, [`toml`] the TOML file, `display` the canonical words.

mod display;
mod dummynet;
mod parser;
pub mod schedule;
pub mod toml;
pub mod words;

pub use self::toml::TomlWords;
pub use words::{is_link_word, link_words_help, words_help, WordDoc, UNSUPPORTED, WORDS};

use crate::dist::Distribution;
use crate::loss::LossConfig;
use crate::trace::Trace;
use std::sync::Arc;

/// The default queue limit, in packets (netem's and Linux's txqueuelen default).
pub const DEFAULT_QUEUE_PACKETS: u32 = 1000;
/// Dummynet's default queue, in slots (packets): "the typical queue size for
/// Ethernet devices" (ipfw(8)).
pub const DUMMYNET_DEFAULT_QUEUE_PACKETS: u32 = 50;
/// Framing overhead of Ethernet on the wire: preamble and start delimiter (8),
/// inter-frame gap (12) and FCS (4), for captures that exclude the FCS.
pub const ETHERNET_OVERHEAD_BYTES: u32 = 24;
/// Largest policer bucket: keeps the bucket's exact integer arithmetic in u64.
pub const MAX_POLICER_BURST_BYTES: u64 = 1 << 30;

/// Where a random loss takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossAt {
    /// Before the queue: a lost packet never occupies the queue or the link.
    Arrival,
    /// After the link: a lost packet is queued and transmitted, then lost (a
    /// noisy wire rather than a full router).
    Link,
}

/// A token-bucket policer (MoonEm §5.5): tokens accrue at `rate_bps` up to
/// `burst_bytes`; a packet whose frame bytes exceed the tokens is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicerConfig {
    /// Rate at which tokens accrue.
    pub rate_bps: u64,
    /// Bucket size (and the tokens at start).
    pub burst_bytes: u64,
}

/// netem's `slot`: packets leave only when a slot is open (see
/// [`crate::link`], step 7).
#[derive(Debug, Clone, PartialEq)]
pub struct SlotConfig {
    /// Time to the next slot: uniform in [min, max] ns ...
    pub min_ns: u64,
    /// ... (`slot MIN MAX`; MAX = MIN when not given),
    pub max_ns: u64,
    /// ... or `slot distribution D DELAY JITTER`: DELAY + JITTER·z, z from D.
    pub distribution: Option<(Arc<Distribution>, u64, u64)>,
    /// Packets a slot carries (`None`: no limit).
    pub packets: Option<u32>,
    /// Frame bytes a slot carries; the packet that reaches it still leaves.
    pub bytes: Option<u64>,
}

/// One direction's link, parsed once and then immutable.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// Link rate; `None`: no serialisation time.
    pub rate_bps: Option<u64>,
    /// Bytes added to each frame on the wire (preamble, gap, FCS...).
    pub overhead_bytes: u32,
    /// `None`: no limit in packets.
    pub queue_packets: Option<u32>,
    /// `None`: no limit in bytes.
    pub queue_bytes: Option<u64>,
    /// Mean (or base) delay after the link.
    pub delay_ns: u64,
    /// Spread of the delay, in the distribution's meaning.
    pub jitter_ns: u64,
    /// Correlation of successive delay draws, in [0, 1].
    pub delay_correlation: f64,
    /// Shape of the delay around `delay_ns`.
    pub distribution: Arc<Distribution>,
    /// `jitter-mode process HOLD`: the delay is a process in time that holds
    /// each drawn value for `HOLD` ns (see [`crate::link`], step 7); `None`:
    /// a fresh draw per packet.
    pub jitter_hold_ns: Option<u64>,
    /// Jitter may reorder packets (otherwise releases never go backwards).
    pub reorder_allow: bool,
    /// netem's reordering: probability that a packet skips the delay.
    pub reorder_probability: f64,
    /// Correlation of successive reordering draws.
    pub reorder_correlation: f64,
    /// Only every `reorder_gap`-th packet may skip the delay.
    pub reorder_gap: u32,
    /// The loss model.
    pub loss: LossConfig,
    /// Where a random loss strikes.
    pub loss_at: LossAt,
    /// Probability of sending a second copy.
    pub duplicate: f64,
    /// Correlation of successive duplication draws.
    pub duplicate_correlation: f64,
    /// Probability of flipping one bit.
    pub corrupt: f64,
    /// Correlation of successive corruption draws.
    pub corrupt_correlation: f64,
    /// A token-bucket policer before the queue.
    pub policer: Option<PolicerConfig>,
    /// A mahimahi trace in place of a rate ([`crate::trace`]): the link
    /// carries bytes only at the trace's delivery opportunities.
    pub trace: Option<Arc<Trace>>,
    /// netem's `slot`.
    pub slot: Option<SlotConfig>,
    /// `schedule FILE`: the link changes at given instants
    /// ([`schedule`]); each change is a whole configuration without one.
    pub schedule: Option<Arc<schedule::Schedule>>,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            rate_bps: None,
            overhead_bytes: 0,
            queue_packets: Some(DEFAULT_QUEUE_PACKETS),
            queue_bytes: None,
            delay_ns: 0,
            jitter_ns: 0,
            delay_correlation: 0.0,
            distribution: Arc::new(Distribution::Uniform),
            jitter_hold_ns: None,
            reorder_allow: false,
            reorder_probability: 0.0,
            reorder_correlation: 0.0,
            reorder_gap: 0,
            loss: LossConfig::None,
            loss_at: LossAt::Arrival,
            duplicate: 0.0,
            duplicate_correlation: 0.0,
            corrupt: 0.0,
            corrupt_correlation: 0.0,
            policer: None,
            trace: None,
            slot: None,
            schedule: None,
        }
    }
}

impl LinkConfig {
    /// Whether the link takes time to carry a packet (a rate or a trace), so
    /// that a scheduler in front of it hands it one packet at a time.
    pub fn serialises(&self) -> bool {
        self.rate_bps.is_some() || self.trace.is_some()
    }

    /// Whether the link leaves every packet as it came, at the instant it
    /// came, whatever the packets: no rate or trace (so no queue ever forms,
    /// and no queue limit or overhead applies), no delay or jitter, no
    /// reordering, loss, duplication, corruption, policer, slots or schedule.
    /// A packet through it is delivered unchanged with release = arrival,
    /// and it draws nothing from the random streams, so whether it was given
    /// to the model at all changes nothing that follows.
    pub fn is_pass_through(&self) -> bool {
        self.rate_bps.is_none()
            && self.trace.is_none()
            && self.delay_ns == 0
            && self.jitter_ns == 0
            && self.reorder_probability == 0.0
            && matches!(self.loss, LossConfig::None)
            && self.duplicate == 0.0
            && self.corrupt == 0.0
            && self.policer.is_none()
            && self.slot.is_none()
            && self.schedule.is_none()
    }
}

/// A link plus the seed, as parsed from words or a file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LinkSpec {
    /// The link.
    pub link: LinkConfig,
    /// `seed N`, if given.
    pub seed: Option<u64>,
}

/// A word that could not be used, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{word}' (word {position}): {message}")]
pub struct ConfigError {
    /// 1-based position of the offending word.
    pub position: usize,
    /// The offending word.
    pub word: String,
    /// What is wrong with it.
    pub message: String,
}

/// Reads a file a word names (`distribution FILE`, a pipe's `profile FILE`)
/// by name; the core does no I/O, so the caller supplies this (the binary
/// reads the file system, tests supply text). Its error says what it looked
/// for and starts with the name in quotes; the word that named the file says
/// which kind of file it is ("distribution 'x': ...", "profile 'x': ...").
pub type FileLoader<'a> = dyn FnMut(&str) -> Result<String, String> + 'a;

/// A loader for callers that have no files: every name is unknown.
pub fn no_files(name: &str) -> Result<String, String> {
    Err(format!("'{name}': no such file"))
}

/// Which tool's reading of the words applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// linkem's own: units required, default queue 1000 packets.
    Linkem,
    /// As typed after `pipe N config` in ipfw/dnctl: a bare time is milliseconds,
    /// a bare `bw` bit/s, the default queue 50 slots, `plr` a probability.
    Dummynet,
}

impl LinkSpec {
    /// Parses linkem words separated by white space, with no distribution files.
    pub fn parse(text: &str) -> Result<LinkSpec, ConfigError> {
        let words: Vec<&str> = text.split_whitespace().collect();
        Self::parse_words(&words, &mut no_files)
    }

    /// Parses linkem words. `files` reads a distribution file named by
    /// `distribution FILE`.
    pub fn parse_words(
        words: &[&str],
        files: &mut FileLoader<'_>,
    ) -> Result<LinkSpec, ConfigError> {
        Self::parse_layers(&[words], Dialect::Linkem, files)
    }

    /// Words as typed after `pipe N config` in ipfw/dnctl (with
    /// [`Dialect::Dummynet`]) or linkem's own; no distribution files.
    pub fn parse_dialect(words: &[&str], dialect: Dialect) -> Result<LinkSpec, ConfigError> {
        Self::parse_layers(&[words], dialect, &mut no_files)
    }

    /// Parses layers of words in `dialect`: inside a layer a thing may be set
    /// once; a later layer replaces what an earlier one set. Error positions count
    /// words across all layers, as if they were one line.
    pub fn parse_layers<S: AsRef<str>>(
        layers: &[&[S]],
        dialect: Dialect,
        files: &mut FileLoader<'_>,
    ) -> Result<LinkSpec, ConfigError> {
        Self::read_over(parser::Draft::default(), layers, dialect, files)
    }

    /// Link words applied over a running link (a control socket's `link`
    /// request, PATCH): what `words` set changes and everything else of
    /// `base` stays, as a later layer over `base`'s own words would
    /// ([`LinkSpec::parse_layers`]); the checks of the whole link run on the
    /// result. A word that clears something names its default: `rate
    /// unlimited`, `loss none`, `delay 0ms`, `policer none`, `slot none`,
    /// `queue 1000`, `distribution uniform`, `jitter-mode packet`.
    /// Invariants (property-tested): no words give `base`; words that set
    /// every thing give what they give alone; words that set disjoint things
    /// give the same link in either order.
    pub fn patch<S: AsRef<str>>(
        base: &LinkConfig,
        words: &[S],
        files: &mut FileLoader<'_>,
    ) -> Result<LinkSpec, ConfigError> {
        Self::read_over(parser::Draft::over(base), &[words], Dialect::Linkem, files)
    }

    /// Whether `words` read as a patch ([`LinkSpec::patch`]) before the
    /// link they go over is known: each word and its arguments (files read
    /// through `files`), not the checks of the whole link, which the link
    /// under them may satisfy.
    pub fn check_patch<S: AsRef<str>>(
        words: &[S],
        files: &mut FileLoader<'_>,
    ) -> Result<(), ConfigError> {
        let words: Vec<&str> = words.iter().map(AsRef::as_ref).collect();
        let mut draft = parser::Draft::default();
        let mut cursor = parser::Cursor::new(&words, 0, 0, Dialect::Linkem, files);
        words::read_layer(&mut cursor, &mut draft)
    }

    /// Reads `layers` over `draft`, then resolves a schedule against them.
    fn read_over<S: AsRef<str>>(
        mut draft: parser::Draft,
        layers: &[&[S]],
        dialect: Dialect,
        files: &mut FileLoader<'_>,
    ) -> Result<LinkSpec, ConfigError> {
        let layers: Vec<Vec<&str>> = layers
            .iter()
            .map(|l| l.iter().map(AsRef::as_ref).collect())
            .collect();
        let mut offset = 0;
        for (layer, words) in layers.iter().enumerate() {
            let mut cursor = parser::Cursor::new(words, offset, layer, dialect, files);
            words::read_layer(&mut cursor, &mut draft)?;
            offset += words.len();
        }
        let Some(raw) = draft.schedule.take() else {
            return draft.finish();
        };
        // Each line is one more layer over the link's words and the lines before.
        let mut changes = Vec::with_capacity(raw.changes.len());
        let mut at = draft.clone();
        for (k, change) in raw.changes.iter().enumerate() {
            let words: Vec<&str> = change.words.iter().map(String::as_str).collect();
            let line_error = |e: ConfigError| {
                raw.origin(crate::filetext::hide_content(
                    &format!(
                        "schedule '{}' line {}, link word {}: {}",
                        raw.name, change.line, e.position, e.message
                    ),
                    &raw.name,
                    &raw.text,
                ))
            };
            let mut cursor = parser::Cursor::new(&words, 0, layers.len() + k, dialect, files);
            words::read_layer(&mut cursor, &mut at).map_err(line_error)?;
            let spec = at.clone().finish().map_err(line_error)?;
            changes.push((change.at_ns, Arc::new(spec.link)));
        }
        let mut spec = draft.finish()?;
        spec.link.schedule = Some(Arc::new(schedule::Schedule {
            name: raw.name,
            changes,
            period_ns: raw.period_ns,
        }));
        Ok(spec)
    }
}

/// Whether `words` read alone as one layer, before the checks of the whole
/// link (a distribution needs a jitter...), which other words may satisfy.
/// Files they name are not read here: the error is the word's own.
pub(crate) fn check_words_alone(words: &[&str]) -> Result<(), ConfigError> {
    const NOT_READ: &str = "\u{0}not read";
    let mut files = |_: &str| Err(NOT_READ.to_string());
    let mut draft = parser::Draft::default();
    let mut cursor = parser::Cursor::new(words, 0, 0, Dialect::Linkem, &mut files);
    match words::read_layer(&mut cursor, &mut draft) {
        Err(e) if e.message.contains(NOT_READ) => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod patch_tests;
#[cfg(test)]
mod tests;
