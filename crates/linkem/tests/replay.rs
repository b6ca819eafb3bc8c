//! `linkem replay` end to end: real files in, real files out, through the binary.

mod replay_outputs;

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
    let lines = replay_outputs::rows(&text);
    assert_eq!(lines.len(), 2000);
    let queue_full = lines
        .iter()
        .filter(|l| l.get("fate") == "queue-full")
        .count() as u64;
    assert_eq!(queue_full, fates["queue-full"].as_u64().unwrap());
    // A queue-full packet found the queue at its limit of 20.
    let l = lines
        .iter()
        .find(|l| l.get("fate") == "queue-full")
        .unwrap();
    assert_eq!(l.get("queue_packets"), "20", "{}", l.line());
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

fn ok(o: &Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(s(path)).unwrap();
    // Safety: mkfifo reads a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

fn temp_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

#[test]
fn dev_null_as_output_and_events_stays_a_device() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let (input, _) = paths(&dir);
    synth(&input, 50, 100, "1mbit");
    ok(&linkem(&[
        "replay",
        s(&input),
        "/dev/null",
        "delay",
        "1ms",
        "--events",
        "/dev/null",
        "--stats",
        "json",
    ]));
    let m = std::fs::metadata("/dev/null").unwrap();
    assert!(
        m.file_type().is_char_device(),
        "/dev/null is still a device"
    );
}

#[test]
fn fifo_output_is_written_through_not_replaced() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let (input, _) = paths(&dir);
    synth(&input, 20, 100, "1mbit");
    let fifo = dir.path().join("out.fifo");
    mkfifo(&fifo);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    ok(&linkem(&["replay", s(&input), s(&fifo), "delay", "1ms"]));
    let bytes = reader.join().unwrap();
    let (_, packets) = read_capture_bytes("fifo", &bytes).unwrap();
    assert_eq!(packets.len(), 20);
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    assert!(temp_files(dir.path()).is_empty());
}

#[test]
fn symlinked_output_replaces_the_target_and_keeps_the_link_and_the_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (input, _) = paths(&dir);
    synth(&input, 20, 100, "1mbit");
    let real = dir.path().join("real.pcap");
    std::fs::write(&real, b"old").unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).unwrap();
    let link = dir.path().join("link.pcap");
    std::os::unix::fs::symlink("real.pcap", &link).unwrap();
    ok(&linkem(&["replay", s(&input), s(&link), "delay", "1ms"]));
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(read(&real).len(), 20);
    let mode = std::fs::metadata(&real).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o640);
}

#[test]
fn an_output_that_is_an_input_is_refused_and_the_input_survives() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = paths(&dir);
    synth(&input, 20, 100, "1mbit");
    let original = std::fs::read(&input).unwrap();
    let hard = dir.path().join("hard.pcap");
    std::fs::hard_link(&input, &hard).unwrap();
    let soft = dir.path().join("soft.pcap");
    std::os::unix::fs::symlink(&input, &soft).unwrap();
    std::fs::write(&output, b"previous output").unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec![s(&input), s(&input)],
        vec![s(&input), s(&hard)],
        vec![s(&input), s(&soft)],
        vec![s(&input), s(&output), "--events", s(&input)],
        vec![s(&input), s(&output), "--events", s(&output)],
    ];
    for case in cases {
        let mut args = vec!["replay"];
        args.extend(&case);
        args.extend(["delay", "1ms"]);
        let o = linkem(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{case:?} was accepted");
        assert!(err.contains("same file"), "{case:?}: {err}");
        assert_eq!(std::fs::read(&input).unwrap(), original, "{case:?}");
        assert_eq!(std::fs::read(&output).unwrap(), b"previous output");
    }
    // The same new name for the capture and the events.
    let fresh = dir.path().join("fresh.out");
    let o = linkem(&[
        "replay",
        s(&input),
        s(&fresh),
        "--events",
        s(&fresh),
        "delay",
        "1ms",
    ]);
    assert!(!o.status.success(), "the events would replace the capture");
    assert!(String::from_utf8_lossy(&o.stderr).contains("same file"));
    assert!(!fresh.exists());
    assert!(temp_files(dir.path()).is_empty());
}

