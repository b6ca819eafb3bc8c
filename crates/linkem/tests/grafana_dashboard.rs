//! deploy/grafana/linkem.json against a live scrape: its datasource and
//! variables are well formed, and every panel query reads metrics and
//! labels a running `linkem bridge --metrics` exposes. Two bridges (prefix
//! `lkgf`, torn down by their Drop): one link alone (its series have no
//! `link` label) and a group of two pairs (each series labelled
//! `link="NAME"`), each after 5 s of pings through it.
//!
//! For each query, with its variables at "All" (`.*`): every metric it
//! names is in the scrape; every label it matches on or groups by is on
//! that metric's series (`link` may be missing on the single link: PromQL
//! gives a missing label the value "", so `link=~".*"` matches it and
//! `by (link)` groups it as one); its matchers select at least one series;
//! each `{{label}}` of its legend is one of those labels. `instance` and
//! `job` are Prometheus's target labels, added at scrape, never exposed.
//!
//! Then a real Prometheus, which scraped the bridge every second during 5 s
//! of pings, evaluates every query as Grafana sends it (`$__rate_interval`
//! = four scrapes): each returns series, and the variables `link` and
//! `direction` list the pairs' names and both directions.

mod common;
mod dashboard;

use common::*;
use dashboard::prometheus::{Prometheus, RATE_INTERVAL};
use dashboard::{parse, parse_scrape, variables, Labels, Parsed};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Labels Prometheus adds to every series it scrapes.
const TARGET_LABELS: [&str; 2] = ["instance", "job"];

fn dashboard_json() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/grafana/linkem.json"
    );
    let text = std::fs::read_to_string(path).expect("deploy/grafana/linkem.json is readable");
    serde_json::from_str(&text).expect("deploy/grafana/linkem.json is JSON")
}

/// Every query of the dashboard: (where, expression, legend).
fn queries(d: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push((
                format!(
                    "panel '{}' {}",
                    p["title"].as_str().unwrap_or(""),
                    t["refId"].as_str().unwrap_or("")
                ),
                t["expr"].as_str().expect("a target's expr").to_string(),
                t["legendFormat"].as_str().unwrap_or("").to_string(),
            ));
        }
    }
    out
}

/// The variables' queries: (name, selector, label) of `label_values(SELECTOR, LABEL)`.
fn variable_queries(d: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for v in d["templating"]["list"].as_array().expect("templating.list") {
        if v["type"] != "query" {
            continue;
        }
        let q = v["query"]["query"]
            .as_str()
            .expect("a query variable's query");
        assert_eq!(v["definition"].as_str(), Some(q), "{v}");
        let inner = q
            .strip_prefix("label_values(")
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or_else(|| panic!("variable {}: not label_values(..): {q}", v["name"]));
        let (sel, label) = inner
            .rsplit_once(',')
            .expect("label_values(SELECTOR, LABEL)");
        out.push((
            v["name"].as_str().unwrap().to_string(),
            sel.trim().to_string(),
            label.trim().to_string(),
        ));
    }
    out
}

