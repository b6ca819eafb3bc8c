//! `linkem replay` end to end: real files in, real files out, through the binary.

use linkem_io::capture::{read_capture_bytes, CaptureWriter};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn linkem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(args)
        .output()
        .expect("linkem runs")
}

fn frame(len: usize, tag: u8) -> Vec<u8> {
    let mut f = vec![tag; len];
    if len >= 14 {
        f[12] = 0x08;
        f[13] = 0x00;
    }
    f
}

/// A nanosecond pcap of Ethernet frames: (timestamp ns, frame).
fn write_capture(path: &Path, packets: &[(u64, Vec<u8>)]) {
    let mut w = CaptureWriter::create(path, 1, 65535).expect("create");
    for (t, f) in packets {
        w.write(*t, f.len() as u32, f).expect("write");
    }
    w.finish().expect("finish");
}

fn read(path: &Path) -> Vec<(u64, u32, Vec<u8>)> {
    let bytes = std::fs::read(path).expect("output exists");
    let (_, packets) = read_capture_bytes("out", &bytes).expect("output is a valid capture");
    packets
        .into_iter()
        .map(|p| (p.ts_ns, p.orig_len, p.data))
        .collect()
}

fn paths(dir: &tempfile::TempDir) -> (PathBuf, PathBuf) {
    (dir.path().join("in.pcap"), dir.path().join("out.pcap"))
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

fn synth(path: &Path, packets: u64, size: u32, rate: &str) {
    let o = linkem(&[
        "synth",
        s(path),
        "--packets",
        &packets.to_string(),
        "--size",
        &size.to_string(),
        "--rate",
        rate,
        "--poisson",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn six_packet_golden_vector_leaves_at_the_model_times() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = paths(&dir);
    let sizes = [20, 20, 1600, 20, 1600, 20];
    let packets: Vec<(u64, Vec<u8>)> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| (0, frame(n, i as u8)))
        .collect();
    write_capture(&input, &packets);
    let o = linkem(&[
        "replay",
        s(&input),
        s(&output),
        "rate",
        "100kbit",
        "delay",
        "5ms",
        "seed",
        "1",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = read(&output);
    let times: Vec<u64> = out.iter().map(|p| p.0).collect();
    assert_eq!(
        times,
        [
            6_600_000,
            8_200_000,
            136_200_000,
            137_800_000,
            265_800_000,
            267_400_000
        ]
    );
    for (i, p) in out.iter().enumerate() {
        assert_eq!(p.2, packets[i].1, "frame {i} unchanged");
    }
}

#[test]
fn same_seed_gives_identical_output_and_another_seed_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = paths(&dir);
    synth(&input, 3000, 200, "20mbit");
    let run = |seed: &str, out: &Path| {
        let o = linkem(&[
            "replay",
            s(&input),
            s(out),
            "rate",
            "10mbit",
            "delay",
            "10ms",
            "3ms",
            "loss",
            "5%",
            "duplicate",
            "1%",
            "corrupt",
            "1%",
            "seed",
            seed,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::read(out).unwrap()
    };
    let a = run("7", &output);
    let b = run("7", &dir.path().join("b.pcap"));
    let c = run("8", &dir.path().join("c.pcap"));
    assert_eq!(a, b, "same seed, same bytes");
    assert_ne!(a, c, "another seed, other losses");
}

#[test]
fn stats_json_counts_add_up_and_events_have_one_line_per_packet() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = paths(&dir);
    synth(&input, 2000, 1000, "20mbit");
    let events = dir.path().join("events.tsv");
    let o = linkem(&[
        "replay",
        s(&input),
        s(&output),
        "--stats",
        "json",
        "--events",
        s(&events),
        "rate",
        "8mbit",
        "queue",
        "20",
        "delay",
        "5ms",
        "loss",
        "2%",
        "duplicate",
        "3%",
        "policer",
        "30mbit",
        "burst",
        "3kB",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    let fates = &v["fates"];
    let sum: u64 = ["delivered", "queue-full", "loss", "policed"]
        .iter()
        .map(|f| fates[f].as_u64().unwrap())
        .sum();
    assert_eq!(v["arrived"].as_u64(), Some(2000));
    assert_eq!(sum, 2000);
    assert!(
        fates["queue-full"].as_u64().unwrap() > 0,
        "8 Mbit/s cannot carry 20 Mbit/s: {v}"
    );
    assert!(fates["loss"].as_u64().unwrap() > 0);
    let written = fates["delivered"].as_u64().unwrap() + v["duplicated"].as_u64().unwrap();
    assert_eq!(v["written"].as_u64(), Some(written));
    assert_eq!(read(&output).len() as u64, written);
    assert!(v["seed"].as_u64().is_some());

    let text = std::fs::read_to_string(&events).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(lines.len(), 2000);
    let queue_full = lines
        .iter()
        .filter(|l| l.split('\t').nth(3) == Some("queue-full"))
        .count() as u64;
    assert_eq!(queue_full, fates["queue-full"].as_u64().unwrap());
    // A queue-full packet found the queue at its limit of 20.
    let l = lines.iter().find(|l| l.contains("queue-full")).unwrap();
    assert_eq!(l.split('\t').nth(5), Some("20"), "{l}");
}

#[test]
fn output_is_in_release_order_with_duplicates_right_after_and_one_bit_corrupted() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = paths(&dir);
    let packets: Vec<(u64, Vec<u8>)> = (0..200)
        .map(|i| (i * 1_000_000, frame(100, i as u8)))
        .collect();
    write_capture(&input, &packets);
    let o = linkem(&[
        "replay",
        s(&input),
        s(&output),
        "delay",
        "10ms",
        "8ms",
        "reorder",
        "allow",
        "duplicate",
        "100%",
        "seed",
        "3",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = read(&output);
    assert_eq!(out.len(), 400);
    assert!(out.windows(2).all(|w| w[0].0 <= w[1].0), "release order");
    let reordered = out.windows(2).filter(|w| w[1].2[0] < w[0].2[0]).count();
    assert!(
        reordered > 0,
        "8 ms jitter on 1 ms spacing with 'reorder allow' reorders"
    );
    for pair in out.chunks(2) {
        assert_eq!(pair[0], pair[1], "a duplicate follows its original");
    }

    let o = linkem(&[
        "replay",
        s(&input),
        s(&output),
        "corrupt",
        "100%",
        "seed",
        "3",
    ]);
    assert!(o.status.success());
    let out = read(&output);
    for (i, p) in out.iter().enumerate() {
        let flipped: u32 =
            p.2.iter()
                .zip(&packets[i].1)
                .map(|(a, b)| (a ^ b).count_ones())
                .sum();
        assert_eq!(flipped, 1, "packet {i}");
    }
}

#[test]
fn toml_config_and_words_combine() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = paths(&dir);
    write_capture(&input, &[(0, frame(125, 1)), (0, frame(125, 2))]);
    let cfg = dir.path().join("link.toml");
    std::fs::write(&cfg, "rate = \"1mbit\"\ndelay = \"1ms\"\nseed = 1\n").unwrap();
    let o = linkem(&[
        "replay",
        s(&input),
        s(&output),
        "--config",
        s(&cfg),
        "delay",
        "2ms",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // 125 bytes at 1 Mbit/s = 1 ms each; the command line's delay 2 ms wins.
    assert_eq!(
        read(&output).iter().map(|p| p.0).collect::<Vec<_>>(),
        [3_000_000, 4_000_000]
    );
}

#[test]
fn microsecond_pcap_and_pcapng_inputs_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out.pcap");
    // Classic pcap, microsecond magic, one 60-byte frame at t = 1.000002 s.
    let mut us = Vec::new();
    us.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    us.extend_from_slice(&2u16.to_le_bytes());
    us.extend_from_slice(&4u16.to_le_bytes());
    us.extend_from_slice(&[0; 8]);
    us.extend_from_slice(&65535u32.to_le_bytes());
    us.extend_from_slice(&1u32.to_le_bytes());
    us.extend_from_slice(&1u32.to_le_bytes());
    us.extend_from_slice(&2u32.to_le_bytes());
    us.extend_from_slice(&60u32.to_le_bytes());
    us.extend_from_slice(&60u32.to_le_bytes());
    us.extend_from_slice(&frame(60, 9));
    let input = dir.path().join("us.pcap");
    std::fs::write(&input, &us).unwrap();
    let o = linkem(&["replay", s(&input), s(&output), "delay", "1ms", "seed", "1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(read(&output)[0].0, 1_001_002_000);

    // pcapng: section header, interface (Ethernet, default µs resolution), one EPB.
    let mut ng = Vec::new();
    let block = |ng: &mut Vec<u8>, kind: u32, body: &[u8]| {
        let len = 12 + body.len() as u32;
        ng.extend_from_slice(&kind.to_le_bytes());
        ng.extend_from_slice(&len.to_le_bytes());
        ng.extend_from_slice(body);
        ng.extend_from_slice(&len.to_le_bytes());
    };
    let mut shb = Vec::new();
    shb.extend_from_slice(&0x1a2b_3c4du32.to_le_bytes());
    shb.extend_from_slice(&1u16.to_le_bytes());
    shb.extend_from_slice(&0u16.to_le_bytes());
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    block(&mut ng, 0x0a0d_0d0a, &shb);
    let mut idb = Vec::new();
    idb.extend_from_slice(&1u16.to_le_bytes());
    idb.extend_from_slice(&0u16.to_le_bytes());
    idb.extend_from_slice(&65535u32.to_le_bytes());
    block(&mut ng, 1, &idb);
    let ts_us: u64 = 5_000_000;
    let mut epb = Vec::new();
    epb.extend_from_slice(&0u32.to_le_bytes());
    epb.extend_from_slice(&((ts_us >> 32) as u32).to_le_bytes());
    epb.extend_from_slice(&(ts_us as u32).to_le_bytes());
    epb.extend_from_slice(&60u32.to_le_bytes());
    epb.extend_from_slice(&60u32.to_le_bytes());
    epb.extend_from_slice(&frame(60, 4));
    block(&mut ng, 6, &epb);
    let input = dir.path().join("in.pcapng");
    std::fs::write(&input, &ng).unwrap();
    let o = linkem(&["replay", s(&input), s(&output), "delay", "1ms", "seed", "1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = read(&output);
    assert_eq!((out[0].0, out[0].2.clone()), (5_001_000_000, frame(60, 4)));
}

#[test]
fn bad_input_is_named_and_leaves_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = paths(&dir);

    let o = linkem(&["replay", "/nonexistent/in.pcap", s(&output), "delay", "1ms"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/in.pcap"));

    std::fs::write(&input, b"this is not a capture file at all").unwrap();
    let o = linkem(&["replay", s(&input), s(&output), "delay", "1ms"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("in.pcap"), "{err}");
    assert!(!output.exists());

    // A capture cut in the middle of its third record.
    write_capture(
        &input,
        &[(0, frame(100, 1)), (10, frame(100, 2)), (20, frame(100, 3))],
    );
    let bytes = std::fs::read(&input).unwrap();
    std::fs::write(&input, &bytes[..bytes.len() - 30]).unwrap();
    let o = linkem(&["replay", s(&input), s(&output), "delay", "1ms"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("offset"), "names the offset: {err}");
    assert!(!output.exists(), "no half-written output");

    synth(&input, 10, 100, "1mbit");
    let o = linkem(&["replay", s(&input), s(&output), "delay", "10mbps"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("10mbps"), "{err}");
    let o = linkem(&["replay", s(&input), s(&output), "rate", "10mbps"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("tc reads") && err.contains("ipfw"), "{err}");
    assert!(!output.exists());
}

#[test]
fn unseeded_runs_print_their_seed_and_repeat_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = paths(&dir);
    synth(&input, 500, 100, "1mbit");
    let o = linkem(&[
        "replay",
        s(&input),
        s(&output),
        "loss",
        "30%",
        "--stats",
        "json",
    ]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let seed = v["seed"].as_u64().unwrap().to_string();
    assert!(String::from_utf8_lossy(&o.stderr).contains(&seed));
    let first = std::fs::read(&output).unwrap();
    let o = linkem(&[
        "replay",
        s(&input),
        s(&output),
        "loss",
        "30%",
        "seed",
        &seed,
    ]);
    assert!(o.status.success());
    assert_eq!(std::fs::read(&output).unwrap(), first);
}
