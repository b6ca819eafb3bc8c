//! `linkem bridge` with real traffic: `nsA <-veth-> linkem <-veth-> nsB`, names
//! unique to each test, torn down even when a test fails (the topology's Drop).
//! Needs root and prints "skipped" otherwise; as root, a missing tool (ip, ethtool,
//! iperf3, ping) fails the test, so that a machine without them cannot pass silently.
//!
//! Traffic comes from ping, iperf3 (Debian package) and UDP sockets opened by
//! this test inside the namespaces (a thread enters a namespace with setns),
//! which carry a sequence number and a send time so that loss, bursts and
//! one-way delay are measured exactly.

#[macro_use]
mod common;

use common::*;
use linkem_io::netns::{self, Topology};
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

on_both_backends!(
    ping_rtt_with_delay_10ms_each_way,
    udp_and_tcp_through_rate_50mbit,
    loss_10_percent_inside_its_binomial_bound,
    gilbert_elliott_loss_rate_and_burst_length,
    overload_of_a_small_queue_drops_queue_full_and_recovers,
    both_directions_at_once_with_clean_shutdown,
    sighup_changes_the_delay_without_losing_queued_packets,
);

fn ping_rtt_with_delay_10ms_each_way(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology("lkbpd");
    let b = Bridge::start(&topo, backend, &[]);
    ping_median_ms(&topo, 10); // warm-up
    let base = ping_median_ms(&topo, 40);
    b.stop();
    let b = Bridge::start(&topo, backend, &["delay", "10ms"]);
    let rtt = ping_median_ms(&topo, 40);
    let v = b.stop();
    eprintln!("{backend}: baseline {base:.3} ms, delay 10ms each way: {rtt:.3} ms; {v}");
    assert!(
        (rtt - (20.0 + base)).abs() <= 1.0,
        "RTT {rtt} ms, expected 20 ms + {base} ms"
    );
}

fn udp_and_tcp_through_rate_50mbit(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology("lkbrt");
    let b = Bridge::start(&topo, backend, &["rate", "50mbit", "queue", "200"]);
    // UDP at 70 Mbit/s of 1472-byte payloads: 1514-byte frames on the link,
    // within 3 % of it; TCP's goodput at 90 % of the 95.6 % of the link that
    // 1448 bytes of payload in 1514-byte frames are. A spell of the host's
    // load costs an attempt.
    let frame_bps = within_attempts(&format!("{backend}: UDP into rate 50mbit"), 3, |_| {
        let u = iperf3(&topo, &["-u", "-b", "70M", "-l", "1472", "-t", "4"]);
        let payload_bps = u["end"]["sum"]["bits_per_second"].as_f64().unwrap();
        let lost = u["end"]["sum"]["lost_percent"].as_f64().unwrap();
        // The receiver counts what arrived over the sender's time, in UDP payload bits.
        let frame_bps = payload_bps * (1.0 - lost / 100.0) * 1514.0 / 1472.0;
        if (frame_bps / 50e6 - 1.0).abs() <= 0.03 {
            Ok(frame_bps)
        } else {
            Err(format!("{:.2} Mbit/s of frames", frame_bps / 1e6))
        }
    });
    let tcp_bps = within_attempts(&format!("{backend}: TCP through rate 50mbit"), 3, |_| {
        let t = iperf3(&topo, &["-t", "4"]);
        let bps = t["end"]["sum_received"]["bits_per_second"]
            .as_f64()
            .unwrap();
        if bps >= 0.9 * 50e6 * 1448.0 / 1514.0 {
            Ok(bps)
        } else {
            Err(format!("{:.2} Mbit/s of goodput", bps / 1e6))
        }
    });
    let v = b.stop();
    eprintln!(
        "{backend}: UDP {:.2} Mbit/s of frames, TCP {:.2} Mbit/s goodput; {v}",
        frame_bps / 1e6,
        tcp_bps / 1e6
    );
    assert!(
        fate(&v, 0, "queue-full") > 0,
        "70 Mbit/s into 50 Mbit/s overflows the queue"
    );
}

fn loss_10_percent_inside_its_binomial_bound(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology("lkbls");
    // The model's loss statistics, seen by the receiver: a frame the machine could
    // not send within the default max-lag would count as lost here too, so these
    // statistical tests let late frames through (max-lag has its own tests).
    let b = Bridge::start(
        &topo,
        backend,
        &["loss", "10%", "seed", "5", "--max-lag", "off"],
    );
    let n = 20_000;
    let got = udp_flow(&topo, true, n, 100, Duration::from_micros(50));
    let v = b.stop();
    let lost = got.iter().filter(|g| g.is_none()).count() as f64;
    let (p, n) = (0.1, n as f64);
    // 99.9 % two-sided binomial bound.
    let bound = 3.29 * (p * (1.0 - p) / n).sqrt();
    eprintln!(
        "{backend}: loss rate {:.4} (bound ±{bound:.4}); {v}",
        lost / n
    );
    // The model's rate, from linkem's own counts: a frame the machine lost
    // elsewhere is not the link's loss.
    let received = v["directions"][0]["received"].as_u64().unwrap() as f64;
    let model = fate(&v, 0, "loss") as f64 / received;
    assert!(
        (model - p).abs() <= bound,
        "loss rate {model} outside 0.1 ± {bound}"
    );
    // What the receiver missed is the link's loss, plus at most a few frames the
    // machine lost; stray frames of the hosts (received beyond the flow) may be
    // among the losses too.
    let counted = fate(&v, 0, "loss") as f64;
    let strays = (received - n).max(0.0);
    assert!(
        counted <= lost + strays && lost <= counted + n / 200.0,
        "{lost} missing at the receiver, {counted} counted as 'loss', {strays} stray frames"
    );
}

