//! What a scrape exposes, read from the model at once: the counts of each
//! direction, the links or the node's pipes, flows, objects and rules, the
//! lateness histogram and the control requests. The format's rules are the
//! `prometheus-client` encoder's: HELP and label escaping, counters named
//! `_total` once, cumulative buckets with `+Inf` equal to `_count`, `le`
//! written as Go's client writes it, `1e-06`, `0.0001`.
//!
//! The counters are those of `--stats json` (same source, `Direction::stats`,
//! never reset by `zero`): `linkem_received_packets_total`,
//! `linkem_packets_total{fate}`, `linkem_rx_kernel_drops_total`, ... per
//! direction, `linkem_received_bytes_total` and
//! `linkem_delivered_bytes_total` (wire frames with their headers, so rates
//! compare with the link's `rate`). Lateness is a Prometheus histogram in seconds built from the
//! pipeline's HDR histogram (2 significant digits: a bucket boundary is
//! exact to within 1 %; `_sum` is the sum of the recorded values at that
//! precision); so is `linkem_delay_seconds`, the model's delay (release −
//! arrival) of each packet stored for sending, on the buckets of the pipes'
//! time in pipe. "Queue occupancy" is `linkem_in_flight_packets`: accepted
//! packets not yet sent (the model's queue and the delay line together,
//! since the model decides a release time on arrival).
//!
//! A bridge running rules adds, per pipe and per scheduler queue object
//! (`linkem_pipe_*`, `linkem_queue_*`, labelled by number, so bounded by the
//! rule set), the node stage's counts (`linkem_runtime::pipeline::ObjectStats`,
//! the `objects` of `--stats json`): packets by fate (`fate_packets_total`,
//! with RED and AQM drops), packets and bytes in it now (`occupancy_*`), and
//! `time_in_pipe_seconds`, a histogram of release minus arrival time of its
//! delivered packets on fixed buckets (100 µs to 10 s). Flows of dynamic
//! pipes are the [`TOP_FLOWS`] busiest.
//!
//! A socket of several links (a group of pairs, a lab) exposes every link's
//! directions in the same families, each series with a `link="NAME"` label
//! first; the exposition of one link has no such label (unchanged). The
//! group's `linkem_info` has seed 0: each link's seed is in `stats`.

use super::Model;
use crate::render::node::addr;
use hdrhistogram::Histogram;
use linkem_core::{Fate, LinkConfig};
use linkem_runtime::pipeline::{DirectionStats, SpinStats, DELAY_BUCKETS_NS};
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use std::fmt;
use std::sync::atomic::Ordering;

/// Lateness bucket bounds, seconds.
const LATENESS_BUCKETS_S: [f64; 14] = [
    1e-6, 2e-6, 5e-6, 10e-6, 20e-6, 50e-6, 100e-6, 200e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 100e-3,
];

/// The model's delay bucket bounds, seconds: those of the pipes' time in
/// pipe (`DELAY_BUCKETS_NS`, 100 µs to 10 s), one scale for both.
const DELAY_BUCKETS_S: [f64; 16] = {
    let mut s = [0.0; 16];
    let mut i = 0;
    while i < 16 {
        s[i] = DELAY_BUCKETS_NS[i] as f64 / 1e9;
        i += 1;
    }
    s
};

