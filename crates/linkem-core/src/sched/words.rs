//! The words of `sched N config`, `queue N config` and the scheduler and
//! AQM words of `pipe N config`, as ipfw(8)/dnctl(8) take them.
//!
//! ```text
//! sched N config [type fifo|wf2q+|qfq|rr|prio|fq_codel|fq_pie] [quantum B] [limit P]
//!                [flows F] [target T] [interval T] [tupdate T] [alpha A] [beta B]
//!                [max_burst T] [max_ecnth P] [ecn|noecn] [mask ...] [buckets N]
//! queue N config pipe|sched M [weight W] [lmax|maxlen B] [queue LIMIT] [plr P]
//!                [droptail | red|gred w_q/min_th/max_th/max_p
//!                 | codel [target T] [interval T] [ecn|noecn]
//!                 | pie [target T] [tupdate T] [alpha A] [beta B] [max_burst T]
//!                       [max_ecnth P] [ecn|noecn]] [ecn] [mask ...] [buckets N]
//! pipe N config ... [type T] [droptail|red ...|gred ...|codel ...|pie ...] [ecn]
//! ```
//!
//! Defaults as Dummynet's: type wf2q+, weight 1 (wf2q+ 1..100, rr and qfq
//! 1..65536, prio 0..31 with default 0: under prio the weight is the level,
//! 0 served first), `lmax` (qfq and rr only) 1514 frame bytes (Dummynet's
//! 1500 IP bytes as an Ethernet frame; qfq 1..65535 where Dummynet caps at
//! 2000, rr 64..2048 as Dummynet), queue 50 slots,
//! quantum 1514 B, fq limit 10240 packets, 1024 flows, CoDel target 5 ms /
//! interval 100 ms, PIE target 15 ms / tupdate 15 ms / alpha 0.125 / beta
//! 1.25 / max_burst 150 ms / max_ecnth 0.1; ECN off for codel/pie queues, on
//! for fq_codel/fq_pie. A bare time is milliseconds. Under rr, the
//! scheduler's `quantum` is the `lmax` of its queues that give none
//! (Dummynet has no such word: its default is 1500).
//!
//! Ranges the parser enforces (anything else is an error naming the word):
//! `sched`/`queue` numbers (and a queue's `pipe M`/`sched M`) 1..65535 in
//! decimal ([`crate::rules::parse`]); `quantum` 1..1048576 bytes (fq_*),
//! 64..2048 (rr, Dummynet's bounds of `lmax`); `limit` 1..20480 packets and
//! `flows` 1..65536 (fq_* only);
//! `queue` 1..100000 slots, or 1 B..4 GiB with a unit (B, K/KB/KBytes =
//! 1024 B, M/MB/MBytes = 2²⁰ B); `plr` a probability 0..1; times 0..3600000
//! ms, CoDel's target below its interval and both above 0, PIE's tupdate
//! above 0; `alpha`/`beta` 0..7; `max_ecnth` 0..1; RED `w_q` and `max_p` in
//! (0, 1] (at least 10⁻⁹), `min_th` < `max_th` (slots, or bytes under a byte
//! limit); `buckets` 1..1048576 (accepted and ignored: classes are kept in a
//! hash map). A word given twice is an error.
//!
//! Where linkem differs from Dummynet on purpose:
//! - `sched N` is the scheduler of pipe N's link (`pipe N config` must exist);
//!   queues attached to `sched N` (or `pipe N`) and traffic sent to `pipe N`
//!   share that one link; traffic sent to `pipe N` uses pipe N's own queue
//!   (its `queue` and AQM, weight 1).
//! - `mask` on `sched N` (or, as in Dummynet, on `pipe N config` when the pipe
//!   is scheduled) gives every masked flow its own **scheduler instance**: its
//!   own copy of pipe N's link (full rate, delay, impairments) and its own
//!   classes; a queue's instances are then per (queue mask | sched mask), so a
//!   queue instance belongs to one scheduler instance (Dummynet's `fsk_mask`).
//!   A mask on `sched N` takes precedence over one on `pipe N`. Idle
//!   instances expire and count against `--max-flows` as dynamic pipe
//!   instances do ([`super::service`]).
//! - A pipe with no `sched`, queue or AQM word keeps the closed-form link
//!   (exact, and faster); `type fifo` with one droptail queue gives the same
//!   result through the scheduler.
//! - PIE's `capdrop`/`drand`/`dre` are not supported yet.
//! - `qfq` normalises by the sum of its queues' weights (see [`super::qfq`]),
//!   as current Dummynet does.
//! - A weight or `lmax` out of its scheduler's range is an error; Dummynet
//!   would clamp it (or bump it to the default) and print a warning.
//! - `pri` is refused: ipfw stores it where no scheduler reads it (`par[2]`);
//!   prio's level is the weight.

