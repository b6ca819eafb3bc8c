//! A socket of several links, on a live stage of in-memory ports: a request
//! names its link, a batch changes several or none, `link` patches.

use super::*;
use linkem_core::model::LinkModel;
use linkem_core::{LinkConfig, LinkSpec};
use linkem_runtime::pipeline::{GroupPair, LiveBridge, LiveGroup, LiveOptions};
use linkem_runtime::port::memory::{MemoryRx, MemoryTx};
use std::sync::mpsc::channel;

fn root() -> PeerCred {
    PeerCred {
        uid: 0,
        gid: 0,
        pid: 1,
    }
}

fn spec(words: &str) -> LinkSpec {
    let w: Vec<&str> = words.split_whitespace().collect();
    LinkSpec::parse_words(&w, &mut linkem_core::config::no_files).unwrap()
}

/// Three links named p0, p1, p2, each `delay 10ms loss 1% rate 10mbit`, and
/// the group's model over them.
fn group() -> (Model, LiveGroup) {
    let mut pairs = Vec::new();
    let mut keep = Vec::new();
    for k in 0..3u64 {
        let s = spec("delay 10ms loss 1% rate 10mbit");
        let (in_a, rx_a) = channel::<(u64, Vec<u8>)>();
        let (in_b, rx_b) = channel::<(u64, Vec<u8>)>();
        keep.push((in_a, in_b));
        pairs.push(GroupPair {
            names: ["a->b".into(), "b->a".into()],
            buffer_bytes: [1 << 20; 2],
            model: LinkModel::new([s.link.clone(), s.link], k),
            rx: [Box::new(MemoryRx::new(rx_a)), Box::new(MemoryRx::new(rx_b))],
            tx: [Box::new(MemoryTx::new().0), Box::new(MemoryTx::new().0)],
        });
    }
    // The senders may go: a closed channel is an idle interface.
    drop(keep);
    let (bridges, threads) = LiveBridge::start_group(LiveOptions::new(1 << 20), pairs).unwrap();
    let started = Instant::now();
    let members = bridges
        .into_iter()
        .enumerate()
        .map(|(k, b)| {
            let s = spec("delay 10ms loss 1% rate 10mbit");
            let words = s.link.to_string();
            Arc::new(Model::new(
                format!("p{k}"),
                Running::Link(b),
                [(s.link.clone(), words.clone()), (s.link, words)],
                k as u64,
                started,
            ))
        })
        .collect();
    (Model::group("g".into(), members, started), threads)
}

fn run(g: &Model, lines: &[&str]) -> Result<u64, Failure> {
    let parsed: Vec<Request> = lines
        .iter()
        .map(|l| g.parse_line(l).map(|p| p.request))
        .collect::<Result<_, _>>()
        .map_err(|e| Failure::Error(e.to_string()))?;
    let refs: Vec<&Request> = parsed.iter().collect();
    g.apply(&root(), &refs, lines)
}

fn link_of(g: &Model, name: &str, dir: usize) -> LinkConfig {
    let m = g
        .members()
        .unwrap()
        .iter()
        .find(|m| m.name == name)
        .unwrap();
    m.link_configs()[dir].clone()
}

#[test]
fn a_patch_of_one_link_keeps_its_other_words_and_the_other_links() {
    let (g, _threads) = group();
    run(&g, &["link p1 a-to-b delay 30ms"]).unwrap();
    assert_eq!(
        link_of(&g, "p1", 0),
        spec("delay 30ms loss 1% rate 10mbit").link
    );
    assert_eq!(
        link_of(&g, "p1", 1),
        spec("delay 10ms loss 1% rate 10mbit").link
    );
    assert_eq!(
        link_of(&g, "p0", 0),
        spec("delay 10ms loss 1% rate 10mbit").link
    );
    let shown = g.show_json(Some("p1")).unwrap();
    assert_eq!(shown["link"], "p1");
    assert_eq!(
        shown["links"][0]["link"],
        "rate 10mbit queue 1000 delay 30ms loss 1%"
    );
    // replace: the direction becomes exactly the words.
    run(&g, &["replace p2 b-to-a delay 5ms"]).unwrap();
    assert_eq!(link_of(&g, "p2", 1), spec("delay 5ms").link);
}

