//! Expected words and links written from tc-netem(8), tc-tbf(8) and Chaos
//! Mesh's NetworkChaos documentation, not from the mapping's code.

use super::*;
use crate::chaos::*;
use linkem_core::LossConfig;

fn spec(yaml: &str) -> LinkChaosSpec {
    let head = "selector: {namespaces: [default]}\nmode: all\n";
    serde_yaml::from_str(&format!("{head}{yaml}")).expect("test spec parses")
}

fn words(yaml: &str) -> DirectionWords {
    link_words(&spec(yaml)).unwrap_or_else(|e| panic!("{yaml}: refused: {e}"))
}

fn refused(yaml: &str) -> SpecError {
    match link_words(&spec(yaml)) {
        Ok(w) => panic!("{yaml}: accepted as {w:?}"),
        Err(e) => e,
    }
}

fn link(w: &Option<String>) -> linkem_core::LinkConfig {
    LinkSpec::parse(w.as_deref().expect("words for the direction"))
        .expect("words parse")
        .link
}

#[test]
fn delay_action_is_the_pods_egress_by_default() {
    let w = words("action: delay\ndelay: {latency: 20ms}");
    assert_eq!(w.egress.as_deref(), Some("delay 20ms"));
    assert_eq!(w.ingress, None);
    assert_eq!(link(&w.egress).delay_ns, 20_000_000);
}

#[test]
fn delay_jitter_correlation_and_defaults() {
    let w = words("action: delay\ndelay: {latency: 10ms, jitter: 5ms, correlation: \"25\"}");
    let l = link(&w.egress);
    assert_eq!((l.delay_ns, l.jitter_ns), (10_000_000, 5_000_000));
    assert!((l.delay_correlation - 0.25).abs() < 1e-12);
    let w = words("action: delay\ndelay: {latency: 10ms, jitter: 5ms}");
    assert!(
        w.notes.iter().any(|n| n.starts_with("delay.jitter")),
        "{:?}",
        w.notes
    );
    let y = "action: delay\ndelay: {latency: 10ms, jitter: 5ms}\nlinkem: {egress: reorder allow}";
    assert!(link(&words(y).egress).reorder_allow);
    // Defaults jitter "0ms", correlation "0": a constant delay.
    let l = link(&words("action: delay\ndelay: {latency: 1.5s}").egress);
    assert_eq!(
        (l.delay_ns, l.jitter_ns, l.delay_correlation),
        (1_500_000_000, 0, 0.0)
    );
    // Go's `m` is minutes.
    assert_eq!(
        link(&words("action: delay\ndelay: {latency: 1m}").egress).delay_ns,
        60_000_000_000
    );
    assert_eq!(
        link(&words("action: delay\ndelay: {latency: 250us}").egress).delay_ns,
        250_000
    );
}

#[test]
fn reorder_with_and_without_gap() {
    let y = "action: delay\ndelay: {latency: 10ms, reorder: {reorder: \"25\", correlation: \"50\", gap: 5}}";
    let l = link(&words(y).egress);
    assert!((l.reorder_probability - 0.25).abs() < 1e-12);
    assert!((l.reorder_correlation - 0.5).abs() < 1e-12);
    assert_eq!(l.reorder_gap, 5);
    // tc-netem: a reorder without a gap reorders every packet's chance (gap 1).
    let y = "action: delay\ndelay: {latency: 10ms, reorder: {reorder: \"25\"}}";
    assert_eq!(link(&words(y).egress).reorder_gap, 1);
}

#[test]
fn loss_duplicate_corrupt_are_percentages_with_correlation() {
    let l = link(&words("action: loss\nloss: {loss: \"10\", correlation: \"25\"}").egress);
    assert_eq!(
        l.loss,
        LossConfig::Random {
            p: 0.10,
            correlation: 0.25
        }
    );
    let l = link(&words("action: duplicate\nduplicate: {duplicate: \"5\"}").egress);
    assert!((l.duplicate - 0.05).abs() < 1e-12 && l.duplicate_correlation == 0.0);
    let l =
        link(&words("action: corrupt\ncorrupt: {corrupt: \"0.5\", correlation: \"10\"}").egress);
    assert!((l.corrupt - 0.005).abs() < 1e-12 && (l.corrupt_correlation - 0.1).abs() < 1e-12);
}

