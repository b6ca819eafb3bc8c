//! `--metrics ADDR:PORT`: the Prometheus text exposition format (0.0.4) on
//! `GET /metrics`, over a minimal HTTP/1.1 responder on std's TcpListener:
//! one short-lived thread per connection, at most [`MAX_CONNECTIONS`] at
//! once; the whole request must arrive within [`REQUEST_DEADLINE`] (one
//! deadline for the request, not per read: a client sending a byte now and
//! then is cut at it) and fit in 8 KiB; the reply must be taken within the
//! same time. When every place is held, the connection that has waited
//! longest for its request is closed to make room: slow clients
//! (slowloris) cannot hold every place, since a scraper sends its request
//! at once and is answered in microseconds.
//!
//! The counters are those of `--stats json` (same source, `Direction::stats`,
//! never reset by `zero`): `linkem_received_packets_total`,
//! `linkem_packets_total{fate}`, `linkem_rx_kernel_drops_total`, ... per
//! direction. Lateness is a Prometheus histogram in seconds built from the
//! pipeline's HDR histogram (2 significant digits: a bucket boundary is
//! exact to within 1 %; `_sum` is the sum of the recorded values at that
//! precision). "Queue occupancy" is `linkem_in_flight_packets`: accepted
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

use super::Model;
use crate::render::node::addr;
use anyhow::{anyhow, Context, Result};
use linkem_core::{Fate, LinkConfig};
use linkem_runtime::pipeline::DirectionStats;
use std::fmt::Write as _;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 16;
/// Time for the whole request to arrive, and for the reply to be taken.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
const MAX_REQUEST_BYTES: usize = 8192;

/// Lateness bucket bounds, seconds.
const LATENESS_BUCKETS_S: [f64; 14] = [
    1e-6, 2e-6, 5e-6, 10e-6, 20e-6, 50e-6, 100e-6, 200e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 100e-3,
];

/// `PORT` or `ADDR:PORT` (IPv6 as `[::1]:PORT`).
pub fn parse_addr(text: &str) -> Result<SocketAddr> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse::<SocketAddr>().map_err(|_| {
        anyhow!("--metrics '{text}': give PORT (on 127.0.0.1) or ADDR:PORT, e.g. 127.0.0.1:9105")
    })
}

pub fn bind(text: &str) -> Result<TcpListener> {
    let addr = parse_addr(text)?;
    TcpListener::bind(addr).with_context(|| format!("--metrics: cannot listen on {addr}"))
}

pub struct Endpoint {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Endpoint {
    pub fn start(listener: TcpListener, model: Arc<Model>, stop: Arc<AtomicBool>) -> Endpoint {
        let addr = listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("linkem-metrics".into())
            .spawn(move || serve(listener, model, s))
            .expect("a thread can be started");
        Endpoint { addr, stop, thread }
    }

