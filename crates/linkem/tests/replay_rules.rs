//! `linkem replay --rules` end to end, with the seed paper's examples in
//! testdata/rules run as written (real addresses).

mod replay_outputs;

use linkem_io::capture::read_capture_bytes;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn linkem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(args)
        .output()
        .expect("linkem runs")
}

fn ok(o: Output) -> String {
    assert!(
        o.status.success(),
        "linkem failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("utf-8")
}

fn testdata(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/rules")
        .join(name)
        .display()
        .to_string()
}

fn synth(path: &Path, extra: &[&str]) {
    let mut args = vec!["synth", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    ok(linkem(&args));
}

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).expect("--stats json prints JSON")
}

fn tmp() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let d = tempfile::tempdir().expect("tempdir");
    let (i, o) = (d.path().join("in.pcap"), d.path().join("out.pcap"));
    (d, i, o)
}

#[test]
fn multipath_splits_http_by_probability_and_reorders() {
    let (_d, input, output) = tmp();
    synth(
        &input,
        &[
            "--packets",
            "20000",
            "--size",
            "500",
            "--rate",
            "8mbit",
            "--src",
            "198.51.100.7:80",
            "--dst",
            "10.0.0.2:40000",
        ],
    );
    let rules = testdata("multipath.rules");
    let out = ok(linkem(&[
        "replay",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--rules",
        &rules,
        "--stats",
        "json",
        "seed",
        "3",
    ]));
    let v = json(&out);
    let counts: Vec<f64> = v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["packets"].as_f64().unwrap())
        .collect();
    let n = 20000.0;
    for (c, p) in counts.iter().zip([0.2, 0.56, 0.24]) {
        assert!(
            (c - n * p).abs() < 5.0 * (n * p * (1.0 - p)).sqrt(),
            "{counts:?}"
        );
    }
    let bytes = std::fs::read(&output).unwrap();
    let (_, pkts) = read_capture_bytes("out", &bytes).unwrap();
    assert_eq!(pkts.len() as u64, v["fates"]["delivered"].as_u64().unwrap());
    // Output in release order, and the paths reorder: sequence numbers (payload) not sorted.
    assert!(pkts.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
    let seqs: Vec<u64> = pkts
        .iter()
        .map(|p| u64::from_be_bytes(p.data[42..50].try_into().unwrap()))
        .collect();
    assert!(
        seqs.windows(2).any(|w| w[0] > w[1]),
        "different paths reorder"
    );
}

#[test]
fn two_links_per_direction_and_shared_subnet_pipe() {
    let (d, input, output) = tmp();
    synth(
        &input,
        &[
            "--packets",
            "200",
            "--size",
            "1000",
            "--rate",
            "1mbit",
            "--src",
            "10.0.0.2:5000",
            "--dst",
            "198.51.100.1:80",
        ],
    );
    let rules = testdata("two-links.rules");
    let events = d.path().join("ev.tsv");
    let out = ok(linkem(&[
        "replay",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--rules",
        &rules,
        "--stats",
        "json",
        "--events",
        events.to_str().unwrap(),
        "seed",
        "1",
    ]));
    let v = json(&out);
    // `in src-ip 10.0.0.2` takes every packet into pipe 11 (256 kbit/s, 12 ms).
    assert_eq!(v["rules"][1]["packets"], 200);
    let ev = std::fs::read_to_string(&events).unwrap();
    let first = &replay_outputs::rows(&ev)[0];
    let columns = ["fate", "release_ns", "rule", "pipe"].map(|c| first.get(c));
    assert_eq!(columns, ["delivered", "43250000", "200", "11"]);
    // The same capture taken as sent the other way: rule 100 does not match (dst differs), nothing does.
    let out = ok(linkem(&[
        "replay",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--rules",
        &rules,
        "--rules-side",
        "b",
        "--stats",
        "json",
        "seed",
        "1",
    ]));
    assert_eq!(json(&out)["unmatched"], 200);
}

