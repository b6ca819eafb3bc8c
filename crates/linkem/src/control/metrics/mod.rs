//! `--metrics ADDR:PORT`: the Prometheus text exposition format (0.0.4) on
//! `GET /metrics`, written by the `prometheus-client` crate's encoder from a
//! collector that reads the model at each scrape ([`families`]), served by
//! the shared HTTP plumbing ([`super::http`]: one thread, a task per
//! connection, its bounds and deadlines).

mod families;
#[cfg(test)]
mod tests;

use super::http::{full, Body, Conn, Endpoint, Handler};
use super::Model;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{prometheus_text, DescriptorEncoder};
use prometheus_client::registry::Registry;
use std::fmt;
use std::net::TcpListener;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use families::expose;
pub use families::TOP_FLOWS;

/// Serves `GET /metrics` of `model` on `listener` until `stop`.
pub fn start(listener: TcpListener, model: Arc<Model>, stop: Arc<AtomicBool>) -> Endpoint {
    let registry = Arc::new(registry(model));
    let handler: Handler = Arc::new(move |req: Request<Incoming>, _: Conn| {
        let r = reply(&registry, req.method(), req.uri().path());
        Box::pin(std::future::ready(r))
    });
    Endpoint::start("linkem-metrics", listener, handler, stop)
}

fn reply(registry: &Registry, method: &Method, path: &str) -> Response<Body> {
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
    let mut r = Response::new(full(body));
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
