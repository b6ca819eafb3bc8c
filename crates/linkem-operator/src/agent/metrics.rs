//! The agent's Prometheus metrics (text format 0.0.4) on `--metrics ADDR`:
//! per pod and emulator (labels `namespace`, `pod`, `emulator`) the batches
//! applied, refused and restoring the base, the last apply's instant, and,
//! read from each emulator's `stats` when scraped, its packet counters per
//! direction (label `direction` `egress`/`ingress`, the pod's view). A small
//! HTTP/1.1 server on a thread of its own: one request per connection.

use super::apply;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Labels of one emulator: namespace, pod, emulator.
pub type Labels = (String, String, String);

/// One emulator's counts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    pub applies: u64,
    pub refusals: u64,
    pub restores: u64,
    /// Seconds since the epoch of the last applied batch (its `at_ns`).
    pub last_apply_s: Option<f64>,
}

/// The counts and the emulators whose stats a scrape reads.
#[derive(Debug, Default)]
pub struct Metrics {
    counts: Mutex<BTreeMap<Labels, Counts>>,
    sockets: Mutex<BTreeMap<Labels, PathBuf>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A label value as the text format wants it.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    pub fn count(&self, labels: &Labels, f: impl FnOnce(&mut Counts)) {
        f(lock(&self.counts).entry(labels.clone()).or_default());
    }

    pub fn counts(&self, labels: &Labels) -> Counts {
        lock(&self.counts).get(labels).cloned().unwrap_or_default()
    }

    /// The emulators running now (those gone leave the stats, not the counts).
    pub fn set_emulators(&self, emulators: BTreeMap<Labels, PathBuf>) {
        *lock(&self.sockets) = emulators;
    }

    /// The text of a scrape.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let counts = lock(&self.counts).clone();
        let fmt = |(ns, pod, emu): &Labels| {
            format!(
                "namespace=\"{}\",pod=\"{}\",emulator=\"{}\"",
                esc(ns),
                esc(pod),
                esc(emu)
            )
        };
        type Get = fn(&Counts) -> Option<f64>;
        let families: [(&str, &str, &str, Get); 4] = [
            (
                "linkem_agent_applies_total",
                "counter",
                "batches the emulator applied",
                |c| Some(c.applies as f64),
            ),
            (
                "linkem_agent_refusals_total",
                "counter",
                "batches the emulator or the agent's parser refused",
                |c| Some(c.refusals as f64),
            ),
            (
                "linkem_agent_restores_total",
                "counter",
                "batches that restored the base link",
                |c| Some(c.restores as f64),
            ),
            (
                "linkem_agent_last_apply_timestamp_seconds",
                "gauge",
                "when the last batch took effect",
                |c| c.last_apply_s,
            ),
        ];
        for (name, kind, help, get) in families {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (l, c) in &counts {
                if let Some(v) = get(c) {
                    let _ = writeln!(out, "{name}{{{}}} {v}", fmt(l));
                }
            }
        }
        let sockets = lock(&self.sockets).clone();
        let stats: Vec<(String, Value)> = sockets
            .iter()
            .filter_map(|(l, s)| Some((fmt(l), apply::query(s, "stats").ok()?)))
            .collect();
        render_stats(&mut out, &stats);
        out
    }

    /// Serves `/metrics` on `addr` from a thread; the address bound.
    pub fn serve(self: Arc<Self>, addr: &str) -> anyhow::Result<SocketAddr> {
        let listener = TcpListener::bind(addr)
            .map_err(|e| anyhow::anyhow!("--metrics {addr}: cannot listen ({e})"))?;
        let bound = listener.local_addr()?;
        std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                for conn in listener.incoming().flatten() {
                    let _ = self.answer(conn);
                }
            })?;
        Ok(bound)
    }

    fn answer(&self, mut conn: TcpStream) -> std::io::Result<()> {
        conn.set_read_timeout(Some(Duration::from_secs(2)))?;
        conn.set_write_timeout(Some(Duration::from_secs(2)))?;
        // The request head only, bounded: the path is all that matters.
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
            let n = conn.read(&mut buf)?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        let line = String::from_utf8_lossy(&head);
        let path = line.split_whitespace().nth(1).unwrap_or("");
        let (status, body) = if path == "/metrics" || path.starts_with("/metrics?") {
            ("200 OK", self.render())
        } else {
            ("404 Not Found", "metrics are at /metrics\n".to_string())
        };
        let reply = format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        conn.write_all(reply.as_bytes())
    }
}