#[test]
fn a_signal_removes_the_temporary_file_and_exits_128_plus_its_number() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = paths(&dir);
    // Large enough that the replay is still running when the signal comes.
    synth(&input, 1_000_000, 200, "1gbit");
    for (sig, code) in [(libc::SIGINT, 130), (libc::SIGTERM, 143)] {
        let events = dir.path().join("events.txt");
        let child = Command::new(env!("CARGO_BIN_EXE_linkem"))
            .args(["replay", s(&input), s(&output), "delay", "1ms", "seed", "1"])
            .args(["--events", s(&events), "--stats", "none"])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Signal once the temporary outputs exist (the replay is under way).
        let t = std::time::Instant::now();
        while temp_files(dir.path()).len() < 2 {
            assert!(t.elapsed().as_secs() < 20, "no temporary file appeared");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Safety: kill with the pid of our own child.
        unsafe { libc::kill(child.id() as i32, sig) };
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{err}");
        assert!(err.contains("interrupted"), "{err}");
        assert!(
            temp_files(dir.path()).is_empty(),
            "{:?}",
            temp_files(dir.path())
        );
        assert!(!output.exists() && !events.exists());
    }
}

#[test]
fn config_that_is_not_toml_is_never_echoed() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = paths(&dir);
    synth(&input, 5, 100, "1mbit");
    let shadow = dir.path().join("shadow");
    std::fs::write(
        &shadow,
        "root:$6$Zx9s3cr3tHASH$abcdefgh:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n",
    )
    .unwrap();
    let o = linkem(&["replay", s(&input), s(&output), "--config", s(&shadow)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("line 1"), "{err}");
    assert!(
        !err.contains("s3cr3t") && !err.contains("root:"),
        "echoes the file: {err}"
    );
}

#[test]
fn configs_and_tables_must_be_small_regular_files_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = paths(&dir);
    synth(&input, 5, 100, "1mbit");
    let fifo = dir.path().join("table.fifo");
    mkfifo(&fifo);
    let big = dir.path().join("big.dist");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(17 << 20)
        .unwrap();
    let started = std::time::Instant::now();
    for (args, expect) in [
        (vec!["--config", "/dev/zero"], "not a regular file"),
        (vec!["--config", s(&fifo)], "not a regular file"),
        (vec!["--config", s(dir.path())], "not a regular file"),
        (
            vec!["delay", "1ms", "1ms", "distribution", "/dev/zero"],
            "not a regular file",
        ),
        (
            vec!["delay", "1ms", "1ms", "distribution", s(&fifo)],
            "not a regular file",
        ),
        (
            vec!["delay", "1ms", "1ms", "distribution", s(&big)],
            "limit",
        ),
    ] {
        let mut all = vec!["replay", s(&input), s(&output)];
        all.extend(&args);
        let o = linkem(&all);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains(expect),
            "{args:?}: {err}"
        );
    }
    assert!(
        started.elapsed().as_secs() < 30,
        "no read blocked or ran away"
    );
    assert!(!output.exists());
}

