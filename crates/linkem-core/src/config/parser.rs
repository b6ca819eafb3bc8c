//! The cursor over one layer of words, and the draft link they build.
//!
//! Each word records which things it set ([`Slot`]) and where; a second setting
//! of the same thing in the same layer is an error naming both words, while a
//! later layer replaces what an earlier one set. Checks that need the whole link
//! (a distribution needs a jitter, reordering needs a delay) run once, in
//! [`Draft::finish`].
//!
//! The reading of each word, and the loop that dispatches a layer's words to
//! them ([`super::words::read_layer`]), sit above this module in `words`: the
//! word readers need the cursor and the draft, and this module needs nothing
//! of theirs, so the two never import each other.

use super::{
    ConfigError, Dialect, FileLoader, LinkConfig, LinkSpec, DEFAULT_QUEUE_PACKETS,
    DUMMYNET_DEFAULT_QUEUE_PACKETS,
};
use crate::dist::Distribution;
use crate::units::{self, UnitError};
use std::sync::Arc;

/// One thing a word sets. Two words of one layer that set the same slot conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    Rate,
    Overhead,
    QueuePackets,
    QueueBytes,
    Delay,
    Jitter,
    DelayCorrelation,
    Distribution,
    JitterMode,
    ReorderAllow,
    Reorder,
    ReorderGap,
    Loss,
    LossAt,
    Duplicate,
    Corrupt,
    Policer,
    Slots,
    Schedule,
    Seed,
}

impl Slot {
    fn what(self) -> &'static str {
        match self {
            Slot::Rate => "the link rate (a rate or a trace)",
            Slot::Overhead => "the overhead",
            Slot::QueuePackets => "the queue limit in packets",
            Slot::QueueBytes => "the queue limit in bytes",
            Slot::Delay => "the delay",
            Slot::Jitter => "the jitter",
            Slot::DelayCorrelation => "the delay correlation",
            Slot::Distribution => "the delay distribution",
            Slot::JitterMode => "the jitter mode",
            Slot::ReorderAllow => "'reorder allow'",
            Slot::Reorder => "the reordering probability",
            Slot::ReorderGap => "the reordering gap",
            Slot::Loss => "the loss model",
            Slot::LossAt => "where losses strike",
            Slot::Duplicate => "the duplication",
            Slot::Corrupt => "the corruption",
            Slot::Policer => "the policer",
            Slot::Slots => "the slots",
            Slot::Schedule => "the schedule",
            Slot::Seed => "the seed",
        }
    }
}

/// Where a word was given: its layer, and its 0-based position across all layers.
#[derive(Debug, Clone)]
pub(super) struct Origin {
    layer: usize,
    position: usize,
    word: String,
}

impl Origin {
    fn error(&self, message: impl Into<String>) -> ConfigError {
        ConfigError {
            position: self.position + 1,
            word: self.word.clone(),
            message: message.into(),
        }
    }
}

/// A schedule file's lines, read by `schedule FILE` and resolved against the
/// link's words once every layer is read.
#[derive(Debug, Clone)]
pub(super) struct RawSchedule {
    pub name: String,
    pub changes: Vec<super::schedule::RawChange>,
    pub period_ns: Option<u64>,
    /// The `schedule` word's 0-based position across the layers and its text.
    pub position: usize,
    pub word: String,
    /// The file's text: an error about a line hides it (`crate::filetext`).
    pub text: String,
}

impl RawSchedule {
    pub fn origin(&self, message: String) -> ConfigError {
        ConfigError {
            position: self.position + 1,
            word: self.word.clone(),
            message,
        }
    }
}

/// The link as far as the words so far describe it.
#[derive(Debug, Default, Clone)]
pub(super) struct Draft {
    pub link: LinkConfig,
    pub seed: Option<u64>,
    /// `Some(None)`: explicitly unlimited.
    pub queue_packets: Option<Option<u32>>,
    pub queue_bytes: Option<Option<u64>>,
    pub distribution: Option<Distribution>,
    /// `schedule FILE`, read but not yet resolved.
    pub schedule: Option<RawSchedule>,
    /// `jitter-mode process [HOLD]`: `Some(None)` takes the default hold.
    pub jitter_hold: Option<Option<u64>>,
    /// Who set what, most recent setting of each slot.
    set: Vec<(Slot, Origin)>,
    /// Some layer was read in the Dummynet dialect (its default queue applies).
    pub dummynet: bool,
}