/// The emulators' packet counters from their `stats` replies.
fn render_stats(out: &mut String, stats: &[(String, Value)]) {
    let families = [
        (
            "linkem_emulator_received_packets_total",
            "counter",
            "packets the direction received",
        ),
        (
            "linkem_emulator_packet_fates_total",
            "counter",
            "packets by fate (delivered, loss, queue-full, ...)",
        ),
        (
            "linkem_emulator_in_flight_packets",
            "gauge",
            "packets inside the link",
        ),
    ];
    for (name, kind, help) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, v) in stats {
            for d in v["directions"].as_array().into_iter().flatten() {
                // a->b is what the pod sends (linkem-cni's side a is the pod).
                let dir = match d["direction"].as_str() {
                    Some("a->b") => "egress",
                    Some("b->a") => "ingress",
                    _ => continue,
                };
                let l = format!("{labels},direction=\"{dir}\"");
                match name {
                    "linkem_emulator_packet_fates_total" => {
                        for (fate, n) in d["fates"].as_object().into_iter().flatten() {
                            if let Some(n) = n.as_u64() {
                                let _ = writeln!(out, "{name}{{{l},fate=\"{}\"}} {n}", esc(fate));
                            }
                        }
                    }
                    _ => {
                        let key = if name.contains("received") {
                            "received"
                        } else {
                            "in_flight"
                        };
                        if let Some(n) = d[key].as_u64() {
                            let _ = writeln!(out, "{name}{{{l}}} {n}");
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_stats_render_as_prometheus_text() {
        let m = Metrics::default();
        let l: Labels = ("ns".into(), "web-0".into(), "cni-c1-eth0".into());
        m.count(&l, |c| {
            c.applies += 2;
            c.last_apply_s = Some(1.5);
        });
        let text = m.render();
        let want =
            "linkem_agent_applies_total{namespace=\"ns\",pod=\"web-0\",emulator=\"cni-c1-eth0\"} 2";
        assert!(text.contains(want), "{text}");
        assert!(text.contains("linkem_agent_restores_total{namespace=\"ns\",pod=\"web-0\",emulator=\"cni-c1-eth0\"} 0"));
        assert!(text.contains("linkem_agent_last_apply_timestamp_seconds{namespace=\"ns\",pod=\"web-0\",emulator=\"cni-c1-eth0\"} 1.5"));
        let stats = serde_json::json!({"directions": [
            {"direction": "a->b", "received": 9, "in_flight": 1, "fates": {"delivered": 8, "loss": 0}},
            {"direction": "b->a", "received": 3, "in_flight": 0, "fates": {"delivered": 3}}]});
        let mut out = String::new();
        render_stats(&mut out, &[("pod=\"p\"".into(), stats)]);
        assert!(
            out.contains(
                "linkem_emulator_received_packets_total{pod=\"p\",direction=\"egress\"} 9"
            ),
            "{out}"
        );
        assert!(out.contains("linkem_emulator_packet_fates_total{pod=\"p\",direction=\"ingress\",fate=\"delivered\"} 3"), "{out}");
    }

    #[test]
    fn the_server_answers_metrics_and_refuses_other_paths() {
        let m = Arc::new(Metrics::default());
        m.count(&("a".into(), "b".into(), "c".into()), |c| c.refusals += 1);
        let addr = m.serve("127.0.0.1:0").unwrap();
        let get = |path: &str| {
            let mut s = TcpStream::connect(addr).unwrap();
            write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut text = String::new();
            s.read_to_string(&mut text).unwrap();
            text
        };
        let ok = get("/metrics");
        assert!(
            ok.starts_with("HTTP/1.1 200 OK")
                && ok.contains(
                    "linkem_agent_refusals_total{namespace=\"a\",pod=\"b\",emulator=\"c\"} 1"
                ),
            "{ok}"
        );
        assert!(get("/").starts_with("HTTP/1.1 404"));
    }
}
