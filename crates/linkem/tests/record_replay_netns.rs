//! A live run recorded with `linkem bridge --record DIR` replays exactly:
//! `linkem replay DIR OUT --events REPLAY` writes the same `--events` lines as
//! the live run's `--events LIVE` (fates, release times, queues, pipes, flows,
//! sides), on both backends, with link words (jitter with correlation, GE
//! loss, duplicate, rate) and with a rule file (masks, a scheduler, AQM),
//! while a storm of `linkem ctl` changes runs and traffic goes both ways.
//! `nsA <-veth-> linkem <-veth-> nsB`, names unique to each test, torn down by
//! the topology's Drop. Needs root and prints "skipped" otherwise.
//!
//! The options' refusals (no interface touched) run without root.

#[macro_use]
mod common;

use common::*;
use linkem_io::netns::Topology;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

on_both_backends!(link_words_replay_exactly, rules_replay_exactly);

/// A live run: the bridge's final stats, its stderr, its events lines.
struct Live {
    stats: Value,
    stderr: String,
    lines: Vec<String>,
    applied: u32,
}

/// Runs a bridge with `args`, `--events` and `--record rec_dir`, UDP both
/// ways while `changes` (request lines, in turn) go over the control socket;
/// stops it once the traffic has been quiet for a while (every packet the
/// model held decided).
fn run_live(
    topo: &Topology,
    backend: &str,
    args: &[&str],
    changes: &[&str],
    events: &Path,
    rec_dir: &Path,
) -> Live {
    let mut all = vec!["--record", rec_dir.to_str().unwrap()];
    all.extend_from_slice(args);
    let r = bridge_under_storm(topo, backend, events, &all, changes);
    Live {
        stats: r.stats,
        stderr: r.stderr,
        lines: event_lines(events),
        applied: r.applied,
    }
}

/// `linkem replay DIR OUT --events REPLAY`; the events lines.
fn replay(rec_dir: &Path, out: &Path, events: &Path) -> Vec<String> {
    let o = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(["replay", rec_dir.to_str().unwrap(), out.to_str().unwrap()])
        .args(["--events", events.to_str().unwrap(), "--stats", "json"])
        .output()
        .expect("linkem replay runs");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "linkem replay failed: {stderr}");
    assert!(
        !stderr.contains("incomplete"),
        "the recording should be complete: {stderr}"
    );
    event_lines(events)
}

/// Lines per (side, fate), for the failure message.
fn counts(lines: &[String]) -> BTreeMap<(String, String), u64> {
    let mut by = BTreeMap::new();
    for l in lines {
        let c: Vec<&str> = l.split('\t').collect();
        let side = c.last().copied().unwrap_or("?").to_string();
        let fate = c.get(3).copied().unwrap_or("?").to_string();
        *by.entry((side, fate)).or_insert(0) += 1;
    }
    by
}

/// The two events files are the same, line by line; else the first lines
/// that differ, with what comes before them, and the counts of each.
fn assert_same_events(live: &[String], replayed: &[String]) {
    let first = live
        .iter()
        .zip(replayed)
        .position(|(a, b)| a != b)
        .or_else(|| (live.len() != replayed.len()).then(|| live.len().min(replayed.len())));
    let Some(k) = first else { return };
    let show = |lines: &[String]| -> String {
        let from = k.saturating_sub(3);
        lines
            .iter()
            .enumerate()
            .skip(from)
            .take(8)
            .map(|(i, l)| format!("  {}{i}: {l}\n", if i == k { "> " } else { "  " }))
            .collect()
    };
    panic!(
        "the replay's events differ from the live run's at line {k} (after the header)\n\
         {}\nlive ({} lines):\n{}replay ({} lines):\n{}\
         live lines by (side, fate): {:?}\nreplay lines by (side, fate): {:?}",
        linkem_core::model::EVENTS_HEADER,
        live.len(),
        show(live),
        replayed.len(),
        show(replayed),
        counts(live),
        counts(replayed),
    );
}