fn gilbert_elliott_loss_rate_and_burst_length(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology("lkbge");
    let (p, r) = (0.02, 0.2);
    let seed = 7u64;
    // As above: only the model's drops count here.
    let b = Bridge::start(
        &topo,
        backend,
        &[
            "loss",
            "gemodel",
            "2%",
            "20%",
            "seed",
            "7",
            "--max-lag",
            "off",
        ],
    );
    let n = 30_000u32;
    let got = udp_flow(&topo, true, n, 100, Duration::from_micros(40));
    let v = b.stop();
    let missing: Vec<bool> = got.iter().map(Option::is_none).collect();
    // The model is the oracle (replay and the bridge drive the same core): the
    // same seed and direction decide the same packets, whatever the timing.
    let spec = linkem_core::LinkSpec::parse("loss gemodel 2% 20%").unwrap();
    let mut link = linkem_core::Link::new(spec.link, seed, 0);
    let model_lost: Vec<bool> = (0..n as u64)
        .map(|i| {
            let m = linkem_core::PacketMeta { len_bytes: 142 };
            link.on_arrival(i * 40_000, m).fate != linkem_core::Fate::Delivered
        })
        .collect();
    let lost_n = model_lost.iter().filter(|&&l| l).count();
    let received = v["directions"][0]["received"].as_u64().unwrap();
    eprintln!(
        "{backend} gemodel: linkem received {received} of {n}, model lost {lost_n}, \
         {} missing at the receiver; {v}",
        missing.iter().filter(|&&m| m).count()
    );
    let live_lost = fate(&v, 0, "loss");
    if received == n as u64 {
        // Exactly the flow reached linkem: the decisions line up one to one. A
        // frame the model dropped never arrives; one it kept arrives unless the
        // machine lost it after linkem (a few at most).
        assert_eq!(
            live_lost, lost_n as u64,
            "linkem's losses are the model's: {v}"
        );
        let resurrected = (0..n as usize)
            .filter(|&i| model_lost[i] && !missing[i])
            .count();
        let extra = (0..n as usize)
            .filter(|&i| !model_lost[i] && missing[i])
            .count();
        assert_eq!(resurrected, 0, "frames the model dropped arrived");
        assert!(
            extra <= n as usize / 200,
            "{extra} kept frames did not arrive"
        );
    }
    // The statistics of the decisions themselves: stationary loss p/(p+r) and
    // geometric bursts of mean 1/r.
    let rate = lost_n as f64 / n as f64;
    let mut bursts = Vec::new();
    let mut run = 0u32;
    for &l in &model_lost {
        if l {
            run += 1;
        } else if run > 0 {
            bursts.push(run as f64);
            run = 0;
        }
    }
    let mean_burst = bursts.iter().sum::<f64>() / bursts.len() as f64;
    // Loss indicator = the chain's state; its autocorrelation decays as λ^k, λ = 1 - p - r,
    // which inflates the binomial variance by (1 + λ)/(1 - λ).
    let want_rate = p / (p + r);
    let lambda = 1.0 - p - r;
    let rate_bound =
        3.29 * (want_rate * (1.0 - want_rate) / n as f64 * (1.0 + lambda) / (1.0 - lambda)).sqrt();
    // Bursts are geometric with mean 1/r and variance (1-r)/r².
    let burst_bound = 3.29 * ((1.0 - r) / (r * r) / bursts.len() as f64).sqrt();
    eprintln!(
        "gemodel: rate {rate:.4} (theory {want_rate:.4} ± {rate_bound:.4}), mean burst {mean_burst:.3} (theory {} ± {burst_bound:.3})",
        1.0 / r
    );
    assert!((rate - want_rate).abs() <= rate_bound);
    assert!((mean_burst - 1.0 / r).abs() <= burst_bound);
    // A stray frame of the hosts (counted in `received`) shifts the draws: then
    // linkem's own loss rate is held to the same bound.
    let live_rate = live_lost as f64 / received as f64;
    assert!(
        (live_rate - want_rate).abs() <= rate_bound,
        "live loss rate {live_rate}: {v}"
    );
}

fn overload_of_a_small_queue_drops_queue_full_and_recovers(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology("lkbov");
    let b = Bridge::start(
        &topo,
        backend,
        &["rate", "2mbit", "queue", "8", "delay", "5ms"],
    );
    // As fast as the sender goes: far beyond 2 Mbit/s.
    let got = udp_flow(&topo, true, 20_000, 1000, Duration::ZERO);
    let arrived = got.iter().filter(|g| g.is_some()).count() as u64;
    // Still forwarding afterwards: no stall.
    let rtt = ping_median_ms(&topo, 10);
    let v = b.stop();
    eprintln!("{backend} overload: {arrived} of 20000 arrived, ping {rtt:.2} ms after; {v}");
    assert!(fate(&v, 0, "queue-full") > 1000, "a small queue overflows");
    assert!(arrived > 0 && arrived <= fate(&v, 0, "delivered"));
    assert!(rtt < 50.0);
}

