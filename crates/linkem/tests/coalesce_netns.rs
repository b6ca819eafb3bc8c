//! Coalescing on transmit, live: bulk TCP between two hosts at their stock
//! offloads (checksum offload, TSO/GSO on, as containers get them) through
//! `linkem bridge --backend packet`, which hands the receiving host
//! super-frames. The data must arrive whole and verify (no checksum errors
//! in either host's counters), and `coalesced` must show the super-frames;
//! with no impairment per wire frame (unimpaired, `delay 10ms`), most wire
//! frames cross inside the host's own super-frames, stored whole (`whole`).

#[macro_use]
mod common;

use common::*;
use linkem_io::netns::Topology;
use serde_json::Value;
use std::process::Command;

/// Checksum error counters of the namespace's stack: TCP, UDP and IP header.
fn csum_errors(ns: &str) -> u64 {
    let o = Command::new("ip")
        .args(["netns", "exec", ns, "nstat", "-asz"])
        .args(["TcpInCsumErrors", "UdpInCsumErrors", "IpExtInCsumErrors"])
        .output()
        .expect("nstat runs (package iproute2)");
    assert!(o.status.success(), "nstat: {o:?}");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.contains("CsumErrors"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

/// One TCP run of `secs` s from A to B through the bridge with `args`:
/// (goodput bit/s, bytes received, final counts).
fn bulk_tcp(topo: &Topology, args: &[&str], secs: u32) -> (f64, u64, Value) {
    let b = Bridge::start(topo, "packet", args);
    // Buffers for the bandwidth-delay product of a 10 ms link at a few Gbit/s.
    let v = iperf3(topo, &["-t", &secs.to_string(), "-O", "1", "-w", "8M"]);
    let counts = b.stop();
    let bps = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or_else(|| panic!("iperf3 TCP result: {v}"));
    let bytes = v["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    (bps, bytes, counts)
}

#[test]
fn bulk_tcp_arrives_whole_in_super_frames_with_and_without_delay() {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology_with("lkGso", true);
    // No words is a pass-through, which the kernel path would forward
    // itself (kernel_path_netns): here every frame goes through linkem.
    for words in [&["--kernel-path", "off"][..], &["delay", "10ms"][..]] {
        let errors_before = csum_errors(&topo.ns_a) + csum_errors(&topo.ns_b);
        let (bps, bytes, v) = bulk_tcp(&topo, words, 4);
        let errors = csum_errors(&topo.ns_a) + csum_errors(&topo.ns_b) - errors_before;
        let d = &v["directions"][0];
        let coalesced = d["coalesced"].as_u64().unwrap();
        let supers = d["super_frames"].as_u64().unwrap();
        let whole = d["whole"].as_u64().unwrap();
        let delivered = fate(&v, 0, "delivered");
        eprintln!(
            "{words:?}: TCP {:.0} Mbit/s, {bytes} bytes; a->b delivered {delivered}, \
             {coalesced} of them in {supers} super-frames, {whole} in super-frames that \
             crossed whole; {errors} checksum errors; {v}",
            bps / 1e6
        );
        assert_eq!(errors, 0, "the hosts counted checksum errors: {v}");
        assert!(bytes > 10_000_000, "data arrived: {bytes} bytes");
        assert!(
            supers > 0 && coalesced > supers,
            "super-frames were sent: {v}"
        );
        assert!(
            coalesced <= delivered,
            "coalesced frames are delivered ones: {v}"
        );
        assert_eq!(fate(&v, 0, "too-big"), 0, "{v}");
        // Bulk TCP hands over 64 KiB bursts; the ACKs, the handshake and the
        // tail of a burst cut short by the window are the rest.
        assert!(
            whole * 2 > delivered && whole <= coalesced,
            "{words:?}: of {delivered} wire frames delivered a->b, {coalesced} left in \
             {supers} super-frames and only {whole} crossed whole in the sender's own; \
             the rest left one by one: {v}"
        );
    }
}

#[test]
fn coalesce_off_sends_every_wire_frame_alone() {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology_with("lkGsf", true);
    let errors_before = csum_errors(&topo.ns_b);
    let (_bps, bytes, v) = bulk_tcp(&topo, &["--coalesce", "off"], 2);
    assert_eq!(csum_errors(&topo.ns_b) - errors_before, 0, "{v}");
    assert!(bytes > 1_000_000, "data arrived: {bytes} bytes");
    let d = &v["directions"][0];
    assert_eq!(d["coalesced"], 0, "{v}");
    assert_eq!(d["super_frames"], 0, "{v}");
    assert_eq!(d["whole"], 0, "{v}");
}

#[test]
fn a_bad_coalesce_window_is_refused_by_name() {
    let o = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(["bridge", "nosuch0", "nosuch1", "--coalesce-window", "soon"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--coalesce-window"), "{err}");
}