#[test]
fn dashboard_is_well_formed() {
    let d = dashboard_json();
    assert!(d["schemaVersion"].as_u64().unwrap() >= 36, "schemaVersion");
    assert!(d["uid"].is_string() && d["title"].is_string());
    let vars = d["templating"]["list"].as_array().unwrap();
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no variable '{name}'"))
    };
    let ds = var("datasource");
    assert_eq!(
        (ds["type"].as_str(), ds["query"].as_str()),
        (Some("datasource"), Some("prometheus"))
    );
    for name in ["instance", "link", "direction"] {
        let v = var(name);
        assert_eq!(v["type"], "query", "{name}");
        assert_eq!(v["datasource"]["uid"], "${datasource}", "{name}");
        assert_eq!(v["datasource"]["type"], "prometheus", "{name}");
        // "All" is `.*`, not Grafana's default alternation of the values
        // seen: the single link's series have no `link` value to list.
        assert!(
            v["multi"] == true && v["includeAll"] == true && v["allValue"] == ".*",
            "{v}"
        );
    }
    let link_q = var("link")["query"]["query"].as_str().unwrap();
    assert!(
        link_q.starts_with("label_values(linkem_received_packets_total")
            && link_q.ends_with(", link)"),
        "{link_q}"
    );
    let defined: Vec<&str> = vars.iter().map(|v| v["name"].as_str().unwrap()).collect();
    let mut ids = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        ids.push(p["id"].as_u64().expect("a panel id"));
        let g = &p["gridPos"];
        assert!(
            g["w"].as_u64().unwrap() + g["x"].as_u64().unwrap() <= 24,
            "{g}"
        );
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{}", p["title"]);
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        }
    }
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "panel ids are unique");
    let all: Vec<(String, String)> = queries(&d)
        .into_iter()
        .map(|(w, e, _)| (w, e))
        .chain(variable_queries(&d).into_iter().map(|(n, s, _)| (n, s)))
        .collect();
    for (at, expr) in &all {
        for v in variables(expr) {
            assert!(
                v.starts_with("__") || defined.contains(&v.as_str()),
                "{at}: ${v} is no variable"
            );
        }
        let p = parse(expr).unwrap_or_else(|e| panic!("{at}: {e}"));
        assert!(!p.selectors.is_empty(), "{at}: no metric in {expr}");
        if p.functions.iter().any(|f| f == "histogram_quantile") {
            assert!(
                p.grouping.iter().any(|l| l == "le"),
                "{at}: histogram_quantile without le"
            );
        }
    }
    // The panels the issue asks for.
    let metrics: Vec<String> = all
        .iter()
        .flat_map(|(_, e)| parse(e).unwrap().selectors)
        .map(|s| s.metric)
        .collect();
    for want in [
        "linkem_delivered_bytes_total",
        "linkem_received_bytes_total",
        "linkem_link_rate_bits_per_second",
        "linkem_delay_seconds_bucket",
        "linkem_lateness_seconds_bucket",
        "linkem_in_flight_packets",
        "linkem_packets_total",
        "linkem_rx_kernel_drops_total",
        "linkem_control_requests_total",
        "linkem_stage_wakeups_total",
        "linkem_output_wakeups_total",
        "linkem_spin_seconds_total",
    ] {
        assert!(metrics.iter().any(|m| m == want), "no panel reads {want}");
    }
}

/// What is wrong with one query against a scrape (`single`: one link, no `link` label).
fn check_query(
    at: &str,
    p: &Parsed,
    legend: &str,
    scrape: &BTreeMap<String, Vec<Labels>>,
    single: bool,
) -> Vec<String> {
    let mut errors = Vec::new();
    let may_miss = |l: &str| TARGET_LABELS.contains(&l) || (single && l == "link");
    let mut seen_labels: Vec<String> = p.grouping.clone();
    for s in &p.selectors {
        let Some(series) = scrape.get(&s.metric) else {
            errors.push(format!("{at}: {} is not in the scrape", s.metric));
            continue;
        };
        let has = |l: &str| series.iter().any(|x| x.contains_key(l));
        let wanted = s.matchers.iter().map(|m| &m.label).chain(&p.grouping);
        for l in wanted {
            if !has(l) && !may_miss(l) {
                errors.push(format!("{at}: no series of {} has label '{l}'", s.metric));
            }
        }
        let selected = series.iter().any(|x| {
            s.matchers
                .iter()
                .filter(|m| !TARGET_LABELS.contains(&m.label.as_str()))
                .all(|m| m.matches(x))
        });
        if !selected {
            errors.push(format!(
                "{at}: the matchers of {} select no series",
                s.metric
            ));
        }
        seen_labels.extend(series.iter().flat_map(|x| x.keys().cloned()));
    }
    for part in legend.split("{{").skip(1) {
        let l = part.split("}}").next().unwrap_or("").trim();
        if !seen_labels.iter().any(|x| x == l) && !may_miss(l) {
            errors.push(format!("{at}: legend label '{l}' is on none of its series"));
        }
    }
    errors
}

