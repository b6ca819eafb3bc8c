//! The web page of a lab of 100 links under 10 clients: `linkem lab up
//! --web 127.0.0.1:0` of a hub (a Linux bridge node) and 100 spokes, each
//! spoke's link `delay 1ms` (lab `lw` and this process's id, taken down by
//! a guard also when the test fails). For 10 s, 10 clients read
//! `/api/events` and one client asks for it and never reads, while pings
//! cross two links and `linkem ctl ping` asks the lab's socket twice a
//! second. Then:
//!
//! - memory is bounded: the emulator's VmRSS at 10 s is within a few MiB of
//!   that at 3 s, and within a bound of the same lab before any client;
//! - every reading client gets the samples at their rate (at least 80 % of
//!   two a second after its first second);
//! - the control socket answers `ping` within 100 ms (median), and the
//!   pings' RTT stays within 2 ms (median) of the RTT before the clients;
//! - the client that never reads is dropped by the server within the 10 s
//!   (its socket leaves the established state: reset or ended), never
//!   waited for.

mod common;

use common::*;
use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

const SPOKES: usize = 100;
const READERS: usize = 10;
const WINDOW: Duration = Duration::from_secs(10);
/// Samples a second (the sampler's interval is 500 ms).
const SAMPLE_RATE_HZ: f64 = 2.0;

/// The lab: its file's folder, the foreground `lab up` (the emulator
/// itself), stopped by SIGINT and then `lab down` when dropped.
struct Lab {
    name: String,
    child: Option<Child>,
    _dir: tempfile::TempDir,
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // Safety: kill with a pid we own.
            unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
            let t = Instant::now();
            while matches!(c.try_wait(), Ok(None)) && t.elapsed() < Duration::from_secs(20) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = linkem(&["lab", "down", &self.name]);
    }
}

fn linkem(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(args)
        .output()
        .unwrap()
}

/// The hub of [`SPOKES`] spokes, spoke k at 10.61.0.k.
fn hub_file(name: &str) -> String {
    let mut f = format!(
        "name: {name}\ntopology:\n  defaults:\n    kind: linux\n  nodes:\n    hub:\n      kind: bridge\n"
    );
    for k in 1..=SPOKES {
        f += &format!("    s{k}:\n      exec:\n        - ip addr add 10.61.0.{k}/24 dev eth1\n");
    }
    f += "  links:\n";
    for k in 1..=SPOKES {
        f += &format!("    - endpoints: [\"s{k}:eth1\", \"hub:s{k}\"]\n      impair: delay 1ms\n");
    }
    f
}

/// Brings the lab up in the foreground with `--web 127.0.0.1:0`; returns
/// it with the page's address (`127.0.0.1:PORT`) once every link forwards.
fn up() -> (Lab, String) {
    let name = format!("lw{:x}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lab.clab.yml");
    std::fs::write(&file, hub_file(&name)).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(["lab", "up", file.to_str().unwrap(), "--web", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = said(child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let lab = Lab {
        name: name.clone(),
        child: Some(child),
        _dir: dir,
    };
    let (mut web, mut is_up, mut told) = (None, false, String::new());
    let t = Instant::now();
    while web.is_none() || !is_up {
        let left = Duration::from_secs(90).saturating_sub(t.elapsed());
        let line = lines
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("lab {name}: no web page and 'is up' within 90 s:\n{told}"));
        if let Some(url) = line.split("web page on http://").nth(1) {
            web = Some(url.split('/').next().unwrap().to_string());
        }
        is_up |= line.contains(&format!("lab {name} is up"));
        told += &line;
        told.push('\n');
    }
    eprintln!("lab {name} up in {:.1} s", t.elapsed().as_secs_f64());
    (lab, web.unwrap())
}

/// Every line of the two streams, as they come.
fn said(out: impl Read + Send + 'static, err: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let tx2 = tx.clone();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx2.send(l);
        }
    });
    rx
}

fn vm_rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