#[test]
fn a_batch_changes_several_links_or_none() {
    let (g, _threads) = group();
    run(
        &g,
        &[
            "link p0 delay 1ms",
            "link p2 loss none",
            "link p0 rate unlimited",
        ],
    )
    .unwrap();
    assert_eq!(link_of(&g, "p0", 1), spec("delay 1ms loss 1%").link);
    assert_eq!(link_of(&g, "p2", 0), spec("delay 10ms rate 10mbit").link);
    // Queued together, taken in one pass of the stage over its pairs.
    let list = g.links_json();
    let at = |k: usize| list[k]["links"][0]["changed_at_ns"].as_u64().unwrap();
    let spread_ns = at(0).abs_diff(at(2));
    eprintln!("instants of one batch over two links {spread_ns} ns apart");
    assert!(spread_ns < 5_000_000, "{spread_ns} ns");
    // A later line refused (over the link, after the batch's own): nothing applies.
    let e = run(&g, &["link p1 delay 2ms", "link p0 distribution normal"]).unwrap_err();
    assert!(e.message().contains("needs a jitter"), "{e:?}");
    assert_eq!(
        link_of(&g, "p1", 0),
        spec("delay 10ms loss 1% rate 10mbit").link
    );
}

#[test]
fn show_stats_and_list_of_the_group_name_every_link() {
    let (g, _threads) = group();
    let show = g.show_json(None).unwrap();
    let names: Vec<&str> = show["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["link"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["p0", "p1", "p2"]);
    assert_eq!(g.stats_json()["links"][2]["link"], "p2");
    assert_eq!(g.links_json()[1]["links"][0]["direction"], "a->b");
    assert!(g.stats_for(Some("p1")).unwrap()["directions"].is_array());
    // An unknown name: refused at the parse, naming it and the known ones.
    let e = g.parse_line("show p9").unwrap_err();
    assert!(
        e.message.contains("no link 'p9'") && e.message.contains("p0, p1, p2"),
        "{e:?}"
    );
}

#[test]
fn the_group_exposition_labels_each_link_and_one_link_has_no_label() {
    use crate::control::metrics::{registry, render};
    let (g, _threads) = group();
    run(&g, &["link p2 a-to-b delay 30ms"]).unwrap();
    let member = g.members().unwrap()[0].clone();
    let g = Arc::new(g);
    let text = render(&registry(g.clone()));
    for (name, dir, delay) in [
        ("p0", "a->b", "0.01"),
        ("p1", "b->a", "0.01"),
        ("p2", "a->b", "0.03"),
    ] {
        let series =
            format!("linkem_link_delay_seconds{{link=\"{name}\",direction=\"{dir}\"}} {delay}\n");
        assert!(text.contains(&series), "{series} missing:\n{text}");
    }
    assert!(
        text.contains("linkem_packets_total{link=\"p1\",direction=\"a->b\",fate=\"delivered\"} 0"),
        "{text}"
    );
    // Each family once, whatever the number of links.
    assert_eq!(
        text.matches("# TYPE linkem_link_delay_seconds gauge")
            .count(),
        1
    );
    // A link's one stage serves both its directions: one series per link.
    let stage: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("linkem_stage_wakeups_total"))
        .collect();
    assert_eq!(
        stage.len(),
        g.members().unwrap().len(),
        "one series per link:\n{text}"
    );
    assert!(
        stage[0].starts_with("linkem_stage_wakeups_total{link=\"p0\"} "),
        "{text}"
    );
    // A link alone: the exposition it always had, no link label.
    let alone = render(&registry(member));
    assert!(
        alone.contains("linkem_link_delay_seconds{direction=\"a->b\"} 0.01\n"),
        "{alone}"
    );
    assert!(!alone.contains("link=\""), "{alone}");
    for family in ["stage_wakeups", "stage_on_beat", "stage_yields_lost"] {
        let series = format!("\nlinkem_{family}_total ");
        assert!(alone.contains(&series), "{series} missing:\n{alone}");
    }
    assert!(
        alone.contains("linkem_output_wakeups_total{direction=\"b->a\"} "),
        "{alone}"
    );
}