/// A capture whose timestamps go back: each such packet is taken as
/// arriving with the latest earlier one (delivered after it), and replay
/// warns once with the count and the first packet, with and without rules.
#[test]
fn backwards_timestamps_are_counted_and_the_first_named() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = paths(&dir);
    let ms = 1_000_000u64;
    let packets: Vec<(u64, Vec<u8>)> = [10, 20, 15, 30, 12]
        .iter()
        .enumerate()
        .map(|(i, t)| (t * ms, frame(100, i as u8)))
        .collect();
    write_capture(&input, &packets);
    let o = linkem(&["replay", s(&input), s(&output), "delay", "5ms", "seed", "1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("2 packets with a timestamp earlier than a packet before")
            && err.contains("first: packet 3, 0.005000000 s back"),
        "{err}"
    );
    // Packet 3 (15 ms) leaves as if it came with packet 2 (20 ms): 25 ms.
    let out = read(&output);
    let at = out.iter().find(|(_, _, f)| f[0] == 2).map(|(t, _, _)| *t);
    assert_eq!(
        at,
        Some(25 * ms),
        "packet 3's release; out: {:?}",
        out.iter().map(|p| p.0).collect::<Vec<_>>()
    );
    let rules = dir.path().join("r.rules");
    std::fs::write(&rules, "pipe 1 config delay 5ms\nadd pipe 1 ip\n").unwrap();
    let o = linkem(&[
        "replay",
        s(&input),
        s(&output),
        "--rules",
        s(&rules),
        "seed",
        "1",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("first: packet 3"), "{err}");
}

/// A distribution table named in the link words is an input like the capture:
/// an output (the capture or `--events`) naming it, by its name, a hard link or
/// a symbolic link, is refused before anything is written, and the error names
/// both uses. `/dev/null` stays allowed, several times over.
#[test]
fn an_output_that_is_a_distribution_table_the_words_read_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = paths(&dir);
    synth(&input, 20, 100, "1mbit");
    let table = dir.path().join("my.dist");
    let text = "# a netem table\n-100 0 100\n-50 50 0\n";
    std::fs::write(&table, text).unwrap();
    let hard = dir.path().join("hard.dist");
    std::fs::hard_link(&table, &hard).unwrap();
    let soft = dir.path().join("soft.dist");
    std::os::unix::fs::symlink(&table, &soft).unwrap();
    let words = ["delay", "10ms", "1ms", "distribution", s(&table)];
    for out in [&table, &hard, &soft] {
        for events in [false, true] {
            let mut args = vec!["replay", s(&input)];
            if events {
                args.extend([s(&output), "--events", s(out)]);
            } else {
                args.push(s(out));
            }
            args.extend(words);
            let o = linkem(&args);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(!o.status.success(), "{args:?} was accepted");
            assert!(
                err.contains("same file")
                    && err.contains("distribution table named in the link words")
                    && err.contains(if events { "--events" } else { "output capture" }),
                "{args:?}: names both uses: {err}"
            );
            assert_eq!(std::fs::read_to_string(&table).unwrap(), text, "{args:?}");
            assert!(!output.exists(), "{args:?}: nothing written");
        }
    }
    assert!(temp_files(dir.path()).is_empty());
    // The words read the table through a link: still the same file.
    let o = linkem(&[
        "replay",
        s(&input),
        s(&table),
        "delay",
        "10ms",
        "1ms",
        "distribution",
        s(&soft),
    ]);
    assert!(!o.status.success());
    assert_eq!(std::fs::read_to_string(&table).unwrap(), text);
    // /dev/null as both outputs, with the same table: fine.
    let o = linkem(&[
        "replay",
        s(&input),
        "/dev/null",
        "--events",
        "/dev/null",
        "--stats",
        "none",
        "delay",
        "10ms",
        "1ms",
        "distribution",
        s(&table),
    ]);
    ok(&o);
}

/// Link words replay exactly as a bare `Link` decides (side a's: direction 0
/// of the seed), packet by packet: every `--events` line, and every frame
/// written in (release, decision) order with its flipped bit and its copy.
/// Stamps tie, burst, and once go back in time.
#[test]
fn link_words_release_exactly_as_a_bare_link() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = paths(&dir);
    let events = dir.path().join("events.tsv");
    let mut packets = Vec::new();
    let mut t = 1_000_000u64;
    for i in 0..3000u64 {
        t = match i {
            1500 => t - 2_000_000,
            _ => t + (i * 7919) % 300_000,
        };
        packets.push((t, frame(60 + (i * 37 % 1400) as usize, i as u8)));
    }
    write_capture(&input, &packets);
    let words = "rate 20mbit queue 30 delay 4ms 2ms loss 2% duplicate 3% corrupt 3%";
    let mut args = vec!["replay", s(&input), s(&output), "--events", s(&events)];
    args.extend(words.split(' '));
    args.extend(["seed", "11"]);
    let o = linkem(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let spec = linkem_core::LinkSpec::parse(words).unwrap();
    let mut link = linkem_core::Link::new(spec.link, 11, 0);
    let rows = replay_outputs::rows(&std::fs::read_to_string(&events).unwrap());
    assert_eq!(rows.len(), packets.len());
    let mut want = Vec::new();
    for (i, ((t, f), row)) in packets.iter().zip(&rows).enumerate() {
        let meta = linkem_core::PacketMeta {
            len_bytes: f.len() as u32,
        };
        let v = link.on_arrival(*t, meta);
        let delivered = v.fate == linkem_core::Fate::Delivered;
        let line = row.line();
        assert_eq!(row.num("index"), i as u64, "{line}");
        assert_eq!(row.num("arrival_ns"), *t, "{line}");
        assert_eq!(row.get("fate"), v.fate.name(), "{line}");
        assert_eq!(
            row.num("queue_packets"),
            u64::from(v.queue_packets),
            "{line}"
        );
        assert_eq!(row.num("queue_bytes"), v.queue_bytes, "{line}");
        assert_eq!(row.get("side"), "a", "{line}");
        assert_eq!(row.get("rule"), "-", "{line}");
        if !delivered {
            assert_eq!(row.get("release_ns"), "-", "{line}");
            continue;
        }
        assert_eq!(row.num("release_ns"), v.release_ns, "{line}");
        assert_eq!(row.num("copies"), 1 + u64::from(v.duplicate), "{line}");
        let bit = v.corrupt_bit.map_or("-".to_string(), |b| b.to_string());
        assert_eq!(row.get("corrupt_bits"), bit, "{line}");
        let mut data = f.clone();
        if let Some(b) = v.corrupt_bit {
            data[(b / 8) as usize] ^= 0x80 >> (b % 8);
        }
        want.push((v.release_ns, data));
        if v.duplicate {
            want.push((v.release_ns, f.clone()));
        }
    }
    // Stable: equal release times stay in decision order.
    want.sort_by_key(|w| w.0);
    let out = read(&output);
    assert_eq!(out.len(), want.len());
    for (i, (p, w)) in out.iter().zip(&want).enumerate() {
        assert_eq!((p.0, &p.2), (w.0, &w.1), "frame {i} written");
    }
    let copies = want.len() - rows.iter().filter(|r| r.get("fate") == "delivered").count();
    let corrupt = rows.iter().filter(|r| r.get("corrupt_bits") != "-").count();
    assert!(copies > 0 && corrupt > 0, "the words duplicate and corrupt");
}

