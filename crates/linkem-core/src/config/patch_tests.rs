//! [`LinkSpec::patch`]: words over a running link change what they name and
//! keep the rest.

use super::*;
use proptest::prelude::*;

fn parse(words: &str) -> LinkConfig {
    let w: Vec<&str> = words.split_whitespace().collect();
    LinkSpec::parse_words(&w, &mut no_files)
        .unwrap_or_else(|e| panic!("{words}: {e}"))
        .link
}

fn patch(base: &LinkConfig, words: &str) -> Result<LinkConfig, ConfigError> {
    let w: Vec<&str> = words.split_whitespace().collect();
    LinkSpec::patch(base, &w, &mut no_files).map(|s| s.link)
}

#[test]
fn a_delay_keeps_the_loss_and_the_rate() {
    let base = parse("delay 10ms loss 1% rate 10mbit");
    let after = patch(&base, "delay 30ms").unwrap();
    assert_eq!(after, parse("delay 30ms loss 1% rate 10mbit"));
    assert_eq!(
        after.to_string(),
        parse("rate 10mbit delay 30ms loss 1%").to_string()
    );
}

#[test]
fn the_words_of_a_default_clear_what_they_name() {
    let base = parse(
        "delay 10ms 2ms distribution normal loss 1% rate 10mbit policer 2mbit burst 15kB slot 1ms",
    );
    let after = patch(&base, "rate unlimited loss none policer none slot none").unwrap();
    assert_eq!(after, parse("delay 10ms 2ms distribution normal"));
    let cleared = patch(&after, "delay 0ms 0ms distribution uniform").unwrap();
    assert_eq!(cleared, LinkConfig::default());
}

#[test]
fn checks_of_the_whole_link_see_the_merged_link() {
    // Alone, a distribution without a jitter is refused; over a jitter it is fine.
    let base = parse("delay 10ms 2ms");
    assert_eq!(
        patch(&base, "distribution normal").unwrap(),
        parse("delay 10ms 2ms distribution normal")
    );
    let e = patch(&parse("delay 10ms"), "distribution normal").unwrap_err();
    assert!(e.message.contains("needs a jitter"), "{e}");
    // A word given twice in the patch is still an error naming both.
    let e = patch(&base, "delay 1ms delay 2ms").unwrap_err();
    assert!(e.message.contains("given twice"), "{e}");
}

#[test]
fn a_limit_in_bytes_over_the_default_queue_drops_the_packet_limit() {
    let after = patch(&parse("delay 1ms"), "queue 64KiB").unwrap();
    assert_eq!(after, parse("delay 1ms queue 64KiB"));
    let kept = patch(&parse("queue 50"), "queue 64KiB").unwrap();
    assert_eq!(
        (kept.queue_packets, kept.queue_bytes),
        (Some(50), Some(65536))
    );
}

/// Words for each group of things, each group setting its own slots.
fn group_words() -> Vec<BoxedStrategy<String>> {
    let pct = |hi: u32| (0..hi).prop_map(|n| format!("{n}%"));
    vec![
        prop_oneof![
            (1u64..1000).prop_map(|m| format!("rate {m}mbit")),
            Just("rate unlimited".to_string())
        ]
        .boxed(),
        (0u64..200, 0u64..5)
            .prop_map(|(d, j)| format!("delay {d}ms {j}ms"))
            .boxed(),
        prop_oneof![
            pct(30).prop_map(|p| format!("loss {p}")),
            Just("loss none".to_string())
        ]
        .boxed(),
        pct(10).prop_map(|p| format!("duplicate {p}")).boxed(),
        pct(10).prop_map(|p| format!("corrupt {p}")).boxed(),
        (0u32..40).prop_map(|n| format!("overhead {n}")).boxed(),
        prop_oneof![
            (1u32..5000, 1u32..500).prop_map(|(n, k)| format!("queue {n} queue {k}KiB")),
            Just("queue unlimited".to_string())
        ]
        .boxed(),
        prop_oneof![
            (1u64..100).prop_map(|m| format!("policer {m}mbit burst 15kB")),
            Just("policer none".to_string())
        ]
        .boxed(),
        prop_oneof![
            (1u64..5).prop_map(|m| format!("slot {m}ms")),
            Just("slot none".to_string())
        ]
        .boxed(),
        prop_oneof![Just("loss-at arrival"), Just("loss-at link")]
            .prop_map(str::to_string)
            .boxed(),
    ]
}

/// Words for every group (a full spec), and which groups a subset takes.
fn full_words() -> impl Strategy<Value = Vec<String>> {
    group_words()
}

proptest! {
    #[test]
    fn patching_with_every_word_is_replacing(
        base in full_words(),
        take in proptest::collection::vec(any::<bool>(), 10),
        full in full_words(),
    ) {
        let base: Vec<&String> = base.iter().zip(&take).filter(|(_, t)| **t).map(|(w, _)| w).collect();
        let base = parse(&base.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" "));
        let full = full.join(" ");
        prop_assert_eq!(patch(&base, &full).unwrap(), parse(&full));
    }

    #[test]
    fn patching_with_nothing_changes_nothing(
        base in full_words(),
        take in proptest::collection::vec(any::<bool>(), 10),
    ) {
        let words: Vec<&str> = base.iter().zip(&take).filter(|(_, t)| **t).map(|(w, _)| w.as_str()).collect();
        let base = parse(&words.join(" "));
        prop_assert_eq!(patch(&base, "").unwrap(), base);
    }

    #[test]
    fn disjoint_patches_commute(
        base in full_words(),
        one in full_words(),
        side in proptest::collection::vec(0u8..3, 10),
    ) {
        // Each group goes to the base, the first patch or the second (never both patches).
        let pick = |k: u8, from: &[String]| -> String {
            from.iter().zip(&side).filter(|(_, s)| **s == k).map(|(w, _)| w.as_str()).collect::<Vec<_>>().join(" ")
        };
        let base = parse(&pick(0, &base));
        let (p1, p2) = (pick(1, &one), pick(2, &one));
        let a = patch(&patch(&base, &p1).unwrap(), &p2).unwrap();
        let b = patch(&patch(&base, &p2).unwrap(), &p1).unwrap();
        prop_assert_eq!(a, b);
    }
}