pub(super) type Labels = Vec<(&'static str, String)>;

/// A counter's or gauge's value.
#[derive(Clone, Copy)]
pub(super) enum Value {
    Int(u64),
    Float(f64),
}

/// A family's type, as the format names it.
#[derive(Clone, Copy)]
pub(super) enum Kind {
    Counter,
    Gauge,
}

/// One counter or gauge family and its series. Counter names are given as
/// exposed, ending `_total`: the encoder adds that suffix itself (the
/// format's rule), so it is taken off here, and a counter without it would
/// be renamed.
pub(super) fn family(
    enc: &mut DescriptorEncoder,
    name: &str,
    kind: Kind,
    help: &str,
    series: impl IntoIterator<Item = (Labels, Value)>,
) -> fmt::Result {
    let (base, metric_type) = match kind {
        Kind::Counter => {
            debug_assert!(name.ends_with("_total"), "counter {name}");
            (
                name.strip_suffix("_total").unwrap_or(name),
                MetricType::Counter,
            )
        }
        Kind::Gauge => (name, MetricType::Gauge),
    };
    let mut m = enc.encode_descriptor(base, help, None, metric_type)?;
    for (labels, value) in series {
        let mut s = m.encode_family(&labels)?;
        match (kind, value) {
            (Kind::Counter, Value::Int(v)) => s.encode_counter::<NoLabelSet, _, u64>(&v, None)?,
            (Kind::Counter, Value::Float(v)) => s.encode_counter::<NoLabelSet, _, f64>(&v, None)?,
            (Kind::Gauge, Value::Int(v)) => s.encode_gauge(&v)?,
            (Kind::Gauge, Value::Float(v)) => s.encode_gauge(&v)?,
        }
    }
    Ok(())
}

/// One series of a histogram: labels, bucket upper bounds in seconds with
/// the count in each (not cumulative: the encoder accumulates), the sum in
/// seconds and the count (the `+Inf` bucket).
pub(super) struct HistogramSeries {
    pub(super) labels: Labels,
    pub(super) buckets: Vec<(f64, u64)>,
    pub(super) sum_s: f64,
    pub(super) count: u64,
}

pub(super) fn histogram_family(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = HistogramSeries>,
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for h in series {
        m.encode_family(&h.labels)?
            .encode_histogram::<NoLabelSet>(h.sum_s, h.count, &h.buckets, None)?;
    }
    Ok(())
}

/// A direction's counts and link, and the link it belongs to: named in a
/// socket of several links (the `link` label, first), None alone (no label:
/// the exposition of one link is as it was).
struct Row<'a> {
    link: Option<&'a str>,
    stats: DirectionStats,
    config: LinkConfig,
}

fn dir_label(r: &Row<'_>) -> Labels {
    let mut l = Vec::with_capacity(3);
    if let Some(name) = r.link {
        l.push(("link", name.to_string()));
    }
    l.push(("direction", r.stats.name.clone()));
    l
}

fn push_rows<'a>(out: &mut Vec<Row<'a>>, link: Option<&'a str>, m: &Model) {
    for (stats, config) in m.raw_stats().into_iter().zip(m.link_configs()) {
        out.push(Row {
            link,
            stats,
            config,
        });
    }
}

/// Every direction the model serves: its own, or each of its links', named.
fn rows(model: &Model) -> Vec<Row<'_>> {
    let mut out = Vec::new();
    match model.members() {
        Some(members) => {
            for m in members {
                push_rows(&mut out, Some(&m.name), m);
            }
        }
        None => push_rows(&mut out, None, model),
    }
    out
}

/// A family of one count per direction: name, type, help, the count.
type DirectionFamily = (&'static str, Kind, &'static str, fn(&DirectionStats) -> u64);