/// Link words: `--stats text` and the frames written are those of the
/// golden files (testdata/replay/plain.*, made before replay had one driver
/// for links and rules).
#[test]
fn plain_replay_matches_the_golden_files() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| replay_outputs::linkem_in(dir.path(), args);
    replay_outputs::synth_golden_input(dir.path());
    let stats = run(&[
        "replay",
        "in.pcap",
        "outp.pcap",
        "--stats",
        "text",
        "rate",
        "3mbit",
        "queue",
        "10",
        "delay",
        "5ms",
        "1ms",
        "loss",
        "2%",
        "duplicate",
        "3%",
        "corrupt",
        "3%",
        "seed",
        "9",
    ]);
    assert_eq!(stats, replay_outputs::golden("plain.stats.txt"));
    let out = replay_outputs::capture_digest(&dir.path().join("outp.pcap"));
    assert_eq!(out, replay_outputs::golden("plain.out.tsv"));
}

/// An Ethernet + IPv4 + UDP frame of `len` bytes from 10.0.0.1:`sport` to
/// 10.0.0.2:9 (checksums zero: nothing here reads them).
fn udp_frame(len: usize, sport: u16) -> Vec<u8> {
    let mut f = vec![0u8; len.max(42)];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&9u16.to_be_bytes());
    f[38..40].copy_from_slice(&((len - 34) as u16).to_be_bytes());
    f
}

/// Writes a recording with the recording module's own writer: frames of
/// both sides every 1 ms from 1 ms, and `changes` (instant, change) applied
/// after the frames stamped before them.
fn record(
    dir: &Path,
    start: linkem_io::recording::Start,
    frames: u64,
    changes: &[(u64, linkem_io::recording::RecordedChange)],
) {
    use linkem_io::recording::{Recorder, RecordingMeta};
    let meta = RecordingMeta::new(3, 1, 65535, ["veth-a".into(), "veth-b".into()], start);
    let mut rec = Recorder::create(dir, meta, u64::MAX).unwrap();
    let mut pending = changes.iter().peekable();
    for i in 0..frames {
        let t = (i + 1) * 1_000_000;
        while let Some((at, c)) = pending.next_if(|(at, _)| *at <= t) {
            rec.change(*at, c.clone());
        }
        let f = udp_frame(100, 5000 + i as u16);
        rec.frame((i % 2) as usize, t, f.len() as u32, &f);
    }
    let summary = rec.finish().unwrap();
    assert!(summary.complete, "{summary:?}");
}

