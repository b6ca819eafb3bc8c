//! `--metrics ADDR:PORT`: the Prometheus text exposition format (0.0.4) on
//! `GET /metrics`, written by the `prometheus-client` crate's encoder from a
//! collector that reads the model at each scrape (so the format's rules are
//! the crate's: HELP and label escaping, counters named `_total` once,
//! cumulative buckets with `+Inf` equal to `_count`, `le` written as Go's
//! client writes it, `1e-06`, `0.0001`), served by `hyper` (HTTP/1.1, no
//! keep-alive) on a current-thread tokio runtime: one thread for the
//! endpoint, a task per connection, at most [`MAX_CONNECTIONS`] at once.
//! The request head must arrive within [`REQUEST_DEADLINE`] of the
//! connection (hyper's header read timeout: one deadline for the request,
//! not per read, so a client sending a byte now and then, or nothing, is
//! closed at it) and fit in 8 KiB (431 beyond); the whole exchange ends
//! within twice that, so a reply not taken is dropped too. When every place
//! is held, the connection that has waited longest for its request is
//! closed (its task aborted) to make room: slow clients (slowloris) cannot
//! hold every place, since a scraper sends its request at once and is
//! answered in microseconds.
//!
//! Why these crates (measured when the hand-written responder was replaced):
//! `tiny_http` 0.12 sets no read timeout on its sockets, has no connection
//! bound and runs each connection on a pool thread, adding a thread whenever
//! none is idle, so it fits none of the three needs. hyper 1 with tokio
//! (`rt`, `net`, `time`) and hyper-util bring 11 crates more (hyper, http,
//! tokio, mio, ...): about 33 s of CPU in a release build, against about
//! 5 min for a clean release build of linkem (+10 %), and 0.4 MB more in
//! the stripped binary (5.28 to 5.68 MB, +8 %); the MSRV (1.88) holds. That
//! buys deadlines, bounds and HTTP parsing nobody here has to keep right.
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
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use linkem_core::{Fate, LinkConfig};
use linkem_runtime::pipeline::DirectionStats;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{prometheus_text, DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::task::AbortHandle;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 16;
/// Time for the whole request to arrive, and for the reply to be taken.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// hyper's least read buffer: a request head larger is answered 431.
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
            .spawn(move || {
                if let Err(e) = serve(listener, model, s) {
                    eprintln!("linkem: metrics endpoint stopped: {e:#}");
                }
            })
            .expect("a thread can be started");
        Endpoint { addr, stop, thread }
    }

    /// Stops accepting (the stop flag is already set by the server).
    pub fn stop(self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the accept; connections in progress end with the runtime.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        let _ = self.thread.join();
    }
}

/// The connections being served: each with a handle to end its task and,
/// while its request has not fully arrived, the instant it was accepted.
#[derive(Default)]
struct Held {
    next_id: u64,
    conns: Vec<(u64, AbortHandle, Option<Instant>)>,
}

impl Held {
    /// Ends the connection that has waited longest for its request;
    /// false if every connection already has its request.
    fn evict_slowest(&mut self) -> bool {
        let oldest = self
            .conns
            .iter()
            .filter_map(|(id, task, since)| since.map(|t| (t, *id, task)))
            .min_by_key(|(t, _, _)| *t);
        match oldest {
            Some((_, id, task)) => {
                // Dropping the task drops its socket: the client sees it closed.
                task.abort();
                self.conns.retain(|c| c.0 != id);
                true
            }
            None => false,
        }
    }

    fn forget(held: &Mutex<Held>, id: u64) {
        lock(held).conns.retain(|c| c.0 != id);
    }

    fn request_complete(held: &Mutex<Held>, id: u64) {
        if let Some(c) = lock(held).conns.iter_mut().find(|c| c.0 == id) {
            c.2 = None;
        }
    }
}

fn lock(held: &Mutex<Held>) -> std::sync::MutexGuard<'_, Held> {
    held.lock().unwrap_or_else(|p| p.into_inner())
}

/// Accepts and serves on one thread: a current-thread runtime, a task per
/// connection.
fn serve(listener: TcpListener, model: Arc<Model>, stop: Arc<AtomicBool>) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .context("cannot start the metrics runtime")?;
    let registry = Arc::new(registry(model));
    rt.block_on(async {
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let held: Arc<Mutex<Held>> = Arc::default();
        while !stop.load(Ordering::Acquire) {
            let Ok((stream, _)) = listener.accept().await else {
                // Out of descriptors, say: wait for some to be freed, not spin.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            if stop.load(Ordering::Acquire) {
                break;
            }
            let mut h = lock(&held);
            if h.conns.len() >= MAX_CONNECTIONS && !h.evict_slowest() {
                // Every place is answering a complete request: busy, not stalled.
                continue;
            }
            h.next_id += 1;
            let id = h.next_id;
            let (r, hd) = (registry.clone(), held.clone());
            // Registered before the task can run (same thread, lock held).
            let task = tokio::spawn(async move {
                answer(stream, &r, || Held::request_complete(&hd, id)).await;
                Held::forget(&hd, id);
            });
            h.conns
                .push((id, task.abort_handle(), Some(Instant::now())));
        }
        Ok::<_, std::io::Error>(())
    })
    .context("metrics endpoint")
}