    /// Stops accepting (the stop flag is already set by the server).
    pub fn stop(self) {
        self.stop.store(true, Ordering::Release);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        let _ = self.thread.join();
    }
}

/// The connections being served: each with a handle to close it and, while
/// its request has not fully arrived, the instant it was accepted.
#[derive(Default)]
struct Held {
    next_id: u64,
    conns: Vec<(u64, TcpStream, Option<Instant>)>,
}

impl Held {
    /// Closes the connection that has waited longest for its request;
    /// false if every connection already has its request.
    fn evict_slowest(&mut self) -> bool {
        let oldest = self
            .conns
            .iter()
            .filter_map(|(id, s, since)| since.map(|t| (t, *id, s)))
            .min_by_key(|(t, _, _)| *t);
        match oldest {
            Some((_, id, s)) => {
                let _ = s.shutdown(std::net::Shutdown::Both);
                self.conns.retain(|c| c.0 != id);
                true
            }
            None => false,
        }
    }
}

fn serve(listener: TcpListener, model: Arc<Model>, stop: Arc<AtomicBool>) {
    let held: Arc<Mutex<Held>> = Arc::default();
    let forget = |held: &Mutex<Held>, id: u64| {
        held.lock()
            .unwrap_or_else(|p| p.into_inner())
            .conns
            .retain(|c| c.0 != id);
    };
    for conn in listener.incoming() {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let Ok(stream) = conn else { continue };
        let Ok(handle) = stream.try_clone() else {
            continue;
        };
        let id = {
            let mut h = held.lock().unwrap_or_else(|p| p.into_inner());
            if h.conns.len() >= MAX_CONNECTIONS && !h.evict_slowest() {
                // Every place is answering a complete request: busy, not stalled.
                continue;
            }
            h.next_id += 1;
            let id = h.next_id;
            h.conns.push((id, handle, Some(Instant::now())));
            id
        };
        let (m, h) = (model.clone(), held.clone());
        let spawned = std::thread::Builder::new()
            .name("linkem-scrape".into())
            .spawn(move || {
                let _ = answer(stream, &m, || {
                    let mut h = h.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(c) = h.conns.iter_mut().find(|c| c.0 == id) {
                        c.2 = None;
                    }
                });
                forget(&h, id);
            });
        if spawned.is_err() {
            forget(&held, id);
        }
    }
}

/// Reads one request within [`REQUEST_DEADLINE`] and answers it;
/// `complete` is called once the request has fully arrived.
fn answer(mut stream: TcpStream, model: &Model, complete: impl FnOnce()) -> std::io::Result<()> {
    let deadline = Instant::now() + REQUEST_DEADLINE;
    stream.set_write_timeout(Some(REQUEST_DEADLINE))?;
    let mut req = Vec::new();
    let mut chunk = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && !req.windows(2).any(|w| w == b"\n\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let why = format!(
                "the request did not arrive within {} s\n",
                REQUEST_DEADLINE.as_secs()
            );
            return respond(&mut stream, "408 Request Timeout", "text/plain", &why);
        }
        stream.set_read_timeout(Some(left))?;
        let n = match stream.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok(());
        }
        req.extend_from_slice(&chunk[..n]);
        if req.len() > MAX_REQUEST_BYTES {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                "too large\n",
            );
        }
    }
    complete();
    let first = req.split(|&b| b == b'\n').next().unwrap_or(b"");
    let first = String::from_utf8_lossy(first);
    let mut parts = first.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => respond(
            &mut stream,
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            &render(model),
        ),
        ("GET", _) => respond(&mut stream, "404 Not Found", "text/plain", "try /metrics\n"),
        _ => respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n",
        ),
    }
}

fn respond(stream: &mut TcpStream, status: &str, ctype: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}