#[test]
fn multihop_releases_add_up_and_profile_runs() {
    let (_d, input, output) = tmp();
    synth(&input, &["--packets", "1", "--size", "1250"]);
    let out = ok(linkem(&[
        "replay",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--rules",
        &testdata("multihop.rules"),
        "--stats",
        "json",
        "seed",
        "1",
    ]));
    assert_eq!(
        json(&out)["rules"][2]["packets"],
        1,
        "the packet reached the third hop"
    );
    // 1250 B: 0.1 ms at 100 Mbit/s + 2 ms, 1 ms at 10 Mbit/s + 20 ms, 0.1 ms + 2 ms.
    let bytes = std::fs::read(&output).unwrap();
    let (_, pkts) = read_capture_bytes("out", &bytes).unwrap();
    assert_eq!(pkts[0].ts_ns, 25_200_000);
    let out = ok(linkem(&[
        "replay",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--rules",
        &testdata("radio.rules"),
        "--stats",
        "text",
        "seed",
        "1",
    ]));
    assert!(out.contains("profile: name \"profile_foo\""), "{out}");
}

/// Seed 003 §3.7's profile exactly as the paper prints it (bare delays under a
/// `# delay in us` comment) parses, and its bare numbers are milliseconds, as
/// ipfw reads them: 75-byte frames 3 s apart (longer than any airtime, so
/// nothing queues) spend 0.3 ms at 2 Mbit/s plus 0, 100, 130 or 586.7 ms, a
/// quarter each, and `loss-level 0.99` of `samples 5` keeps ⌊4.95⌋ = 4 table
/// entries: a fifth of the packets are lost.
#[test]
fn seed_003_profile_as_printed_reads_bare_delays_as_ms() {
    let (d, input, output) = tmp();
    std::fs::write(
        d.path().join("profile_foo"),
        "name profile_foo\nbandwidth 2Mbit/s\nloss-level 0.99\nsamples 5\n\
         prob delay # delay in us\n0.2 100\n0.4 130\n0.5 130\n0.8 1500\n0.98 2000\n",
    )
    .unwrap();
    let rules = d.path().join("radio.rules");
    std::fs::write(
        &rules,
        "ipfw pipe 3 config profile profile_foo\nipfw add 100 pipe 3 ip from any to any\n",
    )
    .unwrap();
    let events = d.path().join("events.tsv");
    let n = 2000;
    synth(
        &input,
        &["--packets", "2000", "--size", "75", "--rate", "200bit"],
    );
    let out = ok(linkem(&[
        "replay",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--rules",
        rules.to_str().unwrap(),
        "--events",
        events.to_str().unwrap(),
        "--stats",
        "json",
        "seed",
        "1",
    ]));
    let v = json(&out);
    assert_eq!(v["pipes"][0]["profile"]["name"], "profile_foo");
    let text = std::fs::read_to_string(&events).unwrap();
    let mut by_delay = std::collections::BTreeMap::<u64, u32>::new();
    let mut lost = 0u32;
    for l in replay_outputs::rows(&text) {
        assert_eq!(l.get("len_bytes"), "75");
        match l.get("fate") {
            "delivered" => {
                let d = l.num("release_ns") - l.num("arrival_ns");
                *by_delay.entry(d).or_default() += 1;
            }
            "loss" => lost += 1,
            other => panic!("fate {other}: {}", l.line()),
        }
    }
    // 130 + (0.6 - 0.5) / (0.8 - 0.5) · (1500 - 130) ms, rounded to the ns.
    let airtime_ms = [0.0, 100.0, 130.0, 130.0 + 1370.0 / 3.0];
    let want: Vec<u64> = airtime_ms
        .iter()
        .map(|ms| 300_000 + (ms * 1e6_f64).round() as u64)
        .collect();
    assert_eq!(by_delay.keys().copied().collect::<Vec<_>>(), want);
    let delivered = n - lost;
    for (delay, k) in &by_delay {
        let share = f64::from(*k) / f64::from(delivered);
        let sd = (0.25 * 0.75 / f64::from(delivered)).sqrt();
        assert!(
            (share - 0.25).abs() <= 4.5 * sd,
            "{delay} ns: {k} of {delivered}"
        );
    }
    let (rate, sd) = (
        f64::from(lost) / f64::from(n),
        (0.2_f64 * 0.8 / f64::from(n)).sqrt(),
    );
    assert!((rate - 0.2).abs() <= 4.5 * sd, "loss rate {rate}");
}