/// Serves one request on `stream` (no keep-alive): its head must arrive
/// within [`REQUEST_DEADLINE`] of the first read, and the whole exchange
/// end within twice that (the reply taken in the rest); `complete` is
/// called once the request has fully arrived.
async fn answer(stream: tokio::net::TcpStream, registry: &Registry, complete: impl Fn()) {
    let service = service_fn(|req: Request<Incoming>| {
        complete();
        let reply = reply(registry, req.method(), req.uri().path());
        std::future::ready(Ok::<_, std::convert::Infallible>(reply))
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(REQUEST_DEADLINE)
        .max_buf_size(MAX_REQUEST_BYTES)
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service);
    // Ends with the connection or at the deadline; either way it is closed.
    let _ = tokio::time::timeout(2 * REQUEST_DEADLINE, conn).await;
}

fn reply(registry: &Registry, method: &Method, path: &str) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (method, path) {
        (&Method::GET, "/metrics") => (
            StatusCode::OK,
            prometheus_text::CONTENT_TYPE,
            render(registry),
        ),
        (&Method::GET, _) => (StatusCode::NOT_FOUND, "text/plain", "try /metrics\n".into()),
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".into(),
        ),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// The exposition, drawn from the model at each scrape: a collector of
/// pre-computed values (the counts live in the pipeline, not in the
/// crate's metric types).
struct Exposition(Arc<Model>);

impl std::fmt::Debug for Exposition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Exposition").field(&self.0.name).finish()
    }
}

impl Collector for Exposition {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        expose(&mut enc, &self.0)
    }
}

/// The registry the endpoint encodes at each scrape.
pub fn registry(model: Arc<Model>) -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(Exposition(model)));
    r
}

/// The whole exposition in the Prometheus text format (0.0.4).
pub fn render(registry: &Registry) -> String {
    let mut out = String::with_capacity(8192);
    // Writing to a String cannot fail, nor can the collector.
    let _ = prometheus_text::encode(&mut out, registry);
    out
}

type Labels = Vec<(&'static str, String)>;

/// A counter's or gauge's value.
#[derive(Clone, Copy)]
enum Value {
    Int(u64),
    Float(f64),
}

/// A family's type, as the format names it.
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
}