#[test]
fn netem_and_each_netem_action_merge_every_given_impairment() {
    // Chaos Mesh's mergeNetem: delay, loss, duplicate, corrupt and rate all
    // apply for any of the netem actions.
    for action in ["netem", "delay", "loss"] {
        let y = format!(
            "action: {action}\ndelay: {{latency: 10ms}}\nloss: {{loss: \"1\"}}\nrate: {{rate: 1mbit}}"
        );
        let l = link(&words(&y).egress);
        assert_eq!(l.delay_ns, 10_000_000, "{action}");
        assert_eq!(
            l.loss,
            LossConfig::Random {
                p: 0.01,
                correlation: 0.0
            },
            "{action}"
        );
        assert_eq!(l.rate_bps, Some(1_000_000), "{action}");
    }
    // No action: netem's.
    assert_eq!(
        link(&words("delay: {latency: 3ms}").egress).delay_ns,
        3_000_000
    );
    let e = refused("action: netem");
    assert_eq!(e.field, "action");
    assert!(e.message.contains("delay, loss"), "{e}");
}

#[test]
fn a_field_the_action_does_not_use_is_refused() {
    let e = refused("action: bandwidth\nbandwidth: {rate: 1mbit, limit: 10000, buffer: 10000}\ndelay: {latency: 1ms}");
    assert_eq!(e.field, "delay");
    let e = refused("action: delay\ndelay: {latency: 1ms}\nbandwidth: {rate: 1mbit, limit: 10000, buffer: 10000}");
    assert_eq!(e.field, "bandwidth");
    let e = refused("action: partition\nloss: {loss: \"5\"}");
    assert_eq!(e.field, "loss");
}

#[test]
fn partition_drops_everything_in_the_directions() {
    let w = words("action: partition");
    assert_eq!(
        link(&w.egress).loss,
        LossConfig::Random {
            p: 1.0,
            correlation: 0.0
        }
    );
    assert_eq!(w.ingress, None);
    let w = words("action: partition\ndirection: from");
    assert_eq!(w.egress, None);
    assert_eq!(
        link(&w.ingress).loss,
        LossConfig::Random {
            p: 1.0,
            correlation: 0.0
        }
    );
    let w = words("action: partition\ndirection: both");
    assert_eq!(w.egress, w.ingress);
    assert!(w.egress.is_some());
}

#[test]
fn a_target_or_other_per_destination_scope_is_refused() {
    let t = "target: {selector: {namespaces: [b]}, mode: all}";
    assert_eq!(refused(&format!("action: partition\n{t}")).field, "target");
    assert_eq!(
        refused(&format!("action: delay\ndelay: {{latency: 1ms}}\n{t}")).field,
        "target"
    );
    let e = refused("action: delay\ndelay: {latency: 1ms}\nexternalTargets: [1.2.3.4]");
    assert_eq!(e.field, "externalTargets");
    // The status says why and what to do instead.
    let said = e.to_string();
    assert!(
        said.starts_with("externalTargets: a per-destination scope is not supported")
            && said.contains("Remove it")
            && said.contains("linkem.rules"),
        "{said}"
    );
    assert_eq!(
        refused("action: delay\ndelay: {latency: 1ms}\ntargetDevice: eth1").field,
        "targetDevice"
    );
    assert_eq!(
        refused("action: delay\ndelay: {latency: 1ms}\nremoteCluster: x").field,
        "remoteCluster"
    );
}

