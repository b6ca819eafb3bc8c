//! A `LinkChaos` spec as linkem link words per direction of the pod: egress
//! (what the pod sends) and ingress (what it receives), with Chaos Mesh's
//! meaning of each NetworkChaos field, checked by linkem's own parser, so
//! a spec either maps whole or is refused with the field (and, for words
//! linkem's parser refuses, the word and its position) named.
//!
//! What Chaos Mesh does, read in its source (`api/v1alpha1/networkchaos_*`,
//! `controllers/chaosimpl/networkchaos/{trafficcontrol,partition}`,
//! `controllers/podnetworkchaos/controller.go`, `pkg/netem/convert.go`,
//! `pkg/chaosdaemon/tc_server.go`), and how it maps here:
//!
//! - `action` `netem`, `delay`, `loss`, `duplicate`, `corrupt` are one tc
//!   type: Chaos Mesh merges EVERY given one of `delay`, `loss`,
//!   `duplicate`, `corrupt`, `rate` into one netem qdisc whatever the action
//!   names (`mergeNetem`), and refuses none given. So does this module.
//!   `bandwidth` is a tbf from `bandwidth` alone; `partition` drops every
//!   packet (iptables DROP) in the direction(s): `loss 100%` here. A field
//!   the action does not use (Chaos Mesh ignores it) is refused here, since
//!   a manifest carrying it means something Chaos Mesh would not do.
//! - `direction`: Chaos Mesh applies tc on the selected pods' egress for
//!   `to` and `both`, and for `from` only on a `target`'s pods; its webhook
//!   refuses `from`/`both` without a target for tc actions. Partition
//!   without target: `to` = OUTPUT (egress), `from` = INPUT (ingress),
//!   `both` = both. linkem sits on the pod's interface, so here `to` =
//!   egress, `from` = ingress, `both` = both for every action (the default
//!   `to`). `target`, `externalTargets`, `targetDevice`, `remoteCluster`
//!   (per-destination scope) are refused: a pod's emulator impairs its whole
//!   link.
//! - netem: `delay LATENCY [JITTER [CORR]]` with jitter only when above 0
//!   and the correlation only with a jitter, none of it (nor a reorder)
//!   for a zero latency (as `convertNetemToArgs`);
//!   defaults `jitter` "0ms", `correlation` "0". Percentages are tc's bare
//!   percent ("25" = 25%). `reorder P [C] gap N` (tc makes gap 0 a gap of
//!   1, linkem's default). linkem keeps a jittered link in order where netem
//!   reorders; `linkem.egress: reorder allow` gives netem's reordering.
//! - Rates (`rate`, `bandwidth.rate`) in tc's units: `bit kbit mbit gbit
//!   tbit` bits per second (powers of 1000), `bps kbps mbps gbps tbps`
//!   BYTES per second; written here as exact `NNNbit`.
//! - tbf: `rate` the link rate, `limit` the bytes queued (`queue NB`),
//!   `buffer` the bucket in bytes: tbf drops a packet longer than its
//!   bucket, so a bucket under one Ethernet frame (1514 B) is refused;
//!   linkem's link has a one-packet bucket, so a larger bucket's burst
//!   after idle is not emulated and is reported in `notes`. `peakrate` (tc
//!   reads the bare number as bit/s) caps that burst's speed and `minburst`
//!   is its bucket: with no burst both hold trivially (a note says so).
//!
//! Word positions in errors are 1-based in the direction's words as
//! returned (`egress`/`ingress`), the words the agent sends.

use crate::chaos::{Action, Direction, LinkChaosSpec, LinkemSpec};
use linkem_core::{ConfigError, LinkSpec};
use std::fmt;