#[test]
fn rules_from_toml_and_errors_name_line_and_word() {
    let (d, input, output) = tmp();
    synth(&input, &["--packets", "10"]);
    let cfg = d.path().join("c.toml");
    std::fs::write(
        &cfg,
        "seed = 4\nrules = \"\"\"\npipe 1 config bw 1Mbit/s\nadd 10 pipe 1 udp\n\"\"\"\n",
    )
    .unwrap();
    let out = ok(linkem(&[
        "replay",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
        "--stats",
        "json",
    ]));
    assert_eq!(json(&out)["rules"][0]["packets"], 10);
    let bad = d.path().join("bad.rules");
    std::fs::write(
        &bad,
        "pipe 1 config bw 1Mbit/s\n\nadd 10 pipe 1 udp frobnicate\n",
    )
    .unwrap();
    let output = d.path().join("never.pcap");
    let o = linkem(&[
        "replay",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "--rules",
        bad.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("line 3, word 6: <12 bytes of the file>: unknown word")
            && !err.contains("frobnicate"),
        "{err}"
    );
    assert!(!output.exists(), "no output on a bad rule file");
}

/// Delivered bytes per UDP source port in a pcap written by replay, over the
/// first `window_ns` of output.
fn bytes_by_src_port(path: &Path, window_ns: u64) -> std::collections::BTreeMap<u16, u64> {
    let bytes = std::fs::read(path).unwrap();
    let (_, pkts) = read_capture_bytes("out", &bytes).unwrap();
    let t0 = pkts.first().map_or(0, |p| p.ts_ns);
    let mut m = std::collections::BTreeMap::new();
    for p in pkts.iter().filter(|p| p.ts_ns < t0 + window_ns) {
        let port = u16::from_be_bytes([p.data[34], p.data[35]]);
        *m.entry(port).or_default() += p.data.len() as u64;
    }
    m
}

#[test]
fn sched_mask_gives_each_flow_its_own_link() {
    // Two UDP flows of 8 Mbit/s each into a 4 Mbit/s pipe under wf2q+: with
    // `mask src-port 0xffff` on the scheduler each flow has its own instance
    // of the pipe's link (4 Mbit/s each); without it they share one.
    let (d, input, _) = tmp();
    synth(
        &input,
        &[
            "--packets",
            "20000",
            "--size",
            "1000",
            "--rate",
            "16mbit",
            "--flows",
            "2",
        ],
    );
    let window_ns = 8_000_000_000;
    for mask in [" mask src-port 0xffff", ""] {
        let rules = d.path().join("m.rules");
        std::fs::write(
            &rules,
            format!(
                "pipe 1 config bw 4Mbit/s delay 5\nsched 1 config type wf2q+{mask}\n\
                 queue 2 config sched 1 weight 1\nadd 100 queue 2 ip\n"
            ),
        )
        .unwrap();
        let output = d.path().join("out.pcap");
        let out = ok(linkem(&[
            "replay",
            input.to_str().unwrap(),
            output.to_str().unwrap(),
            "--rules",
            rules.to_str().unwrap(),
            "--stats",
            "json",
        ]));
        let v = json(&out);
        let insts = v["schedulers"].as_array().unwrap();
        assert_eq!(insts.len(), if mask.is_empty() { 1 } else { 2 }, "{v}");
        let m = bytes_by_src_port(&output, window_ns);
        let bps = |b: u64| b as f64 * 8.0 / (window_ns as f64 / 1e9);
        if mask.is_empty() {
            // One link: 4 Mbit/s between them (one FIFO queue, so not
            // necessarily evenly).
            let total = bps(m.values().sum());
            assert!((total / 4e6 - 1.0).abs() < 0.02, "shared: {total} bit/s");
        } else {
            assert_eq!(m.len(), 2, "{m:?}");
            for (port, b) in &m {
                let r = bps(*b);
                assert!(
                    (r / 4e6 - 1.0).abs() < 0.02,
                    "masked: port {port} got {r} bit/s"
                );
            }
        }
    }
}

/// Every file a rules replay reads is an input: the rule file, and the
/// profiles and tables it names (relative to it or by path). An output naming
/// one of them, directly or through a link, is refused before anything is
/// written, and the error names both uses.
#[test]
fn an_output_that_is_a_file_the_rules_name_is_refused() {
    let (d, input, output) = tmp();
    synth(&input, &["--packets", "20", "--size", "200"]);
    let profile = d.path().join("radio.profile");
    let profile_text = "name p\nbandwidth 2Mbit/s\nsamples 2\nprob delay\n0.5 100us\n1 200us\n";
    std::fs::write(&profile, profile_text).unwrap();
    let table = d.path().join("my.dist");
    let table_text = "-100 0 100\n";
    std::fs::write(&table, table_text).unwrap();
    let rules = d.path().join("r.rules");
    let rules_text = format!(
        "pipe 1 config profile radio.profile\n\
         pipe 2 config delay 5ms 1ms distribution {}\n\
         add 100 pipe 1 ip from any to any dst-port 9\n\
         add 200 pipe 2 ip from any to any\n",
        table.display()
    );
    std::fs::write(&rules, &rules_text).unwrap();
    let link = d.path().join("link.profile");
    std::os::unix::fs::symlink(&profile, &link).unwrap();
    let (i, r) = (input.to_str().unwrap(), rules.to_str().unwrap());
    let o_ = output.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec![i, r], "--rules"),
        (
            vec![i, profile.to_str().unwrap()],
            "file named in the rules",
        ),
        (vec![i, link.to_str().unwrap()], "file named in the rules"),
        (vec![i, table.to_str().unwrap()], "file named in the rules"),
        (
            vec![i, o_, "--events", profile.to_str().unwrap()],
            "file named in the rules",
        ),
    ];
    for (head, other_use) in cases {
        let mut args = vec!["replay"];
        args.extend(&head);
        args.extend(["--rules", r, "seed", "1"]);
        let o = linkem(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} was accepted");
        assert!(
            err.contains("same file") && err.contains(other_use),
            "{args:?}: names both uses: {err}"
        );
        assert_eq!(std::fs::read_to_string(&profile).unwrap(), profile_text);
        assert_eq!(std::fs::read_to_string(&table).unwrap(), table_text);
        assert_eq!(std::fs::read_to_string(&rules).unwrap(), rules_text);
        assert!(!output.exists(), "{args:?}: nothing written");
    }
    // The same rules into a fresh output run.
    ok(linkem(&["replay", i, o_, "--rules", r, "seed", "1"]));
}