fn both_directions_at_once_with_clean_shutdown(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology("lkbbd");
    let b = Bridge::start(&topo, backend, &["delay", "5ms", "loss", "1%", "seed", "9"]);
    let (ab, ba) = std::thread::scope(|s| {
        let ab = s.spawn(|| udp_flow(&topo, true, 5000, 200, Duration::from_micros(200)));
        let ba = s.spawn(|| udp_flow(&topo, false, 5000, 200, Duration::from_micros(200)));
        (ab.join().unwrap(), ba.join().unwrap())
    });
    // Stop while a stream is in the delay line: the in-flight packets are counted.
    let mut flood = topo
        .spawn_in_a(&["ping", "-f", "-c", "2000", &topo.addr_b.to_string()])
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let v = b.stop();
    let _ = flood.kill();
    let _ = flood.wait();
    for (dir, got) in [(0, &ab), (1, &ba)] {
        let arrived = got.iter().filter(|g| g.is_some()).count() as u64;
        let delays: Vec<f64> = got.iter().flatten().map(|&d| d as f64 / 1e6).collect();
        let med = median(delays);
        eprintln!(
            "{backend} direction {dir}: {arrived} of 5000 arrived, median one-way {med:.3} ms"
        );
        assert!(arrived >= 4850, "about 1 % lost: {arrived} arrived");
        assert!(
            (5.0..6.0).contains(&med),
            "one-way delay {med} ms for delay 5ms"
        );
        assert!(fate(&v, dir, "delivered") >= arrived);
    }
}

fn sighup_changes_the_delay_without_losing_queued_packets(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology("lkbhu");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("link.toml");
    std::fs::write(&cfg, "delay = \"100ms\"\n").unwrap();
    // What is tested is that the change loses nothing queued; a stall of a loaded
    // machine would turn frames into `late` drops under the default max-lag, which
    // has tests of its own.
    let b = Bridge::start(
        &topo,
        backend,
        &["--config", cfg.to_str().unwrap(), "--max-lag", "off"],
    );
    let got = std::thread::scope(|s| {
        let flow = s.spawn(|| udp_flow(&topo, true, 600, 100, Duration::from_millis(1)));
        std::thread::sleep(Duration::from_millis(300));
        // Packets sent in the last 100 ms are in the delay line now.
        std::fs::write(&cfg, "delay = \"10ms\"\n").unwrap();
        b.signal(libc::SIGHUP);
        flow.join().unwrap()
    });
    let v = b.stop();
    let arrived = got.iter().filter(|g| g.is_some()).count();
    let ms = |i: usize| got[i].map(|d| d as f64 / 1e6).unwrap_or(f64::NAN);
    eprintln!(
        "SIGHUP: {arrived} of 600 arrived; first {:.2} ms, last {:.2} ms; {v}",
        ms(0),
        ms(599)
    );
    assert_eq!(arrived, 600, "no packet lost across the change");
    assert!(
        got[..150].iter().flatten().all(|&d| d >= 100_000_000),
        "before: 100 ms"
    );
    // After: 10 ms. Never early; a stall of this VM (a few ms, now and then)
    // may hold back a packet or two beyond 20 ms, in linkem or in the
    // receiving test thread, so the bound is on the median and on most.
    let after: Vec<u64> = got[500..].iter().flatten().copied().collect();
    let early: Vec<u64> = after.iter().copied().filter(|&d| d < 10_000_000).collect();
    let slow: Vec<u64> = after.iter().copied().filter(|&d| d >= 20_000_000).collect();
    let med = median(after.iter().map(|&d| d as f64 / 1e6).collect());
    assert!(
        early.is_empty() && slow.len() <= 5 && (10.0..12.0).contains(&med),
        "after: 10 ms: median {med:.3} ms; earlier than 10 ms (ns): {early:?}; \
         20 ms or later (ns, at most 5 allowed): {slow:?}"
    );
}

#[test]
fn plain_errors_for_bad_interfaces_and_words() {
    let run = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_linkem"))
            .arg("bridge")
            .args(args)
            .output()
            .unwrap();
        assert!(!o.status.success());
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    let e = run(&["nosuchif0", "nosuchif1", "delay", "10ms"]);
    assert!(
        e.contains("nosuchif0") && (e.contains("does not exist") || e.contains("root")),
        "{e}"
    );
    let e = run(&["lo", "lo"]);
    assert!(e.contains("two interfaces"), "{e}");
    let e = run(&["a", "b", "delay", "10"]);
    assert!(e.contains("'10'"), "{e}");
    let e = run(&["a", "b", "--forward-only", "delay", "10ms"]);
    assert!(
        e.contains("--forward-only") && e.contains("no link words"),
        "{e}"
    );
}

