//! The HTTP endpoints' plumbing, shared by `--metrics` and `--web`: an
//! address option read and bound ([`parse_addr`], [`bind`]), and [`Endpoint`],
//! `hyper` (HTTP/1.1, no keep-alive) on a current-thread tokio runtime: one
//! thread per endpoint, a task per connection, each request handed to the
//! endpoint's [`Handler`].
//!
//! # Bounds
//! The request head must arrive within [`REQUEST_DEADLINE`] of the
//! connection (hyper's header read timeout: one deadline for the request,
//! not per read, so a client sending a byte now and then, or nothing, is
//! closed at it) and fit in 8 KiB (431 beyond); the whole exchange ends
//! within twice that, so a reply not taken is dropped too. At most
//! [`MAX_CONNECTIONS`] such exchanges at once: when every place is held, the
//! connection that has waited longest for its request is closed (its task
//! aborted) to make room: slow clients (slowloris) cannot hold every place,
//! since a scraper sends its request at once and is answered in microseconds.
//!
//! A handler may turn its connection into a stream ([`Conn::stream`], the
//! web page's events): it leaves those places and that deadline (the
//! handler bounds its streams itself) and lasts until its body ends, or
//! until a write to the socket stays blocked for [`STALL`]: a client that
//! does not read is reset, never waited for.
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

use anyhow::{anyhow, Context, Result};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::BodyExt;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::Future;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::task::AbortHandle;

/// Short exchanges served at once.
pub const MAX_CONNECTIONS: usize = 16;
/// Time for the whole request to arrive, and for the reply to be taken.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// How long a stream's write may stay blocked before its client is dropped.
pub const STALL: Duration = Duration::from_secs(2);
/// How often the accept loop looks at the stop flag while no connection comes.
const STOP_POLL: Duration = Duration::from_millis(200);
/// How often a connection looks at its deadline and its blocked writes.
const CONN_POLL: Duration = Duration::from_millis(250);
/// A stream's send buffer: small, so that a client that does not read
/// blocks its writes (and is dropped) after a few events, not megabytes.
const STREAM_SEND_BUFFER_BYTES: i32 = 4096;
/// hyper's least read buffer: a request head larger is answered 431. It
/// bounds the reply buffered per connection too.
const MAX_REQUEST_BYTES: usize = 8192;

/// A reply's body: whole, or streamed (never failing: a stream ends instead).
pub type Body = UnsyncBoxBody<Bytes, std::convert::Infallible>;
/// What a handler makes of one request.
pub type ReplyFuture = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;
/// An endpoint's answer to each request.
pub type Handler = Arc<dyn Fn(Request<Incoming>, Conn) -> ReplyFuture + Send + Sync>;

/// A whole body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    http_body_util::Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// `PORT` or `ADDR:PORT` (IPv6 as `[::1]:PORT`) of the option `option`
/// (`--metrics`, `--web`), named in the error.
pub fn parse_addr(option: &str, text: &str) -> Result<SocketAddr> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse::<SocketAddr>().map_err(|_| {
        anyhow!("{option} '{text}': give PORT (on 127.0.0.1) or ADDR:PORT, e.g. 127.0.0.1:9105")
    })
}

pub fn bind(option: &str, text: &str) -> Result<TcpListener> {
    let addr = parse_addr(option, text)?;
    TcpListener::bind(addr).with_context(|| format!("{option}: cannot listen on {addr}"))
}

/// A running endpoint: its thread and the address it was bound to.
pub struct Endpoint {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Endpoint {
    /// Serves `listener` on a thread named `thread` until `stop`.
    pub fn start(
        thread: &str,
        listener: TcpListener,
        handler: Handler,
        stop: Arc<AtomicBool>,
    ) -> Endpoint {
        let addr = listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)));
        let (s, name) = (stop.clone(), thread.to_string());
        let thread = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                if let Err(e) = serve(listener, handler, s) {
                    eprintln!("linkem: {name} endpoint stopped: {e:#}");
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

/// A handler's hold on the connection of its request.
#[derive(Clone)]
pub struct Conn {
    held: Arc<Mutex<Held>>,
    id: u64,
    streaming: Arc<AtomicBool>,
}

impl Conn {
    /// Makes this connection a stream: out of the short exchanges' places
    /// and deadline, it lasts until its body ends or a write stays blocked
    /// for [`STALL`] (the handler bounds how many it keeps).
    pub fn stream(&self) {
        self.streaming.store(true, Ordering::Release);
        Held::forget(&self.held, self.id);
    }
}

/// Accepts and serves on one thread: a current-thread runtime, a task per
/// connection.
fn serve(listener: TcpListener, handler: Handler, stop: Arc<AtomicBool>) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .context("cannot start the endpoint's runtime")?;
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
            if !admit(&held, stream, &handler) {
                // Every place is answering a complete request: busy, not stalled.
                continue;
            }
            // Lets the new connection read a request already there before
            // the next accept: in a burst, a prompt client is not taken for
            // a slow one and evicted.
            tokio::task::yield_now().await;
        }
        Ok::<_, std::io::Error>(())
    })
    .context("endpoint")
}

