//! `linkem probe` never waits without a deadline: a namespace that does not exist, a
//! receiver that cannot start, or a destination whose ARP never resolves end the run
//! promptly with the reason. Needs root for the namespace cases (prints "skipped"
//! otherwise).

use linkem_io::netns::{self, Topology};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `linkem ARGS` and fails the test if it has not ended within `limit`.
fn linkem_within(limit: Duration, args: &[&str]) -> (Output, Duration) {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "linkem {args:?} still running after {limit:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (child.wait_with_output().unwrap(), started.elapsed())
}

fn root() -> bool {
    if netns::is_root() {
        true
    } else {
        eprintln!("skipped: needs root");
        false
    }
}

#[test]
fn a_missing_namespace_on_either_side_fails_at_once_naming_it() {
    if !root() {
        return;
    }
    for side in ["--src-ns", "--dst-ns"] {
        let (o, took) = linkem_within(
            Duration::from_secs(10),
            &["probe", "127.0.0.1", side, "lkFnosuchns", "--packets", "10"],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{side}: {err}");
        assert!(err.contains("lkFnosuchns"), "{side}: {err}");
        assert!(took < Duration::from_secs(3), "{side}: took {took:?}");
    }
}

#[test]
fn a_receiver_that_cannot_bind_ends_the_run_with_the_reason() {
    let busy = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let (o, took) = linkem_within(
        Duration::from_secs(10),
        &["probe", "127.0.0.1", "--port", &port, "--packets", "10"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains(&port), "{err}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

#[test]
fn a_destination_whose_arp_never_resolves_does_not_block_the_sender() {
    if !root() {
        return;
    }
    // Nothing joins the emulator's two ends, so host A's ARP for B is never answered.
    let topo = Topology::two_hosts(&netns::unique_prefix("lkFarp")).unwrap();
    // A neighbour queue longer than the socket's send buffer (as hosts tuned for bursts
    // have): unanswered frames then hold the whole buffer until ARP gives up (3 s), and
    // a blocking send waits that long for every bufferful.
    let o = netns::exec_in(
        &topo.ns_a,
        &[
            "sysctl",
            "-qw",
            &format!("net.ipv4.neigh.{}.unres_qlen_bytes=100000000", topo.host_a),
        ],
    )
    .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dst = topo.addr_b.to_string();
    // 1 s of 1500-byte frames: the socket buffer fills with frames held in the
    // neighbour queue within milliseconds.
    let (o, took) = linkem_within(
        Duration::from_secs(30),
        &[
            "probe",
            &dst,
            "--src-ns",
            &topo.ns_a,
            "--dst-ns",
            &topo.ns_b,
            "--rate",
            "20kpps",
            "--size",
            "1500",
            "--packets",
            "20000",
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    eprintln!("{took:?}\n{out}{err}");
    // The schedule is 1 s and the drain 0.5 s: allow for a loaded machine, not a minute.
    assert!(took < Duration::from_secs(10), "took {took:?}");
    if o.status.success() {
        assert!(out.contains("lost 20000"), "{out}");
    } else {
        assert!(err.contains(&dst), "{err}");
    }
}