/// Connects to `/api/events` and checks the reply is an event stream.
fn events(addr: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /api/events HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    s
}

/// Reads the events until `end`: when each `sample` came, after the head.
fn read_samples(addr: &str, end: Instant) -> Vec<Instant> {
    let s = events(addr);
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut r = std::io::BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "/api/events: {line}");
    let mut at = Vec::new();
    let mut head = true;
    while Instant::now() < end {
        line.clear();
        match r.read_line(&mut line) {
            Ok(0) => panic!("the server ended a reading client's events"),
            Ok(_) => {
                let l = line.trim_end();
                if head {
                    head = !l.is_empty();
                    if l.to_ascii_lowercase().starts_with("content-type:") {
                        assert!(l.contains("text/event-stream"), "{l}");
                    }
                } else if l == "event: sample" {
                    at.push(Instant::now());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => panic!("a reading client: {e}"),
        }
    }
    at
}

/// A client that asks for the events and never reads them (a receive
/// buffer of 4 KiB, so that the server's writes block soon).
fn never_reads(addr: &str) -> TcpStream {
    let s = events(addr);
    let size: libc::c_int = 4096;
    // Safety: a valid socket and an int option of its size.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &size as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    s
}

/// The TCP state (the kernel's number: 1 established, 8 close-wait) of
/// this host's IPv4 socket bound to `port`, None when it has none (a reset
/// socket leaves the table at once).
fn tcp_state(port: u16) -> Option<u8> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let local_port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
        (local_port == port).then(|| u8::from_str_radix(f[3], 16).ok())?
    })
}