#[test]
fn forward_only_baseline_carries_every_frame_at_once() {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology("lkbfo");
    for backend in ["packet", "xdp"] {
        // A stall of this VM that outlasts the 200 ms flow (seen once in CI: a
        // median of 3.9 ms on one backend, 0.04 ms on the other in the same
        // run) is told from added delay by measuring again: added delay is
        // there every time. Each try must carry every frame.
        let mut tries = Vec::new();
        for _ in 0..3 {
            let b = Bridge::start(&topo, backend, &["--forward-only"]);
            let got = udp_flow(&topo, true, 2000, 100, Duration::from_micros(100));
            let v = b.stop();
            let arrived = got.iter().filter(|g| g.is_some()).count() as u64;
            let med = median(got.iter().flatten().map(|&d| d as f64 / 1e6).collect());
            eprintln!("{backend} forward-only: {arrived} of 2000, median one-way {med:.3} ms; {v}");
            assert_eq!(
                arrived, 2000,
                "a plain forwarder on an idle link loses nothing ({backend}): {v}"
            );
            assert!(fate(&v, 0, "delivered") >= arrived, "{v}");
            tries.push(med);
            if med < 1.0 {
                break;
            }
        }
        assert!(
            tries.iter().any(|&m| m < 1.0),
            "no delay is added ({backend}): median one-way of each try {tries:?} ms \
             (the stats of each try are printed above)"
        );
    }
}

// ---- Hosts at their defaults: offloaded checksums and segments, IPv6, VLAN
// tags, jumbo frames, frames too big for the egress. No ethtool on the hosts. ----

on_both_backends!(
    tcp_through_rate_50mbit_delay_10ms_with_hosts_at_defaults,
    udp_100mbit_into_rate_50mbit_with_hosts_at_defaults,
    ipv6_ping_and_tcp_with_hosts_at_defaults,
    vlan_tagged_frames_arrive_unchanged,
    jumbo_frames_at_mtu_9000,
    a_frame_larger_than_the_egress_mtu_is_counted_too_big,
    tcp_with_gro_on_linkems_own_ends,
);

fn tcp_through_rate_50mbit_delay_10ms_with_hosts_at_defaults(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let words = ["rate", "50mbit", "delay", "10ms"];
    // The twins within 5 % of each other, the defaults' at 90 % of the link
    // or more. A spell of the host's load through one twin (the CI once saw
    // 47.7 against 44.6 Mbit/s, the slower run's releases 16 ms late at
    // p99) makes both again.
    within_attempts(
        &format!("{backend}: TCP with and without offloads"),
        3,
        |_| {
            let mut goodput = Vec::new();
            for stock in [true, false] {
                let topo = topology_with("lkPtc", stock);
                let b = Bridge::start(&topo, backend, &words);
                let bps = tcp_goodput_bps(&topo, &[], 4);
                let v = b.stop();
                eprintln!(
                    "{backend}, hosts' offloads {}: TCP {:.2} Mbit/s; {v}",
                    if stock { "on (defaults)" } else { "off" },
                    bps / 1e6
                );
                // AF_PACKET only: with an XDP program on linkem's veth end the kernel
                // turns TSO off on the host's end, so no super-frame reaches AF_XDP.
                if stock && backend == "packet" {
                    assert!(
                        v["directions"][0]["segmented"].as_u64().unwrap() > 0,
                        "a host with TSO on hands over super-frames: {v}"
                    );
                }
                goodput.push(bps);
            }
            let (stock, off) = (goodput[0], goodput[1]);
            if stock >= 0.9 * 50e6 && (stock / off - 1.0).abs() <= 0.05 {
                Ok(())
            } else {
                Err(format!(
                "defaults {:.2} Mbit/s (want 45 or more) vs offloads off {:.2} (want within 5 %)",
                stock / 1e6,
                off / 1e6
            ))
            }
        },
    );
}

/// GRO on linkem's own veth ends (where a user may have turned it on, e.g. as
/// advice for AF_XDP): the kernel then merges the wire frames of a TCP flow into
/// super-frames before a packet socket sees them, and linkem must cut them back
/// into the wire frames the model shapes. With the hosts' offloads off, every
/// super-frame AF_PACKET sees comes from that merging; the twin keeps the hosts
/// at their defaults.
fn tcp_with_gro_on_linkems_own_ends(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let words = ["rate", "50mbit", "delay", "10ms"];
    for stock in [true, false] {
        let topo = topology_with("lkPgr", stock);
        for emu in [&topo.emu_a, &topo.emu_b] {
            let o = Command::new("ethtool")
                .args(["-K", emu, "gro", "on"])
                .output()
                .unwrap();
            assert!(o.status.success(), "ethtool -K {emu} gro on: {o:?}");
        }
        let b = Bridge::start(&topo, backend, &words);
        // At 90 % of the link; a spell of the host's load costs an attempt.
        let bps = within_attempts(&format!("{backend}: TCP with GRO on"), 3, |_| {
            let bps = tcp_goodput_bps(&topo, &[], 4);
            if bps >= 0.9 * 50e6 {
                Ok(bps)
            } else {
                Err(format!("TCP through rate 50mbit: {:.2} Mbit/s", bps / 1e6))
            }
        });
        // Bridge::stop checks received + segmented = delivered + drops + in flight.
        let v = b.stop();
        let segmented = v["directions"][0]["segmented"].as_u64().unwrap();
        eprintln!(
            "{backend}, GRO on linkem's ends, hosts' offloads {}: TCP {:.2} Mbit/s, {segmented} \
             extra wire frames cut; {v}",
            if stock { "on (defaults)" } else { "off" },
            bps / 1e6
        );
        if !stock && backend == "packet" {
            assert!(
                segmented > 0,
                "GRO-merged frames reach AF_PACKET and are cut: {v}"
            );
        }
        assert_eq!(
            fate(&v, 0, "too-big"),
            0,
            "no merged frame is dropped as too big: {v}"
        );
    }
}

