//! `linkem bridge --events FILE` on both backends, with link words and with
//! a rule file, while a storm of `linkem ctl` changes runs: every line is a
//! model decision with a valid fate, one line per wire frame the model saw,
//! and the fates in the file match the bridge's counts. `nsA <-veth-> linkem
//! <-veth-> nsB`, names unique to each test, torn down by the topology's Drop.
//! Needs root and prints "skipped" otherwise.

#[macro_use]
mod common;

use common::*;
use linkem_core::Fate;
use linkem_io::netns::Topology;
use serde_json::Value;
use std::collections::HashMap;

on_both_backends!(
    events_of_link_words_match_the_counts,
    events_of_rules_match_the_counts
);

/// Runs a bridge with `args` and `--events`, UDP both ways while `changes`
/// (request lines, in turn) go over the control socket; returns the final
/// stats and the events file's lines.
fn run(topo: &Topology, backend: &str, args: &[&str], changes: &[&str]) -> (Value, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.tsv");
    let r = bridge_under_storm(topo, backend, &events, args, changes);
    (r.stats, event_lines(&events))
}

/// The checks both runs share; `may_hold`: the model may hold packets
/// undecided at the end (a scheduler), which have no line.
fn check(v: &Value, lines: &[String], may_hold: bool) {
    assert_eq!(v["events_skipped"], 0, "{v}");
    let columns = linkem_core::model::EVENTS_HEADER.split('\t').count();
    let names: Vec<&str> = Fate::ALL.iter().map(|f| f.name()).collect();
    // (side, fate) -> lines
    let mut by: HashMap<(String, String), u64> = HashMap::new();
    for (i, l) in lines.iter().enumerate() {
        let c: Vec<&str> = l.split('\t').collect();
        assert_eq!(c.len(), columns, "line {i}: {l}");
        assert!(names.contains(&c[3]), "line {i}: fate {}: {l}", c[3]);
        let side = c[columns - 1].to_string();
        assert!(side == "a" || side == "b", "line {i}: side {side}");
        *by.entry((side, c[3].to_string())).or_default() += 1;
    }
    let mut seen_total = 0;
    for (d, side) in [(0usize, "a"), (1, "b")] {
        let dir = &v["directions"][d];
        assert_counts_add_up(dir, "received + segmented = fates + in flight");
        let n = |k: &str| dir[k].as_u64().unwrap();
        // The plain link lists its fates only, the node every fate.
        let f = |name: &str| dir["fates"][name].as_u64().unwrap_or(0);
        let lines_of = |name: &str| {
            by.get(&(side.to_string(), name.to_string()))
                .copied()
                .unwrap_or(0)
        };
        let seen = n("received") + n("segmented") - f("too-big");
        let lines_side: u64 = names.iter().map(|&x| lines_of(x)).sum();
        seen_total += seen;
        eprintln!("direction {d}: the model saw {seen} frames; {lines_side} lines; {dir}");
        if may_hold {
            assert!(
                lines_side <= seen && lines_side + n("in_flight") >= seen,
                "direction {d}"
            );
        } else {
            assert_eq!(
                lines_side, seen,
                "direction {d}: one line per frame the model saw"
            );
        }
        // The model's drops are exactly the bridge's.
        for x in [
            "loss",
            "queue-full",
            "policed",
            "denied",
            "flow-limit",
            "red-drop",
            "aqm-drop",
        ] {
            assert_eq!(lines_of(x), f(x), "direction {d}: {x}");
        }
        // What the model delivered the stage sent, shed, found late, or holds.
        let delivered = lines_of("delivered");
        let after = f("delivered") + f("backpressure") + f("late") + f("tx-error") + f("flushed");
        assert!(
            delivered >= f("delivered") && delivered <= after + n("in_flight"),
            "direction {d}: {delivered} delivered in events, {after} by the stage"
        );
        assert!(delivered > 1000, "direction {d}: traffic flowed");
    }
    assert!(lines.len() as u64 <= seen_total);
}

fn events_of_link_words_match_the_counts(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology("lkev1");
    let (v, lines) = run(&topo, backend, &STORM_LINK_WORDS, &STORM_LINK_CHANGES);
    check(&v, &lines, false);
    assert!(lines.iter().any(|l| l.contains("\tloss\t")), "some loss");
}

fn events_of_rules_match_the_counts(backend: &str) {
    let _g = serial();
    if skip() {
        return;
    }
    let topo = topology("lkev2");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lab.rules");
    std::fs::write(
        &file,
        "pipe 1 config bw 20Mbit/s delay 2ms queue 50 mask src-port 0xffff\n\
         pipe 2 config bw 20Mbit/s delay 1ms queue 30 codel\n\
         sched 2 config type fq_codel\n\
         add 100 pipe 1 udp from any to any in\n\
         add 200 pipe 2 ip from any to any out\n\
         add 300 allow ip from any to any\n",
    )
    .unwrap();
    let (v, lines) = run(
        &topo,
        backend,
        &["--rules", file.to_str().unwrap(), "seed", "3"],
        &[
            "pipe 1 config bw 10Mbit/s delay 3ms queue 40 mask src-port 0xffff",
            "pipe 2 config bw 30Mbit/s delay 1ms queue 30 codel",
            "pipe 1 config bw 20Mbit/s delay 2ms queue 50 mask src-port 0xffff",
        ],
    );
    check(&v, &lines, true);
    assert!(
        lines.iter().any(|l| l.split('\t').nth(10) == Some("1")),
        "pipe 1 used"
    );
    assert!(
        lines.iter().any(|l| l.split('\t').nth(10) == Some("2")),
        "pipe 2 used"
    );
}