/// Label values: backslash, double quote and newline escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The whole exposition, one consistent snapshot per direction.
// Kept whole: the metric families one after another, in the order they are exposed.
pub fn render(model: &Model) -> String {
    let stats = model.raw_stats();
    let mut o = String::with_capacity(8192);
    family(&mut o, "linkem_info", "gauge", "The emulator (always 1).");
    let _ = writeln!(
        o,
        "linkem_info{{name=\"{}\",version=\"{}\",seed=\"{}\"}} 1",
        label(&model.name),
        env!("CARGO_PKG_VERSION"),
        model.seed()
    );
    let per_dir =
        |o: &mut String, name: &str, kind: &str, help: &str, value: &dyn Fn(usize) -> String| {
            family(o, name, kind, help);
            for (i, s) in stats.iter().enumerate() {
                let _ = writeln!(o, "{name}{{direction=\"{}\"}} {}", label(&s.name), value(i));
            }
        };
    per_dir(
        &mut o,
        "linkem_received_packets_total",
        "counter",
        "Frames taken from the receiving interface.",
        &|i| stats[i].received.to_string(),
    );
    per_dir(
        &mut o,
        "linkem_segmented_packets_total",
        "counter",
        "Extra wire frames made by cutting super-frames.",
        &|i| stats[i].segmented.to_string(),
    );
    per_dir(
        &mut o,
        "linkem_rx_kernel_drops_total",
        "counter",
        "Frames the kernel dropped before linkem could take them.",
        &|i| stats[i].rx_kernel_drops.to_string(),
    );
    family(
        &mut o,
        "linkem_packets_total",
        "counter",
        "Packets by fate (delivered = handed to the kernel for sending).",
    );
    for s in &stats {
        for f in Fate::ALL {
            let _ = writeln!(
                o,
                "linkem_packets_total{{direction=\"{}\",fate=\"{}\"}} {}",
                label(&s.name),
                f.name(),
                s.fates.get(f)
            );
        }
        if model.rules().is_some() {
            // The node's own drops, as `--stats json` lists them beside the fates.
            for (name, n) in s.node_drops.named() {
                let _ = writeln!(
                    o,
                    "linkem_packets_total{{direction=\"{}\",fate=\"{name}\"}} {n}",
                    label(&s.name)
                );
            }
        }
    }
    per_dir(
        &mut o,
        "linkem_in_flight_packets",
        "gauge",
        "Accepted packets not yet sent: queue and delay line.",
        &|i| stats[i].in_flight.to_string(),
    );
    per_dir(
        &mut o,
        "linkem_duplicated_packets_total",
        "counter",
        "Extra copies made by duplicate.",
        &|i| stats[i].fates.duplicated.to_string(),
    );
    per_dir(
        &mut o,
        "linkem_copies_sent_total",
        "counter",
        "Extra copies sent.",
        &|i| stats[i].copies_sent.to_string(),
    );
    per_dir(
        &mut o,
        "linkem_corrupted_packets_total",
        "counter",
        "Delivered packets with a bit flipped by corrupt.",
        &|i| stats[i].fates.corrupted.to_string(),
    );
    per_dir(
        &mut o,
        "linkem_delay_line_bytes",
        "gauge",
        "Size of the delay line.",
        &|i| stats[i].buffer_bytes.to_string(),
    );
    if let Some(r) = model.rules() {
        node_metrics(&mut o, r);
    } else {
        link_metrics(&mut o, &stats, &model.link_configs());
    }
    lateness_and_control(&mut o, &stats, model);
    o
}