/// A rule file with per-flow pipes (mask, loss, duplicates, corruption) and a
/// WF2Q+ scheduler of masked CoDel queues: `--stats text`, the frames written
/// and every decision are those of the golden files (testdata/replay/
/// mask-sched.*, made before replay had one driver for links and rules; the
/// events there are in the rules' former 13-column format, compared column by
/// column by name).
#[test]
fn mask_and_scheduler_replay_matches_the_golden_files() {
    let d = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| replay_outputs::linkem_in(d.path(), args);
    replay_outputs::synth_golden_input(d.path());
    let rules =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/replay/mask-sched.rules");
    let stats = run(&[
        "replay",
        "in.pcap",
        "out.pcap",
        "--rules",
        rules.to_str().unwrap(),
        "--events",
        "ev.tsv",
        "--stats",
        "text",
        "seed",
        "5",
    ]);
    assert_eq!(stats, replay_outputs::golden("mask-sched.stats.txt"));
    let out = replay_outputs::capture_digest(&d.path().join("out.pcap"));
    assert_eq!(out, replay_outputs::golden("mask-sched.out.tsv"));
    let got = replay_outputs::rows(&std::fs::read_to_string(d.path().join("ev.tsv")).unwrap());
    let want = replay_outputs::rows(&replay_outputs::golden("mask-sched.events-v1.tsv"));
    assert_eq!(got.len(), want.len());
    let columns = [
        "index",
        "arrival_ns",
        "len_bytes",
        "fate",
        "release_ns",
        "rule",
        "pipe",
        "flow",
        "hops",
        "copies",
        "corrupt_bits",
        "queue",
        "ce",
    ];
    for (g, w) in got.iter().zip(&want) {
        for c in columns {
            assert_eq!(
                g.get(c),
                w.get(c),
                "column {c}: {} for {}",
                g.line(),
                w.line()
            );
        }
    }
}