#[test]
fn tc_rate_units_bits_and_bytes() {
    // tc(8): bit, kbit, mbit, gbit, tbit are bits per second in powers of
    // 1000; bps, kbps, mbps, gbps, tbps are BYTES per second.
    let cases: [(&str, u64); 12] = [
        ("100bit", 100),
        ("64kbit", 64_000),
        ("10mbit", 10_000_000),
        ("1gbit", 1_000_000_000),
        ("2tbit", 2_000_000_000_000),
        ("125bps", 1_000),
        ("1kbps", 8_000),
        ("1mbps", 8_000_000),
        ("1gbps", 8_000_000_000),
        ("1tbps", 8_000_000_000_000),
        ("1.5mbit", 1_500_000),
        ("10MBIT", 10_000_000),
    ];
    for (text, bits) in cases {
        assert_eq!(tc_rate_bits_per_s(text), Ok(bits), "{text}");
        let y =
            format!("action: bandwidth\nbandwidth: {{rate: {text}, limit: 20000, buffer: 1514}}");
        assert_eq!(link(&words(&y).egress).rate_bps, Some(bits), "{text}");
    }
    for bad in ["10", "10mbyte", "x mbit", "0mbit", "0.0001bit"] {
        assert!(tc_rate_bits_per_s(bad).is_err(), "{bad}");
    }
}

#[test]
fn tbf_limit_is_bytes_queued_and_buffer_the_bucket() {
    // Chaos Mesh's documented example: rate 1mbps, limit 20971520, buffer 10000.
    let w = words("action: bandwidth\nbandwidth: {rate: 1mbps, limit: 20971520, buffer: 10000}");
    let l = link(&w.egress);
    assert_eq!(l.rate_bps, Some(8_000_000));
    assert_eq!(l.queue_bytes, Some(20_971_520));
    assert!(
        w.notes.iter().any(|n| n.contains("bandwidth.buffer 10000")),
        "{:?}",
        w.notes
    );
    // A bucket under one frame drops full-size packets in tbf.
    let e = refused("action: bandwidth\nbandwidth: {rate: 1mbit, limit: 10000, buffer: 1000}");
    assert_eq!(e.field, "bandwidth.buffer");
    // peakrate (bit/s) must exceed the rate, as tbf requires.
    let e = refused("action: bandwidth\nbandwidth: {rate: 1mbit, limit: 10000, buffer: 2000, peakrate: 500000, minburst: 1514}");
    assert_eq!(e.field, "bandwidth.peakrate");
    let w = words("action: bandwidth\nbandwidth: {rate: 1mbit, limit: 10000, buffer: 2000, peakrate: 2000000, minburst: 1514}");
    assert!(
        w.notes.iter().any(|n| n.contains("peakrate")),
        "{:?}",
        w.notes
    );
    assert_eq!(refused("action: bandwidth").field, "bandwidth");
}

#[test]
fn directions_and_linkem_words() {
    let w = words("action: delay\ndelay: {latency: 10ms}\ndirection: from");
    assert_eq!(
        (w.egress.as_deref(), w.ingress.as_deref()),
        (None, Some("delay 10ms"))
    );
    let w = words("action: delay\ndelay: {latency: 10ms}\ndirection: both");
    assert_eq!(w.egress.as_deref(), Some("delay 10ms"));
    assert_eq!(w.ingress.as_deref(), Some("delay 10ms"));
    let w = words(
        "action: delay\ndelay: {latency: 10ms}\nlinkem: {link: rate 10mbit, egress: loss 1%, ingress: queue 50}",
    );
    assert_eq!(w.egress.as_deref(), Some("delay 10ms rate 10mbit loss 1%"));
    assert_eq!(w.ingress.as_deref(), Some("rate 10mbit queue 50"));
    // linkem words alone, no NetworkChaos impairment needed when the action is absent?
    // Chaos Mesh needs one; linkem's own words are one.
    let w = words("linkem: {egress: delay 5ms}");
    assert_eq!(w.egress.as_deref(), Some("delay 5ms"));
}

#[test]
fn a_malformed_latency_names_the_field_word_and_position() {
    // The schema's pattern refuses `20xs`; reaching the words anyway, linkem's parser names it.
    let e = refused("action: delay\ndelay: {latency: 20xs}");
    assert_eq!(e.field, "delay.latency");
    assert_eq!(e.word.as_deref(), Some("20xs"));
    assert_eq!(e.position, Some(2));
    assert!(e.to_string().contains("'20xs' (word 2)"), "{e}");
}