/// One counter or gauge family and its series. Counter names are given as
/// exposed, ending `_total`: the encoder adds that suffix itself (the
/// format's rule), so it is taken off here, and a counter without it would
/// be renamed.
fn family(
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
struct HistogramSeries {
    labels: Labels,
    buckets: Vec<(f64, u64)>,
    sum_s: f64,
    count: u64,
}

fn histogram_family(
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

fn dir_label(s: &DirectionStats) -> Labels {
    vec![("direction", s.name.clone())]
}

/// The whole exposition, one consistent snapshot per direction.
// Kept whole: the metric families one after another, in the order they are exposed.
fn expose(enc: &mut DescriptorEncoder, model: &Model) -> fmt::Result {
    let stats = model.raw_stats();
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
    let per_dir = |enc: &mut DescriptorEncoder,
                   name: &str,
                   kind: Kind,
                   help: &str,
                   value: &dyn Fn(&DirectionStats) -> Value| {
        family(
            enc,
            name,
            kind,
            help,
            stats.iter().map(|s| (dir_label(s), value(s))),
        )
    };
    per_dir(
        enc,
        "linkem_received_packets_total",
        Kind::Counter,
        "Frames taken from the receiving interface.",
        &|s| Value::Int(s.received),
    )?;
    per_dir(
        enc,
        "linkem_segmented_packets_total",
        Kind::Counter,
        "Extra wire frames made by cutting super-frames.",
        &|s| Value::Int(s.segmented),
    )?;
    per_dir(
        enc,
        "linkem_rx_kernel_drops_total",
        Kind::Counter,
        "Frames the kernel dropped before linkem could take them.",
        &|s| Value::Int(s.rx_kernel_drops),
    )?;
    let mut fates: Vec<(Labels, Value)> = Vec::new();
    for s in &stats {
        let with = |fate: &str, n: u64| {
            (
                vec![("direction", s.name.clone()), ("fate", fate.to_string())],
                Value::Int(n),
            )
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
    per_dir(
        enc,
        "linkem_in_flight_packets",
        Kind::Gauge,
        "Accepted packets not yet sent: queue and delay line.",
        &|s| Value::Int(s.in_flight),
    )?;
    per_dir(
        enc,
        "linkem_duplicated_packets_total",
        Kind::Counter,
        "Extra copies made by duplicate.",
        &|s| Value::Int(s.fates.duplicated),
    )?;
    per_dir(
        enc,
        "linkem_copies_sent_total",
        Kind::Counter,
        "Extra copies sent.",
        &|s| Value::Int(s.copies_sent),
    )?;
    per_dir(
        enc,
        "linkem_coalesced_frames_total",
        Kind::Counter,
        "Delivered wire frames that left merged into super-frames (coalescing on transmit).",
        &|s| Value::Int(s.coalesced),
    )?;
    per_dir(
        enc,
        "linkem_super_frames_total",
        Kind::Counter,
        "Super-frames handed to the receiving host (coalescing on transmit).",
        &|s| Value::Int(s.super_frames),
    )?;
    per_dir(
        enc,
        "linkem_whole_frames_total",
        Kind::Counter,
        "Of the coalesced wire frames, those inside received super-frames that crossed whole, never cut.",
        &|s| Value::Int(s.whole),
    )?;
    per_dir(
        enc,
        "linkem_corrupted_packets_total",
        Kind::Counter,
        "Delivered packets with a bit flipped by corrupt.",
        &|s| Value::Int(s.fates.corrupted),
    )?;
    per_dir(
        enc,
        "linkem_delay_line_bytes",
        Kind::Gauge,
        "Size of the delay line.",
        &|s| Value::Int(s.buffer_bytes),
    )?;
    if let Some(r) = model.rules() {
        node_metrics(enc, r)?;
    } else {
        link_metrics(enc, &stats, &model.link_configs())?;
    }
    lateness_and_control(enc, &stats, model)
}

/// The configured link of each direction (a bridge without rules).
fn link_metrics(
    enc: &mut DescriptorEncoder,
    stats: &[DirectionStats],
    links: &[LinkConfig; 2],
) -> fmt::Result {
    family(
        enc,
        "linkem_link_delay_seconds",
        Kind::Gauge,
        "The link's configured delay.",
        stats
            .iter()
            .zip(links)
            .map(|(s, l)| (dir_label(s), Value::Float(l.delay_ns as f64 / 1e9))),
    )?;
    family(
        enc,
        "linkem_link_rate_bits_per_second",
        Kind::Gauge,
        "The link's configured rate (0: unlimited).",
        stats
            .iter()
            .zip(links)
            .map(|(s, l)| (dir_label(s), Value::Int(l.rate_bps.unwrap_or(0)))),
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

/// Per pipe, per busiest flow and per rule (a bridge running rules). Rules
/// that share a number are one series, as ipfw numbers them.
// Kept whole: one snapshot under the node's lock, then its families in exposition order.
fn node_metrics(enc: &mut DescriptorEncoder, r: &super::rules::Rules) -> fmt::Result {
    let (pipes, rules, unmatched) = r.bridge.with_model(|n| {
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

fn lateness_and_control(
    enc: &mut DescriptorEncoder,
    stats: &[DirectionStats],
    model: &Model,
) -> fmt::Result {
    let series = stats.iter().map(|s| {
        let h = &s.lateness;
        let mut below = 0;
        let buckets = LATENESS_BUCKETS_S
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
            labels: dir_label(s),
            buckets,
            sum_s: sum_ns / 1e9,
            count: h.len(),
        }
    });
    histogram_family(
        enc,
        "linkem_lateness_seconds",
        "Send time minus release time of sent packets.",
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

    /// Families written through the helpers, as the format wants them.
    #[derive(Debug)]
    struct Sample;

    impl Collector for Sample {
        fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
            family(
                &mut enc,
                "x_packets_total",
                Kind::Counter,
                "Packets.",
                [(vec![("direction", "a\"b\\c\nd".to_string())], Value::Int(7))],
            )?;
            family(
                &mut enc,
                "x_delay_seconds",
                Kind::Gauge,
                "Delay.",
                [(Vec::new(), Value::Float(0.003))],
            )?;
            histogram_family(
                &mut enc,
                "x_lateness_seconds",
                "Lateness.",
                [HistogramSeries {
                    labels: vec![("direction", "a->b".to_string())],
                    buckets: vec![(1e-6, 2), (1e-4, 0), (0.25, 3)],
                    sum_s: 0.5,
                    count: 6,
                }],
            )
        }
    }

    #[test]
    fn exposition_follows_the_text_format() {
        let mut r = Registry::default();
        r.register_collector(Box::new(Sample));
        assert_eq!(
            render(&r),
            "# HELP x_packets_total Packets.\n\
             # TYPE x_packets_total counter\n\
             x_packets_total{direction=\"a\\\"b\\\\c\\nd\"} 7\n\
             # HELP x_delay_seconds Delay.\n\
             # TYPE x_delay_seconds gauge\n\
             x_delay_seconds 0.003\n\
             # HELP x_lateness_seconds Lateness.\n\
             # TYPE x_lateness_seconds histogram\n\
             x_lateness_seconds_bucket{direction=\"a->b\",le=\"1e-06\"} 2\n\
             x_lateness_seconds_bucket{direction=\"a->b\",le=\"0.0001\"} 2\n\
             x_lateness_seconds_bucket{direction=\"a->b\",le=\"0.25\"} 5\n\
             x_lateness_seconds_bucket{direction=\"a->b\",le=\"+Inf\"} 6\n\
             x_lateness_seconds_sum{direction=\"a->b\"} 0.5\n\
             x_lateness_seconds_count{direction=\"a->b\"} 6\n"
        );
    }
}