fn udp_100mbit_into_rate_50mbit_with_hosts_at_defaults(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology_with("lkPud", true);
    // A short queue (200 frames, 48 ms) so that what drains after the sender stops
    // hardly counts.
    let b = Bridge::start(&topo, backend, &["rate", "50mbit", "queue", "200"]);
    let u = iperf3(&topo, &["-u", "-b", "100M", "-l", "1472", "-t", "4"]);
    let v = b.stop();
    let payload_bps = u["end"]["sum"]["bits_per_second"].as_f64().unwrap();
    let lost = u["end"]["sum"]["lost_percent"].as_f64().unwrap();
    // What the receiver took in over the sender's time, in 1514-byte frames.
    let frame_bps = payload_bps * (1.0 - lost / 100.0) * 1514.0 / 1472.0;
    eprintln!(
        "{backend}: UDP 100 Mbit/s offered, {:.2} Mbit/s of frames arrived; {v}",
        frame_bps / 1e6
    );
    // Every datagram that arrived had a valid checksum (a bad one is not counted
    // as received by iperf3), and about half of them arrived.
    assert!(
        (frame_bps / 50e6 - 1.0).abs() <= 0.05,
        "UDP through rate 50mbit: {frame_bps} bit/s of frames"
    );
    assert!(fate(&v, 0, "queue-full") > 0);
}

/// Adds `fd77:X::1/64` to A and `::2` to B (no duplicate-address detection wait);
/// returns B's address.
fn add_ipv6(topo: &Topology) -> String {
    let net = format!("fd77:{}", topo.addr_a.octets()[2]);
    for (ns, dev, host) in [(&topo.ns_a, &topo.host_a, 1), (&topo.ns_b, &topo.host_b, 2)] {
        let a = format!("{net}::{host}/64");
        let o = netns::exec_in(ns, &["ip", "addr", "add", &a, "dev", dev, "nodad"]).unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    format!("{net}::2")
}

fn ipv6_ping_and_tcp_with_hosts_at_defaults(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology_with("lkP6t", true);
    let b6 = add_ipv6(&topo);
    let b = Bridge::start(&topo, backend, &["rate", "50mbit", "delay", "5ms"]);
    // Neighbour discovery goes through the link too.
    let o = topo
        .exec_in_a(&["ping", "-6", "-c", "20", "-i", "0.05", &b6])
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "IPv6 ping: {text}");
    // Goodput of 1428-byte payloads in 1514-byte frames, 80 % of the link,
    // in the median second: a stall of this VM (releases 160 ms late in one
    // run) takes a second of a 5 s flow, not the link's rate. A quiet
    // machine gives 45-47 Mbit/s. Under the CI's load (fuzzers and builds
    // on both cores) AF_XDP's copy mode held 38.0 and 36.6 in the median
    // second of two runs (81 % and 78 % of the link), with every core taken
    // and 1 % of its releases 93-129 ms late or more: such a run is
    // measured again. Checksums or TSO gone wrong would leave next to
    // nothing in every attempt, a rate halved would show in each.
    let least_bps = 0.8 * 50e6 * 1428.0 / 1514.0;
    within_attempts(
        &format!("{backend}: IPv6 TCP through rate 50mbit"),
        3,
        |_| {
            let mut server = topo
                .spawn_in_b(&["iperf3", "-s", "-1", "-p", "5302"])
                .unwrap();
            std::thread::sleep(Duration::from_millis(300));
            let o = topo
                .exec_in_a(&[
                    "iperf3", "-6", "-c", &b6, "-p", "5302", "-J", "-t", "5", "-O", "1",
                ])
                .unwrap();
            let _ = server.kill();
            let _ = server.wait();
            let t: Value = serde_json::from_slice(&o.stdout).unwrap();
            let (bps, median_bps) = iperf3_goodput_bps(&t);
            let report = format!(
                "median second {:.2} Mbit/s (whole run {:.2}), want at least {:.2}",
                median_bps / 1e6,
                bps / 1e6,
                least_bps / 1e6
            );
            eprintln!("{backend}: IPv6 TCP {report}");
            if median_bps >= least_bps {
                Ok(())
            } else {
                Err(report)
            }
        },
    );
    // linkem's counts are printed at a failure above (the bridge's Drop).
    let v = b.stop();
    eprintln!("{backend}: IPv6 TCP through rate 50mbit; {v}");
    // AF_PACKET only (see tcp_through_rate_50mbit_delay_10ms_with_hosts_at_defaults).
    assert!(
        backend != "packet" || v["directions"][0]["segmented"].as_u64().unwrap() > 0,
        "TSO over IPv6 is cut: {v}"
    );
}

