//! The kernel path (`--kernel-path`, on by default): a direction whose link
//! is a pass-through is forwarded by the kernel, in the sender's context,
//! and counted as delivered (`kernel_forwarded`); a link that does something,
//! a tap that must see each frame, or `--kernel-path off` takes every frame
//! through linkem; a change switches between the two without losing or
//! reordering a packet. Stock hosts (offloads on), on each backend. Needs
//! root (prints "skipped" otherwise).

#[macro_use]
mod common;

use common::ctl::{ctl, CtlBridge};
use common::*;
use linkem_io::netns::Topology;
use serde_json::Value;

fn kernel_forwarded(stats: &Value, dir: usize) -> u64 {
    stats["directions"][dir]["kernel_forwarded"]
        .as_u64()
        .expect("kernel_forwarded is reported")
}

/// The tc programs on linkem's two interfaces, as the kernel lists them.
fn tc_programs(topo: &Topology) -> [u32; 2] {
    [&topo.emu_a, &topo.emu_b].map(|name| {
        let index = linkem_io::ifaces::lookup(name).expect("interface").index;
        linkem_io::bpf::tcx_ingress_programs(index).expect("BPF_PROG_QUERY")
    })
}

/// Where the pings' frames went, for a failure message.
fn counts(stats: &Value) -> String {
    (0..2)
        .map(|d| {
            let s = &stats["directions"][d];
            format!(
                "{}: received {} delivered {} kernel_forwarded {} in_flight {} rx_wakeups {}",
                s["direction"],
                s["received"],
                s["fates"]["delivered"],
                s["kernel_forwarded"],
                s["in_flight"],
                s["rx_wakeups"]
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A plain bridge (no words: a pass-through both ways) is forwarded by the
/// kernel: every ping answered, every frame counted delivered and
/// kernel-forwarded, the stage hardly woken. Its twin with
/// `--kernel-path off` takes every frame through linkem.
fn a_pass_through_is_forwarded_by_the_kernel(backend: &str) {
    if skip() {
        return;
    }
    let _serial = serial();
    let topo = topology_with("kp", true);
    let pings = 40u64;
    let mut runs = Vec::new();
    for extra in [&[][..], &["--kernel-path", "off"][..]] {
        let b = Bridge::start(&topo, backend, extra);
        let rtts = ping_rtts_ms_to(&topo, topo.addr_b, pings as u32);
        let programs = tc_programs(&topo);
        let stats = b.stop();
        let want = if extra.is_empty() { 1 } else { 0 };
        assert_eq!(programs, [want; 2], "{backend} {extra:?}: tc programs");
        runs.push((extra, rtts, stats));
    }
    assert_eq!(tc_programs(&topo), [0; 2], "stopped, linkem left none");
    for (extra, rtts, stats) in &runs {
        let what = format!("{backend} {extra:?}: {}", counts(stats));
        assert_eq!(rtts.len() as u64, pings, "every ping answered: {what}");
        for d in 0..2 {
            let s = &stats["directions"][d];
            assert_counts_add_up(s, &what);
            assert!(fate(stats, d, "delivered") >= pings, "{what}");
            assert_eq!(s["in_flight"], 0, "{what}");
        }
        if extra.is_empty() {
            for d in 0..2 {
                // Every ping; what linkem took itself came before it switched
                // the kernel path on (the hosts' own IPv6 chatter at start).
                assert!(kernel_forwarded(stats, d) >= pings, "{what}");
                assert!(
                    fate(stats, d, "delivered") - kernel_forwarded(stats, d) <= 4,
                    "the kernel forwarded all but a few frames at start: {what}"
                );
            }
            // The stage woke for its own start and stop, not per packet.
            let wakeups = stats["directions"][0]["rx_wakeups"].as_u64().unwrap();
            assert!(wakeups < pings / 2, "{wakeups} wake-ups: {what}");
        } else {
            for d in 0..2 {
                assert_eq!(kernel_forwarded(stats, d), 0, "{what}");
            }
        }
    }
}

/// A tap must see every frame: with `--events` nothing bypasses linkem, and
/// every ping is in the events file.
fn a_tap_keeps_every_frame_in_linkem(backend: &str) {
    if skip() {
        return;
    }
    let _serial = serial();
    let topo = topology_with("kt", true);
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let events_arg = events.to_str().unwrap();
    let b = Bridge::start(&topo, backend, &["--events", events_arg]);
    let rtts = ping_rtts_ms_to(&topo, topo.addr_b, 10);
    let stats = b.stop();
    let what = counts(&stats);
    assert_eq!(rtts.len(), 10, "{what}");
    for d in 0..2 {
        assert_eq!(kernel_forwarded(&stats, d), 0, "{what}");
        assert!(fate(&stats, d, "delivered") >= 10, "{what}");
    }
    let lines = event_lines(&events);
    assert!(lines.len() >= 20, "{} event lines: {what}", lines.len());
}

/// A link that does something from its start never has a tc program on
/// its interfaces (no lookup in tc per frame, no detach at its stop); a
/// change to `delay 0` attaches it.
fn a_delay_from_the_start_attaches_no_program(backend: &str) {
    if skip() {
        return;
    }
    let _serial = serial();
    let topo = topology_with("kd", true);
    let b = Bridge::start(&topo, backend, &["delay", "1ms"]);
    let rtts = ping_rtts_ms_to(&topo, topo.addr_b, 5);
    let programs = tc_programs(&topo);
    let stats = b.stop();
    assert_eq!(rtts.len(), 5, "{}", counts(&stats));
    assert_eq!(programs, [0; 2], "a delay from the start: no tc program");
    assert_eq!(kernel_forwarded(&stats, 0), 0, "{}", counts(&stats));
}

on_both_backends!(
    a_pass_through_is_forwarded_by_the_kernel,
    a_tap_keeps_every_frame_in_linkem,
    a_delay_from_the_start_attaches_no_program
);

/// `linkem ctl` changes switch a direction between the kernel and linkem: a
/// delay takes every frame back at once (the RTT follows from the first
/// ping after the reply), and `delay 0` hands it to the kernel again once
/// nothing is in flight. Every packet is counted once, none lost.
#[test]
fn a_change_switches_between_the_kernel_and_linkem() {
    if skip() {
        return;
    }
    let _serial = serial();
    let topo = topology_with("kc", true);
    let bridge = CtlBridge::start(&topo, &[]);
    let mut c = bridge.client();
    let stats = |c: &mut linkem_ctl::Client| c.request_json("stats").unwrap();
    let rtts = |n| common::ctl::ping_rtts_to(&topo, topo.addr_b, n);

    // RTTs: medians and counts, so that a stall of this VM fails nothing; the
    // delayed ones are all 20 ms or more (nothing may bypass the delay).
    let quick =
        |r: &[f64]| median(r.to_vec()) < 5.0 && r.iter().filter(|x| **x >= 19.5).count() <= 2;
    let first = rtts(10);
    let s1 = stats(&mut c);
    assert!(quick(&first), "pass-through: {first:?}");
    assert!(kernel_forwarded(&s1, 0) >= 10, "{}", counts(&s1));

    let o = ctl(&bridge.socket, &["link", "both", "delay", "10ms"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Counted once the change is applied (ctl returns then): a frame of the
    // hosts' own (IPv6 neighbour and multicast chatter) between the first
    // count and the change went through the kernel, as it should.
    let applied = stats(&mut c);
    let delayed = rtts(10);
    let s2 = stats(&mut c);
    assert!(
        delayed.iter().all(|r| *r >= 19.5) && median(delayed.clone()) < 30.0,
        "delay 10ms both ways: {delayed:?}; {}",
        counts(&s2)
    );
    assert_eq!(
        kernel_forwarded(&s2, 0),
        kernel_forwarded(&applied, 0),
        "nothing bypassed the delay once it applied: {} (when it applied: {})",
        counts(&s2),
        counts(&applied)
    );

    let o = ctl(&bridge.socket, &["link", "both", "delay", "0"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The switch waits for the delayed packets to leave (and their counts to
    // be published), then the kernel takes over.
    let again = rtts(40);
    let s3 = stats(&mut c);
    assert_eq!(
        tc_programs(&topo),
        [1; 2],
        "one tc program each, attached once"
    );
    assert!(quick(&again), "delay 0 again: {again:?}");
    assert!(
        kernel_forwarded(&s3, 0) >= kernel_forwarded(&s2, 0) + 10,
        "the kernel took over again: before {}, now {}",
        counts(&s2),
        counts(&s3)
    );
    drop(c);
    let (stats, _, _) = bridge.finish();
    for d in 0..2 {
        let s = &stats["directions"][d];
        assert_counts_add_up(s, &counts(&stats));
        assert!(fate(&stats, d, "delivered") >= 60, "{}", counts(&stats));
        assert_eq!(s["in_flight"], 0, "{}", counts(&stats));
    }
}

on_both_backends!(an_egress_set_down_takes_its_frames_back_from_the_kernel);

/// The other interface set down under a pass-through (AF_PACKET's socket
/// hears of it, AF_XDP's port from the kernel's link notifications): frames
/// towards it come back to linkem and count `tx-error`, not forwarded by the
/// kernel into a down interface and counted delivered; once it is up the
/// kernel takes over again. The twin of bridge_netns's
/// `an_interface_set_down_and_up_again_resumes_forwarding` (`delay 5ms`).
fn an_egress_set_down_takes_its_frames_back_from_the_kernel(backend: &str) {
    if skip() {
        return;
    }
    let _serial = serial();
    let topo = topology_with(&format!("kdn{}", &backend[..1]), true);
    let b = Bridge::start(&topo, backend, &[]);
    let set = |state: &str| {
        let o = std::process::Command::new("ip")
            .args(["link", "set", &topo.emu_a, state])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        // linkem hears of it at once, and asks again every 200 ms while down.
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    assert_eq!(ping_rtts_ms_to(&topo, topo.addr_b, 5).len(), 5);
    set("down");
    let lost = ping_a_from_b_briefly(&topo);
    assert!(!lost.status.success(), "pings crossed a down interface");
    set("up");
    let back = ping_rtts_ms_to(&topo, topo.addr_b, 10);
    let stats = b.stop();
    let what = counts(&stats);
    assert_eq!(back.len(), 10, "up again, every ping answered: {what}");
    assert!(
        fate(&stats, 1, "tx-error") >= 5,
        "b->a while A was down: {what}"
    );
    // 5 + 10 replies a->b, forwarded by the kernel before and after.
    assert!(kernel_forwarded(&stats, 1) >= 15, "{what}");
    for d in 0..2 {
        assert_counts_add_up(&stats["directions"][d], &what);
    }
}