/// The configured link of each direction (a bridge without rules).
fn link_metrics(o: &mut String, stats: &[DirectionStats], links: &[LinkConfig; 2]) {
    let per_dir =
        |o: &mut String, name: &str, kind: &str, help: &str, value: &dyn Fn(usize) -> String| {
            family(o, name, kind, help);
            for (i, s) in stats.iter().enumerate() {
                let _ = writeln!(o, "{name}{{direction=\"{}\"}} {}", label(&s.name), value(i));
            }
        };
    per_dir(
        o,
        "linkem_link_delay_seconds",
        "gauge",
        "The link's configured delay.",
        &|i| format!("{}", links[i].delay_ns as f64 / 1e9),
    );
    per_dir(
        o,
        "linkem_link_rate_bits_per_second",
        "gauge",
        "The link's configured rate (0: unlimited).",
        &|i| links[i].rate_bps.unwrap_or(0).to_string(),
    );
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

/// Per pipe, per busiest flow and per rule (a bridge running rules). Rules
/// that share a number are one series, as ipfw numbers them.
// Kept whole: one snapshot under the node's lock, then its families in exposition order.
fn node_metrics(o: &mut String, r: &super::rules::Rules) {
    let (pipes, rules, unmatched) = r.bridge.with_node(|n| {
        let pipes: Vec<PipeSnap> = n
            .pipes()
            .iter()
            .map(|p| {
                let mut inst: Vec<&linkem_core::pipe::Instance> = p.instances().collect();
                let queued = inst.iter().map(|i| i.queued_packets() as u64).sum();
                let flows = inst.len();
                let top = if p.def.mask.is_some() {
                    if inst.len() > TOP_FLOWS {
                        inst.select_nth_unstable_by_key(TOP_FLOWS, |i| {
                            std::cmp::Reverse(i.tot_bytes)
                        });
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
            })
            .collect();
        let c = n.classifier();
        let mut rules: Vec<(u32, u64, u64)> = Vec::new();
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
    });
    type Field = fn(&PipeSnap) -> String;
    let per_pipe: [(&str, &str, &str, Field); 7] = [
        (
            "linkem_pipe_packets_total",
            "counter",
            "Packets that entered the pipe (ipfw Tot_pkt).",
            |p| p.totals.0.to_string(),
        ),
        (
            "linkem_pipe_bytes_total",
            "counter",
            "Bytes of those packets.",
            |p| p.totals.1.to_string(),
        ),
        (
            "linkem_pipe_drops_total",
            "counter",
            "Of those packets, the ones its link dropped (ipfw Drp).",
            |p| p.totals.2.to_string(),
        ),
        (
            "linkem_pipe_queued_packets",
            "gauge",
            "Packets queued in the pipe at its last arrival.",
            |p| p.queued.to_string(),
        ),
        (
            "linkem_pipe_flows",
            "gauge",
            "Live instances of the pipe (1 without a mask).",
            |p| p.flows.to_string(),
        ),
        (
            "linkem_pipe_delay_seconds",
            "gauge",
            "The pipe's configured delay.",
            |p| format!("{}", p.delay_ns as f64 / 1e9),
        ),
        (
            "linkem_pipe_rate_bits_per_second",
            "gauge",
            "The pipe's configured rate (0: unlimited).",
            |p| p.rate_bps.to_string(),
        ),
    ];
    for (name, kind, help, f) in per_pipe {
        family(o, name, kind, help);
        for p in &pipes {
            let _ = writeln!(o, "{name}{{pipe=\"{}\"}} {}", p.number, f(p));
        }
    }
    let flow_fields: [(&str, &str, &str); 4] = [
        (
            "linkem_flow_packets_total",
            "counter",
            "Packets of a flow of a dynamic pipe (the busiest by bytes).",
        ),
        (
            "linkem_flow_bytes_total",
            "counter",
            "Bytes of a flow of a dynamic pipe (the busiest by bytes).",
        ),
        (
            "linkem_flow_drops_total",
            "counter",
            "Drops of a flow of a dynamic pipe (the busiest by bytes).",
        ),
        (
            "linkem_flow_queued_packets",
            "gauge",
            "Packets queued in a flow of a dynamic pipe (the busiest by bytes).",
        ),
    ];
    for (k, (name, kind, help)) in flow_fields.iter().enumerate() {
        family(o, name, kind, help);
        for p in &pipes {
            for (src, dst, proto, pk, by, dr, q) in &p.top {
                let v = [*pk, *by, *dr, *q as u64][k];
                let _ = writeln!(
                    o,
                    "{name}{{pipe=\"{}\",proto=\"{proto}\",src=\"{}\",dst=\"{}\"}} {v}",
                    p.number,
                    label(src),
                    label(dst)
                );
            }
        }
    }
    objects_metrics(o, &r.bridge.object_stats());
    family(
        o,
        "linkem_rule_packets_total",
        "counter",
        "Packets that matched the rule.",
    );
    for (n, pk, _) in &rules {
        let _ = writeln!(o, "linkem_rule_packets_total{{rule=\"{n}\"}} {pk}");
    }
    family(
        o,
        "linkem_rule_bytes_total",
        "counter",
        "Bytes of the packets that matched the rule.",
    );
    for (n, _, by) in &rules {
        let _ = writeln!(o, "linkem_rule_bytes_total{{rule=\"{n}\"}} {by}");
    }
    family(
        o,
        "linkem_unmatched_packets_total",
        "counter",
        "Packets no rule took (passed unimpaired).",
    );
    let _ = writeln!(o, "linkem_unmatched_packets_total {unmatched}");
}

/// Per pipe and per scheduler queue, from the node stage's counts (the
/// same snapshot type `--stats json` prints as `objects`): packets by fate,
/// packets and bytes in it now, and the time spent in it as a histogram.
fn objects_metrics(o: &mut String, s: &linkem_runtime::pipeline::ObjectsSnapshot) {
    use crate::render::bridge_stats::object_fates;
    use linkem_runtime::pipeline::{ObjectStats, DELAY_BUCKETS_NS};
    for (kind, list) in [("pipe", &s.pipes), ("queue", &s.queues)] {
        let name = format!("linkem_{kind}_fate_packets_total");
        family(
            o,
            &name,
            "counter",
            &format!("Packets the {kind} decided, by fate (delivered = stored for sending)."),
        );
        for (n, st) in list.iter() {
            for (fate, v) in object_fates(st) {
                let _ = writeln!(o, "{name}{{{kind}=\"{n}\",fate=\"{fate}\"}} {v}");
            }
        }
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
            let name = format!("linkem_{kind}_{what}");
            family(o, &name, "gauge", help);
            for (n, st) in list.iter() {
                let _ = writeln!(o, "{name}{{{kind}=\"{n}\"}} {}", f(st));
            }
        }
        let name = format!("linkem_{kind}_time_in_pipe_seconds");
        family(
            o,
            &name,
            "histogram",
            "Release time minus arrival time of its delivered packets (queueing and delay).",
        );
        for (n, st) in list.iter() {
            let c = st.delay.cumulative();
            for (b, v) in DELAY_BUCKETS_NS.iter().zip(c) {
                let le = *b as f64 / 1e9;
                let _ = writeln!(o, "{name}_bucket{{{kind}=\"{n}\",le=\"{le}\"}} {v}");
            }
            let _ = writeln!(
                o,
                "{name}_bucket{{{kind}=\"{n}\",le=\"+Inf\"}} {}",
                st.delay.count
            );
            let _ = writeln!(
                o,
                "{name}_sum{{{kind}=\"{n}\"}} {}",
                st.delay.sum_ns as f64 / 1e9
            );
            let _ = writeln!(o, "{name}_count{{{kind}=\"{n}\"}} {}", st.delay.count);
        }
    }
}

fn lateness_and_control(o: &mut String, stats: &[DirectionStats], model: &Model) {
    family(
        o,
        "linkem_lateness_seconds",
        "histogram",
        "Send time minus release time of sent packets.",
    );
    for s in stats {
        let d = label(&s.name);
        let h = &s.lateness;
        for b in LATENESS_BUCKETS_S {
            let ns = (b * 1e9).round() as u64;
            let c = if h.is_empty() {
                0
            } else {
                h.count_between(0, ns)
            };
            let _ = writeln!(
                o,
                "linkem_lateness_seconds_bucket{{direction=\"{d}\",le=\"{b:e}\"}} {c}"
            );
        }
        let sum_ns: f64 = h
            .iter_recorded()
            .map(|v| v.value_iterated_to() as f64 * v.count_at_value() as f64)
            .sum();
        let _ = writeln!(
            o,
            "linkem_lateness_seconds_bucket{{direction=\"{d}\",le=\"+Inf\"}} {}",
            h.len()
        );
        let _ = writeln!(
            o,
            "linkem_lateness_seconds_sum{{direction=\"{d}\"}} {}",
            sum_ns / 1e9
        );
        let _ = writeln!(
            o,
            "linkem_lateness_seconds_count{{direction=\"{d}\"}} {}",
            h.len()
        );
    }
    family(
        o,
        "linkem_control_requests_total",
        "counter",
        "Control socket requests by result.",
    );
    let c = &model.counters;
    for (result, v) in [("ok", &c.ok), ("error", &c.error), ("refused", &c.refused)] {
        let _ = writeln!(
            o,
            "linkem_control_requests_total{{result=\"{result}\"}} {}",
            v.load(Ordering::Relaxed)
        );
    }
    family(
        o,
        "linkem_control_changes_total",
        "counter",
        "Changes applied (a batch or a SIGHUP counts once).",
    );
    let _ = writeln!(
        o,
        "linkem_control_changes_total {}",
        c.changes.load(Ordering::Relaxed)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(parse_addr("9105").unwrap().to_string(), "127.0.0.1:9105");
        assert_eq!(parse_addr("0.0.0.0:80").unwrap().to_string(), "0.0.0.0:80");
        assert_eq!(parse_addr("[::1]:9").unwrap().to_string(), "[::1]:9");
        assert!(parse_addr("localhost").is_err());
        assert!(parse_addr("70000").is_err());
    }

    #[test]
    fn label_escapes() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
