//! `--metrics ADDR:PORT`: the Prometheus text exposition format (0.0.4) on
//! `GET /metrics`, written by the `prometheus-client` crate's encoder from a
//! collector that reads the model at each scrape ([`families`]), served by
//! `hyper` (HTTP/1.1, no keep-alive) on a current-thread tokio runtime: one
//! thread for the endpoint, a task per connection, at most
//! [`MAX_CONNECTIONS`] at once.
//!
//! # Bounds
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
//! # Why these crates
//! Measured when the hand-written responder was replaced:
//! `tiny_http` 0.12 sets no read timeout on its sockets, has no connection
//! bound and runs each connection on a pool thread, adding a thread whenever
//! none is idle, so it fits none of the three needs. hyper 1 with tokio
//! (`rt`, `net`, `time`) and hyper-util bring 11 crates more (hyper, http,
//! tokio, mio, ...): about 33 s of CPU in a release build, against about
//! 5 min for a clean release build of linkem (+10 %), and 0.4 MB more in
//! the stripped binary (5.28 to 5.68 MB, +8 %); the MSRV (1.88) holds. That
//! buys deadlines, bounds and HTTP parsing nobody here has to keep right.

mod families;
#[cfg(test)]
mod tests;

use super::Model;
use anyhow::{anyhow, Context, Result};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{prometheus_text, DescriptorEncoder};
use prometheus_client::registry::Registry;
use std::fmt;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::task::AbortHandle;

use families::expose;
pub use families::TOP_FLOWS;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 16;
/// Time for the whole request to arrive, and for the reply to be taken.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// How often the accept loop looks at the stop flag while no connection comes.
const STOP_POLL: Duration = Duration::from_millis(200);
/// hyper's least read buffer: a request head larger is answered 431.
const MAX_REQUEST_BYTES: usize = 8192;

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
            // The stop's wake-up connection cannot reach the listener from a
            // thread in another network namespace (a lab's emulator binds the
            // endpoint in the host's and runs in the lab's): the flag is also
            // looked at every STOP_POLL.
            let Ok(accepted) = tokio::time::timeout(STOP_POLL, listener.accept()).await else {
                if stop.load(Ordering::Acquire) {
                    break;
                }
                continue;
            };
            let Ok((stream, _)) = accepted else {
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