use super::{QueueParams, SchedKind, SchedParams};
use crate::aqm::{AqmConfig, CoDelConfig, PieConfig, RedConfig};
use crate::pipe::{parse_mask, FlowMask, PipeDef};
use crate::rulefile::{object_number, parse_number, rerr, RulesError};
use std::collections::BTreeMap;

/// A `sched N config` line.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedDef {
    /// N of `sched N`, 1..65535: the scheduler of pipe N's link.
    pub number: u32,
    /// Type and parameters, defaults filled in ([`SchedParams::new`]).
    pub params: SchedParams,
    /// `mask ...`: one scheduler instance (with its own copy of the pipe's
    /// link) per masked flow id; None: one instance.
    pub mask: Option<FlowMask>,
    /// Line of the rule file (for error messages).
    pub line: usize,
    /// The words after `config`, joined by spaces (for listings).
    pub words: String,
}

/// What a `queue N config` attaches to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parent {
    /// `pipe M`: served by pipe M's scheduler.
    Pipe(u32),
    /// `sched M`: served by scheduler M, which is pipe M's.
    Sched(u32),
}

impl Parent {
    /// The pipe whose link serves the queue (sched N serves pipe N).
    pub fn pipe(self) -> u32 {
        match self {
            Parent::Pipe(n) | Parent::Sched(n) => n,
        }
    }
}

/// A `queue N config` line.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueDef {
    /// N of `queue N`, 1..65535 (what `queue N` rule actions name).
    pub number: u32,
    /// The pipe or scheduler it attaches to.
    pub parent: Parent,
    /// Weight, lmax, level, limit, plr and AQM, defaults filled in.
    pub params: QueueParams,
    /// `mask ...`: one instance per masked flow; None: one instance.
    pub mask: Option<FlowMask>,
    /// Line of the rule file (for error messages).
    pub line: usize,
    /// The words after `config`, joined by spaces (for listings).
    pub words: String,
}

/// The scheduler and AQM words of a `pipe N config` line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PipeSched {
    /// `type T` on the pipe: its scheduler type when no `sched N` line
    /// gives one.
    pub kind: Option<SchedKind>,
    /// The AQM of the pipe's own queue: `red`, `gred`, `codel` or `pie`
    /// (`ecn` turns on marking; `ecn` without one of them is an error).
    /// None: droptail.
    pub aqm: Option<AqmConfig>,
}

/// Every scheduler-related line of a rule file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SchedSet {
    /// `sched N config` lines by N (a later line for the same N replaces it).
    pub scheds: BTreeMap<u32, SchedDef>,
    /// `queue N config` lines by N (a later line for the same N replaces it).
    pub queues: BTreeMap<u32, QueueDef>,
    /// Scheduler and AQM words of `pipe N config` lines, by pipe number.
    pub pipes: BTreeMap<u32, PipeSched>,
}

