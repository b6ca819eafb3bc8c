//! `--web ADDR:PORT`: a page of the running emulator or lab in the browser
//! (its files in the binary, [`page`](self) folder), its JSON ([`history`]:
//! the sampler that reads the model every half second), its live events
//! (Server-Sent Events, [`sse`]) and its changes ([`change`]: run through a
//! control session as the starter's), on the shared HTTP plumbing
//! ([`super::http`]). The graph it draws comes from the front end
//! ([`Topology`]).
//!
//! # Who may do what
//! Reading is open to whoever reaches the port (loopback unless an address
//! is given). Changing needs the run's [`Token`], printed at start in the
//! page's address (`#token=HEX`, a fragment: never sent in a request line
//! or Referer), sent back in the header `X-Linkem-Token`: a custom header,
//! so a cross-site request needs a CORS preflight, never granted (OPTIONS is
//! 405, no `Access-Control-*` header ever). Every request's `Host` must be
//! an IP literal or `localhost` (DNS rebinding); a change's `Origin`, when
//! present, must be this server; its body JSON (`Content-Type`), at most
//! [`checks::MAX_BODY_BYTES`]. Every reply forbids framing, sniffing, and
//! any script, style or connection but the page's own (CSP).

pub mod change;
pub mod checks;
pub mod history;
mod sse;
pub mod topology;

use super::audit::Audit;
use super::http::{self, full, Body, Conn, Endpoint, Handler, ReplyFuture};
use super::{Model, Running};
use anyhow::Result;
use checks::{host_allowed, is_json, origin_allowed, query_param, route, Route, MAX_BODY_BYTES};
use history::History;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::{json, Value};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub use checks::Token;
pub use topology::Topology;

/// The header that carries the token.
pub const TOKEN_HEADER: &str = "x-linkem-token";
/// Every reply's policy: the page's own files only, no inline script or
/// style, no framing.
pub const CSP: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; \
                       script-src 'self'; connect-src 'self'; frame-ancestors 'none'";

/// `--web`'s port, bound while linkem holds its privileges, and the run's token.
pub struct Bound {
    listener: TcpListener,
    token: Token,
}

impl Bound {
    /// Binds `--web ADDR:PORT` (a bare PORT is 127.0.0.1:PORT) and draws the token.
    pub fn bind(text: &str) -> Result<Bound> {
        let listener = http::bind("--web", text)?;
        Ok(Bound {
            listener,
            token: Token::new()?,
        })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// The page's address with the token, the port as bound.
    pub fn url(&self) -> Option<String> {
        let addr = self.local_addr()?;
        Some(format!("http://{addr}/#token={}", self.token.hex()))
    }
}

/// The running page: its endpoint and its sampler.
/// How a change is run: the control server's `run_lines` (a session over a
/// socket pair), handed in by the server that starts the page, so that the
/// page does not import the server that imports it.
pub type RunLines = fn(&Model, Option<&Audit>, u32, &[String]) -> Result<Vec<serde_json::Value>>;

pub struct Web {
    endpoint: Endpoint,
    history: Arc<History>,
}

impl Web {
    /// Serves the page of `model` until `stop`; changes are run by `run`
    /// and audited in `audit`.
    pub fn start(
        bound: Bound,
        model: Arc<Model>,
        (audit, run): (Option<Arc<Audit>>, RunLines),
        topology: Topology,
        stop: Arc<AtomicBool>,
    ) -> Web {
        let history = History::start(model.clone(), stop.clone());
        let site = Arc::new(Site {
            front: topology.front.unwrap_or(model.front.word()),
            topology: topology.to_json(),
            model,
            audit,
            run,
            history: history.clone(),
            token: bound.token,
            streams: sse::Streams::default(),
        });
        let handler: Handler = Arc::new(move |req, conn| handle(site.clone(), req, conn));
        let endpoint = Endpoint::start("linkem-web", bound.listener, handler, stop);
        Web { endpoint, history }
    }

    pub fn stop(self) {
        self.endpoint.stop();
        self.history.stop();
    }
}

struct Site {
    model: Arc<Model>,
    audit: Option<Arc<Audit>>,
    run: RunLines,
    history: Arc<History>,
    topology: Value,
    front: &'static str,
    token: Token,
    streams: sse::Streams,
}

/// The page's files, in the binary.
fn page(name: &str) -> &'static str {
    match name {
        "index.html" => include_str!("page/index.html"),
        "app.js" => include_str!("page/app.js"),
        _ => include_str!("page/style.css"),
    }
}