/// The words a spec gives each direction of a selected pod; `None` leaves
/// that direction at the pod's base link.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirectionWords {
    /// What the pod sends: link words, checked by linkem's parser together
    /// with `schedule.egress` and `traces.egress`.
    pub egress: Option<String>,
    /// What the pod receives.
    pub ingress: Option<String>,
    /// `linkem.rules`, a Dummynet rule set, as given.
    pub rules: Option<String>,
    /// Per direction, the text of a linkem schedule file (lines `TIME
    /// WORDS`, times from when the words take effect): the agent writes it
    /// to a file in its run dir and appends `schedule PATH` to that
    /// direction's words.
    pub schedule: PerDirection,
    /// Per direction, a mahimahi trace's text: the agent writes it to a
    /// file and appends `trace PATH` to that direction's words.
    pub traces: PerDirection,
    /// What maps with a difference worth saying (the controller puts these
    /// in `status.message`), e.g. a tbf bucket's burst linkem does not emulate.
    pub notes: Vec<String>,
}

/// One text per direction of the pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerDirection {
    pub egress: Option<String>,
    pub ingress: Option<String>,
}

/// Why a spec cannot apply: the field (`delay.latency`, `linkem.egress`,
/// `target`), and for a word linkem's parser refused, the word and its
/// 1-based position in the direction's words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    pub field: String,
    pub message: String,
    pub word: Option<String>,
    pub position: Option<u32>,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.word, self.position) {
            (Some(w), Some(p)) => write!(f, "{}: '{w}' (word {p}): {}", self.field, self.message),
            _ => write!(f, "{}: {}", self.field, self.message),
        }
    }
}

impl std::error::Error for SpecError {}

/// A [`SpecError`] for `field` with no word named.
pub fn refuse_field(field: &str, message: impl Into<String>) -> SpecError {
    refuse(field, message)
}

fn refuse(field: &str, message: impl Into<String>) -> SpecError {
    SpecError {
        field: field.into(),
        message: message.into(),
        word: None,
        position: None,
    }
}

/// One Ethernet frame without FCS: a tbf bucket smaller than this drops full-size packets.
const MIN_TBF_BUCKET_BYTES: u32 = 1514;

/// Words with the field each came from, so a parser error names the field.
#[derive(Default)]
struct Tagged {
    words: Vec<(String, String)>,
}

impl Tagged {
    fn push(&mut self, field: &str, text: &str) {
        for w in text.split_whitespace() {
            self.words.push((w.to_string(), field.to_string()));
        }
    }
}

/// The spec's words per direction, or the reason it cannot apply.
pub fn link_words(spec: &LinkChaosSpec) -> Result<DirectionWords, SpecError> {
    refuse_scope(spec)?;
    let chaos = chaos_words(spec)?;
    let dir = spec.direction.unwrap_or(Direction::To);
    let (to_egress, to_ingress) = match dir {
        Direction::To => (true, false),
        Direction::From => (false, true),
        Direction::Both => (true, true),
    };
    let linkem = spec.linkem.clone().unwrap_or_default();
    let mut out = DirectionWords {
        rules: check_rules(linkem.rules.as_deref())?,
        notes: chaos.notes.clone(),
        ..DirectionWords::default()
    };
    let schedule = schedule_texts(&linkem)?;
    let traces = linkem.trace.clone().unwrap_or_default();
    for egress in [true, false] {
        let (name, own) = if egress {
            ("egress", linkem.egress.as_deref())
        } else {
            ("ingress", linkem.ingress.as_deref())
        };
        let mut t = Tagged::default();
        if (egress && to_egress) || (!egress && to_ingress) {
            t.words.extend(chaos.words.words.iter().cloned());
        }
        t.push("linkem.link", linkem.link.as_deref().unwrap_or(""));
        t.push(&format!("linkem.{name}"), own.unwrap_or(""));
        let (sched, trace) = if egress {
            (schedule.egress.clone(), traces.egress.clone())
        } else {
            (schedule.ingress.clone(), traces.ingress.clone())
        };
        let sched = sched.filter(|s| !s.trim().is_empty());
        let trace = trace.filter(|s| !s.trim().is_empty());
        check(&t, name, sched.as_deref(), trace.as_deref())?;
        let words = (!t.words.is_empty()).then(|| {
            t.words
                .iter()
                .map(|(w, _)| w.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        });
        if egress {
            (out.egress, out.schedule.egress, out.traces.egress) = (words, sched, trace);
        } else {
            (out.ingress, out.schedule.ingress, out.traces.ingress) = (words, sched, trace);
        }
    }
    let nothing = out.egress.is_none() && out.ingress.is_none() && out.rules.is_none();
    if nothing && !chaos.given {
        let action = action_name(spec.action.unwrap_or(Action::Netem));
        return Err(refuse(
            "action",
            format!(
                "action {action} needs at least one of delay, loss, duplicate, corrupt, rate \
                 (or linkem's own words)"
            ),
        ));
    }
    Ok(out)
}

fn refuse_scope(spec: &LinkChaosSpec) -> Result<(), SpecError> {
    let why = "a per-destination scope is not supported: linkem impairs the selected \
               pods' whole link (their emulator sits on the pod's interface). Remove it to \
               impair every destination; for some destinations only, run the pods on a \
               linkem-cni network with `rules` and give linkem.rules matching them (e.g. \
               'add pipe 1 ip from any to 10.0.0.7')";
    if spec.target.is_some() {
        return Err(refuse("target", why));
    }
    if spec
        .external_targets
        .as_ref()
        .is_some_and(|t| !t.is_empty())
    {
        return Err(refuse("externalTargets", why));
    }
    if spec.target_device.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(refuse("targetDevice", why));
    }
    if spec.remote_cluster.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(refuse(
            "remoteCluster",
            "linkem applies in its own cluster only",
        ));
    }
    Ok(())
}