impl SchedSet {
    /// Whether pipe `n` is served by a scheduler (else the closed-form link).
    pub fn scheduled(&self, n: u32) -> bool {
        self.scheds.contains_key(&n)
            || self
                .pipes
                .get(&n)
                .is_some_and(|p| p.kind.is_some() || p.aqm.is_some())
            || self.queues.values().any(|q| q.parent.pipe() == n)
    }

    /// The scheduler mask of pipe `n`: `sched n config ... mask`, else the
    /// mask of `pipe n config` (`pipe_mask`), as Dummynet's `pipe N config
    /// mask` sets the mask of scheduler N. None: one scheduler instance.
    pub fn sched_mask(&self, n: u32, pipe_mask: Option<FlowMask>) -> Option<FlowMask> {
        self.scheds.get(&n).and_then(|s| s.mask).or(pipe_mask)
    }

    /// The scheduler parameters of pipe `n`.
    pub fn params(&self, n: u32) -> SchedParams {
        if let Some(s) = self.scheds.get(&n) {
            return s.params.clone();
        }
        let kind = self.pipes.get(&n).and_then(|p| p.kind).unwrap_or(
            // A pipe made scheduled by an AQM word alone keeps FIFO order.
            if self.queues.values().any(|q| q.parent.pipe() == n) {
                SchedKind::Wf2q
            } else {
                SchedKind::Fifo
            },
        );
        SchedParams::new(kind)
    }
}

/// What a `weight` may be, per scheduler (for error messages).
const WEIGHT_RANGES: &str =
    "weight is 1..100 under wf2q+, 1..65536 under rr and qfq, 0..31 (the level) under prio";

/// The weights `kind` accepts: Dummynet's bounds (fifo and fq_* ignore the
/// weight and keep wf2q+'s range, so a queue can move between them).
pub fn weight_range(kind: SchedKind) -> (u32, u32) {
    match kind {
        SchedKind::Rr => (1, super::drr::MAX_WEIGHT),
        SchedKind::Qfq => (1, super::qfq::MAX_WEIGHT),
        SchedKind::Prio => (0, super::prio::MAX_LEVEL),
        _ => (1, super::wf2q::MAX_WEIGHT),
    }
}

fn time_ms(line: usize, w: &str) -> Result<u64, RulesError> {
    if !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let v: f64 = w.parse().map_err(|_| rerr(line, w, "not a time"))?;
        if !(0.0..=3.6e6).contains(&v) {
            return Err(rerr(line, w, "a time is 0..3600000 ms"));
        }
        return Ok((v * 1e6).round() as u64);
    }
    crate::units::parse_time_ns(w).map_err(|e| rerr(line, w, e.0))
}

fn float_in(line: usize, w: &str, lo: f64, hi: f64, what: &str) -> Result<f64, RulesError> {
    w.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= lo && *v <= hi)
        .ok_or_else(|| rerr(line, w, format!("{what} is a number in {lo}..{hi}")))
}

fn int_in(line: usize, w: &str, lo: u64, hi: u64, what: &str) -> Result<u64, RulesError> {
    parse_number(w)
        .filter(|v| (lo..=hi).contains(v))
        .ok_or_else(|| rerr(line, w, format!("{what} is {lo}..{hi}")))
}

struct Words<'a> {
    w: &'a [&'a str],
    at: usize,
    line: usize,
    seen: Vec<&'a str>,
}