/// The per-direction counts exposed before the packets by fate, and after.
fn direction_families() -> ([DirectionFamily; 5], [DirectionFamily; 10]) {
    (
        [
        (
            "linkem_received_packets_total",
            Kind::Counter,
            "Frames taken from the receiving interface.",
            |s| s.received,
        ),
        (
            "linkem_received_bytes_total",
            Kind::Counter,
            "Bytes of the wire frames given to the model (each with its headers).",
            |s| s.received_bytes,
        ),
        (
            "linkem_delivered_bytes_total",
            Kind::Counter,
            "Bytes of the wire frames handed to the kernel for sending (each with its headers).",
            |s| s.delivered_bytes,
        ),
        (
            "linkem_segmented_packets_total",
            Kind::Counter,
            "Extra wire frames made by cutting super-frames.",
            |s| s.segmented,
        ),
        (
            "linkem_rx_kernel_drops_total",
            Kind::Counter,
            "Frames the kernel dropped before linkem could take them.",
            |s| s.rx_kernel_drops,
        ),
        ],
        [
        (
            "linkem_in_flight_packets",
            Kind::Gauge,
            "Accepted packets not yet sent: queue and delay line.",
            |s| s.in_flight,
        ),
        (
            "linkem_duplicated_packets_total",
            Kind::Counter,
            "Extra copies made by duplicate.",
            |s| s.fates.duplicated,
        ),
        (
            "linkem_copies_sent_total",
            Kind::Counter,
            "Extra copies sent.",
            |s| s.copies_sent,
        ),
        (
            "linkem_coalesced_frames_total",
            Kind::Counter,
            "Delivered wire frames that left merged into super-frames (coalescing on transmit).",
            |s| s.coalesced,
        ),
        (
            "linkem_super_frames_total",
            Kind::Counter,
            "Super-frames handed to the receiving host (coalescing on transmit).",
            |s| s.super_frames,
        ),
        (
            "linkem_whole_frames_total",
            Kind::Counter,
            "Of the coalesced wire frames, those inside received super-frames that crossed whole, never cut.",
            |s| s.whole,
        ),
        (
            "linkem_kernel_forwarded_frames_total",
            Kind::Counter,
            "Delivered wire frames the kernel forwarded itself while the link was a pass-through (--kernel-path).",
            |s| s.kernel_forwarded,
        ),
        (
            "linkem_corrupted_packets_total",
            Kind::Counter,
            "Delivered packets with a bit flipped by corrupt.",
            |s| s.fates.corrupted,
        ),
        (
            "linkem_delay_line_bytes",
            Kind::Gauge,
            "Size of the delay line.",
            |s| s.buffer_bytes,
        ),
        (
            "linkem_output_wakeups_total",
            Kind::Counter,
            "Times the output thread woke from a sleep before a release time or from parking on an empty line.",
            |s| s.tx_wakeups,
        ),
        ],
    )
}

/// The whole exposition, one consistent snapshot per direction.
pub(super) fn expose(enc: &mut DescriptorEncoder, model: &Model) -> fmt::Result {
    let stats = rows(model);
    {
        let info: Labels = vec![
            ("name", model.name.clone()),
            ("front", model.front.word().to_string()),
            ("version", env!("CARGO_PKG_VERSION").to_string()),
            ("commit", crate::build_info::COMMIT.to_string()),
            ("seed", model.seed().to_string()),
        ];
        // An info family: exposed as the gauge `linkem_info`, always 1.
        enc.encode_descriptor("linkem", "The emulator (always 1).", None, MetricType::Info)?
            .encode_info(&info)?;
    }
    let per_dir = |enc: &mut DescriptorEncoder, (name, kind, help, count): DirectionFamily| {
        let series = stats
            .iter()
            .map(|r| (dir_label(r), Value::Int(count(&r.stats))));
        family(enc, name, kind, help, series)
    };
    let (before, after) = direction_families();
    for f in before {
        per_dir(enc, f)?;
    }
    let mut fates: Vec<(Labels, Value)> = Vec::new();
    for r in &stats {
        let s = &r.stats;
        let with = |fate: &str, n: u64| {
            let mut labels = dir_label(r);
            labels.push(("fate", fate.to_string()));
            (labels, Value::Int(n))
        };
        fates.extend(
            Fate::listed(model.rules().is_some())
                .iter()
                .map(|&f| with(f.name(), s.fates.get(f))),
        );
    }
    family(
        enc,
        "linkem_packets_total",
        Kind::Counter,
        "Packets by fate (delivered = handed to the kernel for sending).",
        fates,
    )?;
    for f in after {
        per_dir(enc, f)?;
    }
    if let Some(r) = model.rules() {
        node_metrics(enc, r)?;
    } else {
        link_metrics(enc, &stats)?;
    }
    spin_metrics(enc, &stats)?;
    stage_metrics(enc, &stats)?;
    lateness_and_control(enc, &stats, model)
}