/// How long after `from` the server ended the connection of the client
/// bound to `port` (looked at every 100 ms until `until`).
fn dropped_after(port: u16, from: Instant, until: Instant) -> Option<Duration> {
    while Instant::now() < until {
        if tcp_state(port) != Some(1) {
            return Some(from.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// Whether the server has closed or reset `s`: what is buffered is read to
/// its end within `limit`.
fn closed_by_server(mut s: TcpStream, limit: Duration) -> Result<String, String> {
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let t = Instant::now();
    let mut buf = vec![0u8; 65536];
    let mut got = 0usize;
    while t.elapsed() < limit {
        match s.read(&mut buf) {
            Ok(0) => return Ok(format!("end of stream after {got} bytes")),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Ok(format!("reset after {got} bytes"))
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Ok(format!("{e} after {got} bytes")),
        }
    }
    Err(format!("still open after {got} bytes read"))
}

/// The RTTs of `count` pings from spoke 1 to spoke 2 (two links each way).
fn spoke_rtts_ms(lab: &str, count: u32, gap: &str) -> Vec<f64> {
    try_spoke_rtts_ms(lab, count, gap).unwrap_or_else(|e| panic!("{e}"))
}

/// As [`spoke_rtts_ms`], with fewer than 9 in 10 answered an `Err` with
/// ping's output: a stall of the machine longer than the lab's max-lag (5
/// ms) drops what the links held through it as `late`.
fn try_spoke_rtts_ms(lab: &str, count: u32, gap: &str) -> Result<Vec<f64>, String> {
    let ns = format!("lk-{lab}-s1");
    let o = linkem_io::netns::exec_in(
        &ns,
        &["ping", "-c", &count.to_string(), "-i", gap, "10.61.0.2"],
    )
    .unwrap();
    answered_rtts_ms(&String::from_utf8_lossy(&o.stdout), count, count * 9 / 10)
}

/// `linkem ctl --name LAB ping` twice a second until `end`: each one's time, ms.
fn ctl_pings_ms(lab: &str, end: Instant) -> Vec<f64> {
    let mut out = Vec::new();
    while Instant::now() < end {
        let t = Instant::now();
        let o = linkem(&["ctl", "--name", lab, "ping"]);
        assert!(
            o.status.success(),
            "ctl ping: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        out.push(t.elapsed().as_secs_f64() * 1e3);
        std::thread::sleep(Duration::from_millis(500));
    }
    out
}

#[test]
fn a_lab_of_100_links_serves_10_clients_and_drops_one_that_never_reads() {
    let _g = serial();
    if skip() {
        return;
    }
    let (lab, web) = up();
    let pid = lab.child.as_ref().unwrap().id();
    // The RTT before the clients, which the one during them is held to. The
    // landing CI once saw 25 of 30 answered here, before any client: a
    // stall of the machine, so it is measured again.
    let before_ms = within_attempts("spoke 1 -> spoke 2 before the clients", 3, |_| {
        Ok(median(
            try_spoke_rtts_ms(&lab.name, 3, "0.2")?
                .into_iter()
                .chain(try_spoke_rtts_ms(&lab.name, 30, "0.05")?)
                .collect(),
        ))
    });
    let rss_idle = vm_rss_kib(pid);
    let start = Instant::now();
    let end = start + WINDOW;
    let (samples, slow, rss, ctl_ms, during_ms, dropped) = std::thread::scope(|s| {
        let readers: Vec<_> = (0..READERS)
            .map(|_| s.spawn(|| read_samples(&web, end)))
            .collect();
        let slow = never_reads(&web);
        let slow_port = slow.local_addr().unwrap().port();
        let dropped = s.spawn(move || dropped_after(slow_port, start, end));
        let ctl = s.spawn(|| ctl_pings_ms(&lab.name, end));
        let pings = s.spawn(|| spoke_rtts_ms(&lab.name, 90, "0.1"));
        std::thread::sleep(Duration::from_secs(3));
        let rss_3 = vm_rss_kib(pid);
        std::thread::sleep(end.saturating_duration_since(Instant::now()));
        let rss_10 = vm_rss_kib(pid);
        let samples: Vec<Vec<Instant>> = readers.into_iter().map(|r| r.join().unwrap()).collect();
        (
            samples,
            slow,
            (rss_3, rss_10),
            ctl.join().unwrap(),
            pings.join().unwrap(),
            dropped.join().unwrap(),
        )
    });
    let slow_closed = closed_by_server(slow, Duration::from_secs(3));
    let during_ms = median(during_ms);
    let ctl_median_ms = median(ctl_ms.clone());
    let counts: Vec<usize> = samples
        .iter()
        .map(|at| {
            at.iter()
                .filter(|&&t| t >= start + Duration::from_secs(1))
                .count()
        })
        .collect();
    let want = (0.8 * SAMPLE_RATE_HZ * (WINDOW.as_secs_f64() - 1.0)).floor() as usize;
    eprintln!(
        "VmRSS: {} MiB before the clients, {} MiB at 3 s, {} MiB at 10 s; samples per reader after 1 s: {counts:?} (want >= {want}); \
         ctl ping median {ctl_median_ms:.1} ms (max {:.1}); spoke RTT median {before_ms:.3} ms before, {during_ms:.3} ms during; \
         the client that never reads: dropped after {dropped:?}, {slow_closed:?}",
        rss_idle / 1024,
        rss.0 / 1024,
        rss.1 / 1024,
        ctl_ms.iter().copied().fold(0.0, f64::max),
    );
    assert!(
        rss.1 <= rss.0 + 8 * 1024,
        "VmRSS grew from {} to {} KiB between 3 s and 10 s",
        rss.0,
        rss.1
    );
    assert!(
        rss.1 <= rss_idle + 32 * 1024,
        "VmRSS {} KiB with the clients, {} KiB before",
        rss.1,
        rss_idle
    );
    assert!(
        counts.iter().all(|&c| c >= want),
        "samples per reader {counts:?}, want >= {want}"
    );
    assert!(
        ctl_median_ms < 100.0,
        "ctl ping median {ctl_median_ms:.1} ms"
    );
    assert!(
        during_ms <= before_ms + 2.0,
        "spoke RTT {during_ms:.3} ms during, {before_ms:.3} ms before"
    );
    assert!(
        slow_closed.is_ok(),
        "the client that never reads: {slow_closed:?}"
    );
    drop(lab);
}