impl<'a> Words<'a> {
    fn new(w: &'a [&'a str], line: usize) -> Self {
        Words {
            w,
            at: 0,
            line,
            seen: Vec::new(),
        }
    }
    fn next(&mut self) -> Option<&'a str> {
        let w = self.w.get(self.at).copied();
        self.at += 1;
        w
    }
    fn peek(&self) -> Option<&'a str> {
        self.w.get(self.at).copied()
    }
    fn arg(&mut self, kw: &str, what: &str) -> Result<&'a str, RulesError> {
        self.next()
            .ok_or_else(|| rerr(self.line, kw, format!("'{kw}' needs {what}")))
    }
    /// A word given twice is an error naming it.
    fn once(&mut self, canon: &'a str, w: &str) -> Result<(), RulesError> {
        if self.seen.contains(&canon) {
            return Err(rerr(self.line, w, format!("'{canon}' is given twice")));
        }
        self.seen.push(canon);
        Ok(())
    }
    /// `mask FIELDS` (once): the mask; the words after its fields come next.
    fn mask(&mut self, w: &str) -> Result<FlowMask, RulesError> {
        self.once("mask", w)?;
        let (m, used) = parse_mask(&self.w[self.at..], self.line, w)?;
        self.at += used;
        Ok(m)
    }
    /// `buckets N` (once, 1..2^20): Dummynet's hash size, checked and not kept (the
    /// flow index grows as needed).
    fn buckets(&mut self, w: &str) -> Result<(), RulesError> {
        self.once("buckets", w)?;
        int_in(self.line, self.arg(w, "a number")?, 1, 1 << 20, "buckets")?;
        Ok(())
    }
}

/// CoDel's options after `codel`.
fn codel_opts(c: &mut Words<'_>, cfg: &mut CoDelConfig) -> Result<(), RulesError> {
    while let Some(w) = c.peek() {
        match w {
            "target" | "interval" => {
                c.next();
                c.once(if w == "target" { "target" } else { "interval" }, w)?;
                let v = time_ms(c.line, c.arg(w, "a time such as 5ms")?)?;
                if v == 0 {
                    return Err(rerr(c.line, w, format!("{w} must be above 0")));
                }
                if w == "target" {
                    cfg.target_ns = v
                } else {
                    cfg.interval_ns = v
                }
            }
            "ecn" | "noecn" => {
                c.next();
                c.once("ecn", w)?;
                cfg.ecn = w == "ecn";
            }
            _ => break,
        }
    }
    if cfg.target_ns >= cfg.interval_ns {
        return Err(rerr(
            c.line,
            "target",
            "CoDel's target must be below its interval",
        ));
    }
    Ok(())
}

/// PIE's options after `pie`.
fn pie_opts(c: &mut Words<'_>, cfg: &mut PieConfig) -> Result<(), RulesError> {
    while let Some(w) = c.peek() {
        match w {
            "target" | "tupdate" | "max_burst" => {
                c.next();
                c.once(w, w)?;
                let v = time_ms(c.line, c.arg(w, "a time such as 15ms")?)?;
                match w {
                    "target" => cfg.target_ns = v,
                    "tupdate" => {
                        if v == 0 {
                            return Err(rerr(c.line, w, "tupdate must be above 0"));
                        }
                        cfg.tupdate_ns = v
                    }
                    _ => cfg.max_burst_ns = v,
                }
            }
            "alpha" | "beta" => {
                c.next();
                c.once(w, w)?;
                let v = float_in(c.line, c.arg(w, "a number such as 0.125")?, 0.0, 7.0, w)?;
                if w == "alpha" {
                    cfg.alpha = v
                } else {
                    cfg.beta = v
                }
            }
            "max_ecnth" => {
                c.next();
                c.once(w, w)?;
                cfg.max_ecnth =
                    float_in(c.line, c.arg(w, "a probability such as 0.1")?, 0.0, 1.0, w)?;
            }
            "ecn" | "noecn" => {
                c.next();
                c.once("ecn", w)?;
                cfg.ecn = w == "ecn";
            }
            "capdrop" | "nocapdrop" | "drand" | "nodrand" | "onoff" | "dre" | "ts" => {
                return Err(rerr(
                    c.line,
                    w,
                    "not supported (linkem's PIE is RFC 8033's basic PIE with timestamps)",
                ))
            }
            _ => break,
        }
    }
    Ok(())
}

