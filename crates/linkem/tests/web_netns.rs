//! `--web` on a live `linkem bridge` (`nsA <-veth-> linkem <-veth-> nsB`):
//! the state and its topology, the event stream, a change from the page
//! followed by the pings, and what is refused (no token, a refused word,
//! another origin, a rebound host name); a client of the event stream that
//! never reads is dropped while another keeps its events. Plain HTTP by
//! hand over std's TcpStream. Needs root and prints "skipped" otherwise.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd};
use std::time::{Duration, Instant};

mod common;

use common::ctl::{ping_rtts_to, CtlBridge};
use common::{serial, skip};

/// The bridge, stopped (SIGTERM, then waited for) when the test ends.
struct Running(CtlBridge);

impl Drop for Running {
    fn drop(&mut self) {
        // SAFETY: a signal to the child this test started.
        unsafe { libc::kill(self.0.child.id() as i32, libc::SIGTERM) };
        let _ = self.0.child.wait();
    }
}

/// Where the page is: `ADDR:PORT` and the token, from the announce line.
fn page_address(bridge: &mut CtlBridge) -> (String, String) {
    let stderr = bridge.child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    // Read to the end, so that the bridge never blocks on a full pipe.
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let until = Instant::now() + Duration::from_secs(10);
    while let Ok(line) = rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
        if let Some(url) = line.strip_prefix("linkem: web page on http://") {
            let (addr, token) = url.split_once("/#token=").expect("URL with a token");
            return (addr.to_string(), token.to_string());
        }
    }
    panic!("no 'web page on' line");
}