impl Draft {
    /// A draft that holds `base` as if its words had been read in an earlier
    /// layer: later words replace what they set and keep the rest, and the
    /// checks of the whole link ([`Draft::finish`]) see the merged link. The
    /// default queue limit stays a default (so that a limit in bytes given
    /// later means no limit in packets, as it does in one line of words).
    pub fn over(base: &LinkConfig) -> Draft {
        let default_queue =
            base.queue_packets == Some(DEFAULT_QUEUE_PACKETS) && base.queue_bytes.is_none();
        let distribution =
            (*base.distribution != Distribution::Uniform).then(|| (*base.distribution).clone());
        Draft {
            link: base.clone(),
            queue_packets: (!default_queue).then_some(base.queue_packets),
            queue_bytes: base.queue_bytes.map(Some),
            distribution,
            jitter_hold: base.jitter_hold_ns.map(Some),
            ..Draft::default()
        }
    }

    fn origin(&self, slot: Slot) -> Option<&Origin> {
        self.set.iter().find(|(s, _)| *s == slot).map(|(_, o)| o)
    }

    /// Records that `origin` sets `slot`: an error if its layer set it already.
    fn record(&mut self, slot: Slot, origin: Origin) -> Result<(), ConfigError> {
        match self.set.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, earlier)) if earlier.layer == origin.layer => {
                let message = if earlier.word == origin.word {
                    format!(
                        "given twice (word {} and word {}): {} can be set once",
                        earlier.position + 1,
                        origin.position + 1,
                        slot.what()
                    )
                } else {
                    format!(
                        "'{}' (word {}) and '{}' both set {}: give one of them",
                        earlier.word,
                        earlier.position + 1,
                        origin.word,
                        slot.what()
                    )
                };
                Err(origin.error(message))
            }
            Some((_, earlier)) => {
                *earlier = origin;
                Ok(())
            }
            None => {
                self.set.push((slot, origin));
                Ok(())
            }
        }
    }

    /// Applies the defaults and the checks that need the whole link.
    pub fn finish(self) -> Result<LinkSpec, ConfigError> {
        let mut link = self.link.clone();
        let distribution = self.distribution.clone();
        let default_queue = if self.dummynet {
            DUMMYNET_DEFAULT_QUEUE_PACKETS
        } else {
            DEFAULT_QUEUE_PACKETS
        };
        link.queue_bytes = self.queue_bytes.flatten();
        link.queue_packets = match (self.queue_packets, self.queue_bytes) {
            (Some(p), _) => p,
            // A limit in bytes alone means no limit in packets.
            (None, Some(_)) => None,
            (None, None) => Some(default_queue),
        };
        if let Some(d) = distribution {
            let origin = self.set_origin(Slot::Distribution);
            if d.uses_jitter() && link.jitter_ns == 0 && d != Distribution::Uniform {
                return Err(
                    origin.error("a distribution needs a jitter: 'delay D J distribution NAME'")
                );
            }
            if !d.uses_jitter() && link.jitter_ns != 0 {
                return Err(origin.error("a CDF profile gives the delays itself; drop the jitter"));
            }
            link.distribution = Arc::new(d);
        }
        if let Some(hold) = self.jitter_hold {
            if link.jitter_ns == 0 && link.distribution.uses_jitter() {
                return Err(self
                    .set_origin(Slot::JitterMode)
                    .error("jitter-mode process needs a jitter: 'delay D J jitter-mode process'"));
            }
            // Holds long beside the jitter keep the down-slopes a small part of the time.
            let default = link.jitter_ns.saturating_mul(100).max(1_000_000);
            link.jitter_hold_ns = Some(hold.unwrap_or(default));
        }
        if link.reorder_probability > 0.0 {
            if link.delay_ns == 0 {
                return Err(self
                    .set_origin(Slot::Reorder)
                    .error("reordering needs a delay to reorder against (netem refuses it too)"));
            }
            if link.reorder_gap == 0 {
                link.reorder_gap = 1;
            }
        } else if let Some(gap) = self.origin(Slot::ReorderGap) {
            return Err(gap.error("gap needs 'reorder P%'"));
        }
        Ok(LinkSpec {
            link,
            seed: self.seed,
        })
    }

    fn set_origin(&self, slot: Slot) -> Origin {
        self.origin(slot).cloned().unwrap_or(Origin {
            layer: 0,
            position: 0,
            word: String::new(),
        })
    }
}