/// Runs `linkem replay DIR OUT --events EV` and gives the events by column.
fn replay_recording(dir: &Path, extra: &[&str]) -> (Output, Vec<replay_outputs::Row>) {
    let out = dir.with_extension("pcap");
    let events = dir.with_extension("tsv");
    let mut args = vec!["replay", s(dir), s(&out), "--events", s(&events)];
    args.extend_from_slice(extra);
    let o = linkem(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows = replay_outputs::rows(&std::fs::read_to_string(&events).unwrap());
    (o, rows)
}

/// A recording of a plain link (`delay 10ms`) with `link a-to-b delay 1ms`
/// at 10.5 ms: side a's frames (even) are delayed 10 ms up to 10 ms, 1 ms
/// after the change (behind the frames already in flight: a link does not
/// reorder); side b's (odd) 10 ms throughout, each on its own side.
#[test]
fn a_recording_of_a_link_replays_its_frames_and_changes() {
    use linkem_io::recording::{RecordedChange, Start};
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("rec");
    let change = RecordedChange::Lines(vec!["link a-to-b delay 1ms".into()]);
    record(
        &dir,
        Start::Link("delay 10ms".into()),
        20,
        &[(10_500_000, change)],
    );
    let (o, rows) = replay_recording(&dir, &["--stats", "json"]);
    assert_eq!(rows.len(), 20);
    let mut last = [0u64; 2];
    for (i, r) in rows.iter().enumerate() {
        let t = (i as u64 + 1) * 1_000_000;
        let side_a = i % 2 == 0;
        let delay = if side_a && t > 10_500_000 {
            1_000_000
        } else {
            10_000_000
        };
        assert_eq!(
            r.get("side"),
            if side_a { "a" } else { "b" },
            "{}",
            r.line()
        );
        let release = (t + delay).max(last[i % 2]);
        last[i % 2] = release;
        assert_eq!(r.num("arrival_ns"), t, "{}", r.line());
        assert_eq!(r.num("release_ns"), release, "{}", r.line());
    }
    assert_eq!(
        last,
        [20_000_000, 30_000_000],
        "a's last frame left 1 ms after it came"
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["seed"].as_u64(), v["written"].as_u64()),
        (Some(3), Some(20))
    );
    let written = read(&dir.with_extension("pcap"));
    assert!(
        written.windows(2).all(|w| w[0].0 <= w[1].0),
        "in release order"
    );
}

/// A recording of a rules run, reloaded at 5.5 ms from a 5 ms pipe to a
/// 2 ms one (the whole rule set, as SIGHUP does): frames before the reload
/// take 5 ms, those after 2 ms (behind those in flight: the pipe is kept,
/// reconfigured), all through rule 100 and pipe 1. A recording
/// marked incomplete replays too, with a warning naming what is missing.
#[test]
fn a_recording_of_rules_replays_its_reload_and_warns_when_incomplete() {
    use linkem_io::recording::{RecordedChange, Start};
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("rec");
    let rules = |ms: u32| format!("pipe 1 config delay {ms}ms\nadd 100 pipe 1 ip\n");
    let reload = RecordedChange::Rules(rules(2), Default::default());
    record(&dir, Start::Rules(rules(5)), 10, &[(5_500_000, reload)]);
    let (o, rows) = replay_recording(&dir, &[]);
    assert!(String::from_utf8_lossy(&o.stderr).is_empty(), "{o:?}");
    assert_eq!(rows.len(), 10);
    let mut last = 0;
    for (i, r) in rows.iter().enumerate() {
        let t = (i as u64 + 1) * 1_000_000;
        let delay = if t > 5_500_000 { 2_000_000 } else { 5_000_000 };
        last = (t + delay).max(last);
        assert_eq!(r.num("release_ns"), last, "{}", r.line());
        assert_eq!((r.get("rule"), r.get("pipe")), ("100", "1"), "{}", r.line());
    }
    assert_eq!(last, 12_000_000, "the last frame left 2 ms after it came");

    let meta_path = dir.join("recording.json");
    let mut meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&meta_path).unwrap()).unwrap();
    meta["complete"] = false.into();
    meta["stopped"] = "reached the record limit of 4096 bytes after 10 frames".into();
    std::fs::write(&meta_path, meta.to_string()).unwrap();
    let (o, again) = replay_recording(&dir, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("incomplete") && err.contains("record limit of 4096 bytes"),
        "{err}"
    );
    assert_eq!(again.len(), 10);
}