struct ChaosWords {
    words: Tagged,
    /// A NetworkChaos impairment was given (zero probabilities give no words).
    given: bool,
    notes: Vec<String>,
}

/// The words of the NetworkChaos fields the action uses.
fn chaos_words(spec: &LinkChaosSpec) -> Result<ChaosWords, SpecError> {
    let action = spec.action.unwrap_or(Action::Netem);
    let mut out = ChaosWords {
        words: Tagged::default(),
        given: false,
        notes: Vec::new(),
    };
    let present = [
        ("delay", spec.delay.is_some()),
        ("loss", spec.loss.is_some()),
        ("duplicate", spec.duplicate.is_some()),
        ("corrupt", spec.corrupt.is_some()),
        ("rate", spec.rate.is_some()),
        ("bandwidth", spec.bandwidth.is_some()),
    ];
    let used: &[&str] = match action {
        Action::Partition => &[],
        Action::Bandwidth => &["bandwidth"],
        _ => &["delay", "loss", "duplicate", "corrupt", "rate"],
    };
    for (field, given) in present {
        if given && !used.contains(&field) {
            return Err(refuse(
                field,
                format!(
                    "action {} does not use it (Chaos Mesh ignores it); remove it",
                    action_name(action)
                ),
            ));
        }
    }
    out.given = action == Action::Partition || present.iter().any(|(_, g)| *g);
    match action {
        Action::Partition => out.words.push("action", "loss 100%"),
        Action::Bandwidth => {
            let Some(b) = &spec.bandwidth else {
                return Err(refuse(
                    "bandwidth",
                    "action bandwidth needs bandwidth {rate, limit, buffer}",
                ));
            };
            bandwidth_words(b, &mut out)?;
        }
        _ => {
            netem_words(spec, &mut out)?;
        }
    }
    Ok(out)
}

fn action_name(a: Action) -> &'static str {
    match a {
        Action::Netem => "netem",
        Action::Delay => "delay",
        Action::Loss => "loss",
        Action::Duplicate => "duplicate",
        Action::Corrupt => "corrupt",
        Action::Partition => "partition",
        Action::Bandwidth => "bandwidth",
    }
}

