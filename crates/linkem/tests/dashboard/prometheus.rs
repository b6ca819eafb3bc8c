//! A real Prometheus (Debian's `prometheus`) scraping one target every
//! second, in a temporary folder, killed when dropped: the dashboard's
//! queries evaluated as Grafana would send them.

use serde_json::Value;
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Grafana's `$__rate_interval` for a 1 s scrape: four scrapes.
pub const RATE_INTERVAL: &str = "4s";

pub struct Prometheus {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free port on 127.0.0.1 (bound, then let go).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

impl Prometheus {
    /// Starts scraping `target` (`ADDR:PORT` of `/metrics`); returns once it scraped it.
    pub fn start(target: &str) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
                 scrape_configs:\n  - job_name: linkem\n    static_configs:\n      - targets: [\"{target}\"]\n"
            ),
        )
        .unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("`prometheus` not found: install prometheus (apt-get install prometheus)");
        let p = Prometheus {
            child,
            addr,
            _dir: dir,
        };
        let t = Instant::now();
        while get(&p.addr, "/-/ready").0 != 200 {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "prometheus not ready in 30 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        // Targets reach the scrape loop some seconds after the start.
        while p.query("up == 1").is_empty() {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "prometheus scraped nothing in 30 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        p
    }

    /// An instant query now: its result vector.
    pub fn query(&self, expr: &str) -> Vec<Value> {
        let (status, body) = get(&self.addr, &format!("/api/v1/query?query={}", encode(expr)));
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert!(status == 200 && v["status"] == "success", "{expr}: {body}");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// The values of `label` over the series `selector` selects (Grafana's `label_values`).
    pub fn label_values(&self, selector: &str, label: &str) -> Vec<String> {
        let path = format!("/api/v1/label/{label}/values?match[]={}", encode(selector));
        let (status, body) = get(&self.addr, &path);
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert!(
            status == 200 && v["status"] == "success",
            "{selector}: {body}"
        );
        let values = v["data"].as_array().cloned().unwrap_or_default();
        values
            .iter()
            .filter_map(|x| x.as_str().map(str::to_string))
            .collect()
    }
}

/// Percent-encoding of a query parameter.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// GET over HTTP/1.0 (a whole body, no chunks): status and body; 0 when
/// nothing answers.
fn get(addr: &str, path: &str) -> (u16, String) {
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return (0, String::new());
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    if write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").is_err() {
        return (0, String::new());
    }
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    let status = reply
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = reply.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
    (status, body.unwrap_or_default())
}
