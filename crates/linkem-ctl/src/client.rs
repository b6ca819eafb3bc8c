//! A blocking client of the control socket, for `linkem ctl`, tests and
//! benchmarks: one connection, one request line at a time.
//!
//! Each reply line (the banner too) must arrive whole within the client's
//! timeout, however slowly its bytes come, and be at most
//! [`crate::MAX_REPLY_BYTES`] long: a stalled or hostile peer cannot hold the
//! client longer or make it fill memory.

use crate::{MAX_LINE_BYTES, MAX_REPLY_BYTES};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    /// How long one whole reply line may take.
    timeout: Duration,
    /// The start of a reply line whose rest had not come when a read timed
    /// out: the next [`Client::recv`] goes on from it.
    partial: Vec<u8>,
    /// The emulator's banner (name, versions).
    pub banner: serde_json::Value,
}

impl Client {
    /// Connects once the emulator behind `path` serves: its banner comes and
    /// it answers `ping`, which it does only after its ports are open and
    /// its pipeline runs, so traffic sent from then on is forwarded. Tries
    /// every 20 ms while `alive()` holds, for at most `limit`; a stale
    /// socket file of an earlier run refuses connections and is waited past.
    /// Scripts and tests that start an emulator wait with this, not a sleep:
    /// a loaded machine takes longer than any fixed sleep to start one.
    pub fn connect_when_serving(
        path: &Path,
        limit: Duration,
        mut alive: impl FnMut() -> bool,
    ) -> io::Result<Client> {
        let t0 = Instant::now();
        loop {
            let tried = Client::connect(path, Duration::from_secs(1))
                .and_then(|mut c| c.request("ping").map(|_| c));
            let e = match tried {
                Ok(c) => return Ok(c),
                Err(e) => e,
            };
            if !alive() {
                return Err(io::Error::other(format!(
                    "the emulator exited before {} answered",
                    path.display()
                )));
            }
            if t0.elapsed() >= limit {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} did not answer within {:?} (last: {e})",
                        path.display(),
                        limit
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Connects and reads the banner; every reply line must then arrive whole
    /// within `timeout`.
    pub fn connect(path: &Path, timeout: Duration) -> io::Result<Client> {
        let stream = UnixStream::connect(path)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let writer = stream.try_clone()?;
        let reader = BufReader::new(stream);
        let mut client = Client {
            reader,
            writer,
            timeout,
            partial: Vec::new(),
            banner: serde_json::Value::Null,
        };
        let line = client.read_line()?.ok_or_else(|| {
            io::Error::new(io::ErrorKind::UnexpectedEof, "closed before its banner")
        })?;
        let banner: serde_json::Value = serde_json::from_str(&line)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("banner: {e}")))?;
        // An emulator that has no room for this connection says why in the
        // banner's place (the bound it hit).
        if banner["linkem"] == "ctl" && banner["ok"] == false {
            return Err(io::Error::other(format!(
                "the emulator refused the connection: {}",
                banner["error"].as_str().unwrap_or("no reason given")
            )));
        }
        if banner["linkem"] != "ctl" {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("not a linkem control socket (banner {line})"),
            ));
        }
        client.banner = banner;
        Ok(client)
    }

    /// The next line (without its newline) within the timeout, or `None` at
    /// the end of the stream. A timeout keeps what came of the line.
    fn read_line(&mut self) -> io::Result<Option<String>> {
        let deadline = Instant::now() + self.timeout;
        let timed_out = |timeout: Duration| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no whole reply within {timeout:?}"),
            )
        };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(timed_out(self.timeout));
            }
            self.reader.get_ref().set_read_timeout(Some(left))?;
            // The socket's own timeout (EAGAIN) is the same deadline passing
            // inside a read: one error for both.
            let buf = match self.reader.fill_buf() {
                Ok(buf) => buf,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(timed_out(self.timeout))
                }
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                if self.partial.is_empty() {
                    return Ok(None);
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the emulator closed the connection inside a reply",
                ));
            }
            let (take, whole) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            if self.partial.len() + take > MAX_REPLY_BYTES {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("a reply line longer than {MAX_REPLY_BYTES} bytes"),
                ));
            }
            self.partial.extend_from_slice(&buf[..take]);
            self.reader.consume(take);
            if whole {
                let mut line = std::mem::take(&mut self.partial);
                while line.ends_with(b"\n") || line.ends_with(b"\r") {
                    line.pop();
                }
                return String::from_utf8(line).map(Some).map_err(|_| {
                    io::Error::new(io::ErrorKind::InvalidData, "a reply line is not UTF-8")
                });
            }
        }
    }

    /// Sends one line without waiting for its reply (pipelining).
    pub fn send(&mut self, line: &str) -> io::Result<()> {
        if line.len() + 1 > MAX_LINE_BYTES || line.contains('\n') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a request is one line of at most {} bytes",
                    MAX_LINE_BYTES - 1
                ),
            ));
        }
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        self.writer.write_all(&buf)
    }

    /// The next reply line, raw.
    pub fn recv(&mut self) -> io::Result<String> {
        self.read_line()?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the emulator closed the connection",
            )
        })
    }

    /// Sends one line and returns its reply, raw.
    pub fn request(&mut self, line: &str) -> io::Result<String> {
        self.send(line)?;
        self.recv()
    }

    /// Sends one line and returns its reply, parsed.
    pub fn request_json(&mut self, line: &str) -> io::Result<serde_json::Value> {
        let reply = self.request(line)?;
        serde_json::from_str(&reply)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("reply: {e}")))
    }
}