fn netem_words(spec: &LinkChaosSpec, out: &mut ChaosWords) -> Result<(), SpecError> {
    let t = &mut out.words;
    // tc gets no delay, jitter or reorder at all for a zero latency
    // (`convertNetemToArgs`; netem cannot reorder without a delay).
    if let Some(d) = spec.delay.as_ref().filter(|d| !is_zero_time(&d.latency)) {
        t.push(
            "delay.latency",
            &format!("delay {}", go_time_word(&d.latency)),
        );
        let jitter = d.jitter.as_deref().unwrap_or("0ms");
        if !is_zero_time(jitter) {
            t.push("delay.jitter", &go_time_word(jitter));
            out.notes.push(
                "delay.jitter: linkem keeps the packets in order where netem's jitter reorders \
                 them; 'reorder allow' in linkem.egress/ingress gives netem's reordering"
                    .into(),
            );
            let corr = d.correlation.as_deref().unwrap_or("0");
            if !is_zero_number(corr) {
                t.push("delay.correlation", &percent_word(corr));
            }
        }
        if let Some(r) = &d.reorder {
            if !is_zero_number(&r.reorder) {
                t.push(
                    "delay.reorder.reorder",
                    &format!("reorder {}", percent_word(&r.reorder)),
                );
                let corr = r.correlation.as_deref().unwrap_or("0");
                if !is_zero_number(corr) {
                    t.push("delay.reorder.correlation", &percent_word(corr));
                }
                if r.gap > 0 {
                    t.push("delay.reorder.gap", &format!("gap {}", r.gap));
                }
            }
        }
    }
    let percents = [
        (
            "loss",
            spec.loss.as_ref().map(|l| (&l.loss, &l.correlation)),
        ),
        (
            "duplicate",
            spec.duplicate
                .as_ref()
                .map(|l| (&l.duplicate, &l.correlation)),
        ),
        (
            "corrupt",
            spec.corrupt.as_ref().map(|l| (&l.corrupt, &l.correlation)),
        ),
    ];
    for (word, given) in percents {
        let Some((p, corr)) = given else { continue };
        // tc leaves out a zero probability (convertNetemToArgs), and so the impairment.
        if is_zero_number(p) {
            continue;
        }
        t.push(
            &format!("{word}.{word}"),
            &format!("{word} {}", percent_word(p)),
        );
        let corr = corr.as_deref().unwrap_or("0");
        if !is_zero_number(corr) {
            t.push(&format!("{word}.correlation"), &percent_word(corr));
        }
    }
    if let Some(r) = &spec.rate {
        let bits = tc_rate_bits_per_s(&r.rate).map_err(|m| refuse("rate.rate", m))?;
        t.push("rate.rate", &format!("rate {bits}bit"));
    }
    Ok(())
}

fn bandwidth_words(b: &crate::chaos::BandwidthSpec, out: &mut ChaosWords) -> Result<(), SpecError> {
    let bits = tc_rate_bits_per_s(&b.rate).map_err(|m| refuse("bandwidth.rate", m))?;
    out.words.push("bandwidth.rate", &format!("rate {bits}bit"));
    if b.limit == 0 {
        return Err(refuse(
            "bandwidth.limit",
            "tbf's queue limit is at least 1 byte",
        ));
    }
    out.words
        .push("bandwidth.limit", &format!("queue {}B", b.limit));
    if b.buffer < MIN_TBF_BUCKET_BYTES {
        return Err(refuse(
            "bandwidth.buffer",
            format!(
                "tbf drops every packet longer than its bucket ({} bytes) and linkem's link \
                 passes them; give at least {MIN_TBF_BUCKET_BYTES} (one Ethernet frame)",
                b.buffer
            ),
        ));
    }
    if b.buffer > MIN_TBF_BUCKET_BYTES {
        out.notes.push(format!(
            "bandwidth.buffer {}: linkem's link holds the rate from the first packet \
             (a one-packet bucket); tbf's burst of up to {} bytes after idle is not emulated",
            b.buffer, b.buffer
        ));
    }
    if let Some(peak) = b.peakrate.filter(|p| *p > 0) {
        if peak <= bits {
            return Err(refuse(
                "bandwidth.peakrate",
                format!("tbf needs a peakrate ({peak} bit/s) above the rate ({bits} bit/s)"),
            ));
        }
        out.notes.push(format!(
            "bandwidth.peakrate {peak}: linkem's link never bursts above its rate, so the peak holds"
        ));
    }
    Ok(())
}