fn check_against(d: &Value, body: &str, single: bool) {
    let scrape = parse_scrape(body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    let mut errors = Vec::new();
    for (at, expr, legend) in queries(d) {
        let p = parse(&expr).unwrap();
        errors.extend(check_query(&at, &p, &legend, &scrape, single));
    }
    for (name, sel, label) in variable_queries(d) {
        let mut p = parse(&sel).unwrap();
        p.grouping.push(label);
        errors.extend(check_query(
            &format!("variable {name}"),
            &p,
            "",
            &scrape,
            single,
        ));
    }
    let what = if single { "one link" } else { "a group" };
    assert!(
        errors.is_empty(),
        "against the scrape of {what}:\n{}\n\nscrape:\n{body}",
        errors.join("\n")
    );
    // The group's series carry the pairs' names, the single link's none.
    let received = &scrape["linkem_received_packets_total"];
    assert_eq!(
        received.iter().any(|l| l.contains_key("link")),
        !single,
        "{received:?}"
    );
    assert!(
        received.iter().any(|l| l["direction"] == "a->b"),
        "{received:?}"
    );
}

/// A running linkem, stopped by SIGINT (then killed) when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        // Safety: kill with a pid we own.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
        let t = Instant::now();
        while matches!(self.0.try_wait(), Ok(None)) && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `linkem bridge ARGS --metrics 127.0.0.1:0` and returns it with the address it announced.
fn start(args: &[String]) -> (Running, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .arg("bridge")
        .args(args)
        .args([
            "--backend",
            "packet",
            "--max-lag",
            "off",
            "--metrics",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("linkem starts");
    let err = child.stderr.take().unwrap();
    let running = Running(child);
    let (said, lines) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let _ = said.send(line);
        }
    });
    let start = Instant::now();
    let mut told = String::new();
    loop {
        let left = Duration::from_secs(30).saturating_sub(start.elapsed());
        let line = lines
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no metrics endpoint announced within 30 s: {told}"));
        if let Some(url) = line.strip_prefix("linkem: metrics on http://") {
            return (running, url.trim_end_matches("/metrics").to_string());
        }
        told += &line;
        told.push('\n');
    }
}

fn scrape(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    reply
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

const WORDS: [&str; 6] = ["delay", "5ms", "rate", "20mbit", "loss", "5%"];

/// Pings through every topology at once for 5 s (the link loses 5 % each way).
fn traffic(topos: &[&linkem_io::netns::Topology]) {
    std::thread::scope(|s| {
        for t in topos {
            s.spawn(|| ping_rtts_ms_least(t, t.addr_b, 250, 150));
        }
    });
}

/// Every query evaluated by a real Prometheus that scraped the bridge
/// during the traffic returns series; the variables list the pairs' names
/// (`names`, none for one link) and both directions.
fn check_with_prometheus(d: &Value, prom: &Prometheus, names: &[String]) {
    let mut empty = Vec::new();
    for (at, expr, _) in queries(d) {
        let expr = dashboard::substitute(&expr.replace("$__rate_interval", RATE_INTERVAL));
        let result = prom.query(&expr);
        if result.is_empty() {
            empty.push(format!("{at}: {expr}"));
        }
    }
    assert!(
        empty.is_empty(),
        "queries without a series:\n{}\nscrapes: {:?}",
        empty.join("\n"),
        prom.query("count_over_time(up[1m])")
    );
    for (name, sel, label) in variable_queries(d) {
        let values = prom.label_values(&dashboard::substitute(&sel), &label);
        let want: Vec<String> = match name.as_str() {
            "link" => names.to_vec(),
            "direction" => vec!["a->b".into(), "b->a".into()],
            _ => continue,
        };
        let mut want = want;
        want.sort();
        assert_eq!(values, want, "variable {name}: {sel}, {label}");
    }
}

#[test]
fn every_query_reads_what_a_live_scrape_exposes() {
    let _g = serial();
    if skip() {
        return;
    }
    let d = dashboard_json();
    let one = topology("lkgf");
    let mut args: Vec<String> = vec![one.emu_a.clone(), one.emu_b.clone()];
    args.extend(WORDS.map(String::from));
    let (running, addr) = start(&args);
    let prom = Prometheus::start(&addr);
    traffic(&[&one]);
    check_against(&d, &scrape(&addr), true);
    check_with_prometheus(&d, &prom, &[]);
    drop((prom, running));

    let pairs: Vec<_> = (0..2).map(|_| topology("lkgf")).collect();
    let mut args: Vec<String> = Vec::new();
    let mut names = Vec::new();
    for t in &pairs {
        args.extend(["--pair", &t.emu_a, &t.emu_b].map(String::from));
        args.extend(WORDS.map(String::from));
        names.push(format!("{}-{}", t.emu_a, t.emu_b));
    }
    names.sort();
    let (running, addr) = start(&args);
    let prom = Prometheus::start(&addr);
    traffic(&pairs.iter().collect::<Vec<_>>());
    check_against(&d, &scrape(&addr), false);
    check_with_prometheus(&d, &prom, &names);
    drop((prom, running));
}
