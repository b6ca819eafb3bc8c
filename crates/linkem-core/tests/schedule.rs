//! Schedules: each change takes effect at its instant exactly. The reference
//! drives a link without a schedule and calls `Link::reconfigure` itself at
//! each instant (origin = the first arrival, + loop · period + the line's
//! time), between the arrivals around it; the scheduled link must decide
//! every packet the same.

use linkem_core::{Link, LinkConfig, LinkSpec, PacketMeta};
use proptest::prelude::*;

fn spec(words: &str, schedule: &str) -> LinkConfig {
    let words: Vec<&str> = words.split_whitespace().collect();
    let mut files = |name: &str| match name {
        "s" => Ok(schedule.to_string()),
        _ => Err(format!("'{name}': no such file")),
    };
    LinkSpec::parse_words(&words, &mut files)
        .unwrap_or_else(|e| panic!("{e}"))
        .link
}

#[test]
fn a_change_takes_effect_at_its_instant_exactly() {
    let mut link = Link::new(spec("delay 10ms schedule s", "1s delay 50ms\n"), 1, 0);
    let t0 = 7_000_000_000;
    let mut send = |t: u64| link.on_arrival(t, PacketMeta { len_bytes: 100 }).release_ns - t;
    assert_eq!(send(t0), 10_000_000);
    assert_eq!(send(t0 + 999_999_999), 10_000_000);
    assert_eq!(send(t0 + 1_000_000_000), 50_000_000);
}

#[test]
fn a_looping_schedule_comes_back() {
    let text = "0s delay 1ms\n1s delay 2ms\n2s loop\n";
    let mut link = Link::new(spec("schedule s", text), 1, 0);
    let delays: Vec<u64> = (0..9)
        .map(|i| {
            let t = i * 500_000_000;
            (link.on_arrival(t, PacketMeta { len_bytes: 100 }).release_ns - t) / 1_000_000
        })
        .collect();
    assert_eq!(delays, [1, 1, 2, 2, 1, 1, 2, 2, 1]);
    // An hour idle goes straight to the loop it falls in.
    let t = 3_600_000_000_000 + 1_500_000_000;
    assert_eq!(
        link.on_arrival(t, PacketMeta { len_bytes: 100 }).release_ns - t,
        2_000_000
    );
}

/// (line time in ms, words) → schedule text.
fn text(lines: &[(u64, String)], period_ms: Option<u64>) -> String {
    let mut out: String = lines
        .iter()
        .map(|(ms, w)| format!("{ms}ms {w}\n"))
        .collect();
    if let Some(p) = period_ms {
        out += &format!("{p}ms loop\n");
    }
    out
}