/// The rule set, checked by linkem's rule parser with the emulator's sides
/// named `a` (the pod's side: `a-to-b` is what it sends) and `b`.
fn check_rules(rules: Option<&str>) -> Result<Option<String>, SpecError> {
    let Some(text) = rules.filter(|r| !r.trim().is_empty()) else {
        return Ok(None);
    };
    match linkem_core::rules::parse_rules(text, ["a", "b"], &mut linkem_core::config::no_files) {
        Ok(_) => Ok(Some(text.to_string())),
        Err(e) => Err(SpecError {
            field: "linkem.rules".into(),
            message: format!("line {}: {}", e.line, e.message),
            word: Some(e.word),
            position: None,
        }),
    }
}

/// Go's `m` (minutes) is linkem's `min`; every other unit is spelled alike,
/// and a malformed time passes through for linkem's parser to name.
fn go_time_word(text: &str) -> String {
    match text.strip_suffix('m') {
        Some(n) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit() || c == '.') => {
            format!("{n}min")
        }
        _ => text.to_string(),
    }
}

fn is_zero_time(text: &str) -> bool {
    let n = text.trim_end_matches(|c: char| c.is_ascii_alphabetic() || c == 'µ');
    !n.is_empty() && is_zero_number(n)
}

fn is_zero_number(text: &str) -> bool {
    text.parse::<f64>().is_ok_and(|v| v == 0.0)
}

/// tc's bare percent ("25") as linkem's "25%"; anything else passes
/// through for linkem's parser to name.
fn percent_word(text: &str) -> String {
    if text.parse::<f64>().is_ok() {
        format!("{text}%")
    } else {
        text.to_string()
    }
}

/// A rate in tc's units as bits per second, exactly: `bit`.. `tbit` are
/// powers of 1000 bits per second; `bps`.. `tbps` are BYTES per second.
pub fn tc_rate_bits_per_s(text: &str) -> Result<u64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let units: [(&str, u128); 10] = [
        ("tbps", 8_000_000_000_000),
        ("gbps", 8_000_000_000),
        ("mbps", 8_000_000),
        ("kbps", 8_000),
        ("bps", 8),
        ("tbit", 1_000_000_000_000),
        ("gbit", 1_000_000_000),
        ("mbit", 1_000_000),
        ("kbit", 1_000),
        ("bit", 1),
    ];
    let Some((number, scale)) = units
        .iter()
        .find_map(|(u, s)| lower.strip_suffix(u).map(|n| (n, *s)))
    else {
        return Err(format!(
            "'{text}': a rate in tc's units (bit, kbit, mbit, gbit, tbit; bps, kbps, mbps, gbps, tbps are bytes per second)"
        ));
    };
    let bits = scaled_decimal(number.trim(), scale)
        .ok_or_else(|| format!("'{text}': not a number of {} bit/s", scale))?;
    if bits == 0 {
        return Err(format!("'{text}': a rate above zero"));
    }
    u64::try_from(bits).map_err(|_| format!("'{text}': too large"))
}

/// `number` × `scale` when the product is a whole number ("1.5" × 1000).
fn scaled_decimal(number: &str, scale: u128) -> Option<u128> {
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    if frac.len() > 18 || int.len() > 20 {
        return None;
    }
    let den = 10u128.pow(frac.len() as u32);
    let num = format!("{int}{frac}")
        .parse::<u128>()
        .ok()?
        .checked_mul(scale)?;
    (num % den == 0).then_some(num / den)
}

