//! A live link log survives the process that writes it: `linkem bridge
//! --log-a-to-b FILE` killed with SIGKILL (no destructor, no signal handler)
//! leaves FILE readable, with the packets of the run up to about a second
//! before the kill, where before only a hidden temporary file was left.
//! Needs root (namespaces; prints "skipped" otherwise); names start with `lkc`.

#[macro_use]
#[allow(unused_macros)]
mod common;

use common::*;
use std::time::{Duration, Instant};

#[test]
fn a_live_log_is_readable_after_sigkill() {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology("lkc");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("up.log");
    let b = Bridge::start(
        &topo,
        "packet",
        &["delay", "2ms", "--log-a-to-b", log.to_str().unwrap()],
    );
    // 30 pings at 20 ms: 30 `+` lines on side a's log within 0.6 s; then
    // more than the 1 s flush interval passes before the kill.
    let rtt = ping_median_ms(&topo, 30);
    let deadline = Instant::now() + Duration::from_secs(20);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let arrivals = text.lines().filter(|l| l.contains(" + ")).count();
        if arrivals >= 30 || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut b = b;
    b.signal(libc::SIGKILL);
    b.child.wait().unwrap();
    let after = std::fs::read_to_string(&log).unwrap_or_default();
    let arrivals = after.lines().filter(|l| l.contains(" + ")).count();
    let departures = after.lines().filter(|l| l.contains(" - ")).count();
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    eprintln!(
        "ping median {rtt:.2} ms; after SIGKILL {}: {arrivals} arrivals, {departures} \
         departures; files {names:?}",
        log.display()
    );
    assert!(
        after.contains("# base timestamp: 0"),
        "no header at {} after SIGKILL (files there: {names:?}): {after:?}",
        log.display()
    );
    assert!(
        arrivals >= 30,
        "the pings' arrivals are not in the log (ping median {rtt:.2} ms, so they went \
         through the bridge; files there: {names:?}): {text:?}"
    );
    assert!(departures >= 29, "departures missing: {after}");
    assert_eq!(names, ["up.log"], "no hidden temporary file beside it");
}