/// Serves `stream` on a task of its own, in a place of [`MAX_CONNECTIONS`]
/// (the longest waiting for its request evicted when all are held); false
/// when every place holds a complete request (the connection is dropped).
fn admit(held: &Arc<Mutex<Held>>, stream: tokio::net::TcpStream, handler: &Handler) -> bool {
    let mut h = lock(held);
    if h.conns.len() >= MAX_CONNECTIONS && !h.evict_slowest() {
        return false;
    }
    h.next_id += 1;
    let id = h.next_id;
    let conn = Conn {
        held: held.clone(),
        id,
        streaming: Arc::default(),
    };
    let handler = handler.clone();
    // Registered before the task can run (same thread, lock held).
    let task = tokio::spawn(async move {
        let hd = conn.held.clone();
        answer(stream, handler, conn).await;
        Held::forget(&hd, id);
    });
    h.conns
        .push((id, task.abort_handle(), Some(Instant::now())));
    true
}

/// Serves one request on `stream` (no keep-alive): its head must arrive
/// within [`REQUEST_DEADLINE`] of the first read, and the whole exchange
/// end within twice that (the reply taken in the rest), unless the handler
/// made it a stream.
async fn answer(stream: tokio::net::TcpStream, handler: Handler, conn: Conn) {
    // Only to set an option while `served` (which owns the socket) lives.
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    let blocked: Arc<Mutex<Option<Instant>>> = Arc::default();
    let reset = Arc::new(AtomicBool::new(false));
    let io = Watched {
        inner: stream,
        blocked: blocked.clone(),
        reset: reset.clone(),
    };
    let streaming = conn.streaming.clone();
    let service = service_fn(move |req: Request<Incoming>| {
        Held::request_complete(&conn.held, conn.id);
        let reply = handler(req, conn.clone());
        async move { Ok::<_, std::convert::Infallible>(reply.await) }
    });
    let served = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(REQUEST_DEADLINE)
        .max_buf_size(MAX_REQUEST_BYTES)
        .keep_alive(false)
        .serve_connection(TokioIo::new(io), service);
    let mut served = std::pin::pin!(served);
    let start = Instant::now();
    let mut sized = false;
    loop {
        if tokio::time::timeout(CONN_POLL, served.as_mut())
            .await
            .is_ok()
        {
            return;
        }
        if !streaming.load(Ordering::Acquire) {
            if start.elapsed() >= 2 * REQUEST_DEADLINE {
                return;
            }
            continue;
        }
        if !std::mem::replace(&mut sized, true) {
            let _ = linkem_io::sys::set_int_option(
                &fd,
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                STREAM_SEND_BUFFER_BYTES,
            );
        }
        let since = *blocked.lock().unwrap_or_else(|p| p.into_inner());
        if since.is_some_and(|t| t.elapsed() >= STALL) {
            reset.store(true, Ordering::Release);
            return;
        }
    }
}

/// A connection's socket that notes since when a write has been blocked.
struct Watched {
    inner: tokio::net::TcpStream,
    blocked: Arc<Mutex<Option<Instant>>>,
    /// Set when its client is dropped for not reading.
    reset: Arc<AtomicBool>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        if self.reset.load(Ordering::Acquire) {
            // Reset, not closed: a FIN would wait behind the data the client
            // does not take (SO_LINGER 0 makes the close send RST).
            let _ = self.inner.set_zero_linger();
        }
    }
}

impl Watched {
    fn note<T>(&self, r: Poll<T>) -> Poll<T> {
        let mut b = self.blocked.lock().unwrap_or_else(|p| p.into_inner());
        match r {
            Poll::Pending => {
                b.get_or_insert_with(Instant::now);
            }
            Poll::Ready(_) => *b = None,
        }
        r
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.note(r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.note(r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(
            parse_addr("--web", "9105").unwrap().to_string(),
            "127.0.0.1:9105"
        );
        assert_eq!(
            parse_addr("--metrics", "0.0.0.0:80").unwrap().to_string(),
            "0.0.0.0:80"
        );
        assert_eq!(
            parse_addr("--metrics", "[::1]:9").unwrap().to_string(),
            "[::1]:9"
        );
        let e = parse_addr("--web", "localhost").unwrap_err().to_string();
        assert!(e.starts_with("--web 'localhost'"), "{e}");
        assert!(parse_addr("--metrics", "70000").is_err());
    }
}