/// One request (no keep-alive); the status, the head and the body.
fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req += &format!("Host: {addr}\r\n");
    }
    for (k, v) in headers {
        req += &format!("{k}: {v}\r\n");
    }
    req += &format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    let (head, body) = r.split_once("\r\n\r\n").unwrap_or((&r, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

fn state(addr: &str) -> Value {
    let (status, _, body) = http(addr, "GET", "/api/state", &[], "");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn change(addr: &str, token: &str, body: &Value) -> (u16, Value) {
    let origin = format!("http://{addr}");
    let headers = [
        ("X-Linkem-Token", token),
        ("Content-Type", "application/json"),
        ("Origin", origin.as_str()),
    ];
    let (status, _, body) = http(addr, "POST", "/api/change", &headers, &body.to_string());
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// `GET /api/events` on a socket whose receive buffer is `rcvbuf` bytes
/// (set before connecting; None: the system's).
fn open_events(addr: &str, rcvbuf: Option<i32>) -> TcpStream {
    let mut s = match rcvbuf {
        None => TcpStream::connect(addr).unwrap(),
        Some(bytes) => {
            let sa: std::net::SocketAddrV4 = addr.parse().unwrap();
            // SAFETY: a fresh socket, owned by the TcpStream made from it;
            // the option and address are valid for the calls' lengths.
            unsafe {
                let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
                assert!(fd >= 0);
                let stream = TcpStream::from_raw_fd(fd);
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUF,
                    (&bytes as *const i32).cast(),
                    4,
                );
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as u16,
                    sin_port: sa.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from(*sa.ip()).to_be(),
                    },
                    sin_zero: [0; 8],
                };
                let rc = libc::connect(
                    fd,
                    (&sin as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as u32,
                );
                assert_eq!(rc, 0, "connect");
                stream
            }
        }
    };
    write!(s, "GET /api/events HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    s
}

/// `event: sample` lines read from `s` within `within`.
fn samples_within(s: &mut TcpStream, within: Duration) -> usize {
    let until = Instant::now() + within;
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    while let Some(left) = until
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
    {
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => text.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&text)
        .matches("event: sample")
        .count()
}

/// The socket's TCP state (TCP_INFO's first byte): 1 established, 7 closed.
fn tcp_state(s: &TcpStream) -> u8 {
    let mut info = [0u8; 256];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: the buffer is `len` bytes; the kernel writes at most that.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0);
    info[0]
}

fn words(s: &Value, dir: &str) -> String {
    s["links"][0]["words"][dir]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn web_page_serves_changes_and_refuses_strangers() {
    if skip() {
        return;
    }
    let _g = serial();
    let topo = common::topology("lkWs");
    let audit = std::env::temp_dir().join(format!("lkWs-audit-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&audit);
    let audit_arg = audit.display().to_string();
    let mut bridge = CtlBridge::start(
        &topo,
        &[
            "delay",
            "10ms",
            "--web",
            "127.0.0.1:0",
            "--audit",
            &audit_arg,
        ],
    );
    let (addr, token) = page_address(&mut bridge);
    let _running = Running(bridge);
    assert_eq!(token.len(), 32, "{token}");
    // Opened first and never read: it must be dropped, not waited for.
    let slow = open_events(&addr, Some(1024));

    let s = state(&addr);
    let name = format!("{}-{}", topo.emu_a, std::process::id());
    assert_eq!(s["name"], json!(name));
    assert_eq!(s["writable"], json!(false));
    assert_eq!(
        s["topology"],
        json!({
            "nodes": [{"name": topo.emu_a, "kind": "interface"}, {"name": topo.emu_b, "kind": "interface"}],
            "links": [{"name": name, "a": topo.emu_a, "b": topo.emu_b, "a_if": topo.emu_a, "b_if": topo.emu_b}],
        })
    );
    assert!(words(&s, "a-to-b").contains("10ms"), "{s}");
    let (_, head, _) = http(&addr, "GET", "/", &[], "");
    for h in [
        "content-security-policy: default-src 'self'",
        "x-frame-options: deny",
        "x-content-type-options: nosniff",
    ] {
        assert!(head.to_lowercase().contains(h), "{head}");
    }

    let mut events = open_events(&addr, None);
    let n = samples_within(&mut events, Duration::from_secs(3));
    assert!(n >= 3, "{n} sample events in 3 s");

    // A change with the token: the pings follow.
    let (status, r) = change(
        &addr,
        &token,
        &json!({"link": null, "verb": "link", "dir": "both", "words": "delay 30ms"}),
    );
    assert_eq!((status, r["ok"].clone()), (200, json!(true)), "{r}");
    let rtts = ping_rtts_to(&topo, topo.addr_b, 5);
    assert!(
        rtts.iter().all(|r| (59.5..100.0).contains(r)),
        "after: {rtts:?}"
    );

    strangers_are_refused(&addr, &token);
    // The sampler reads the words again at its next tick.
    let until = Instant::now() + Duration::from_secs(2);
    let mut s = state(&addr);
    while !words(&s, "a-to-b").contains("30ms") && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
        s = state(&addr);
    }
    assert_eq!(words(&s, "a-to-b"), "delay 30ms", "{s}");
    assert_eq!(s["links"][0]["changes"], json!(1), "{s}");
    let rtts = ping_rtts_to(&topo, topo.addr_b, 3);
    assert!(
        rtts.iter().all(|r| (59.5..100.0).contains(r)),
        "unchanged: {rtts:?}"
    );

    // A refused word, placed in the words sent.
    let (status, r) = change(
        &addr,
        &token,
        &json!({"verb": "link", "dir": "a-to-b", "words": "delay 20xs"}),
    );
    assert_eq!(status, 200);
    assert_eq!(
        (
            r["ok"].clone(),
            r["word"].clone(),
            r["position"].clone(),
            r["line_position"].clone()
        ),
        (json!(false), json!("20xs"), json!(2), json!(4)),
        "{r}"
    );

    audited_as_the_starters(&audit);

    slow_clients_are_dropped(&addr, &token, &slow, &mut events);
}

/// Without the token, from another origin, by a rebound name, of another
/// type, too big, a preflight: refused (the caller checks nothing changed).
fn strangers_are_refused(addr: &str, token: &str) {
    // Without the token, from another origin, by a rebound name: refused, nothing changed.
    let body = json!({"verb": "link", "dir": "both", "words": "delay 1ms"}).to_string();
    let json_type = ("Content-Type", "application/json");
    let (status, _, said) = http(addr, "POST", "/api/change", &[json_type], &body);
    assert_eq!(status, 403, "{said}");
    let (status, _, said) = http(
        addr,
        "POST",
        "/api/change",
        &[("X-Linkem-Token", "0".repeat(32).as_str()), json_type],
        &body,
    );
    assert_eq!(status, 403, "{said}");
    let evil = [
        ("X-Linkem-Token", token),
        json_type,
        ("Origin", "http://evil.example"),
    ];
    let (status, _, said) = http(addr, "POST", "/api/change", &evil, &body);
    assert_eq!(status, 403, "{said}");
    let rebound = [
        ("X-Linkem-Token", token),
        json_type,
        ("Host", "evil.example"),
    ];
    let (status, _, said) = http(addr, "POST", "/api/change", &rebound, &body);
    assert_eq!(status, 403, "{said}");
    let (status, _, _) = http(addr, "GET", "/api/state", &[("Host", "evil.example")], "");
    assert_eq!(status, 403);
    let plain = [("X-Linkem-Token", token), ("Content-Type", "text/plain")];
    assert_eq!(http(addr, "POST", "/api/change", &plain, &body).0, 415);
    let big = format!("{{\"line\":\"{}\"}}", "x".repeat(17 * 1024));
    let with_token = [("X-Linkem-Token", token), json_type];
    assert_eq!(http(addr, "POST", "/api/change", &with_token, &big).0, 400);
    let (status, head, _) = http(
        addr,
        "OPTIONS",
        "/api/change",
        &[("Origin", "http://evil.example")],
        "",
    );
    assert_eq!(status, 405);
    assert!(!head.to_lowercase().contains("access-control"), "{head}");
}

/// The page's changes are audited as the starter's through the control socket are.
fn audited_as_the_starters(audit: &std::path::Path) {
    // Audited as the starter's changes through the control socket are.
    let log = std::fs::read_to_string(audit).unwrap();
    let _ = std::fs::remove_file(audit);
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let pid = std::process::id(); // not linkem's: only to tell the fields apart
    let said = |command: &str| {
        lines
            .iter()
            .find(|l| l["command"] == json!(command))
            .cloned()
    };
    let ok = said("link both delay 30ms").unwrap_or_else(|| panic!("{log}"));
    assert_eq!(
        (ok["result"].clone(), ok["uid"].clone()),
        (json!("ok"), json!(0)),
        "{ok}"
    );
    assert_ne!(ok["pid"], json!(pid));
    let refused = said("link a-to-b delay 20xs").unwrap_or_else(|| panic!("{log}"));
    assert!(
        refused["result"]
            .as_str()
            .unwrap()
            .contains("word 4 '20xs'"),
        "{refused}"
    );
}

/// The client that never reads (`slow`) is reset while `events` keeps its
/// events; at most 64 streams at once.
fn slow_clients_are_dropped(addr: &str, token: &str, slow: &TcpStream, events: &mut TcpStream) {
    // The client that never reads is reset; the other keeps its events.
    // Changes add events, filling its buffers sooner.
    let until = Instant::now() + Duration::from_secs(90);
    let mut i = 0;
    while tcp_state(slow) == 1 {
        assert!(
            Instant::now() < until,
            "a client that never reads is still served"
        );
        let words = format!("delay {}ms", 30 + i % 2);
        assert_eq!(
            change(
                addr,
                token,
                &json!({"verb": "link", "dir": "both", "words": words})
            )
            .0,
            200
        );
        i += 1;
        let _ = samples_within(events, Duration::from_millis(100));
    }
    let n = samples_within(events, Duration::from_secs(2));
    assert!(n >= 2, "the reading client got {n} sample events in 2 s");

    // At most 64 streams at once: the 65th is answered 503.
    // One after the other: a burst of connections whose requests have not
    // arrived yet is what the short exchanges' bound evicts.
    let mut more = Vec::new();
    for i in 0..63 {
        let mut s = open_events(addr, None);
        let head = head_of(&mut s);
        assert!(head.starts_with("HTTP/1.1 200"), "stream {i}: {head}");
        more.push(s);
    }
    let mut one_too_many = open_events(addr, None);
    let head = head_of(&mut one_too_many);
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
}

/// A reply's head, read up to its blank line.
fn head_of(s: &mut TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap_or(0) == 1 {
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).to_string()
}

/// A lab of this test process, `linkem lab down` when dropped.
struct LabDown(String);

impl Drop for LabDown {
    fn drop(&mut self) {
        let _ = std::process::Command::new(env!("CARGO_BIN_EXE_linkem"))
            .args(["lab", "down", &self.0])
            .output();
    }
}

/// `lab up --detach --web` prints the page's address; the page draws the
/// lab's nodes and links, and a change names its link.
#[test]
fn a_detached_lab_prints_its_page_and_draws_its_topology() {
    if skip() {
        return;
    }
    let _g = serial();
    let name = format!("lkWl{:x}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lab.clab.yml");
    let lab = format!(
        "name: {name}\ntopology:\n  defaults: {{kind: linux}}\n  nodes:\n    h1: {{}}\n    r: {{}}\n    h2: {{}}\n  links:\n    - endpoints: [\"h1:eth1\", \"r:eth1\"]\n      impair: delay 1ms\n    - endpoints: [\"r:eth2\", \"h2:eth1\"]\n      impair: delay 2ms\n"
    );
    std::fs::write(&file, lab).unwrap();
    let _down = LabDown(name.clone());
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args([
            "lab",
            "up",
            "--detach",
            file.to_str().unwrap(),
            "--web",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let url = out
        .lines()
        .find_map(|l| l.strip_prefix("linkem: web page on http://"))
        .unwrap_or_else(|| panic!("no page address: {out}"));
    let (addr, token) = url.split_once("/#token=").unwrap();

    let s = state(addr);
    assert_eq!(
        (s["name"].clone(), s["front"].clone()),
        (json!(name), json!("lab"))
    );
    let nodes: Vec<&str> = s["topology"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(nodes, ["h1", "r", "h2"], "{s}");
    assert_eq!(
        s["topology"]["links"][1],
        json!({"name": "r:eth2--h2:eth1", "a": "r", "b": "h2", "a_if": "eth2", "b_if": "eth1"})
    );
    // A socket of several links: the link is named, and a refused word is
    // placed in the words all the same.
    let (status, r) = change(
        addr,
        token,
        &json!({"link": "r:eth2--h2:eth1", "verb": "link", "dir": "b-to-a", "words": "delay 20xs"}),
    );
    assert_eq!(status, 200);
    assert_eq!(
        (r["position"].clone(), r["line_position"].clone()),
        (json!(2), json!(5)),
        "{r}"
    );
    let (status, r) = change(
        addr,
        token,
        &json!({"link": "r:eth2--h2:eth1", "verb": "link", "dir": "b-to-a", "words": "delay 7ms"}),
    );
    assert_eq!((status, r["ok"].clone()), (200, json!(true)), "{r}");
    let (status, r) = change(
        addr,
        token,
        &json!({"verb": "link", "dir": "both", "words": "delay 7ms"}),
    );
    assert_eq!(status, 400, "{r}");
}