/// `red|gred w_q/min_th/max_th/max_p`.
fn red_opts(c: &mut Words<'_>, kw: &str) -> Result<RedConfig, RulesError> {
    let v = c.arg(kw, "w_q/min_th/max_th/max_p such as 0.002/5/15/0.1")?;
    let parts: Vec<&str> = v.split('/').collect();
    if parts.len() != 4 {
        return Err(rerr(c.line, v, "RED takes w_q/min_th/max_th/max_p"));
    }
    let w_q = float_in(c.line, parts[0], 1e-9, 1.0, "w_q")?;
    let min_th = int_in(c.line, parts[1], 0, 1 << 40, "min_th")?;
    let max_th = int_in(c.line, parts[2], 1, 1 << 40, "max_th")?;
    let max_p = float_in(c.line, parts[3], 1e-9, 1.0, "max_p")?;
    if min_th >= max_th {
        return Err(rerr(c.line, v, "min_th must be below max_th"));
    }
    Ok(RedConfig {
        w_q,
        min_th,
        max_th,
        max_p,
        gentle: kw == "gred",
        ecn: false,
    })
}

/// Tries an AQM word at the cursor (the word already taken is `w`).
fn aqm_word(c: &mut Words<'_>, w: &str) -> Result<Option<AqmConfig>, RulesError> {
    Ok(Some(match w {
        "droptail" => AqmConfig::DropTail,
        "red" | "gred" => AqmConfig::Red(red_opts(c, w)?),
        "codel" => {
            let mut cfg = CoDelConfig::default();
            codel_opts(c, &mut cfg)?;
            AqmConfig::CoDel(cfg)
        }
        "pie" => {
            let mut cfg = PieConfig::default();
            pie_opts(c, &mut cfg)?;
            AqmConfig::Pie(cfg)
        }
        _ => return Ok(None),
    }))
}

fn set_ecn(aqm: &mut AqmConfig, line: usize) -> Result<(), RulesError> {
    match aqm {
        AqmConfig::DropTail => {
            return Err(rerr(
                line,
                "ecn",
                "ecn needs an AQM (red, gred, codel, pie): droptail only drops",
            ))
        }
        AqmConfig::Red(r) => r.ecn = true,
        AqmConfig::CoDel(x) => x.ecn = true,
        AqmConfig::Pie(x) => x.ecn = true,
    }
    Ok(())
}