/// A packet socket on `dev` inside `ns`, as a raw fd.
fn packet_socket(dev: &str) -> i32 {
    // Safety: plain socket call; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW,
            (libc::ETH_P_ALL as u16).to_be() as i32,
        )
    };
    assert!(
        fd >= 0,
        "packet socket: {}",
        std::io::Error::last_os_error()
    );
    let name = std::ffi::CString::new(dev).unwrap();
    // Safety: a valid NUL-terminated name.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert!(index > 0, "no interface {dev}");
    // Safety: sockaddr_ll is plain data; zero is valid.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sll.sll_ifindex = index as i32;
    // Safety: binds fd to a valid sockaddr_ll of the given size.
    let rc = unsafe {
        libc::bind(
            fd,
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    assert_eq!(rc, 0, "bind: {}", std::io::Error::last_os_error());
    fd
}

/// Tagged frames from A's packet socket: 802.1Q (VID 42, full MTU payload) and QinQ
/// (802.1ad 100 over 802.1Q 7), each with a sequence number, a non-IP ethertype inside.
fn tagged_frames(src: [u8; 6], dst: [u8; 6], n: u16) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut f = Vec::new();
            f.extend_from_slice(&dst);
            f.extend_from_slice(&src);
            if i % 2 == 0 {
                f.extend_from_slice(&[0x81, 0x00, 0x00, 42]);
            } else {
                f.extend_from_slice(&[0x88, 0xa8, 0x00, 100, 0x81, 0x00, 0x20, 7]);
            }
            f.extend_from_slice(&[0x88, 0xb5]); // local experimental ethertype
            f.extend_from_slice(&i.to_be_bytes());
            let body = if i % 2 == 0 { 1500 - 2 } else { 200 };
            f.extend((0..body).map(|k| (k as u16 ^ i) as u8));
            f
        })
        .collect()
}

fn vlan_tagged_frames_arrive_unchanged(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology_with("lkPvl", true);
    let mac = |ns: &str, dev: &str| -> [u8; 6] {
        let o = netns::exec_in(ns, &["cat", &format!("/sys/class/net/{dev}/address")]).unwrap();
        let s = String::from_utf8_lossy(&o.stdout);
        let v: Vec<u8> = s
            .trim()
            .split(':')
            .map(|h| u8::from_str_radix(h, 16).unwrap())
            .collect();
        v.try_into().unwrap()
    };
    let (mac_a, mac_b) = (mac(&topo.ns_a, &topo.host_a), mac(&topo.ns_b, &topo.host_b));
    let frames = tagged_frames(mac_a, mac_b, 40);
    let b = Bridge::start(&topo, backend, &["delay", "1ms"]);
    let t = &topo;
    let got = std::thread::scope(|s| {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let rx = s.spawn(move || {
            let topo = t;
            // linkem's own receive code reads them back: it writes the tag the device
            // stripped into metadata back into the frame, as it was on the wire.
            in_ns(&topo.ns_b, || {
                let mut sock = linkem_io::afpacket::AfPacket::open(
                    &topo.host_b,
                    linkem_io::afpacket::AfPacketConfig {
                        offload: false,
                        ..Default::default()
                    },
                )
                .unwrap();
                ready_tx.send(()).unwrap();
                let mut got = Vec::new();
                let until = Instant::now() + Duration::from_secs(3);
                while Instant::now() < until {
                    let _ = sock.poll_rx(Some(Duration::from_millis(50)));
                    sock.rx_batch(64, |f| {
                        let tagged = |t: &[u8]| t == [0x81, 0x00] || t == [0x88, 0xa8];
                        if f.data.len() > 16 && f.data[6..12] == mac_a && tagged(&f.data[12..14]) {
                            got.push(f.data.to_vec());
                        }
                    });
                }
                got
            })
        });
        ready_rx.recv().unwrap();
        in_ns(&topo.ns_a, || {
            let fd = packet_socket(&topo.host_a);
            for f in &frames {
                // Safety: sends a valid buffer on our socket.
                let rc = unsafe { libc::send(fd, f.as_ptr().cast(), f.len(), 0) };
                assert_eq!(rc, f.len() as isize, "{}", std::io::Error::last_os_error());
                std::thread::sleep(Duration::from_millis(2));
            }
            // Safety: our fd.
            unsafe { libc::close(fd) };
        });
        rx.join().unwrap()
    });
    let v = b.stop();
    eprintln!(
        "{backend}: {} of {} tagged frames arrived; {v}",
        got.len(),
        frames.len()
    );
    assert_eq!(got.len(), frames.len(), "every tagged frame arrives");
    for (i, (g, f)) in got.iter().zip(&frames).enumerate() {
        assert!(
            g == f,
            "frame {i} changed: {:02x?} vs {:02x?}",
            &g[..24],
            &f[..24]
        );
    }
}

