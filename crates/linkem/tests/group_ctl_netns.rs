//! One control socket and one metrics endpoint for a bridge of several
//! pairs (`--pair ... --name G --metrics`), and `link` as a PATCH: three
//! topologies `nsA <-veth-> linkem <-veth-> nsB` (prefix `lkgc`, torn down by
//! their Drop), each pair `delay 10ms loss 1% rate 10mbit`; `linkem ctl
//! --name G link PAIR a-to-b delay 30ms` changes that pair's a->b delay
//! only, `show PAIR --json` reports its three words, ping follows, the other
//! pairs stay, and a scrape names every pair in a `link` label.

mod common;

use common::*;
use linkem_io::netns::Topology;
use serde_json::Value;
use std::io::{BufRead, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

/// The running linkem, killed if the test fails before it stops it.
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn ctl(name: &str, words: &[&str]) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(["ctl", "--name", name])
        .args(words)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success() && !text.contains("linkem ctl:"), text)
}

fn scrape(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body
}

#[test]
fn one_socket_patches_one_pair_and_one_endpoint_labels_every_pair() {
    let _g = serial();
    if skip() {
        return;
    }
    let topos: Vec<Topology> = (0..3).map(|_| topology("lkgc")).collect();
    let group = format!("lkgc{}", std::process::id());
    let mut args: Vec<String> = [
        "bridge",
        "--backend",
        "packet",
        "--stats",
        "json",
        "--max-lag",
        "off",
        "--name",
        &group,
        "--metrics",
        "127.0.0.1:0",
    ]
    .map(String::from)
    .to_vec();
    for t in &topos {
        args.extend(["--pair", &t.emu_a, &t.emu_b].map(String::from));
        args.extend(["delay", "10ms", "loss", "1%", "rate", "10mbit"].map(String::from));
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    let mut running = Running(Some(child));
    let stdout = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = out.read_to_string(&mut text);
        text
    });
    let (said, lines) = channel::<String>();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let _ = said.send(line.clone());
            text += &line;
            text.push('\n');
        }
        text
    });
    // The endpoint is announced last, with the port it bound.
    let start = Instant::now();
    let metrics = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(60).saturating_sub(start.elapsed()))
            .expect("linkem announces its metrics endpoint within 60 s");
        if let Some(url) = line.strip_prefix("linkem: metrics on http://") {
            break url.trim_end_matches("/metrics").to_string();
        }
    };
    let names: Vec<String> = topos
        .iter()
        .map(|t| format!("{}-{}", t.emu_a, t.emu_b))
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let before: Vec<f64> = topos.iter().map(lossy_median_ms).collect();
    let (ok, text) = ctl(&group, &["link", &names[1], "a-to-b", "delay", "30ms"]);
    assert!(ok, "linkem ctl link: {text}");
    let (ok, text) = ctl(&group, &["show", &names[1], "--json"]);
    assert!(ok, "{text}");
    let v: Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(v["link"], names[1].as_str(), "{v}");
    let ab = v["links"][0]["link"].as_str().unwrap();
    for word in ["delay 30ms", "loss 1%", "rate 10mbit"] {
        assert!(
            ab.contains(word),
            "a->b of the changed pair: '{ab}' lacks '{word}'"
        );
    }
    let ba = v["links"][1]["link"].as_str().unwrap();
    assert!(ba.contains("delay 10ms"), "b->a kept: '{ba}'");
    let (ok, text) = ctl(&group, &["show", &names[0], "--json"]);
    assert!(ok && text.contains("delay 10ms"), "{text}");
    // `show` alone, as text: every pair under its name.
    let (ok, text) = ctl(&group, &["show"]);
    assert!(ok, "{text}");
    for n in &names {
        assert!(
            text.contains(&format!("link {n}\n")),
            "{n} missing from show:\n{text}"
        );
    }
    assert!(text.contains("delay 30ms"), "{text}");
    // An unknown pair is refused, naming it and those known.
    let (ok, text) = ctl(&group, &["link", "nosuch", "delay", "1ms"]);
    assert!(
        !ok && text.contains("no link 'nosuch'") && text.contains(&names[0]),
        "{text}"
    );
    let after: Vec<f64> = topos.iter().map(lossy_median_ms).collect();
    eprintln!("median RTT before {before:?} ms, after {after:?} ms");
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert!((20.0..23.0).contains(b), "pair {i} before: {b:.3} ms");
        // 10mbit: an 84-byte ping is 67 µs each way.
        let want = if i == 1 { 40.0 } else { 20.0 };
        assert!(
            (want..want + 3.0).contains(a),
            "pair {i} after the change: {a:.3} ms, expected {want} ms"
        );
    }
    let body = scrape(&metrics);
    for n in &names {
        assert!(
            body.contains(&format!(
                "linkem_link_delay_seconds{{link=\"{n}\",direction=\"a->b\"}}"
            )),
            "no series of {n} in the scrape:\n{body}"
        );
    }
    assert!(
        body.contains(&format!(
            "linkem_link_delay_seconds{{link=\"{}\",direction=\"a->b\"}} 0.03",
            names[1]
        )),
        "{body}"
    );
    let child = running.0.take().unwrap();
    // Safety: kill with a pid we own.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let mut child = child;
    let status = child.wait().unwrap();
    let stderr = stderr.join().unwrap();
    let stdout = stdout.join().unwrap();
    assert!(status.success(), "linkem failed: {stderr}");
    let last: Value =
        serde_json::from_str(stdout.lines().rfind(|l| l.starts_with('{')).unwrap()).unwrap();
    assert_eq!(last["pairs"].as_array().unwrap().len(), 3, "{last}");
    assert!(
        !std::path::Path::new(&format!("/run/linkem/{group}.sock")).exists(),
        "the group's socket is left behind"
    );
}

/// The median RTT of 30 pings through a pair whose link loses 1 % each way:
/// the link's own losses may take a few answers (at least 20 must come).
fn lossy_median_ms(t: &Topology) -> f64 {
    median(ping_rtts_ms_least(t, t.addr_b, 30, 20))
}