/// The emulating stage's wake-ups (`--linger`, beats, lost yields). One stage
/// serves both directions of a link and each direction reports its counts,
/// so these are one series per link (no `direction` label): summed over
/// directions they would count each wake-up twice.
fn stage_metrics(enc: &mut DescriptorEncoder, stats: &[Row<'_>]) -> fmt::Result {
    let per_link = |f: fn(&DirectionStats) -> u64| {
        stats.chunk_by(|a, b| a.link == b.link).map(move |rows| {
            let labels: Labels = rows[0]
                .link
                .map(|name| ("link", name.to_string()))
                .into_iter()
                .collect();
            let count = rows.iter().map(|r| f(&r.stats)).max().unwrap_or(0);
            (labels, Value::Int(count))
        })
    };
    family(
        enc,
        "linkem_stage_wakeups_total",
        Kind::Counter,
        "Times the emulating stage woke from waiting for frames.",
        per_link(|s| s.rx_wakeups),
    )?;
    family(
        enc,
        "linkem_stage_on_beat_total",
        Kind::Counter,
        "Times frames came while the stage was awake for their flow's beat: wake-ups they did not cost.",
        per_link(|s| s.rx_on_beat),
    )?;
    family(
        enc,
        "linkem_stage_yields_lost_total",
        Kind::Counter,
        "Yields after which the stage's core came back 0.5 ms or more later (a stall, or a busy task beside linkem); two within 2 s pause its lingering.",
        per_link(|s| s.rx_yields_lost),
    )
}

/// How each direction's output thread waits for releases (`--spin-budget`):
/// what spinning cost and what it learnt of the machine's wake-ups.
fn spin_metrics(enc: &mut DescriptorEncoder, stats: &[Row<'_>]) -> fmt::Result {
    let per_dir = |f: fn(&SpinStats) -> f64| {
        stats
            .iter()
            .map(move |r| (dir_label(r), Value::Float(f(&r.stats.spin))))
    };
    family(
        enc,
        "linkem_spin_seconds_total",
        Kind::Counter,
        "Time the output thread spent spinning before release times.",
        per_dir(|s| s.spun_ns as f64 / 1e9),
    )?;
    family(
        enc,
        "linkem_spin_budget_ratio",
        Kind::Gauge,
        "The share of a core the output thread may spend spinning (--spin-budget).",
        per_dir(|s| f64::from(s.budget_ppm) / 1e6),
    )?;
    family(
        enc,
        "linkem_spin_covers_ratio",
        Kind::Gauge,
        "The share of the thread's wake-ups its spin before a release covers now (lower once the budget is spent).",
        per_dir(|s| f64::from(s.covers_ppm) / 1e6),
    )?;
    family(
        enc,
        "linkem_send_lead_seconds",
        Kind::Gauge,
        "How long before its release a frame is handed to the kernel: the time the port learnt a frame takes from the send call to the kernel's stamp of it reaching the host (0: none learnt).",
        per_dir(|s| s.send_lead_ns as f64 / 1e9),
    )?;
    let late = stats.iter().flat_map(|r| {
        [
            ("0.5", r.stats.spin.wake_late_p50_ns),
            ("0.99", r.stats.spin.wake_late_p99_ns),
        ]
        .map(|(q, ns)| {
            let mut labels = dir_label(r);
            labels.push(("quantile", q.to_string()));
            (labels, Value::Float(ns as f64 / 1e9))
        })
    });
    family(
        enc,
        "linkem_wake_late_seconds",
        Kind::Gauge,
        "How late the output thread's recent timed sleeps woke, by quantile (0 before any).",
        late,
    )
}

/// The configured link of each direction (a bridge without rules).
fn link_metrics(enc: &mut DescriptorEncoder, stats: &[Row<'_>]) -> fmt::Result {
    family(
        enc,
        "linkem_link_delay_seconds",
        Kind::Gauge,
        "The link's configured delay.",
        stats
            .iter()
            .map(|r| (dir_label(r), Value::Float(r.config.delay_ns as f64 / 1e9))),
    )?;
    family(
        enc,
        "linkem_link_rate_bits_per_second",
        Kind::Gauge,
        "The link's configured rate (0: unlimited).",
        stats
            .iter()
            .map(|r| (dir_label(r), Value::Int(r.config.rate_bps.unwrap_or(0)))),
    )
}

/// Flows of a dynamic pipe shown, by bytes: the exposition stays bounded
/// whatever the number of flows.
pub const TOP_FLOWS: usize = 10;

struct PipeSnap {
    number: u32,
    delay_ns: u64,
    rate_bps: u64,
    totals: (u64, u64, u64),
    queued: u64,
    flows: usize,
    /// (src, dst, proto, packets, bytes, drops, queued) of the busiest flows.
    top: Vec<(String, String, u8, u64, u64, u64, usize)>,
}

/// A pipe's counts and its busiest flows ([`TOP_FLOWS`], dynamic pipes).
fn pipe_snap(p: &linkem_core::pipe::Pipe) -> PipeSnap {
    let mut inst: Vec<&linkem_core::pipe::Instance> = p.instances().collect();
    let queued = inst.iter().map(|i| i.queued_packets() as u64).sum();
    let flows = inst.len();
    let top = if p.def.mask.is_some() {
        if inst.len() > TOP_FLOWS {
            inst.select_nth_unstable_by_key(TOP_FLOWS, |i| std::cmp::Reverse(i.tot_bytes));
            inst.truncate(TOP_FLOWS);
        }
        inst.iter()
            .map(|i| {
                let k = &i.key;
                (
                    format!("{}/{}", addr(k.ip_version, k.src_ip), k.src_port),
                    format!("{}/{}", addr(k.ip_version, k.dst_ip), k.dst_port),
                    k.proto,
                    i.tot_pkts,
                    i.tot_bytes,
                    i.drops,
                    i.queued_packets(),
                )
            })
            .collect()
    } else {
        Vec::new()
    };
    PipeSnap {
        number: p.def.number,
        delay_ns: p.def.link.delay_ns,
        rate_bps: p.def.link.rate_bps.unwrap_or(0),
        totals: p.totals(),
        queued,
        flows,
        top,
    }
}

/// Rules that share a number, summed: one series, as ipfw numbers them.
type RuleCounts = Vec<(u32, u64, u64)>;

/// The node's pipes, rules and unmatched packets, under its lock at once.
fn node_snapshot(n: &linkem_core::node::Node) -> (Vec<PipeSnap>, RuleCounts, u64) {
    let pipes: Vec<PipeSnap> = n.pipes().iter().map(pipe_snap).collect();
    let c = n.classifier();
    let mut rules: RuleCounts = Vec::new();
    for (rule, &(pk, by)) in c.rules().iter().zip(&c.counters) {
        match rules.last_mut() {
            Some(last) if last.0 == rule.number => {
                last.1 += pk;
                last.2 += by;
            }
            _ => rules.push((rule.number, pk, by)),
        }
    }
    (pipes, rules, n.unmatched)
}

/// Per pipe, per busiest flow and per rule (a bridge running rules). Rules
/// that share a number are one series, as ipfw numbers them.
fn node_metrics(enc: &mut DescriptorEncoder, r: &crate::control::rules::Rules) -> fmt::Result {
    let (pipes, rules, unmatched) = r.bridge.with_model(node_snapshot);
    type Field = fn(&PipeSnap) -> Value;
    let per_pipe: [(&str, Kind, &str, Field); 7] = [
        (
            "linkem_pipe_packets_total",
            Kind::Counter,
            "Packets that entered the pipe (ipfw Tot_pkt).",
            |p| Value::Int(p.totals.0),
        ),
        (
            "linkem_pipe_bytes_total",
            Kind::Counter,
            "Bytes of those packets.",
            |p| Value::Int(p.totals.1),
        ),
        (
            "linkem_pipe_drops_total",
            Kind::Counter,
            "Of those packets, the ones its link dropped (ipfw Drp).",
            |p| Value::Int(p.totals.2),
        ),
        (
            "linkem_pipe_queued_packets",
            Kind::Gauge,
            "Packets queued in the pipe at its last arrival.",
            |p| Value::Int(p.queued),
        ),
        (
            "linkem_pipe_flows",
            Kind::Gauge,
            "Live instances of the pipe (1 without a mask).",
            |p| Value::Int(p.flows as u64),
        ),
        (
            "linkem_pipe_delay_seconds",
            Kind::Gauge,
            "The pipe's configured delay.",
            |p| Value::Float(p.delay_ns as f64 / 1e9),
        ),
        (
            "linkem_pipe_rate_bits_per_second",
            Kind::Gauge,
            "The pipe's configured rate (0: unlimited).",
            |p| Value::Int(p.rate_bps),
        ),
    ];
    for (name, kind, help, f) in per_pipe {
        let series = pipes
            .iter()
            .map(|p| (vec![("pipe", p.number.to_string())], f(p)));
        family(enc, name, kind, help, series)?;
    }
    let flow_fields: [(&str, Kind, &str); 4] = [
        (
            "linkem_flow_packets_total",
            Kind::Counter,
            "Packets of a flow of a dynamic pipe (the busiest by bytes).",
        ),
        (
            "linkem_flow_bytes_total",
            Kind::Counter,
            "Bytes of a flow of a dynamic pipe (the busiest by bytes).",
        ),
        (
            "linkem_flow_drops_total",
            Kind::Counter,
            "Drops of a flow of a dynamic pipe (the busiest by bytes).",
        ),
        (
            "linkem_flow_queued_packets",
            Kind::Gauge,
            "Packets queued in a flow of a dynamic pipe (the busiest by bytes).",
        ),
    ];
    for (k, (name, kind, help)) in flow_fields.into_iter().enumerate() {
        let series = pipes.iter().flat_map(|p| {
            p.top.iter().map(move |(src, dst, proto, pk, by, dr, q)| {
                let labels = vec![
                    ("pipe", p.number.to_string()),
                    ("proto", proto.to_string()),
                    ("src", src.clone()),
                    ("dst", dst.clone()),
                ];
                (labels, Value::Int([*pk, *by, *dr, *q as u64][k]))
            })
        });
        family(enc, name, kind, help, series)?;
    }
    objects_metrics(enc, &r.bridge.object_stats())?;
    family(
        enc,
        "linkem_rule_packets_total",
        Kind::Counter,
        "Packets that matched the rule.",
        rules
            .iter()
            .map(|&(n, pk, _)| (vec![("rule", n.to_string())], Value::Int(pk))),
    )?;
    family(
        enc,
        "linkem_rule_bytes_total",
        Kind::Counter,
        "Bytes of the packets that matched the rule.",
        rules
            .iter()
            .map(|&(n, _, by)| (vec![("rule", n.to_string())], Value::Int(by))),
    )?;
    family(
        enc,
        "linkem_unmatched_packets_total",
        Kind::Counter,
        "Packets no rule took (passed unimpaired).",
        [(Vec::new(), Value::Int(unmatched))],
    )
}

/// Per pipe and per scheduler queue, from the node stage's counts (the
/// same snapshot type `--stats json` prints as `objects`): packets by fate,
/// packets and bytes in it now, and the time spent in it as a histogram.
fn objects_metrics(
    enc: &mut DescriptorEncoder,
    s: &linkem_runtime::pipeline::ObjectsSnapshot,
) -> fmt::Result {
    use crate::render::bridge_stats::object_fates;
    use linkem_runtime::pipeline::{ObjectStats, DELAY_BUCKETS_NS};
    for (kind, list) in [("pipe", &s.pipes), ("queue", &s.queues)] {
        let labels = |n: &u32| -> Labels { vec![(kind, n.to_string())] };
        let series = list.iter().flat_map(|(n, st)| {
            object_fates(st).into_iter().map(move |(fate, v)| {
                let mut l = labels(n);
                l.push(("fate", fate.to_string()));
                (l, Value::Int(v))
            })
        });
        family(
            enc,
            &format!("linkem_{kind}_fate_packets_total"),
            Kind::Counter,
            &format!("Packets the {kind} decided, by fate (delivered = stored for sending)."),
            series,
        )?;
        type Gauge = fn(&ObjectStats) -> u64;
        let gauges: [(&str, &str, Gauge); 2] = [
            (
                "occupancy_packets",
                "Delivered packets in it whose release time has not come.",
                |s| s.queued_packets,
            ),
            ("occupancy_bytes", "Bytes of those packets.", |s| {
                s.queued_bytes
            }),
        ];
        for (what, help, f) in gauges {
            let series = list.iter().map(|(n, st)| (labels(n), Value::Int(f(st))));
            family(
                enc,
                &format!("linkem_{kind}_{what}"),
                Kind::Gauge,
                help,
                series,
            )?;
        }
        // The last count is above the last bound: the `+Inf` bucket only.
        let series = list.iter().map(|(n, st)| HistogramSeries {
            labels: labels(n),
            buckets: DELAY_BUCKETS_NS
                .iter()
                .zip(&st.delay.counts)
                .map(|(&b, &c)| (b as f64 / 1e9, c))
                .collect(),
            sum_s: st.delay.sum_ns as f64 / 1e9,
            count: st.delay.count,
        });
        histogram_family(
            enc,
            &format!("linkem_{kind}_time_in_pipe_seconds"),
            "Release time minus arrival time of its delivered packets (queueing and delay).",
            series,
        )?;
    }
    Ok(())
}

/// A direction's HDR histogram (ns) as a Prometheus series on `bounds_s`.
fn hdr_series(r: &Row<'_>, h: &Histogram<u64>, bounds_s: &[f64]) -> HistogramSeries {
    let mut below = 0;
    let buckets = bounds_s
        .iter()
        .map(|&b| {
            let ns = (b * 1e9).round() as u64;
            let upto = if h.is_empty() {
                0
            } else {
                h.count_between(0, ns)
            };
            let in_bucket = upto.saturating_sub(below);
            below = upto.max(below);
            (b, in_bucket)
        })
        .collect();
    let sum_ns: f64 = h
        .iter_recorded()
        .map(|v| v.value_iterated_to() as f64 * v.count_at_value() as f64)
        .sum();
    HistogramSeries {
        labels: dir_label(r),
        buckets,
        sum_s: sum_ns / 1e9,
        count: h.len(),
    }
}

fn lateness_and_control(
    enc: &mut DescriptorEncoder,
    stats: &[Row<'_>],
    model: &Model,
) -> fmt::Result {
    let series = stats
        .iter()
        .map(|r| hdr_series(r, &r.stats.lateness, &LATENESS_BUCKETS_S));
    histogram_family(
        enc,
        "linkem_lateness_seconds",
        "Send time (plus the learnt send lead) minus release time of sent packets.",
        series,
    )?;
    let series = stats
        .iter()
        .map(|r| hdr_series(r, &r.stats.delay, &DELAY_BUCKETS_S));
    histogram_family(
        enc,
        "linkem_delay_seconds",
        "The model's release time minus arrival time of the packets stored for sending.",
        series,
    )?;
    let c = &model.counters;
    family(
        enc,
        "linkem_control_requests_total",
        Kind::Counter,
        "Control socket requests by result.",
        [("ok", &c.ok), ("error", &c.error), ("refused", &c.refused)].map(|(result, v)| {
            (
                vec![("result", result.to_string())],
                Value::Int(v.load(Ordering::Relaxed)),
            )
        }),
    )?;
    family(
        enc,
        "linkem_control_changes_total",
        Kind::Counter,
        "Changes applied (a batch or a SIGHUP counts once).",
        [(Vec::new(), Value::Int(c.changes.load(Ordering::Relaxed)))],
    )
}