/// Sets the MTU of all four ends (hosts and emulator).
fn set_mtu(topo: &Topology, host_a: u32, emu_a: u32, emu_b: u32, host_b: u32) {
    for (ns, dev, mtu) in [
        (Some(&topo.ns_a), &topo.host_a, host_a),
        (None, &topo.emu_a, emu_a),
        (None, &topo.emu_b, emu_b),
        (Some(&topo.ns_b), &topo.host_b, host_b),
    ] {
        let m = mtu.to_string();
        let o = match ns {
            Some(ns) => netns::exec_in(ns, &["ip", "link", "set", dev, "mtu", &m]).unwrap(),
            None => netns::ip(&["link", "set", dev, "mtu", &m]).unwrap(),
        };
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
}

fn jumbo_frames_at_mtu_9000(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology_with("lkPjb", true);
    set_mtu(&topo, 9000, 9000, 9000, 9000);
    let b = Bridge::start(&topo, backend, &["rate", "200mbit"]);
    // Resolve ARP first: what is measured here is the jumbo path, not the first
    // exchange after start (frames that find linkem still starting can be late).
    let _ = topo.exec_in_a(&["ping", "-c", "1", "-W", "2", &topo.addr_b.to_string()]);
    let o = topo
        .exec_in_a(&[
            "ping",
            "-c",
            "10",
            "-i",
            "0.05",
            "-s",
            "8000",
            "-M",
            "do",
            &topo.addr_b.to_string(),
        ])
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    // 8948-byte payloads in 9014-byte frames, 90 % of the link. A stall of
    // the machine starves the sender (171 Mbit/s once under a parallel
    // build), so the best of up to three runs is held to it.
    let floor_bps = 0.9 * 200e6 * 8948.0 / 9014.0;
    let mut runs_bps = vec![tcp_goodput_bps(&topo, &[], 5)];
    while runs_bps.iter().all(|&r| r < floor_bps) && runs_bps.len() < 3 {
        runs_bps.push(tcp_goodput_bps(&topo, &[], 5));
    }
    let bps = runs_bps.iter().copied().fold(0.0, f64::max);
    let v = b.stop();
    eprintln!(
        "{backend}: MTU 9000: {text}\nTCP {:.2} Mbit/s (runs {runs_bps:?}); {v}",
        bps / 1e6
    );
    assert!(text.contains(" 0% packet loss"), "ping -s 8000: {text}");
    assert_eq!(fate(&v, 0, "too-big"), 0);
    assert!(
        bps >= floor_bps,
        "TCP at MTU 9000 through rate 200mbit: best {bps} bit/s of {runs_bps:?}: {v}"
    );
}

fn a_frame_larger_than_the_egress_mtu_is_counted_too_big(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology_with("lkPtb", true);
    // A's side carries 4000-byte frames, B's side only 1500.
    set_mtu(&topo, 4000, 4000, 1500, 1500);
    let b = Bridge::start(&topo, backend, &[]);
    let o = topo
        .exec_in_a(&[
            "ping",
            "-c",
            "5",
            "-i",
            "0.05",
            "-W",
            "1",
            "-s",
            "3000",
            "-M",
            "do",
            &topo.addr_b.to_string(),
        ])
        .unwrap();
    let ok = topo
        .exec_in_a(&["ping", "-c", "3", "-i", "0.05", &topo.addr_b.to_string()])
        .unwrap();
    let (v, stderr) = b.stop_with_stderr();
    eprintln!("{backend}: {v}\n{stderr}");
    assert!(
        !o.status.success(),
        "3028-byte frames cannot cross a 1500 MTU"
    );
    assert!(ok.status.success(), "small frames still pass");
    assert_eq!(
        fate(&v, 0, "too-big"),
        5,
        "each oversized frame counted once"
    );
    assert!(
        stderr.contains("too-big"),
        "a one-time warning names the cause: {stderr}"
    );
}

/// A SIGHUP with a config (or a distribution table in it) that is a FIFO or a device:
/// the re-read fails at once, the running link keeps going, and SIGINT still stops it
/// with its final counts.
#[test]
fn sighup_with_a_fifo_or_device_keeps_the_link_and_sigint_still_works() {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology("lkFhup");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("link.toml");
    let fifo = dir.path().join("table.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // Safety: mkfifo reads a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    std::fs::write(&cfg, "delay = \"1ms\"\n").unwrap();
    let b = Bridge::start(&topo, "packet", &["--config", cfg.to_str().unwrap()]);
    let bad_configs = [
        format!(
            "delay = \"2ms 1ms\"\ndistribution = \"{}\"\n",
            fifo.display()
        ),
        "delay = \"2ms 1ms\"\ndistribution = \"/dev/zero\"\n".to_string(),
    ];
    for text in &bad_configs {
        std::fs::write(&cfg, text).unwrap();
        b.signal(libc::SIGHUP);
        std::thread::sleep(Duration::from_millis(300));
    }
    std::fs::remove_file(&cfg).unwrap();
    std::os::unix::fs::symlink(&fifo, &cfg).unwrap();
    b.signal(libc::SIGHUP);
    std::thread::sleep(Duration::from_millis(300));
    let got = udp_flow(&topo, true, 20, 100, Duration::from_millis(2));
    assert!(got.iter().all(Option::is_some), "the link kept forwarding");
    // stop() fails unless SIGINT ends linkem within 10 s with its final counts.
    let v = b.stop();
    assert!(fate(&v, 0, "delivered") >= 20, "{v}");
}

/// CPU time of process `pid` so far (user + system), in seconds.
fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(at) = stat.rfind(')') else {
        return 0.0;
    };
    let f: Vec<&str> = stat[at + 2..].split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // Safety: sysconf reads a constant.
    ticks as f64 / (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64
}

on_both_backends!(peer_deleted_under_a_single_bridge_is_reported_and_ends_it);

/// Issue 34 item 11: host A's namespace (and with it the peer of linkem's
/// IF_A) is deleted under a running bridge. The bridge says which interface
/// went and exits non-zero (its final counts printed), and never spins
/// meanwhile: before, it either exited on the send error or kept running at
/// a full core, silently.
fn peer_deleted_under_a_single_bridge_is_reported_and_ends_it(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology(&format!("lkdg{}", &backend[..1]));
    let mut b = Bridge::start(&topo, backend, &["delay", "5ms"]);
    ping_median_ms(&topo, 5);
    let pid = b.child.id();
    let cpu_before = cpu_s(pid);
    let lost_at = Instant::now();
    let o = Command::new("ip")
        .args(["netns", "del", &topo.ns_a])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The process either ends, or sleeps: over 2 s, well under a core.
    let mut status = None;
    while lost_at.elapsed() < Duration::from_secs(2) {
        if let Some(s) = b.child.try_wait().unwrap() {
            status = Some(s);
            break;
        }
        let cpu = cpu_s(pid) - cpu_before;
        assert!(
            cpu < 0.3,
            "{cpu:.2} s of CPU within {:.1} s of the loss",
            lost_at.elapsed().as_secs_f64()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = match status {
        Some(s) => s,
        None => {
            while b.child.try_wait().unwrap().is_none() {
                assert!(
                    lost_at.elapsed() < Duration::from_secs(10),
                    "linkem still runs 10 s after its interface {} went",
                    topo.emu_a
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            b.child.wait().unwrap()
        }
    };
    let mut stderr = String::new();
    use std::io::Read;
    b.child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    eprintln!(
        "ended {:.2} s after the loss ({status}); stderr: {stderr}",
        lost_at.elapsed().as_secs_f64()
    );
    assert!(!status.success(), "exit status {status}: {stderr}");
    assert!(
        stderr.contains(&format!("interface '{}' is gone", topo.emu_a))
            && stderr.contains("the link stopped"),
        "no line naming the interface lost: {stderr}"
    );
}

on_both_backends!(an_interface_set_down_and_up_again_resumes_forwarding);

/// Issue 34 item 11: IF_A set down, then up again: the link resumes (with
/// AF_PACKET the bridge says both) instead of dying; frames sent towards it
/// meanwhile count as tx-error, and every count still adds up.
fn an_interface_set_down_and_up_again_resumes_forwarding(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology("lkdu");
    let b = Bridge::start(&topo, backend, &["delay", "5ms"]);
    ping_median_ms(&topo, 5);
    let pid = b.child.id();
    for state in ["down", "up"] {
        let o = Command::new("ip")
            .args(["link", "set", &topo.emu_a, state])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let cpu_before = cpu_s(pid);
        let from = Instant::now();
        if state == "down" {
            // Frames for IF_A while it is down: dropped as tx-error, and
            // the ring must not keep them (what came after would be stuck).
            let _ = ping_a_from_b_briefly(&topo);
        }
        std::thread::sleep(Duration::from_millis(1000).saturating_sub(from.elapsed()));
        let cpu = cpu_s(pid) - cpu_before;
        assert!(
            cpu < 0.2,
            "{cpu:.2} s of CPU in 1 s with {} {state}",
            topo.emu_a
        );
    }
    // Pinned neighbours survive the bounce; the hosts' ends never went down.
    // The fastest of 10: a stall of the machine (the CI once saw a median
    // of 29 ms) delays some pings, not the link's resumption.
    let rtt = ping_min_ms(&topo, 10);
    assert!(
        (10.0..15.0).contains(&rtt),
        "fastest RTT {rtt:.3} ms after the bounce"
    );
    let (v, stderr) = b.stop_with_stderr();
    assert!(
        stderr.contains(&format!("{}: interface down", topo.emu_a))
            && stderr.contains(&format!("{}: up again", topo.emu_a)),
        "down and up not reported: {stderr}"
    );
    assert!(fate(&v, 1, "delivered") >= 10, "{v}");
    assert!(
        fate(&v, 1, "tx-error") >= 1,
        "b->a: the pings sent to A while its interface was down: {}",
        v["directions"][1]
    );
}

/// Issue 34 item 11: IF_B's MTU lowered under a running bridge: frames longer
/// than the new MTU count as too-big (before, the kernel dropped them unseen
/// and they counted as delivered); smaller ones still cross.
#[test]
fn a_lowered_mtu_counts_longer_frames_as_too_big() {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology("lkdm");
    let b = Bridge::start(&topo, "packet", &[]);
    ping_median_ms(&topo, 3);
    let o = Command::new("ip")
        .args(["link", "set", &topo.emu_b, "mtu", "1000"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // linkem reads the MTU again at most 250 ms after a change.
    std::thread::sleep(Duration::from_millis(500));
    let dst = topo.addr_b.to_string();
    let big = topo
        .exec_in_a(&[
            "ping", "-c", "3", "-i", "0.2", "-W", "1", "-s", "1200", &dst,
        ])
        .unwrap();
    let small = topo
        .exec_in_a(&["ping", "-c", "3", "-i", "0.2", "-s", "500", &dst])
        .unwrap();
    assert!(
        small.status.success(),
        "500-byte pings after the MTU change: {}",
        String::from_utf8_lossy(&small.stdout)
    );
    let v = b.stop();
    assert!(
        !big.status.success(),
        "1200-byte pings crossed an MTU of 1000"
    );
    assert_eq!(
        fate(&v, 0, "too-big"),
        3,
        "a->b: the three 1242-byte frames count as too-big: {}",
        v["directions"][0]
    );
}