/// A recording stopped by a full disk: `recording.json` says incomplete and
/// `frames.pcapng` ends inside a frame (and `changes.jsonl` inside a line).
/// The replay gives every whole frame and says where the recording was cut,
/// at several cuts; before, it failed on the cut record.
#[test]
fn a_recording_cut_short_by_a_full_disk_replays_what_is_whole() {
    use linkem_io::recording::{RecordedChange, Start};
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("rec");
    let change = RecordedChange::Lines(vec!["link a-to-b delay 1ms".into()]);
    record(
        &dir,
        Start::Link("delay 10ms".into()),
        20,
        &[(10_500_000, change)],
    );
    let meta_path = dir.join("recording.json");
    let mut meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&meta_path).unwrap()).unwrap();
    meta["complete"] = false.into();
    meta["stopped"] = "cannot write frames.pcapng: No space left on device (os error 28)".into();
    std::fs::write(&meta_path, meta.to_string()).unwrap();
    let frames = std::fs::read(dir.join("frames.pcapng")).unwrap();
    let changes = std::fs::read(dir.join("changes.jsonl")).unwrap();
    // The blocks before the first packet (type 6), then 20 packet blocks of one size.
    let mut header_bytes = 0;
    while u32::from_le_bytes(frames[header_bytes..header_bytes + 4].try_into().unwrap()) != 6 {
        header_bytes += u32::from_le_bytes(
            frames[header_bytes + 4..header_bytes + 8]
                .try_into()
                .unwrap(),
        ) as usize;
    }
    let epb_bytes = (frames.len() - header_bytes) / 20;
    assert_eq!(header_bytes + 20 * epb_bytes, frames.len());
    for (whole, extra) in [(0, 7), (3, 1), (11, 60), (19, epb_bytes - 1)] {
        let cut = header_bytes + whole * epb_bytes + extra;
        std::fs::write(dir.join("frames.pcapng"), &frames[..cut]).unwrap();
        let (o, rows) = replay_recording(&dir, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(rows.len(), whole, "cut {cut}: {err}");
        let offset = header_bytes + whole * epb_bytes;
        // Cut inside its first 4 bytes, the block's kind is not known yet.
        let record = if extra >= 4 {
            format!(
                "enhanced packet block at byte offset {offset} (packet {})",
                whole + 1
            )
        } else {
            format!("pcapng block at byte offset {offset}")
        };
        assert!(
            err.contains(&format!("frames.pcapng: truncated {record}"))
                && err.contains(&format!(
                    "cut short there; {whole} frames before it are replayed"
                )),
            "cut {cut}: {err}"
        );
        assert_eq!(
            err.contains("not replayed"),
            whole < 10,
            "cut {cut}: the change after frame 10 is left out when its frame is: {err}"
        );
    }
    std::fs::write(dir.join("frames.pcapng"), &frames).unwrap();
    std::fs::write(dir.join("changes.jsonl"), &changes[..changes.len() - 5]).unwrap();
    let (o, rows) = replay_recording(&dir, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(rows.len(), 20, "{err}");
    assert!(
        err.contains("changes.jsonl is cut short in line 1"),
        "{err}"
    );
}

/// Link words beside a recording are refused: the model is the recording's.
#[test]
fn a_recording_with_link_words_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("rec");
    record(
        &dir,
        linkem_io::recording::Start::Link("delay 1ms".into()),
        2,
        &[],
    );
    let out = d.path().join("out.pcap");
    let o = linkem(&["replay", s(&dir), s(&out), "delay", "5ms"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("is a recording") && err.contains("no link words"),
        "{err}"
    );
}

/// The ms of a link log's `#` lines of `bytes` each.
fn capacity_ms(log: &str, bytes: u32) -> Vec<u64> {
    let suffix = format!(" # {bytes}");
    log.lines()
        .filter_map(|l| l.strip_suffix(&suffix))
        .map(|ms| ms.parse().unwrap())
        .collect()
}

/// Opportunity ms of the trace 1, 1, 3, 5, 10 (looped) up to `end_ms`.
fn trace_opportunities_ms(end_ms: u64) -> Vec<u64> {
    let offsets = [1u64, 1, 3, 5, 10];
    (0..)
        .map(|k: u64| k / 5 * 10 + offsets[(k % 5) as usize])
        .take_while(|&ms| ms <= end_ms)
        .collect()
}

/// With a trace, a replay's link log has mahimahi's `#` lines as the live
/// logs do (the same writer): one `T # 1504` per opportunity from the
/// link's start (a capture's first packet) to the replay's end, each packet
/// leaving at the ms of one of them, an opportunity's line before the
/// departures it carries; a recording's log counts from the start it stores.
#[test]
fn a_trace_replays_log_has_the_capacity_lines() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = paths(&dir);
    let (up, trace) = (dir.path().join("up.log"), dir.path().join("t.trace"));
    std::fs::write(&trace, "1\n1\n3\n5\n10\n").unwrap();
    let t0_ns = 1_700_000_000_000_000_000u64;
    let packets: Vec<(u64, Vec<u8>)> = (0..12)
        .map(|i| (t0_ns + i * 2_000_000, frame(1514, i as u8)))
        .collect();
    write_capture(&input, &packets);
    let words = format!("trace {} seed 1", s(&trace));
    let o = linkem(&[
        "replay",
        s(&input),
        s(&output),
        &words,
        "--log-a-to-b",
        s(&up),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let log = std::fs::read_to_string(&up).unwrap();
    assert!(log.contains(&format!("\n# queue: {words}\n")), "{log}");
    assert!(log.contains("\n# base timestamp: 0\n"), "{log}");
    let out = read(&output);
    assert_eq!(out.len(), packets.len(), "a trace link loses nothing here");
    let end_ms = out.last().unwrap().0 / 1_000_000 - t0_ns / 1_000_000;
    assert_eq!(
        capacity_ms(&log, 1504),
        trace_opportunities_ms(end_ms),
        "{log}"
    );
    // Each departure at an opportunity already written.
    let mut seen = Vec::new();
    for l in log.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = l.split(' ').collect();
        let ms: u64 = f[0].parse().unwrap();
        match f[1] {
            "#" => seen.push(ms),
            "-" => assert!(seen.contains(&ms), "a departure at {ms} ms: {log}"),
            _ => {}
        }
    }

    // A recording of the same link: times and opportunities from its start,
    // 4 ms before its first frame.
    use linkem_io::recording::{NamedFiles, Recorder, RecordingMeta, Start};
    let rec_dir = dir.path().join("rec");
    let mut meta = RecordingMeta::new(
        3,
        1,
        65535,
        ["veth-a".into(), "veth-b".into()],
        Start::Link("trace t.trace".into()),
    );
    meta.files = NamedFiles::from([("t.trace".into(), "1\n1\n3\n5\n10\n".into())]);
    let mut rec = Recorder::create(&rec_dir, meta, u64::MAX).unwrap();
    let start_ns = t0_ns - 4_000_000;
    rec.record_start(start_ns);
    for (t, f) in &packets {
        rec.frame(0, *t, f.len() as u32, f);
    }
    assert!(rec.finish().unwrap().complete);
    let rec_out = dir.path().join("rec.pcap");
    let rec_log = dir.path().join("rec.log");
    let o = linkem(&[
        "replay",
        s(&rec_dir),
        s(&rec_out),
        "--log-a-to-b",
        s(&rec_log),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let log = std::fs::read_to_string(&rec_log).unwrap();
    assert!(
        log.contains(&format!("\n# init timestamp: {}\n", start_ns / 1_000_000)),
        "{log}"
    );
    assert!(
        log.contains("\n4 + 1500\n"),
        "the first frame 4 ms after the start: {log}"
    );
    let end_ms = read(&rec_out).last().unwrap().0 / 1_000_000 - start_ns / 1_000_000;
    assert_eq!(
        capacity_ms(&log, 1504),
        trace_opportunities_ms(end_ms),
        "{log}"
    );
}

/// A live trace link starts its opportunities at the link's start, which
/// the recording keeps (`start_ns`): a recording whose first frame comes
/// 60 ms into a 100 ms trace (opportunities at 50 and 100 ms) replays the
/// live decision, the opportunity at 100 ms from the start; the same
/// recording without its start (a capture's replay) starts the trace at
/// the first frame, whose first opportunity then falls 50 ms after it.
#[test]
fn a_recording_replays_its_trace_from_the_links_start() {
    use linkem_io::recording::{NamedFiles, Recorder, RecordingMeta, Start};
    let d = tempfile::tempdir().unwrap();
    let t0 = 1_000_000_000u64;
    let releases = |name: &str, start_ns: Option<u64>| {
        let dir = d.path().join(name);
        let mut meta = RecordingMeta::new(
            3,
            1,
            65535,
            ["veth-a".into(), "veth-b".into()],
            Start::Link("trace up.trace".into()),
        );
        meta.files = NamedFiles::from([("up.trace".into(), "50\n100\n".into())]);
        let mut rec = Recorder::create(&dir, meta, u64::MAX).unwrap();
        if let Some(t) = start_ns {
            rec.record_start(t);
        }
        for (i, at_ms) in [60u64, 160].into_iter().enumerate() {
            let f = udp_frame(100, 5000 + i as u16);
            rec.frame(0, t0 + at_ms * 1_000_000, f.len() as u32, &f);
        }
        assert!(rec.finish().unwrap().complete);
        let (_, rows) = replay_recording(&dir, &[]);
        rows.iter()
            .map(|r| (r.num("release_ns") - t0) / 1_000_000)
            .collect::<Vec<u64>>()
    };
    assert_eq!(
        releases("live", Some(t0)),
        [100, 200],
        "ms from the link's start: the live opportunities after 60 and 160 ms"
    );
    assert_eq!(
        releases("first-frame", None),
        [110, 210],
        "without a start the trace starts at the first frame (60 ms)"
    );
}

/// `--log-a-to-b` writes mahimahi's link log of the replay: a `+` line per
/// packet read, at its ms from the capture's first packet, and a `-` line per
/// packet written to OUT, at its stamp's ms, with the delay between; the
/// b-to-a log of a link (every packet on side a) has its header only.
#[test]
fn replay_writes_mahimahis_link_log() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in.pcap"), dir.path().join("out.pcap"));
    let (up, down) = (dir.path().join("up.log"), dir.path().join("down.log"));
    let t0_ns = 1_700_000_000_123_456_789u64;
    let packets: Vec<(u64, Vec<u8>)> = (0..40)
        .map(|i| (t0_ns + i * 700_000, frame(1514, i as u8)))
        .collect();
    write_capture(&input, &packets);
    let o = linkem(&[
        "replay",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "rate 12mbit delay 10ms loss 20% seed 3",
        "--log-a-to-b",
        up.to_str().unwrap(),
        "--downlink-log",
        down.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = read(&output);
    assert!(
        !out.is_empty() && out.len() < packets.len(),
        "{}",
        out.len()
    );
    let log = std::fs::read_to_string(&up).unwrap();
    let init_ms = t0_ns / 1_000_000;
    assert!(
        log.contains(&format!(
            "\n# init timestamp: {init_ms}\n# base timestamp: 0\n"
        )),
        "{log}"
    );
    // The rate's capacity: a `#` line of 1500 bytes (12 Mbit/s) each ms.
    let capacity = capacity_ms(&log, 1500);
    assert!(capacity.len() > 20, "{log}");
    assert_eq!(
        capacity,
        (0..capacity.len() as u64).collect::<Vec<_>>(),
        "{log}"
    );
    let lines: Vec<Vec<u64>> = log
        .lines()
        .filter(|l| !l.contains('#'))
        .map(|l| {
            l.split(' ')
                .map(|f| match f {
                    "+" => 0,
                    "-" => 1,
                    n => n.parse().unwrap(),
                })
                .collect()
        })
        .collect();
    let arrivals: Vec<u64> = lines.iter().filter(|l| l[1] == 0).map(|l| l[0]).collect();
    let expected: Vec<u64> = packets.iter().map(|p| p.0 / 1_000_000 - init_ms).collect();
    assert_eq!(arrivals, expected, "{log}");
    assert!(lines.iter().all(|l| l[2] == 1500), "IP bytes: {log}");
    let departures: Vec<&Vec<u64>> = lines.iter().filter(|l| l[1] == 1).collect();
    let written: Vec<u64> = out.iter().map(|p| p.0 / 1_000_000 - init_ms).collect();
    assert_eq!(
        departures.iter().map(|l| l[0]).collect::<Vec<_>>(),
        written,
        "{log}"
    );
    // At least the 10 ms delay and 12 Mbit/s's 1 ms per frame.
    assert!(departures.iter().all(|l| l[3] >= 10), "{log}");
    assert!(
        lines.windows(2).all(|p| p[0][0] <= p[1][0]),
        "not in time order: {log}"
    );
    let down_log = std::fs::read_to_string(&down).unwrap();
    assert!(down_log.contains("# base timestamp: 0"), "{down_log}");
    assert!(down_log.lines().all(|l| l.starts_with('#')), "{down_log}");

    // A log path that is the input is refused before anything is written.
    let before = std::fs::read(&input).unwrap();
    let o = linkem(&[
        "replay",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "delay 1ms",
        "--log-a-to-b",
        input.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--log-a-to-b"), "{err}");
    assert_eq!(std::fs::read(&input).unwrap(), before);
}
