//! One client's connection: its request loop (lines bounded in length and
//! time, replies cut off when not read), each request parsed and checked
//! whole before it reaches the model, batches kept line by line until
//! `commit`, and `watch`'s stream.

use super::super::audit::Audit;
use super::super::sys::PeerCred;
use super::super::{is_audited, looks_like_change, Failure, Model};
use super::{IDLE_TIMEOUT, PARTIAL_LINE_TIMEOUT, TICK};
use anyhow::Result;
use linkem_ctl::{
    Request, HELP, MAX_BATCH_BYTES, MAX_BATCH_LINES, MAX_LINE_BYTES, PROTOCOL_VERSION,
};
use linkem_runtime::clock;
use serde_json::json;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A batch being collected: the lines as typed, checked for permission as
/// they came and parsed again at `commit` (a parsed line may hold a
/// distribution table: the text is what [`MAX_BATCH_BYTES`] bounds).
struct Batch {
    lines: Vec<String>,
    /// Bytes of `lines`.
    bytes: usize,
    /// What earlier lines create ([`super::rules::Made`]).
    made: crate::control::rules::Made,
    /// The first line that failed, with why: the commit then fails, and
    /// later lines are answered but no longer kept.
    failed: Option<String>,
}

pub(super) struct Session<'a> {
    model: &'a Model,
    audit: Option<&'a Audit>,
    cred: PeerCred,
    batch: Option<Batch>,
}

/// What to do with the connection after a line.
enum Next {
    Continue,
    Close,
}

impl<'a> Session<'a> {
    /// A new connection of `cred`, no batch begun.
    pub(super) fn new(model: &'a Model, audit: Option<&'a Audit>, cred: PeerCred) -> Session<'a> {
        Session {
            model,
            audit,
            cred,
            batch: None,
        }
    }
}