/// Live run, recording, replay, comparison.
fn record_and_replay(
    topo: &Topology,
    backend: &str,
    args: &[&str],
    changes: &[&str],
) -> Vec<String> {
    record_and_replay_after(topo, backend, args, changes, |_| {})
}

/// [`record_and_replay`], `between` run on the recording's directory after the
/// live run and before the replay.
fn record_and_replay_after(
    topo: &Topology,
    backend: &str,
    args: &[&str],
    changes: &[&str],
    between: impl FnOnce(&Path),
) -> Vec<String> {
    let tmp = tempfile::tempdir().unwrap();
    let rec = tmp.path().join("rec");
    let live = run_live(
        topo,
        backend,
        args,
        changes,
        &tmp.path().join("live.tsv"),
        &rec,
    );
    assert_eq!(live.stats["events_skipped"], 0, "{}", live.stats);
    assert!(
        live.stderr.contains("--record: complete recording in"),
        "the bridge says where the recording is and that it is complete: {}",
        live.stderr
    );
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(rec.join("recording.json")).unwrap())
            .unwrap();
    assert_eq!(meta["complete"], true, "{meta}");
    assert_eq!(meta["sides"][0], topo.emu_a.as_str(), "{meta}");
    // Every request of the storm is one line of changes.jsonl.
    let changes_kept = std::fs::read_to_string(rec.join("changes.jsonl"))
        .unwrap()
        .lines()
        .count() as u64;
    assert_eq!(
        changes_kept,
        u64::from(live.applied),
        "changes recorded vs applied"
    );
    // One frame recorded per line of the live events: every frame the model
    // saw was decided before the bridge stopped.
    assert_eq!(
        meta["frames"].as_u64(),
        Some(live.lines.len() as u64),
        "frames recorded vs decisions made live; {}",
        live.stats
    );
    between(&rec);
    let replayed = replay(
        &rec,
        &tmp.path().join("out.pcap"),
        &tmp.path().join("replay.tsv"),
    );
    assert_same_events(&live.lines, &replayed);
    eprintln!(
        "{backend}: {} decisions, {} changes, the same in the replay",
        live.lines.len(),
        changes_kept
    );
    live.lines
}

fn link_words_replay_exactly(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology("lkrr1");
    // Sides that start with different links (recording.json's start.links).
    let words = [&STORM_LINK_WORDS[..], &["--a-to-b", "rate 15mbit"]].concat();
    let lines = record_and_replay(&topo, backend, &words, &STORM_LINK_CHANGES);
    assert!(lines.iter().any(|l| l.contains("\tloss\t")), "some loss");
    assert!(
        lines.iter().any(|l| l.split('\t').nth(7) == Some("2")),
        "some duplicate"
    );
}

fn rules_replay_exactly(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology("lkrr2");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lab.rules");
    std::fs::write(
        &file,
        format!(
            "pipe 1 config bw 20Mbit/s delay 2ms queue 50 mask src-port 0xffff\n\
             pipe 2 config bw 20Mbit/s delay 1ms queue 30 codel\n\
             sched 2 config type fq_codel\n\
             add 100 pipe 1 udp from any to any recv {}\n\
             add 200 pipe 2 ip from any to any out\n\
             add 300 allow ip from any to any\n",
            topo.emu_a
        ),
    )
    .unwrap();
    let lines = record_and_replay(
        &topo,
        backend,
        &["--rules", file.to_str().unwrap(), "seed", "3"],
        &[
            "pipe 1 config bw 10Mbit/s delay 3ms queue 40 mask src-port 0xffff",
            "pipe 2 config bw 30Mbit/s delay 1ms queue 30 codel",
            "pipe 1 config bw 20Mbit/s delay 2ms queue 50 mask src-port 0xffff",
        ],
    );
    for pipe in ["1", "2"] {
        assert!(
            lines.iter().any(|l| l.split('\t').nth(10) == Some(pipe)),
            "pipe {pipe} used"
        );
    }
}