/// A cursor over one layer of words.
pub(super) struct Cursor<'w, 'f, 'l> {
    words: &'w [&'w str],
    /// Index of the next word to read.
    pub next: usize,
    /// Words in the layers before this one (positions in errors count them).
    offset: usize,
    layer: usize,
    pub dialect: Dialect,
    pub files: &'f mut FileLoader<'l>,
}

impl<'w, 'f, 'l> Cursor<'w, 'f, 'l> {
    pub fn new(
        words: &'w [&'w str],
        offset: usize,
        layer: usize,
        dialect: Dialect,
        files: &'f mut FileLoader<'l>,
    ) -> Self {
        Cursor {
            words,
            next: 0,
            offset,
            layer,
            dialect,
            files,
        }
    }

    /// Skips a leading `netem`, or `[ipfw|dnctl] pipe N config` (which also
    /// switches the layer to the Dummynet dialect), so a pasted line reads as is.
    pub fn skip_pasted_prefix(&mut self) {
        let w = self.words;
        if w.first() == Some(&"netem") {
            self.next = 1;
            return;
        }
        let tool = usize::from(matches!(w.first(), Some(&"ipfw") | Some(&"dnctl")));
        if w.get(tool) == Some(&"pipe") && w.get(tool + 2) == Some(&"config") {
            self.next = tool + 3;
            self.dialect = Dialect::Dummynet;
        }
    }

    pub fn peek(&self) -> Option<&'w str> {
        self.words.get(self.next).copied()
    }

    pub fn word(&self, at: usize) -> &'w str {
        self.words[at]
    }

    pub fn error(&self, at: usize, message: impl Into<String>) -> ConfigError {
        let at = at.min(self.words.len().saturating_sub(1));
        ConfigError {
            position: self.offset + at + 1,
            word: self.words.get(at).copied().unwrap_or("").to_string(),
            message: message.into(),
        }
    }

    /// The 0-based position across all layers of the word at `at`.
    pub fn position(&self, at: usize) -> usize {
        self.offset + at
    }

    /// Records that the word at `at` sets `slot`.
    pub fn set(&self, draft: &mut Draft, slot: Slot, at: usize) -> Result<(), ConfigError> {
        let origin = Origin {
            layer: self.layer,
            position: self.offset + at,
            word: self.words[at].to_string(),
        };
        draft.record(slot, origin)
    }

    /// The next word, which `keyword` requires.
    pub fn arg(&mut self, keyword: &str, what: &str) -> Result<(usize, &'w str), ConfigError> {
        match self.peek() {
            Some(w) => {
                self.next += 1;
                Ok((self.next - 1, w))
            }
            None => Err(self.error(
                self.next.saturating_sub(1),
                format!("'{keyword}' needs {what}"),
            )),
        }
    }

    pub fn unit<T>(&self, at: usize, r: Result<T, UnitError>) -> Result<T, ConfigError> {
        r.map_err(|e| self.error(at, e.0))
    }

    /// A time in this dialect: Dummynet reads a bare number as milliseconds.
    pub fn time_ns(&self, at: usize, text: &str) -> Result<u64, ConfigError> {
        match self.dialect {
            Dialect::Linkem => self.unit(at, units::parse_time_ns(text)),
            Dialect::Dummynet => self.unit(at, super::dummynet::time_ns(text)),
        }
    }

    /// Takes the next word if it is a percentage (an optional trailing argument).
    pub fn optional_percent(&mut self) -> Result<Option<f64>, ConfigError> {
        match self.peek() {
            Some(w) if w.ends_with('%') => {
                self.next += 1;
                self.unit(self.next - 1, units::parse_percent(w)).map(Some)
            }
            _ => Ok(None),
        }
    }

    pub fn percent(&mut self, keyword: &str) -> Result<f64, ConfigError> {
        let (at, w) = self.arg(keyword, "a percentage")?;
        self.unit(at, units::parse_percent(w))
    }
}