impl Session<'_> {
    pub(super) fn serve(&mut self, mut stream: UnixStream, stop: &AtomicBool) {
        let banner = json!({
            "linkem": "ctl",
            "front": self.model.front.word(),
            "protocol": PROTOCOL_VERSION,
            "version": env!("CARGO_PKG_VERSION"),
            "commit": crate::build_info::COMMIT,
            "name": self.model.name,
        });
        if write_line(&mut stream, &banner.to_string()).is_err() {
            return;
        }
        let _ = stream.set_read_timeout(Some(TICK));
        let mut buf: Vec<u8> = Vec::with_capacity(1024);
        let mut chunk = [0u8; 4096];
        let mut discarding = false;
        let mut last_byte = Instant::now();
        loop {
            // Every complete line in the buffer.
            while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=nl).collect();
                if std::mem::take(&mut discarding) {
                    continue;
                }
                let line = &line[..line.len() - 1];
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                match self.line(&mut stream, line, &mut buf, stop) {
                    Next::Continue => {}
                    Next::Close => return,
                }
            }
            if discarding {
                buf.clear();
            } else if buf.len() >= MAX_LINE_BYTES {
                buf.clear();
                discarding = true;
                self.count(&Err(Failure::Error(String::new())));
                let r = json!({"ok": false, "error": format!("line longer than {} bytes: refused whole", MAX_LINE_BYTES - 1)});
                if write_line(&mut stream, &r.to_string()).is_err() {
                    return;
                }
            }
            if stop.load(Ordering::Acquire) {
                return;
            }
            match stream.read(&mut chunk) {
                Ok(0) => return,
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    last_byte = Instant::now();
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) =>
                {
                    let quiet = last_byte.elapsed();
                    if (!buf.is_empty() || discarding) && quiet >= PARTIAL_LINE_TIMEOUT {
                        let r = json!({"ok": false, "error": format!("an unfinished line for {} s: closing (nothing applied)", PARTIAL_LINE_TIMEOUT.as_secs())});
                        let _ = write_line(&mut stream, &r.to_string());
                        return;
                    }
                    if quiet >= IDLE_TIMEOUT {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    }

    /// Counts a refused request and answers it with its failure.
    fn refuse(&self, stream: &mut UnixStream, f: Failure, id: Option<&str>) -> Next {
        let f = Err(f);
        self.count(&f);
        reply(stream, &with_id(result_json(&f), id))
    }

    fn count(&self, r: &Result<u64, Failure>) {
        let c = &self.model.counters;
        match r {
            Ok(_) => c.ok.fetch_add(1, Ordering::Relaxed),
            Err(Failure::Error(_) | Failure::Word { .. }) => {
                c.error.fetch_add(1, Ordering::Relaxed)
            }
            Err(Failure::Refused(_)) => c.refused.fetch_add(1, Ordering::Relaxed),
        };
    }

    fn audit(&self, command: &str, result: &Result<u64, Failure>) {
        if let Some(a) = self.audit {
            match result {
                Ok(at) => a.record(&self.cred, command, "ok", Some(*at)),
                Err(f) => a.record(&self.cred, command, &f.audit_result(), None),
            }
        }
    }

    /// Handles one line; writes its reply (or, for `watch`, its stream).
    fn line(
        &mut self,
        stream: &mut UnixStream,
        raw: &[u8],
        buf: &mut Vec<u8>,
        stop: &AtomicBool,
    ) -> Next {
        let text = match std::str::from_utf8(raw) {
            Ok(t) => t,
            Err(e) => {
                self.count(&Err(Failure::Error(String::new())));
                let r =
                    json!({"ok": false, "error": format!("not UTF-8 (byte {})", e.valid_up_to())});
                return reply(stream, &r);
            }
        };
        let parsed = match self.parse(stream, text) {
            Ok(p) => p,
            Err(next) => return next,
        };
        let id = parsed.id.as_deref();
        let request = parsed.request;
        // With claims on, the socket is open to all: what an ordinary user
        // may ask is decided before anything else.
        if let Err(f) = self.model.gate(&self.cred, &request) {
            return self.refused(stream, text, f, id);
        }
        // Inside a batch: changes are collected, commit/abort end it.
        if self.batch.is_some() {
            if let Some(next) = self.in_batch(stream, text, &request, id) {
                return next;
            }
        }
        self.answer(stream, text, &request, id, buf, stop)
    }

    /// Answers a request outside a batch.
    fn answer(
        &mut self,
        stream: &mut UnixStream,
        text: &str,
        request: &Request,
        id: Option<&str>,
        buf: &mut Vec<u8>,
        stop: &AtomicBool,
    ) -> Next {
        let body = match request {
            Request::Ping => json!({"ok": true, "pong": true}),
            Request::Version => {
                json!({"ok": true, "version": env!("CARGO_PKG_VERSION"), "commit": crate::build_info::COMMIT, "protocol": PROTOCOL_VERSION, "name": self.model.name})
            }
            Request::Help => json!({"ok": true, "help": HELP}),
            Request::Show { target } | Request::Stats { target } => {
                let body = match request {
                    Request::Show { .. } => self.model.show_json(target.as_deref()),
                    _ => self.model.stats_for(target.as_deref()),
                };
                match body {
                    Ok(v) => ok_body(v),
                    Err(f) => return self.refuse(stream, f, id),
                }
            }
            Request::List => match self.model.rules() {
                Some(r) => {
                    let mut v = r.list_json();
                    v["ok"] = true.into();
                    v["rule_set"] = true.into();
                    v
                }
                None => json!({"ok": true, "links": self.model.links_json(), "rule_set": false}),
            },
            Request::Begin => {
                self.batch = Some(Batch {
                    lines: Vec::new(),
                    bytes: 0,
                    made: Default::default(),
                    failed: None,
                });
                json!({"ok": true, "batch": "begun"})
            }
            Request::Commit | Request::Abort => {
                let f: Result<u64, Failure> =
                    Err(Failure::Error("no batch (send begin first)".into()));
                self.count(&f);
                return reply(
                    stream,
                    &with_id(
                        json!({"ok": false, "error": "no batch: send begin first"}),
                        id,
                    ),
                );
            }
            Request::Watch { interval_ns } => {
                self.count(&Ok(0));
                return self.watch(stream, *interval_ns, id, buf, stop);
            }
            Request::Rule(linkem_ctl::RuleRequest::Show { kind, number })
                if self.model.rules().is_some() =>
            {
                let r = self.model.rules().expect("checked");
                match r.show_json(*kind, *number) {
                    Ok(v) => ok_body(v),
                    Err(f) => return self.refuse(stream, f, id),
                }
            }
            // `pipe show` and the like: nothing to read without a rule set.
            Request::Rule(_) if !is_audited(request) => {
                let f: Result<u64, Failure> = Err(Failure::Error(linkem_ctl::NO_RULE_SET.into()));
                self.count(&f);
                return reply(
                    stream,
                    &with_id(json!({"ok": false, "error": linkem_ctl::NO_RULE_SET}), id),
                );
            }
            Request::Claims => match self.model.rules() {
                Some(r) => {
                    let mut v = r.claims_json(self.cred.uid, clock::now_ns());
                    v["ok"] = true.into();
                    v
                }
                None => json!({"ok": true, "on": false, "claims": []}),
            },
            Request::Claim(c) => return self.claim(stream, text, c, id),
            Request::Link { .. } | Request::Zero | Request::Rule(_) => {
                let result = self.model.apply(&self.cred, &[request], &[text]);
                self.count(&result);
                self.audit(text, &result);
                return reply(stream, &with_id(result_json(&result), id));
            }
        };
        self.count(&Ok(0));
        reply(stream, &with_id(body, id))
    }

    /// A request refused before it is looked at further (who may ask it):
    /// counted, audited, and the end of a batch being collected.
    fn refused(
        &mut self,
        stream: &mut UnixStream,
        text: &str,
        f: Failure,
        id: Option<&str>,
    ) -> Next {
        let f = Err(f);
        self.count(&f);
        self.audit(text, &f);
        if let Some(b) = &mut self.batch {
            b.failed
                .get_or_insert_with(|| format!("'{text}': {}", f_message(&f)));
        }
        reply(stream, &with_id(result_json(&f), id))
    }

    /// Parses a line as this emulator reads it; a line that does not parse
    /// is answered (and counted, and audited when it asks for a change) here.
    fn parse(&mut self, stream: &mut UnixStream, text: &str) -> Result<linkem_ctl::Line, Next> {
        let e = match self.model.parse_line(text) {
            Ok(p) => return Ok(p),
            Err(e) => e,
        };
        // Who may add what is decided before the rule's words.
        if let Some(r) = self.model.refused_before_parse(&self.cred, text) {
            return Err(self.refused(stream, text, r, id_of(text)));
        }
        let f = Err(Failure::Error(e.to_string()));
        self.count(&f);
        if looks_like_change(text) {
            self.audit(text, &f);
        }
        if let Some(b) = &mut self.batch {
            b.failed.get_or_insert_with(|| format!("'{text}': {e}"));
        }
        Err(reply(stream, &with_id(e.reply(None), id_of(text))))
    }

    /// A request inside a batch: a change is kept, commit and abort end the
    /// batch, anything else but ping is refused; None: answer it as usual.
    fn in_batch(
        &mut self,
        stream: &mut UnixStream,
        text: &str,
        request: &Request,
        id: Option<&str>,
    ) -> Option<Next> {
        match request {
            Request::Commit => Some(self.commit(stream, text, id)),
            Request::Abort => {
                self.batch = None;
                self.count(&Ok(0));
                Some(reply(
                    stream,
                    &with_id(json!({"ok": true, "aborted": true}), id),
                ))
            }
            Request::Ping => None,
            r if r.is_change() && !matches!(r, Request::Begin) => {
                Some(self.batch_line(stream, text, r, id))
            }
            _ => {
                if let Some(b) = &mut self.batch {
                    b.failed
                        .get_or_insert_with(|| format!("'{text}' is not allowed in a batch"));
                }
                self.count(&Err(Failure::Error(String::new())));
                Some(reply(
                    stream,
                    &with_id(
                        json!({"ok": false, "error": "only changes (link, replace, zero, pipe..., add, delete, flush, set) and ping are allowed in a batch; send commit or abort"}),
                        id,
                    ),
                ))
            }
        }
    }

    /// `claim ...`/`release ...`: applied at once (never in a batch), audited
    /// with what it did to which claim.
    fn claim(
        &mut self,
        stream: &mut UnixStream,
        text: &str,
        c: &linkem_ctl::ClaimRequest,
        id: Option<&str>,
    ) -> Next {
        let done = self.model.claim(&self.cred, c, clock::now_ns());
        let result = done.as_ref().map(|d| d.at_ns).map_err(Clone::clone);
        self.count(&result);
        if let Some(a) = self.audit {
            match &done {
                Ok(d) => a.record_claim(&self.cred, text, d),
                Err(f) => a.record(&self.cred, text, &f.audit_result(), None),
            }
        }
        let mut v = result_json(&result);
        if let Ok(d) = &done {
            v["claim"] = d.claim.name().into();
            v["event"] = d.what.into();
            v["pipes"] = json!(d.claim.numbers());
            v["expires_ns"] = d.claim.expires_ns.into();
        }
        reply(stream, &with_id(v, id))
    }

    /// A change inside a batch: refused at once if the peer may not make it
    /// or the batch is full (the reply names the bound), else kept.
    fn batch_line(
        &mut self,
        stream: &mut UnixStream,
        text: &str,
        request: &Request,
        id: Option<&str>,
    ) -> Next {
        let b = self.batch.as_mut().expect("called inside a batch");
        let checked = if b.lines.len() >= MAX_BATCH_LINES {
            Err(Failure::Refused(format!(
                "a batch holds at most {MAX_BATCH_LINES} lines: send commit, then the rest in another batch"
            )))
        } else if b.bytes + text.len() > MAX_BATCH_BYTES {
            Err(Failure::Refused(format!(
                "a batch holds at most {MAX_BATCH_BYTES} bytes of requests: send commit, then the rest in another batch"
            )))
        } else {
            self.model.check_line(&self.cred, request, &mut b.made)
        };
        match checked {
            Ok(()) => {
                if b.failed.is_none() {
                    b.lines.push(text.to_string());
                    b.bytes += text.len();
                }
                let n = b.lines.len();
                self.count(&Ok(0));
                reply(stream, &with_id(json!({"ok": true, "batched": n}), id))
            }
            Err(f) => {
                b.failed
                    .get_or_insert_with(|| format!("'{text}': {}", f.message()));
                let f = Err(f);
                self.count(&f);
                self.audit(text, &f);
                reply(stream, &with_id(result_json(&f), id))
            }
        }
    }

    fn commit(&mut self, stream: &mut UnixStream, text: &str, id: Option<&str>) -> Next {
        let batch = self.batch.take().expect("called inside a batch");
        let command = format!("{text}: {}", batch.lines.join("; "));
        let result = match batch.failed {
            Some(why) => Err(Failure::Error(format!("batch not applied: {why}"))),
            None => {
                // Each line parsed when it came: parsing it again gives the same request.
                let parsed: Result<Vec<Request>, Failure> = batch
                    .lines
                    .iter()
                    .map(|l| {
                        self.model
                            .parse_line(l)
                            .map(|p| p.request)
                            .map_err(|e| Failure::Error(format!("batch not applied: '{l}': {e}")))
                    })
                    .collect();
                parsed.and_then(|reqs| {
                    let reqs: Vec<&Request> = reqs.iter().collect();
                    let lines: Vec<&str> = batch.lines.iter().map(String::as_str).collect();
                    self.model.apply(&self.cred, &reqs, &lines)
                })
            }
        };
        self.count(&result);
        self.audit(&command, &result);
        let mut v = result_json(&result);
        if result.is_ok() {
            v["applied"] = batch.lines.len().into();
        }
        reply(stream, &with_id(v, id))
    }

    fn watch(
        &mut self,
        stream: &mut UnixStream,
        interval_ns: u64,
        id: Option<&str>,
        buf: &mut Vec<u8>,
        stop: &AtomicBool,
    ) -> Next {
        let interval = Duration::from_nanos(interval_ns);
        let mut next = Instant::now();
        let mut seq: u64 = 0;
        let mut chunk = [0u8; 1024];
        loop {
            let mut v = self.model.stats_json();
            v["ok"] = true.into();
            v["watch"] = seq.into();
            if write_line(stream, &with_id(v, id).to_string()).is_err() {
                return Next::Close;
            }
            seq += 1;
            next += interval;
            // Wait for the next tick, ending at any line from the client.
            loop {
                if stop.load(Ordering::Acquire) {
                    return Next::Close;
                }
                let now = Instant::now();
                if now >= next {
                    break;
                }
                let _ = stream.set_read_timeout(Some((next - now).min(TICK)));
                match stream.read(&mut chunk) {
                    Ok(0) => return Next::Close,
                    Ok(n) => {
                        // The line that ended the watch is consumed, not run.
                        let _ = stream.set_read_timeout(Some(TICK));
                        buf.extend_from_slice(&chunk[..n]);
                        match buf.iter().position(|&b| b == b'\n') {
                            Some(nl) => {
                                buf.drain(..=nl);
                            }
                            None => buf.clear(),
                        }
                        return reply(
                            stream,
                            &with_id(json!({"ok": true, "watch": "ended", "lines": seq}), id),
                        );
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                        ) => {}
                    Err(_) => return Next::Close,
                }
            }
        }
    }
}