fn words() -> impl Strategy<Value = String> {
    prop_oneof![
        (1u64..50).prop_map(|m| format!("rate {m}mbit")),
        (0u64..20).prop_map(|d| format!("delay {d}ms")),
        (0u64..20).prop_map(|l| format!("loss {l}%")),
        (1u64..30).prop_map(|q| format!("queue {q}")),
        Just("delay 5ms 2ms".to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn scheduled_changes_decide_as_reconfigure_at_each_instant(
        steps in proptest::collection::vec((0u64..40, words()), 1..8),
        looped in any::<bool>(),
        gaps in proptest::collection::vec((0u64..3_000_000, 40u32..1500), 1..400),
    ) {
        let mut at = 0;
        let lines: Vec<(u64, String)> = steps.iter().map(|(g, w)| { at += g; (at, w.clone()) }).collect();
        let period = looped.then_some(at + 5);
        let base = "rate 20mbit delay 1ms";
        let mut scheduled = Link::new(spec(&format!("{base} schedule s"), &text(&lines, period)), 5, 0);
        let mut plain = Link::new(spec(base, ""), 5, 0);
        // Each line's whole configuration, as the layers make it.
        let configs: Vec<LinkConfig> = (0..lines.len()).map(|k| {
            // A later line replaces what an earlier one set: the lines are layers.
            let mut ws: Vec<Vec<&str>> = vec![base.split_whitespace().collect()];
            for (_, w) in &lines[..=k] {
                ws.push(w.split_whitespace().collect());
            }
            let layered: Vec<&[&str]> = ws.iter().map(Vec::as_slice).collect();
            LinkSpec::parse_layers(&layered, linkem_core::Dialect::Linkem, &mut linkem_core::config::no_files).unwrap().link
        }).collect();
        let mut t = 1_000_000_000u64;
        // The schedule starts at the first arrival.
        let origin = t + gaps[0].0;
        let (mut next, mut cycle) = (0usize, 0u64);
        for (i, &(g, len)) in gaps.iter().enumerate() {
            t += g;
            loop {
                if next == lines.len() {
                    match period { Some(_) => { next = 0; cycle += 1; } None => break }
                }
                let instant = origin + cycle * period.unwrap_or(0) * 1_000_000 + lines[next].0 * 1_000_000;
                if instant > t { break; }
                plain.reconfigure(instant, configs[next].clone());
                next += 1;
            }
            let a = scheduled.on_arrival(t, PacketMeta { len_bytes: len });
            let b = plain.on_arrival(t, PacketMeta { len_bytes: len });
            prop_assert_eq!(a, b, "packet {} at {} ns", i, t);
        }
    }
}

#[test]
fn a_bad_line_names_the_file_and_line() {
    let words = ["rate", "1mbit", "schedule", "s"];
    let mut files = |_: &str| Ok("0s delay 1ms\n5s rate fast\n".to_string());
    let e = LinkSpec::parse_words(&words, &mut files).unwrap_err();
    assert_eq!(e.position, 4);
    assert!(
        e.message
            .starts_with("schedule 's' line 2, link word 2: <6 bytes of the file>: expected"),
        "{}",
        e.message
    );
    let spec = LinkSpec::parse_words(&["schedule", "s"], &mut |_: &str| {
        Ok("1s delay 2ms\n".into())
    })
    .unwrap();
    assert_eq!(spec.link.to_string(), "queue 1000 schedule s");
}

#[test]
fn the_shipped_schedule_parses() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files =
        |name: &str| std::fs::read_to_string(root.join(name)).map_err(|e| e.to_string());
    let spec =
        LinkSpec::parse_words(&["schedule", "testdata/schedules/steps.sched"], &mut files).unwrap();
    let s = spec.link.schedule.unwrap();
    assert_eq!(s.period_ns, Some(60_000_000_000));
    assert_eq!(s.changes.len(), 2 + 11 + 10 + 91);
}

#[test]
fn a_pipe_takes_a_schedule_and_a_trace_in_its_words() {
    use linkem_core::node::{Node, NodeConfig, PacketIn};
    use linkem_core::rules::{parse_rules, FlowKey, Side};
    let text = "pipe 1 config delay 10 trace t schedule s\nadd 100 pipe 1 ip from any to any\n";
    let mut files = |name: &str| match name {
        "s" => Ok("1s delay 50ms\n".to_string()),
        "t" => Ok("1\n".to_string()),
        _ => Err(format!("'{name}': no such file")),
    };
    let set = parse_rules(text, ["a", "b"], &mut files).unwrap_or_else(|e| panic!("{e}"));
    let mut node = Node::new(set, NodeConfig::default());
    let mut out = Vec::new();
    let t0 = 2_000_000_000;
    for (i, t) in [t0, t0 + 1_000_000_000].into_iter().enumerate() {
        let pkt = PacketIn {
            len_bytes: 100,
            key: FlowKey::default(),
            side: Side::A,
            tag: i as u64,
        };
        node.on_arrival(t, pkt, &mut out);
    }
    let delays: Vec<u64> = out.iter().map(|d| d.release_ns).collect();
    // The trace's next opportunity (1 ms after the arrival), then the delay: 10 ms, then 50 ms.
    assert_eq!(
        delays,
        [t0 + 1_000_000 + 10_000_000, t0 + 1_001_000_000 + 50_000_000]
    );
}
