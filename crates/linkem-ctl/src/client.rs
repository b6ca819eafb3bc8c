//! A blocking client of the control socket, for `linkem ctl`, tests and
//! benchmarks: one connection, one request line at a time.

use crate::{read_reply_line, MAX_LINE_BYTES};
use std::io::{self, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    /// The emulator's banner (name, versions).
    pub banner: serde_json::Value,
}

impl Client {
    /// Connects and reads the banner; every later read waits at most `timeout`.
    pub fn connect(path: &Path, timeout: Duration) -> io::Result<Client> {
        let stream = UnixStream::connect(path)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let writer = stream.try_clone()?;
        let mut reader = BufReader::new(stream);
        let line = read_reply_line(&mut reader)?.ok_or_else(|| {
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
        Ok(Client {
            reader,
            writer,
            banner,
        })
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
        read_reply_line(&mut self.reader)?.ok_or_else(|| {
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