fn f_message(r: &Result<u64, Failure>) -> &str {
    r.as_ref().err().map_or("", Failure::message)
}

/// A reply body that succeeded: `v` with `"ok": true`.
fn ok_body(mut v: serde_json::Value) -> serde_json::Value {
    v["ok"] = true.into();
    v
}

fn result_json(r: &Result<u64, Failure>) -> serde_json::Value {
    match r {
        Ok(at) => json!({"ok": true, "at_ns": at}),
        Err(Failure::Error(m)) => json!({"ok": false, "error": m}),
        Err(Failure::Refused(m)) => json!({"ok": false, "refused": true, "error": m}),
        Err(Failure::Word {
            message,
            position,
            word,
        }) => json!({"ok": false, "error": message, "position": position, "word": word}),
    }
}

fn id_of(text: &str) -> Option<&str> {
    text.split_whitespace()
        .next()
        .and_then(|w| w.strip_prefix('@'))
        .filter(|id| {
            linkem_ctl::parse_line(&format!("@{id} ping"), &mut linkem_core::config::no_files)
                .is_ok()
        })
}

fn with_id(mut v: serde_json::Value, id: Option<&str>) -> serde_json::Value {
    if let Some(id) = id {
        v["id"] = id.into();
    }
    v
}

fn reply(stream: &mut UnixStream, v: &serde_json::Value) -> Next {
    match write_line(stream, &v.to_string()) {
        Ok(()) => Next::Continue,
        Err(_) => Next::Close,
    }
}

pub(super) fn write_line(stream: &mut UnixStream, line: &str) -> std::io::Result<()> {
    let mut b = Vec::with_capacity(line.len() + 1);
    b.extend_from_slice(line.as_bytes());
    b.push(b'\n');
    stream.write_all(&b)
}