/// Parses the words after `sched N config`.
pub fn parse_sched(number: u32, words: &[&str], line: usize) -> Result<SchedDef, RulesError> {
    let mut c = Words::new(words, line);
    let mut kind = SchedKind::Wf2q;
    // Type first: its defaults are what the other words change.
    if let Some(i) = words.iter().position(|w| *w == "type") {
        let t = words.get(i + 1).ok_or_else(|| {
            rerr(
                line,
                "type",
                "'type' needs fifo, wf2q+, qfq, rr, prio, fq_codel or fq_pie",
            )
        })?;
        kind = SchedKind::parse(t).ok_or_else(|| {
            rerr(
                line,
                t,
                "unknown scheduler type (fifo, wf2q+, qfq, rr, prio, fq_codel, fq_pie)",
            )
        })?;
    }
    let mut p = SchedParams::new(kind);
    let mut mask = None;
    let fq = kind.is_fq();
    let only_fq = |w: &str| -> Result<(), RulesError> {
        if fq {
            Ok(())
        } else {
            Err(rerr(
                line,
                w,
                format!("'{w}' is a parameter of fq_codel and fq_pie"),
            ))
        }
    };
    while let Some(w) = c.next() {
        match w {
            "type" => {
                c.once("type", w)?;
                c.next();
            }
            "quantum" => {
                c.once("quantum", w)?;
                if !(fq || kind == SchedKind::Rr) {
                    return Err(rerr(line, w, "'quantum' is a parameter of rr, fq_codel and fq_pie"));
                }
                let v = c.arg(w, "bytes")?;
                p.quantum_bytes = if fq {
                    int_in(line, v, 1, 1 << 20, "quantum")?
                } else {
                    let (lo, hi) = (super::drr::MIN_LMAX_BYTES as u64, super::drr::MAX_LMAX_BYTES as u64);
                    int_in(line, v, lo, hi, "quantum under rr (the default lmax of its queues, in bytes)")?
                } as u32;
            }
            "limit" => {
                c.once("limit", w)?;
                only_fq(w)?;
                p.limit_packets = int_in(line, c.arg(w, "packets")?, 1, 20480, "limit")? as u32;
            }
            "flows" => {
                c.once("flows", w)?;
                only_fq(w)?;
                p.flows = int_in(line, c.arg(w, "a number of flows")?, 1, 65536, "flows")? as u32;
            }
            "target" | "interval" | "tupdate" | "alpha" | "beta" | "max_burst" | "max_ecnth" | "ecn" | "noecn" => {
                only_fq(w)?;
                c.at -= 1;
                match &mut p.flow_aqm {
                    AqmConfig::CoDel(x) => codel_opts(&mut c, x)?,
                    AqmConfig::Pie(x) => pie_opts(&mut c, x)?,
                    _ => {}
                }
                if c.peek() == Some(w) {
                    return Err(rerr(line, w, format!("'{w}' is not a parameter of {}", kind.name().to_lowercase())));
                }
            }
            "mask" => mask = Some(c.mask(w)?),
            "buckets" => c.buckets(w)?,
            "lmax" | "maxlen" | "weight" => return Err(rerr(line, w, format!("'{w}' is a word of 'queue N config' (each queue has its own)"))),
            "bw" | "bandwidth" | "delay" => return Err(rerr(line, w, "the link's words go on 'pipe N config' (sched N serves pipe N's link)")),
            _ => return Err(rerr(line, w, "unknown word for sched (type, quantum, limit, flows, target, interval, tupdate, alpha, beta, max_burst, max_ecnth, ecn, noecn, mask, buckets)")),
        }
    }
    Ok(SchedDef {
        number,
        params: p,
        mask,
        line,
        words: words.join(" "),
    })
}

/// A queue limit: slots, or bytes with a unit (K, KB, KBytes = 1024 B, B, bytes).
fn queue_limit(line: usize, v: &str) -> Result<(Option<u32>, Option<u64>), RulesError> {
    if let Some(n) = parse_number(v) {
        if !(1..=100_000).contains(&n) {
            return Err(rerr(line, v, "a queue is 1..100000 slots"));
        }
        return Ok((Some(n as u32), None));
    }
    let digits = v.bytes().take_while(|b| b.is_ascii_digit()).count();
    let (num, unit) = v.split_at(digits);
    let n: u64 = num
        .parse()
        .map_err(|_| rerr(line, v, "a queue is slots (50) or bytes (64KBytes)"))?;
    let scale = match unit {
        "K" | "k" | "KB" | "kb" | "KBytes" | "Kbytes" | "kbytes" => 1024,
        "M" | "MB" | "MBytes" | "Mbytes" => 1 << 20,
        "B" | "b" | "bytes" | "Bytes" => 1,
        _ => {
            return Err(rerr(
                line,
                v,
                "a queue is slots (50) or bytes (64KBytes, 1500B)",
            ))
        }
    };
    let b = n
        .checked_mul(scale)
        .filter(|&b| (1..=1 << 32).contains(&b))
        .ok_or_else(|| rerr(line, v, "a queue is 1 B..4 GiB"))?;
    Ok((None, Some(b)))
}