#[test]
fn a_word_linkem_refuses_in_its_own_words_is_placed() {
    let e =
        refused("action: delay\ndelay: {latency: 10ms}\nlinkem: {egress: rate 10mbit delay 5ms}");
    assert_eq!(e.field, "linkem.egress");
    assert_eq!(e.word.as_deref(), Some("delay"));
    assert_eq!(e.position, Some(5));
    let e = refused("linkem: {ingress: red 1%}");
    assert_eq!(
        (e.field.as_str(), e.word.as_deref(), e.position),
        ("linkem.ingress", Some("red"), Some(1))
    );
}

#[test]
fn schedule_and_trace_go_to_their_directions() {
    let w = words(
        "linkem: {link: delay 10ms, schedule: [{at: 1m30s, words: delay 50ms, direction: to}], trace: {ingress: \"0\\n1\\n\"}}",
    );
    assert_eq!(
        w.schedule.egress.as_deref(),
        Some("90000000000ns delay 50ms\n")
    );
    assert_eq!(w.schedule.ingress, None);
    assert_eq!(w.traces.ingress.as_deref(), Some("0\n1\n"));
    let e = refused("linkem: {schedule: [{at: 10s, words: delay 5xs}]}");
    assert!(e.field.starts_with("linkem.schedule"), "{e}");
    let e = refused("linkem: {schedule: [{at: 10q, words: delay 5ms}]}");
    assert_eq!(e.field, "linkem.schedule[0].at");
}

#[test]
fn go_durations() {
    assert_eq!(go_duration_ns("10s"), Ok(10_000_000_000));
    assert_eq!(go_duration_ns("1m30s"), Ok(90_000_000_000));
    assert_eq!(go_duration_ns("1.5h"), Ok(5_400_000_000_000));
    assert_eq!(go_duration_ns("250ms"), Ok(250_000_000));
    assert_eq!(go_duration_ns("3µs"), Ok(3_000));
    for bad in ["", "10", "10x", "s", "1.2.3s"] {
        assert!(go_duration_ns(bad).is_err(), "{bad}");
    }
}

#[test]
fn rules_are_checked_by_linkems_rule_parser() {
    let w =
        words("linkem: {rules: \"pipe 1 config delay 20\\nadd 100 pipe 1 ip from any to any\\n\"}");
    assert!(w
        .rules
        .as_deref()
        .is_some_and(|r| r.contains("pipe 1 config")));
    let e = refused("linkem: {rules: \"pipe 1 config delay 20xs\\n\"}");
    assert_eq!(e.field, "linkem.rules");
    assert_eq!(e.word.as_deref(), Some("20xs"), "{e}");
}

#[test]
fn chaos_meshs_documented_delay_example() {
    // Chaos Mesh's docs: latency '10ms', correlation '100', jitter '0ms':
    // with no jitter, tc gets neither jitter nor correlation: a constant 10 ms.
    let w = words("action: delay\ndelay: {latency: '10ms', correlation: '100', jitter: '0ms'}");
    assert_eq!(w.egress.as_deref(), Some("delay 10ms"));
    let l = link(
        &words("action: delay\ndelay: {latency: '10ms', correlation: '100', jitter: '2ms'}").egress,
    );
    assert_eq!(
        (l.delay_ns, l.jitter_ns, l.delay_correlation),
        (10_000_000, 2_000_000, 1.0)
    );
}

#[test]
fn a_zero_latency_gives_no_delay_words_as_tc_gets_none() {
    let y = "action: delay\ndelay: {latency: 0ms, jitter: 5ms, reorder: {reorder: '25'}}\nloss: {loss: '1'}";
    assert_eq!(words(y).egress.as_deref(), Some("loss 1%"));
}

#[test]
fn every_example_manifest_in_deploy_maps() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("deploy/examples") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("example");
        let lc: crate::chaos::LinkChaos = serde_yaml::from_str(&text).expect("a LinkChaos");
        let w = link_words(&lc.spec).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            w.egress.is_some() || w.ingress.is_some(),
            "{}",
            path.display()
        );
        seen += 1;
    }
    assert!(seen >= 3, "the examples: {seen}");
}
