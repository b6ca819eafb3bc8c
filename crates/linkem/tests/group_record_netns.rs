//! A group of pairs recorded and replayed: three topologies `nsA <-veth->
//! linkem <-veth-> nsB` (names unique to the test, torn down by each
//! topology's Drop), one linkem for all three: a pair of link words with
//! loss, a pair with a schedule (a step at 1 s, counted from the group's
//! start) and a pair of Dummynet rules. Pings through each, `--record DIR
//! --events LIVE`, a `linkem ctl` change of the first pair's link and of the
//! node's pipe while they run; then `linkem replay DIR OUTDIR --events REPLAY` gives,
//! link by link, the live run's events line for line. Needs root and prints
//! "skipped" otherwise.

#[macro_use]
mod common;

use common::*;
use linkem_io::netns::Topology;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A group events file's lines, by link, each as written.
fn by_link(path: &Path) -> BTreeMap<String, Vec<Value>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{}: not a JSON line ({e}): {line}", path.display()));
        let link = v["link"]
            .as_str()
            .expect("each line names its link")
            .to_string();
        out.entry(link).or_default().push(v);
    }
    out
}

/// Pings from A to B through `topo`, `count` of them `gap_s` apart.
fn pings(topo: &Topology, count: u32, gap_s: f64) {
    let o = topo
        .exec_in_a(&[
            "ping",
            "-q",
            "-c",
            &count.to_string(),
            "-i",
            &format!("{gap_s}"),
            "-W",
            "1",
            &topo.addr_b.to_string(),
        ])
        .expect("ping runs");
    // Some pings are lost on purpose (loss, rules): ping then exits 1.
    assert!(o.status.code().is_some_and(|c| c <= 1), "{o:?}");
}