/// Parses the words after `queue N config`.
pub fn parse_queue(number: u32, words: &[&str], line: usize) -> Result<QueueDef, RulesError> {
    let mut c = Words::new(words, line);
    let mut parent = None;
    let mut params = QueueParams::default();
    let mut mask = None;
    let mut ecn = false;
    let mut weight_given = false;
    while let Some(w) = c.next() {
        match w {
            "pipe" | "sched" => {
                c.once("pipe/sched", w)?;
                // A number that names a thing is decimal, as everywhere in a rule file.
                let n = object_number(line, c.arg(w, "a number")?, w)?;
                parent = Some(if w == "pipe" { Parent::Pipe(n) } else { Parent::Sched(n) });
            }
            "weight" => {
                c.once("weight", w)?;
                let v = c.arg(w, "a weight such as 10")?;
                params.weight = parse_number(v)
                    .filter(|v| *v <= super::qfq::MAX_WEIGHT as u64)
                    .ok_or_else(|| rerr(line, v, WEIGHT_RANGES))?
                    as u32;
                weight_given = true;
            }
            "pri" | "priority" => {
                return Err(rerr(line, w, "'pri' is not read by any scheduler (ipfw keeps it in par[2]); prio's level is the queue's weight: 'weight L', 0..31, 0 served first"));
            }
            "queue" => {
                c.once("queue", w)?;
                let (p, b) = queue_limit(line, c.arg(w, "slots or bytes")?)?;
                params.limit_packets = p;
                params.limit_bytes = b;
            }
            "plr" => {
                c.once("plr", w)?;
                let v = c.arg(w, "a probability such as 0.01")?;
                params.plr = crate::units::parse_probability(v).map_err(|e| rerr(line, v, e.0))?;
            }
            "droptail" | "red" | "gred" | "codel" | "pie" => {
                c.once("aqm", w)?;
                params.aqm = aqm_word(&mut c, w)?.expect("listed");
            }
            "ecn" => {
                c.once("ecn", w)?;
                ecn = true;
            }
            "mask" => mask = Some(c.mask(w)?),
            "buckets" => c.buckets(w)?,
            "lmax" | "maxlen" => {
                c.once("lmax", w)?;
                let v = c.arg(w, "a packet size in bytes such as 1514")?;
                params.lmax_bytes = Some(
                    int_in(line, v, 1, super::qfq::MAX_LMAX_BYTES as u64, "lmax (bytes)")? as u32,
                );
            }
            "noerror" => {}
            "bw" | "bandwidth" | "delay" | "burst" | "profile" => {
                return Err(rerr(line, w, "a link word: put it on 'pipe N config' (queues share their pipe's link)"))
            }
            _ => return Err(rerr(line, w, "unknown word for queue (pipe, sched, weight, lmax, queue, plr, droptail, red, gred, codel, pie, ecn, mask, buckets)")),
        }
    }
    if ecn {
        set_ecn(&mut params.aqm, line)?;
    }
    // Dummynet's prio reads the weight word (par[0]) as the level, 0 when unset.
    params.pri = if weight_given { params.weight } else { 0 };
    let parent =
        parent.ok_or_else(|| rerr(line, "queue", "a queue needs 'pipe M' or 'sched M'"))?;
    Ok(QueueDef {
        number,
        parent,
        params,
        mask,
        line,
        words: words.join(" "),
    })
}

/// Takes the scheduler and AQM words out of a `pipe N config` line: returns
/// the remaining words (for [`crate::pipe::PipeDef::parse`]) and what was taken.
pub fn split_pipe_words<'a>(
    words: &'a [&'a str],
    line: usize,
) -> Result<(Vec<&'a str>, PipeSched), RulesError> {
    let mut rest = Vec::with_capacity(words.len());
    let mut ps = PipeSched::default();
    let mut c = Words::new(words, line);
    let mut ecn = false;
    while let Some(w) = c.next() {
        match w {
            "type" => {
                c.once("type", w)?;
                let t = c.arg(w, "a scheduler type")?;
                ps.kind = Some(SchedKind::parse(t).ok_or_else(|| {
                    rerr(
                        line,
                        t,
                        "unknown scheduler type (fifo, wf2q+, qfq, rr, prio, fq_codel, fq_pie)",
                    )
                })?);
            }
            "red" | "gred" | "codel" | "pie" => {
                c.once("aqm", w)?;
                ps.aqm = aqm_word(&mut c, w)?;
            }
            "ecn" => {
                c.once("ecn", w)?;
                ecn = true;
            }
            // `policer R burst B`: `burst` there is the policer's.
            _ => rest.push(w),
        }
    }
    if ecn {
        let mut a = ps.aqm.unwrap_or(AqmConfig::DropTail);
        set_ecn(&mut a, line)?;
        ps.aqm = Some(a);
    }
    Ok((rest, ps))
}

