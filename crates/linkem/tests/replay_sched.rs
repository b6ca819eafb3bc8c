//! `linkem replay --rules` with schedulers: a FIFO droptail pipe under the
//! event-driven scheduler writes exactly the capture the closed-form pipe
//! writes; Dummynet Revisited §3.6's example runs as written; stats show the queues.

mod replay_outputs;

use std::path::Path;
use std::process::{Command, Output};

fn linkem(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(args)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "linkem {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn synth(path: &Path, rate: &str, extra: &[&str]) {
    let mut a = vec![
        "synth",
        path.to_str().unwrap(),
        "--packets",
        "3000",
        "--size",
        "1000",
        "--rate",
        rate,
        "--poisson",
    ];
    a.extend_from_slice(extra);
    linkem(&a);
}

#[test]
fn fifo_scheduler_output_is_byte_identical_to_the_plain_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcap");
    synth(&input, "8mbit", &["--flows", "3"]);
    let mut outputs = Vec::new();
    for (i, words) in [
        "bw 5Mbit/s delay 3 queue 20",
        "bw 5Mbit/s delay 3 queue 20 type fifo",
    ]
    .iter()
    .enumerate()
    {
        let rules = dir.path().join(format!("r{i}.rules"));
        std::fs::write(&rules, format!("pipe 1 config {words}\nadd pipe 1 ip\n")).unwrap();
        let out = dir.path().join(format!("out{i}.pcap"));
        let ev = dir.path().join(format!("ev{i}.tsv"));
        linkem(&[
            "replay",
            input.to_str().unwrap(),
            out.to_str().unwrap(),
            "seed",
            "3",
            "--rules",
            rules.to_str().unwrap(),
            "--events",
            ev.to_str().unwrap(),
        ]);
        outputs.push((
            std::fs::read(&out).unwrap(),
            std::fs::read_to_string(&ev).unwrap(),
        ));
    }
    assert_eq!(outputs[0].0, outputs[1].0, "captures differ");
    // Same fates and release times; the scheduled run also names its queue.
    // Events come in decision order (a scheduled packet is decided when it leaves the queue).
    let strip = |s: &str| {
        let columns = ["arrival_ns", "len_bytes", "fate", "release_ns", "rule"];
        let mut v: Vec<(u64, Vec<String>)> = replay_outputs::rows(s)
            .iter()
            .map(|l| {
                (
                    l.num("index"),
                    columns.iter().map(|c| l.get(c).to_string()).collect(),
                )
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(strip(&outputs[0].1), strip(&outputs[1].1));
    let first = &replay_outputs::rows(&outputs[1].1)[0];
    assert!(
        first.get("queue") == "1" && first.get("ce") == "0",
        "queue 1, not marked: {}",
        first.line()
    );
    assert!(
        outputs[0].1.contains("queue-full"),
        "the test overloads the queue"
    );
}

#[test]
fn seed_003_section_3_6_example_runs_and_lists_queues() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcap");
    synth(&input, "6mbit", &[]);
    let out = dir.path().join("out.pcap");
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/rules/sched.rules");
    let o = linkem(&[
        "replay",
        input.to_str().unwrap(),
        out.to_str().unwrap(),
        "seed",
        "1",
        "--rules",
        rules.to_str().unwrap(),
        "--rules-side",
        "b",
        "--stats",
        "text",
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("# ipfw sched show"), "{text}");
    assert!(text.contains("type WF2Q+"), "{text}");
    let q10 = text
        .lines()
        .find(|l| l.trim_start().starts_with("10 "))
        .expect("queue 10 listed");
    let cols: Vec<&str> = q10.split_whitespace().collect();
    assert_eq!(cols[1], "20", "weight 20: {q10}");
    assert!(cols[6].parse::<u64>().unwrap() > 2000, "dequeued: {q10}");
    let o = linkem(&[
        "replay",
        input.to_str().unwrap(),
        out.to_str().unwrap(),
        "seed",
        "1",
        "--rules",
        rules.to_str().unwrap(),
        "--rules-side",
        "b",
        "--stats",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let q = &v["schedulers"][0]["queues"][0];
    assert_eq!(q["queue"], 10);
    assert!(q["sojourn_ns"]["p50"].as_u64().is_some());
    assert!(
        q["drops"]["tail"].as_u64().unwrap() > 0,
        "6 Mbit/s into 4 Mbit/s overflows"
    );
}

#[test]
fn ecn_marks_reach_the_output_capture() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcap");
    synth(&input, "12mbit", &[]);
    // Make every frame ECT(0): set the ECN bits and fix the IPv4 checksum.
    let mut bytes = std::fs::read(&input).unwrap();
    let mut at = 24;
    let mut n = 0;
    while at + 16 <= bytes.len() {
        let incl = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let f = at + 16;
        if bytes[f + 14] >> 4 == 4 {
            bytes[f + 15] = (bytes[f + 15] & !3) | 2;
            bytes[f + 24] = 0;
            bytes[f + 25] = 0;
            let mut sum = 0u32;
            for i in (0..20).step_by(2) {
                sum += u16::from_be_bytes([bytes[f + 14 + i], bytes[f + 15 + i]]) as u32;
            }
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            bytes[f + 24..f + 26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
            n += 1;
        }
        at = f + incl;
    }
    assert!(n > 1000);
    std::fs::write(&input, &bytes).unwrap();
    let rules = dir.path().join("r.rules");
    std::fs::write(
        &rules,
        "pipe 1 config bw 10Mbit/s queue 500 codel ecn\nadd pipe 1 ip\n",
    )
    .unwrap();
    let out = dir.path().join("out.pcap");
    let ev = dir.path().join("ev.tsv");
    linkem(&[
        "replay",
        input.to_str().unwrap(),
        out.to_str().unwrap(),
        "seed",
        "1",
        "--rules",
        rules.to_str().unwrap(),
        "--events",
        ev.to_str().unwrap(),
    ]);
    let marked_events = replay_outputs::rows(&std::fs::read_to_string(&ev).unwrap())
        .iter()
        .filter(|l| l.get("ce") == "1")
        .count();
    assert!(marked_events > 0);
    let o = std::fs::read(&out).unwrap();
    let (mut ce, mut at) = (0, 24);
    while at + 16 <= o.len() {
        let incl = u32::from_le_bytes(o[at + 8..at + 12].try_into().unwrap()) as usize;
        let f = at + 16;
        if o[f + 15] & 3 == 3 {
            ce += 1;
            // The header checksum still verifies.
            let mut sum = 0u32;
            for i in (0..20).step_by(2) {
                sum += u16::from_be_bytes([o[f + 14 + i], o[f + 15 + i]]) as u32;
            }
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            assert_eq!(sum, 0xffff);
        }
        at = f + incl;
    }
    assert_eq!(ce, marked_events, "every marked decision is a CE frame");
}

#[test]
fn qfq_weights_share_the_link_in_replay() {
    // Two flows of 8 Mbit/s each into 4 Mbit/s, queues of weight 1 and 3.
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcap");
    linkem(&[
        "synth",
        input.to_str().unwrap(),
        "--packets",
        "20000",
        "--size",
        "1000",
        "--rate",
        "16mbit",
        "--flows",
        "2",
    ]);
    let rules = dir.path().join("q.rules");
    std::fs::write(
        &rules,
        "pipe 1 config bw 4Mbit/s\nsched 1 config type qfq\n\
         queue 1 config sched 1 weight 1 lmax 1000\nqueue 2 config sched 1 weight 3 lmax 1000\n\
         add 100 queue 1 ip src-port 5000\nadd 110 queue 2 ip src-port 5001\n",
    )
    .unwrap();
    let out = dir.path().join("out.pcap");
    let o = linkem(&[
        "replay",
        input.to_str().unwrap(),
        out.to_str().unwrap(),
        "seed",
        "1",
        "--rules",
        rules.to_str().unwrap(),
        "--stats",
        "text",
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("type QFQ"), "{text}");
    // Bytes per source port over the first 9 s of output, while both queues
    // are backlogged (the input lasts 10 s).
    let o = std::fs::read(&out).unwrap();
    let (mut at, mut first) = (24, None);
    let mut bytes = [0u64; 2];
    while at + 16 <= o.len() {
        let ts = u32::from_le_bytes(o[at..at + 4].try_into().unwrap()) as u64 * 1_000_000_000
            + u32::from_le_bytes(o[at + 4..at + 8].try_into().unwrap()) as u64;
        let incl = u32::from_le_bytes(o[at + 8..at + 12].try_into().unwrap()) as usize;
        let f = at + 16;
        let t0 = *first.get_or_insert(ts);
        if ts < t0 + 9_000_000_000 {
            let port = u16::from_be_bytes([o[f + 34], o[f + 35]]);
            bytes[(port - 5000) as usize] += incl as u64;
        }
        at = f + incl;
    }
    let share = bytes[0] as f64 / (bytes[0] + bytes[1]) as f64;
    assert!((share - 0.25).abs() < 0.01, "share {share} ({bytes:?})");
    // The link stays busy: about 9 s at 4 Mbit/s.
    assert!(
        (bytes[0] + bytes[1]) as f64 * 8.0 > 0.98 * 36e6,
        "{bytes:?}"
    );
}