fn handle(site: Arc<Site>, req: Request<Incoming>, conn: Conn) -> ReplyFuture {
    Box::pin(async move {
        let host = header_str(&req, header::HOST).map(str::to_string);
        let Some(host) = host.filter(|h| host_allowed(Some(h))) else {
            return json_reply(
                StatusCode::FORBIDDEN,
                json!({"ok": false, "error": "the Host header must be an IP address or localhost \
                       (a name is refused: DNS rebinding)"}),
            );
        };
        let writable = site
            .token
            .matches(req.headers().get(TOKEN_HEADER).map(HeaderValue::as_bytes));
        match route(req.method(), req.uri().path()) {
            Route::File(name, content_type) => {
                respond(StatusCode::OK, content_type, full(page(name)))
            }
            Route::State => json_reply(StatusCode::OK, site.state(writable)),
            Route::History => site.link_history(req.uri().query()),
            Route::Events => site.events(&conn),
            Route::Change => site.change(req, &host, writable).await,
            Route::MethodNotAllowed => {
                let mut r = respond(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "text/plain; charset=utf-8",
                    full("method not allowed\n"),
                );
                let allow = if req.uri().path() == "/api/change" {
                    "POST"
                } else {
                    "GET"
                };
                r.headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static(allow));
                r
            }
            Route::NotFound => json_reply(
                StatusCode::NOT_FOUND,
                json!({"error": format!("no page '{}'", req.uri().path())}),
            ),
        }
    })
}

impl Site {
    fn state(&self, writable: bool) -> Value {
        let mut v = self.history.state_json();
        v["name"] = json!(self.model.name);
        v["front"] = json!(self.front);
        v["version"] = json!(env!("CARGO_PKG_VERSION"));
        v["writable"] = json!(writable);
        v["topology"] = self.topology.clone();
        v
    }

    fn link_history(&self, query: Option<&str>) -> Response<Body> {
        let Some(link) = query_param(query, "link") else {
            return json_reply(
                StatusCode::BAD_REQUEST,
                json!({"error": "give the link: /api/history?link=NAME"}),
            );
        };
        match self.history.link_history_json(&link) {
            Some(v) => json_reply(StatusCode::OK, v),
            None => json_reply(
                StatusCode::NOT_FOUND,
                json!({"error": format!("no link '{link}'")}),
            ),
        }
    }

    fn events(&self, conn: &Conn) -> Response<Body> {
        let Some(place) = self.streams.take() else {
            return json_reply(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": format!("at most {} event streams at once", sse::MAX_STREAMS)}),
            );
        };
        conn.stream();
        let body = sse::Events::new(self.history.subscribe(), place).boxed_unsync();
        respond(StatusCode::OK, "text/event-stream", body)
    }

    /// A change: checked here for where it comes from and what it is,
    /// then run as the starter's through a control session.
    async fn change(&self, req: Request<Incoming>, host: &str, writable: bool) -> Response<Body> {
        let refuse = |status, error: &str| json_reply(status, json!({"ok": false, "error": error}));
        if !origin_allowed(header_str(&req, header::ORIGIN), host) {
            return refuse(
                StatusCode::FORBIDDEN,
                "a change must come from this page (its Origin is another site)",
            );
        }
        if !writable {
            return refuse(
                StatusCode::FORBIDDEN,
                "a change needs the run's token (header X-Linkem-Token; it is in the page \
                 address linkem printed at start): without it the page is read-only",
            );
        }
        if !is_json(header_str(&req, header::CONTENT_TYPE)) {
            return refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "a change is JSON (Content-Type: application/json)",
            );
        }
        let too_big = format!("a change's body holds at most {MAX_BODY_BYTES} bytes");
        let declared =
            header_str(&req, header::CONTENT_LENGTH).and_then(|l| l.parse::<usize>().ok());
        if declared.is_some_and(|n| n > MAX_BODY_BYTES) {
            return refuse(StatusCode::BAD_REQUEST, &too_big);
        }
        let Ok(body) = Limited::new(req.into_body(), MAX_BODY_BYTES)
            .collect()
            .await
        else {
            return refuse(StatusCode::BAD_REQUEST, &too_big);
        };
        let body: Value = match serde_json::from_slice(&body.to_bytes()) {
            Ok(v) => v,
            Err(e) => return refuse(StatusCode::BAD_REQUEST, &format!("not JSON: {e}")),
        };
        let group = matches!(self.model.running(), Running::Group(_));
        let planned = match change::plan(&body, group, &self.model.name) {
            Ok(p) => p,
            Err(e) => return refuse(StatusCode::BAD_REQUEST, &e),
        };
        let (model, audit, line) = (self.model.clone(), self.audit.clone(), planned.line.clone());
        let run = self.run;
        // A change waits for the live stage to take it: off the serving thread.
        let ran = tokio::task::spawn_blocking(move || {
            let uid = model.owner_uid();
            run(&model, audit.as_deref(), uid, &[line])
        })
        .await;
        match ran {
            Ok(Ok(mut replies)) if !replies.is_empty() => {
                json_reply(StatusCode::OK, change::reply(replies.remove(0), &planned))
            }
            Ok(Err(e)) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e:#}")),
            _ => refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the control session gave no reply",
            ),
        }
    }
}

fn header_str(req: &Request<Incoming>, name: HeaderName) -> Option<&str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

fn json_reply(status: StatusCode, v: Value) -> Response<Body> {
    respond(status, "application/json", full(v.to_string()))
}

/// A reply with the headers every reply carries.
fn respond(status: StatusCode, content_type: &'static str, body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    let h = r.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, content_type),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::REFERRER_POLICY, "no-referrer"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    r
}