/// A netem table (`distribution FILE`), a mahimahi trace (`trace FILE`) and a
/// rule file's profile: a recording copies each into `files/`, so its replay
/// decides as the run did after the originals are deleted or rewritten, and
/// a copy altered in the recording is refused by name.
#[test]
fn files_the_run_read_replay_from_the_recording() {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology("lkrrf");
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("wide.dist");
    // Spread the jitter towards its ends, unlike the normal the default draws.
    std::fs::write(
        &table,
        "# a netem table\n-4000 -3000 -2000 0 2000 3000 4000\n",
    )
    .unwrap();
    let trace = dir.path().join("link.trace");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/traces/12mbit.trace"
        ),
        &trace,
    )
    .unwrap();
    let (table_s, trace_s) = (table.to_str().unwrap(), trace.to_str().unwrap());
    let lines = record_and_replay_after(
        &topo,
        "packet",
        &[
            "delay",
            "2ms",
            "1ms",
            "distribution",
            table_s,
            "trace",
            trace_s,
            "queue",
            "60",
        ],
        &["link a-to-b delay 1ms rate 10mbit queue 40"],
        |rec| {
            let meta: Value =
                serde_json::from_str(&std::fs::read_to_string(rec.join("recording.json")).unwrap())
                    .unwrap();
            for name in [table_s, trace_s] {
                let copy = meta["files"][name]["copy"].as_str();
                assert!(
                    copy.is_some_and(|c| rec.join(c).is_file()),
                    "recording.json maps {name} to a copy in the recording: {meta}"
                );
            }
            std::fs::remove_file(&table).unwrap();
            std::fs::remove_file(&trace).unwrap();
        },
    );
    assert!(
        lines.len() > 100,
        "traffic went through: {} lines",
        lines.len()
    );

    let rules = dir.path().join("radio.rules");
    let profile = dir.path().join("radio.profile");
    let profile_text =
        "name p\nbandwidth 20Mbit/s\nsamples 3\nprob delay\n0.3 100us\n0.6 900us\n1 3ms\n";
    std::fs::write(&profile, profile_text).unwrap();
    std::fs::write(
        &rules,
        "pipe 1 config profile radio.profile\nadd 100 pipe 1 ip from any to any\n",
    )
    .unwrap();
    let rec = dir.path().join("kept");
    record_and_replay_after(
        &topo,
        "packet",
        &["--rules", rules.to_str().unwrap(), "seed", "5"],
        &[
            "pipe 2 config delay 1ms",
            "add 50 pipe 2 udp from any to any out",
        ],
        |rec| {
            // Another profile under the same name: the replay must not read it.
            std::fs::write(
                &profile,
                "name p\nbandwidth 1Mbit/s\nsamples 1\nprob delay\n1 50ms\n",
            )
            .unwrap();
            copy_dir(rec, &dir.path().join("kept"));
        },
    );
    // A copy altered inside the recording is refused, naming the file.
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(rec.join("recording.json")).unwrap())
            .unwrap();
    let copy = meta["files"]["radio.profile"]["copy"]
        .as_str()
        .unwrap_or_else(|| panic!("the profile is mapped to a copy: {meta}"))
        .to_string();
    std::fs::write(rec.join(&copy), "name p\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(["replay", rec.to_str().unwrap()])
        .arg(dir.path().join("out.pcap"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && stderr.contains(&copy) && stderr.contains("altered"),
        "an altered copy is refused by name: {stderr}"
    );
}

/// Copies directory `from` (files and folders of files) to the new `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

// ---- The options' refusals: before any interface is touched ----

fn bridge(args: &[&str]) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(["bridge", "lkrrnone0", "lkrrnone1"])
        .args(args)
        .output()
        .expect("linkem runs");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    )
}