/// Go's `time.ParseDuration` for the forms the CRD admits (`10s`, `1m30s`,
/// `1.5h`, `250ms`, `µs`): nanoseconds.
pub fn go_duration_ns(text: &str) -> Result<u64, String> {
    let bad = || format!("'{text}': not a duration such as 10s, 1m30s, 250ms");
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total_ns: u128 = 0;
    while !rest.is_empty() {
        let n_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (number, tail) = rest.split_at(n_end);
        let u_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(u_end);
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(bad()),
        };
        let (int, frac) = number.split_once('.').unwrap_or((number, ""));
        if int.is_empty() && frac.is_empty() {
            return Err(bad());
        }
        let int_ns = if int.is_empty() {
            0
        } else {
            int.parse::<u128>().map_err(|_| bad())? * scale
        };
        let frac_digits: String = frac.chars().take(18).collect();
        let frac_ns = if frac_digits.is_empty() {
            0
        } else {
            frac_digits.parse::<u128>().map_err(|_| bad())? * scale
                / 10u128.pow(frac_digits.len() as u32)
        };
        total_ns = total_ns.checked_add(int_ns + frac_ns).ok_or_else(bad)?;
        rest = next;
    }
    u64::try_from(total_ns).map_err(|_| bad())
}

/// Per direction, the schedule file's lines (`TIME WORDS`).
fn schedule_texts(linkem: &LinkemSpec) -> Result<PerDirection, SpecError> {
    let mut out = PerDirection::default();
    let mut egress = String::new();
    let mut ingress = String::new();
    for (i, step) in linkem.schedule.iter().flatten().enumerate() {
        let field = format!("linkem.schedule[{i}]");
        let at_ns = go_duration_ns(&step.at).map_err(|m| refuse(&format!("{field}.at"), m))?;
        let line = format!(
            "{at_ns}ns {}\n",
            step.words.split_whitespace().collect::<Vec<_>>().join(" ")
        );
        let dir = step.direction.unwrap_or(Direction::Both);
        if matches!(dir, Direction::To | Direction::Both) {
            egress.push_str(&line);
        }
        if matches!(dir, Direction::From | Direction::Both) {
            ingress.push_str(&line);
        }
    }
    out.egress = (!egress.is_empty()).then_some(egress);
    out.ingress = (!ingress.is_empty()).then_some(ingress);
    Ok(out)
}

const SCHEDULE_NAME: &str = "@linkchaos-schedule";
const TRACE_NAME: &str = "@linkchaos-trace";

/// Parses one direction's final words (plus its schedule and trace as the
/// agent will name them) with linkem's parser; a refusal names the field
/// that gave the word.
fn check(
    t: &Tagged,
    direction: &str,
    schedule: Option<&str>,
    trace: Option<&str>,
) -> Result<(), SpecError> {
    let mut words: Vec<&str> = t.words.iter().map(|(w, _)| w.as_str()).collect();
    if schedule.is_some() {
        words.extend(["schedule", SCHEDULE_NAME]);
    }
    if trace.is_some() {
        words.extend(["trace", TRACE_NAME]);
    }
    if words.is_empty() {
        return Ok(());
    }
    let mut files = |name: &str| -> Result<String, String> {
        match name {
            SCHEDULE_NAME => schedule.map(str::to_string),
            TRACE_NAME => trace.map(str::to_string),
            _ => None,
        }
        .ok_or_else(|| {
            format!("'{name}': no such file (linkem.trace and linkem.schedule carry files)")
        })
    };
    match LinkSpec::parse_words(&words, &mut files) {
        Ok(_) => Ok(()),
        Err(e) => Err(word_error(t, direction, schedule.is_some(), e)),
    }
}

fn word_error(t: &Tagged, direction: &str, has_schedule: bool, e: ConfigError) -> SpecError {
    let n = t.words.len();
    let field = match e.position.checked_sub(1) {
        Some(i) if i < n => t.words[i].1.clone(),
        Some(i) if has_schedule && i < n + 2 => format!("linkem.schedule ({direction})"),
        _ => format!("linkem.trace.{direction}"),
    };
    let inside = e.position >= 1 && e.position <= n;
    SpecError {
        field,
        message: format!("{} words: {}", direction, e.message),
        word: inside.then(|| e.word.clone()),
        position: inside.then_some(e.position as u32),
    }
}

#[cfg(test)]
#[path = "words_tests.rs"]
mod tests;