#[test]
fn a_recorded_group_of_three_pairs_replays_to_each_links_events() {
    let _g = serial();
    if skip() {
        return;
    }
    let t0 = Instant::now();
    let topos: Vec<Topology> = (0..3).map(|_| topology("lkgr")).collect();
    let dir = tempfile::tempdir().unwrap();
    let sched = dir.path().join("step.sched");
    std::fs::write(&sched, "0s delay 2ms\n1s delay 6ms loss 10%\n").unwrap();
    let rules = dir.path().join("node.rules");
    std::fs::write(
        &rules,
        "pipe 1 config delay 3ms plr 0.1\nadd 100 pipe 1 ip from any to any\n",
    )
    .unwrap();
    let rec = dir.path().join("rec");
    let live = dir.path().join("live.jsonl");
    let mut args: Vec<String> = [
        "bridge",
        "--stats",
        "json",
        "--max-lag",
        "off",
        "--record",
        rec.to_str().unwrap(),
        "--events",
        live.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec();
    let words: [Vec<String>; 3] = [
        vec![
            "delay".into(),
            "1ms".into(),
            "loss".into(),
            "5%".into(),
            "seed".into(),
            "11".into(),
        ],
        vec!["schedule".into(), sched.display().to_string()],
        vec!["rules".into(), rules.display().to_string()],
    ];
    for (t, w) in topos.iter().zip(&words) {
        args.extend(["--pair".to_string(), t.emu_a.clone(), t.emu_b.clone()]);
        args.extend(w.iter().cloned());
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("linkem starts");
    let mut err = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = err.read_to_string(&mut text);
        text
    });
    let mut out = child.stdout.take().unwrap();
    let stdout = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = out.read_to_string(&mut text);
        text
    });
    // The stages run once the start line is out; the recording's folder is
    // there before any interface is touched.
    std::thread::sleep(Duration::from_millis(700));
    // Pings through every pair at once, over the schedule's step at 1 s;
    // meanwhile a change of the first pair's link and of the node's pipe
    // over their control sockets (recorded, replayed at their instants).
    let name = |t: &Topology| format!("{}-{}", t.emu_a, t.emu_b);
    std::thread::scope(|s| {
        for t in &topos {
            s.spawn(move || pings(t, 60, 0.03));
        }
        std::thread::sleep(Duration::from_millis(900));
        for (t, words) in [
            (&topos[0], &["link", "delay", "4ms", "loss", "5%"][..]),
            (
                &topos[2],
                &["pipe", "1", "config", "delay", "5ms", "plr", "0.1"][..],
            ),
        ] {
            let o = Command::new(env!("CARGO_BIN_EXE_linkem"))
                .args(["ctl", "--name", &name(t)])
                .args(words)
                .output()
                .unwrap();
            assert!(o.status.success(), "ctl {words:?}: {o:?}");
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    // Safety: kill with a pid we own.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    let stderr = stderr.join().unwrap();
    let _ = stdout.join().unwrap();
    assert!(status.success(), "linkem failed: {stderr}");

    let outdir = dir.path().join("replayed");
    let replayed = dir.path().join("replay.jsonl");
    let o = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(["replay", rec.to_str().unwrap(), outdir.to_str().unwrap()])
        .args(["--events", replayed.to_str().unwrap(), "--stats", "json"])
        .output()
        .expect("linkem replay runs");
    let rerr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "linkem replay failed: {rerr}");
    assert!(!rerr.contains("incomplete"), "{rerr}");

    let live = by_link(&live);
    let again = by_link(&replayed);
    let names: Vec<String> = topos
        .iter()
        .map(|t| format!("{}-{}", t.emu_a, t.emu_b))
        .collect();
    assert_eq!(
        live.keys().collect::<Vec<_>>(),
        again.keys().collect::<Vec<_>>(),
        "the same links"
    );
    let mut report = Vec::new();
    for name in &names {
        let (l, r) = (&live[name], &again[name]);
        report.push(format!("{name}: {} events", l.len()));
        // Each ping and its reply: 120 arrivals, fewer where the link lost some.
        assert!(
            l.len() >= 100,
            "{name}: {} live events; stderr: {stderr}",
            l.len()
        );
        if let Some(k) = l.iter().zip(r).position(|(a, b)| a != b) {
            panic!(
                "{name}: line {k} differs:\n live   {}\n replay {}",
                l[k], r[k]
            );
        }
        assert_eq!(l.len(), r.len(), "{name}: as many lines");
        assert!(
            outdir.join(format!("{name}.pcap")).is_file(),
            "{name}'s capture"
        );
    }
    // One start instant for every link, kept by each link's recording.
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(rec.join("group.json")).unwrap()).unwrap();
    let metas: Vec<Value> = index["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let meta = rec.join(l["dir"].as_str().unwrap()).join("recording.json");
            serde_json::from_str(&std::fs::read_to_string(meta).unwrap()).unwrap()
        })
        .collect();
    let starts: Vec<u64> = metas
        .iter()
        .map(|m| m["start_ns"].as_u64().unwrap())
        .collect();
    let changes: Vec<u64> = metas
        .iter()
        .map(|m| m["changes"].as_u64().unwrap())
        .collect();
    assert_eq!(
        changes,
        [1, 0, 1],
        "each link's recording keeps its own changes"
    );
    assert_eq!(starts.len(), 3);
    assert!(starts.iter().all(|s| *s == starts[0]), "{starts:?}");
    // The rules pair decided through its pipe, the others through no pipe.
    assert!(live[&names[2]].iter().all(|v| v["pipe"] == 1), "rules pair");
    assert!(live[&names[0]].iter().all(|v| v["pipe"].is_null()));
    // The schedule (2 ms, then 6 ms) and the changes (1 ms then 4 ms; the
    // pipe's 3 ms then 5 ms) took effect.
    let delays = |link: &str| -> Vec<u64> {
        live[link]
            .iter()
            .filter(|v| v["fate"] == "delivered")
            .map(|v| v["release_ns"].as_u64().unwrap() - v["arrival_ns"].as_u64().unwrap())
            .collect()
    };
    for (link, before_ms, after_ms) in [(&names[0], 1, 4), (&names[1], 2, 6), (&names[2], 3, 5)] {
        let d = delays(link);
        for ms in [before_ms, after_ms] {
            let range = ms * 1_000_000..(ms + 1) * 1_000_000;
            assert!(
                d.iter().any(|x| range.contains(x)),
                "{link}: no {ms} ms in {d:?}"
            );
        }
    }
    eprintln!(
        "group of 3 recorded and replayed in {:.1} s; {}",
        t0.elapsed().as_secs_f64(),
        report.join(", ")
    );
}