#[test]
fn record_options_are_refused_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let path = |p: &str| tmp.path().join(p).to_str().unwrap().to_string();
    std::fs::create_dir(path("full")).unwrap();
    std::fs::write(path("full/mine.txt"), "keep me").unwrap();
    std::fs::write(path("lab.rules"), "pipe 1 config delay 1ms\n").unwrap();

    let (ok, e) = bridge(&["--record", &path("full"), "delay", "1ms"]);
    assert!(
        !ok && e.contains("not empty") && e.contains("mine.txt"),
        "{e}"
    );
    assert_eq!(
        std::fs::read_to_string(path("full/mine.txt")).unwrap(),
        "keep me"
    );
    let (ok, e) = bridge(&[
        "--record",
        &path("lab.rules"),
        "--rules",
        &path("lab.rules"),
    ]);
    assert!(
        !ok && e.contains("--record") && e.contains("--rules"),
        "{e}"
    );
    assert_eq!(
        std::fs::read_to_string(path("lab.rules")).unwrap(),
        "pipe 1 config delay 1ms\n"
    );
    let (ok, e) = bridge(&["--forward-only", "--record", &path("new")]);
    assert!(
        !ok && e.contains("--forward-only") && e.contains("--record"),
        "{e}"
    );
    let (ok, e) = bridge(&["--record-limit", "1MB", "delay", "1ms"]);
    assert!(!ok && e.contains("--record <DIR>"), "{e}");
    let (ok, e) = bridge(&["--record", &path("new"), "--record-limit", "5"]);
    assert!(
        !ok && e.contains("--record-limit") && e.contains("unit"),
        "{e}"
    );
    let events_inside = path("new/live.tsv");
    let (ok, e) = bridge(&["--record", &path("new"), "--events", &events_inside]);
    assert!(!ok && e.contains("inside the --record directory"), "{e}");
    let (ok, e) = bridge(&["--record", &path("new"), "--events", &path("new")]);
    assert!(!ok && e.contains("same file"), "{e}");
    // The bridge did not start (no such interface): no recording is left.
    let (ok, e) = bridge(&["--record", &path("new"), "delay", "1ms"]);
    assert!(!ok && e.contains("lkrrnone0"), "{e}");
    assert!(!tmp.path().join("new").exists(), "{e}");
}

/// A rules bridge whose pipe plays a trace (an opportunity every 10 ms)
/// counts it from the link's start, as one link's trace does live: every
/// packet the pipe delivers leaves a whole number of 10 ms after the start
/// the recording stores (`start_ns`), not after its first packet; the
/// replay of the recording decides the same.
#[test]
fn a_rules_pipes_trace_starts_at_the_links_start_live_and_replayed() {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology("lkrt");
    let dir = tempfile::tempdir().unwrap();
    let (file, trace) = (dir.path().join("t.rules"), dir.path().join("t.trace"));
    std::fs::write(&trace, "10\n").unwrap();
    std::fs::write(
        &file,
        format!(
            "pipe 1 config trace {} queue 200\n\
             pipe 2 config delay 1ms\n\
             add 100 pipe 1 udp from any to any recv {}\n\
             add 200 pipe 2 ip from any to any out\n\
             add 300 allow ip from any to any\n",
            trace.display(),
            topo.emu_a
        ),
    )
    .unwrap();
    let start_ns = std::cell::Cell::new(0u64);
    let lines = record_and_replay_after(
        &topo,
        "packet",
        &["--rules", file.to_str().unwrap(), "seed", "4"],
        &["pipe 2 config delay 2ms"],
        |rec| {
            let meta: Value =
                serde_json::from_str(&std::fs::read_to_string(rec.join("recording.json")).unwrap())
                    .unwrap();
            start_ns.set(meta["start_ns"].as_u64().expect("start_ns recorded"));
        },
    );
    let start = start_ns.get();
    let released: Vec<u64> = lines
        .iter()
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .filter(|f| f[10] == "1" && f[4] != "-")
        .map(|f| f[4].parse().unwrap())
        .collect();
    assert!(released.len() > 10, "pipe 1 delivered {}", released.len());
    let off: Vec<u64> = released
        .iter()
        .map(|r| (r - start) % 10_000_000)
        .filter(|&o| o != 0)
        .collect();
    assert!(
        off.is_empty(),
        "releases off the trace's opportunities from start_ns {start} (ns past one): {off:?}"
    );
}