/// One `sched N config ...` or `queue N config ...` line (`words[0]` is
/// `sched` or `queue`). A second `config` of the same object replaces it, as
/// in Dummynet.
pub fn parse_line(set: &mut SchedSet, words: &[&str], line: usize) -> Result<(), RulesError> {
    let what = words[0];
    let nw = words.get(1).copied().unwrap_or("");
    let n = object_number(line, nw, what)?;
    let rest = words.get(3..).unwrap_or(&[]);
    if what == "sched" {
        set.scheds.insert(n, parse_sched(n, rest, line)?);
    } else {
        set.queues.insert(n, parse_queue(n, rest, line)?);
    }
    Ok(())
}

/// Cross-checks after the whole file: every `queue N` action names a
/// configured queue, every queue's pipe or sched exists, every sched has its
/// pipe. `pipes` are the file's configured pipes by number
/// ([`crate::rules::RuleSet::pipes`]).
pub fn check(
    s: &SchedSet,
    pipes: &BTreeMap<u32, PipeDef>,
    queue_refs: &[(u32, usize, String)],
) -> Result<(), RulesError> {
    for (n, line, word) in queue_refs {
        if !s.queues.contains_key(n) {
            return Err(rerr(
                *line,
                word,
                format!("queue {n} is not configured (add 'queue {n} config sched M ...')"),
            ));
        }
    }
    for q in s.queues.values() {
        let p = q.parent.pipe();
        let named = match q.parent {
            Parent::Pipe(_) => pipes.contains_key(&p),
            Parent::Sched(_) => s.scheds.contains_key(&p) || pipes.contains_key(&p),
        };
        if !named || !pipes.contains_key(&p) {
            return Err(rerr(q.line, &p.to_string(), format!("queue {}: pipe {p} is not configured (sched {p} sends to pipe {p}'s link: add 'pipe {p} config bw ...')", q.number)));
        }
        // Dummynet's bounds per scheduler (it clamps; linkem refuses).
        let kind = s.params(p).kind;
        let name = kind.name().to_lowercase();
        let (lo, hi) = weight_range(kind);
        if !(lo..=hi).contains(&q.params.weight) {
            return Err(rerr(
                q.line,
                &q.params.weight.to_string(),
                format!(
                    "queue {}: weight is {lo}..{hi} under {name}{}",
                    q.number,
                    if kind == SchedKind::Prio {
                        " (the level, 0 served first)"
                    } else {
                        ""
                    },
                ),
            ));
        }
        match (kind, q.params.lmax_bytes) {
            (SchedKind::Qfq, _) | (_, None) => {}
            (SchedKind::Rr, Some(l)) => {
                let (lo, hi) = (super::drr::MIN_LMAX_BYTES, super::drr::MAX_LMAX_BYTES);
                if !(lo..=hi).contains(&l) {
                    return Err(rerr(
                        q.line,
                        &l.to_string(),
                        format!(
                            "queue {}: lmax is {lo}..{hi} bytes under rr (1..65535 under qfq)",
                            q.number
                        ),
                    ));
                }
            }
            (_, Some(_)) => {
                return Err(rerr(q.line, "lmax", format!("queue {}: 'lmax' is a parameter of qfq and rr queues (pipe {p}'s scheduler is {name})", q.number)));
            }
        }
    }
    for d in s.scheds.values() {
        if !pipes.contains_key(&d.number) {
            return Err(rerr(d.line, &d.number.to_string(), format!("sched {0} sends to pipe {0}, which is not configured (add 'pipe {0} config bw ...')", d.number)));
        }
    }
    Ok(())
}
