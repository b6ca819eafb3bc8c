//! No floor under small delays (issue 21 item 3): ping RTT through linkem with
//! `delay 0us` and `delay 50us`, beside the Linux bridge between the same
//! veths in the same test, stock offloads, default real-time policy, on each
//! backend. A frame due before the output thread could wake is sent by the
//! stage that decided it, so neither delay pays a second wake-up per
//! direction. Needs root (prints "skipped" otherwise).

#[macro_use]
mod common;

use common::*;
use linkem_io::netns::Topology;
use std::process::Command;
use std::time::Duration;

/// Pings per measurement: enough for a stable median on a loaded machine.
const PINGS: u32 = 300;
/// Slack for this shared 2-core VM on top of what each bound is due.
const MARGIN_US: f64 = 150.0;

/// The Linux bridge between the emulator's two veth ends, removed on drop.
struct LinuxBridge {
    name: String,
}

impl LinuxBridge {
    fn up(topo: &Topology) -> LinuxBridge {
        let name = format!("{}br", topo.prefix);
        let ip = |args: &[&str]| {
            let o = Command::new("ip").args(args).output().unwrap();
            assert!(
                o.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        };
        ip(&["link", "add", &name, "type", "bridge"]);
        let br = LinuxBridge { name };
        ip(&["link", "set", &topo.emu_a, "master", &br.name]);
        ip(&["link", "set", &topo.emu_b, "master", &br.name]);
        ip(&["link", "set", &br.name, "up"]);
        std::thread::sleep(Duration::from_millis(500));
        br
    }
}

impl Drop for LinuxBridge {
    fn drop(&mut self) {
        // Deleting the bridge releases its ports for linkem.
        let _ = Command::new("ip")
            .args(["link", "del", &self.name])
            .output();
    }
}

/// RTTs in µs of `PINGS` pings 2 ms apart from A to B, sorted, after a warm-up.
fn rtts_us(topo: &Topology) -> Vec<f64> {
    let b = topo.addr_b.to_string();
    let _ = topo.exec_in_a(&["ping", "-n", "-q", "-c", "20", "-i", "0.002", &b]);
    let count = PINGS.to_string();
    let o = topo
        .exec_in_a(&["ping", "-n", "-c", &count, "-i", "0.002", "-W", "1", &b])
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let mut rtts: Vec<f64> = text
        .lines()
        .filter_map(|l| {
            let ms: f64 = l
                .split("time=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some(ms * 1000.0)
        })
        .collect();
    assert!(
        rtts.len() as u32 >= PINGS * 9 / 10,
        "ping answers {} of {PINGS}: {text}",
        rtts.len()
    );
    rtts.sort_by(f64::total_cmp);
    rtts
}

fn summary(rtts: &[f64]) -> String {
    format!(
        "median {:.0} µs, p90 {:.0} µs ({} replies)",
        rtts[rtts.len() / 2],
        rtts[rtts.len() * 9 / 10],
        rtts.len()
    )
}

/// Measures the Linux bridge, then linkem with `delay 0us` and `delay 50us`,
/// then the bridge again (its two medians' mean is the baseline, so load that
/// changes during the test falls on both sides).
fn small_delays_cost_no_wake_up_floor(backend: &str) {
    if skip() {
        return;
    }
    let _serial = serial();
    let topo = topology_with("sd21", true);
    let bridge = |topo: &Topology| {
        let br = LinuxBridge::up(topo);
        let r = rtts_us(topo);
        drop(br);
        r
    };
    let before = bridge(&topo);
    let mut linkem = Vec::new();
    for delay in ["0us", "50us"] {
        let b = Bridge::start(&topo, backend, &["delay", delay]);
        let r = rtts_us(&topo);
        // Idle, the stages sleep with no timeout: the stop must wake them
        // (`Bridge::stop` allows 10 s, and a stage left asleep never ends).
        std::thread::sleep(Duration::from_millis(300));
        let t = std::time::Instant::now();
        let stats = b.stop();
        eprintln!(
            "{backend} delay {delay}: stopped {:?} after SIGINT",
            t.elapsed()
        );
        linkem.push((delay, r, stats));
    }
    let after = bridge(&topo);
    let base_us = (median(before.clone()) + median(after.clone())) / 2.0;
    let mut report = format!(
        "{backend}: Linux bridge {} then {}",
        summary(&before),
        summary(&after)
    );
    for (delay, r, stats) in &linkem {
        report += &format!(
            "; linkem delay {delay}: {} (a->b delivered {} late {}, b->a delivered {} late {})",
            summary(r),
            fate(stats, 0, "delivered"),
            fate(stats, 0, "late"),
            fate(stats, 1, "delivered"),
            fate(stats, 1, "late"),
        );
    }
    eprintln!("{report}");
    for (delay, r, _) in &linkem {
        // Two directions of the link's delay are due on top of the bridge.
        let due_us = if *delay == "0us" { 0.0 } else { 100.0 };
        let bound_us = base_us + due_us + MARGIN_US;
        let med = median(r.clone());
        assert!(
            med <= bound_us,
            "delay {delay}: median RTT {med:.0} µs through linkem, more than the Linux \
             bridge's {base_us:.0} µs + {due_us:.0} µs due + {MARGIN_US:.0} µs margin \
             ({bound_us:.0} µs): {report}"
        );
    }
}

on_both_backends!(small_delays_cost_no_wake_up_floor);
