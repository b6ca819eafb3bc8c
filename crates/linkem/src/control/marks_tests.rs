//! Marks on a live stage of in-memory ports: the ring's bound, a change's
//! lines, a schedule's steps at their instants, a group's members' marks.

use super::*;
use crate::control::{Failure, PeerCred};
use linkem_core::model::LinkModel;
use linkem_core::LinkSpec;
use linkem_ctl::Request;
use linkem_runtime::pipeline::{GroupPair, LiveBridge, LiveOptions};
use linkem_runtime::port::memory::{MemoryRx, MemoryTx};
use std::sync::atomic::Ordering;
use std::sync::mpsc::channel;
use std::time::Instant;

fn root() -> PeerCred {
    PeerCred {
        uid: 0,
        gid: 0,
        pid: 1,
    }
}

fn link(words: &str) -> LinkConfig {
    let w: Vec<&str> = words.split_whitespace().collect();
    LinkSpec::parse_words(&w, &mut linkem_core::config::no_files)
        .unwrap()
        .link
}

fn pair(cfg: &LinkConfig) -> GroupPair<LinkModel> {
    // Closed channels: idle interfaces.
    let (_, rx_a) = channel::<(u64, Vec<u8>)>();
    let (_, rx_b) = channel::<(u64, Vec<u8>)>();
    GroupPair {
        names: ["a->b".into(), "b->a".into()],
        buffer_bytes: [1 << 20; 2],
        model: LinkModel::new([cfg.clone(), cfg.clone()], 1),
        rx: [Box::new(MemoryRx::new(rx_a)), Box::new(MemoryRx::new(rx_b))],
        tx: [Box::new(MemoryTx::new().0), Box::new(MemoryTx::new().0)],
    }
}

fn model_of(name: &str, bridge: LiveBridge<LinkModel>, cfg: &LinkConfig) -> Model {
    let words = cfg.to_string();
    Model::new(
        name.into(),
        Running::Link(bridge),
        [(cfg.clone(), words.clone()), (cfg.clone(), words)],
        1,
        Instant::now(),
    )
}

/// A plain link's model, both directions `cfg`.
fn plain(cfg: &LinkConfig) -> Model {
    let p = pair(cfg);
    let bridge = LiveBridge::start(LiveOptions::new(1 << 20), p.model, p.rx, p.tx).unwrap();
    model_of("a-b", bridge, cfg)
}

fn run(m: &Model, lines: &[&str]) -> Result<u64, Failure> {
    let parsed: Vec<Request> = lines
        .iter()
        .map(|l| m.parse_line(l).map(|p| p.request))
        .collect::<Result<_, _>>()
        .map_err(|e| Failure::Error(e.to_string()))?;
    let refs: Vec<&Request> = parsed.iter().collect();
    m.apply(&root(), &refs, lines)
}

#[test]
fn the_ring_keeps_the_last_marks_and_numbers_them_on() {
    let m = plain(&link("delay 1ms"));
    for i in 0..MAX_MARKS as u64 + 5 {
        m.mark(MarkKind::Claim, 1_000 + i, format!("claim {i}"));
    }
    let (marks, next) = m.marks_since(0);
    assert_eq!(marks.len(), MAX_MARKS);
    assert_eq!(next, MAX_MARKS as u64 + 5);
    assert_eq!((marks[0].seq, marks[0].text.as_str()), (5, "claim 5"));
    assert!(marks.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    let (newer, again) = m.marks_since(next - 2);
    assert_eq!(newer.len(), 2);
    assert_eq!(again, next);
    assert!(m.marks_since(next).0.is_empty());
    // A text longer than the bound is cut at a character boundary.
    m.mark(MarkKind::Change, 5_000, "é".repeat(MAX_MARK_TEXT_BYTES));
    let (last, _) = m.marks_since(next);
    assert!(last[0].text.len() <= MAX_MARK_TEXT_BYTES);
    assert!(last[0].text.ends_with('…'));
}

#[test]
fn a_change_applied_is_marked_with_its_lines_a_refused_one_is_not() {
    let m = plain(&link("delay 1ms"));
    let at_ns = run(&m, &["link a-to-b delay 20ms"]).unwrap();
    let batch_ns = run(&m, &["link a-to-b delay 5ms", "link b-to-a loss 1%"]).unwrap();
    assert!(run(&m, &["link a-to-b delay 20xs"]).is_err());
    let (marks, next) = m.marks_since(0);
    assert_eq!(next, 2);
    let seen: Vec<(u64, Option<&str>, MarkKind, &str)> = marks
        .iter()
        .map(|k| (k.at_ns, k.link.as_deref(), k.kind, k.text.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            (
                at_ns,
                Some("a-b"),
                MarkKind::Change,
                "link a-to-b delay 20ms"
            ),
            (
                batch_ns,
                Some("a-b"),
                MarkKind::Change,
                "link a-to-b delay 5ms; link b-to-a loss 1%"
            ),
        ]
    );
}

/// `delay 1ms`, then from `first_ns` `delay 30ms`, then from `second_ns`
/// `delay 50ms`, looping every `period_ns` when given.
fn stepped(first_ns: u64, second_ns: u64, period_ns: Option<u64>) -> LinkConfig {
    let mut cfg = link("delay 1ms");
    cfg.schedule = Some(Arc::new(Schedule {
        name: "steps.sched".into(),
        changes: vec![
            (first_ns, Arc::new(link("delay 30ms"))),
            (second_ns, Arc::new(link("delay 50ms"))),
        ],
        period_ns,
    }));
    cfg
}

/// Sleeps until `origin_ns + after_ns` on the packets' clock.
fn sleep_until(origin_ns: u64, after_ns: u64) {
    let now = linkem_runtime::clock::now_ns();
    let left = (origin_ns + after_ns).saturating_sub(now);
    std::thread::sleep(std::time::Duration::from_nanos(left));
}

#[test]
fn schedule_steps_are_marked_at_their_instants_from_the_model_start() {
    let cfg = stepped(300_000_000, 900_000_000, None);
    let m = plain(&cfg);
    let Running::Link(b) = m.running() else {
        unreachable!("a plain link")
    };
    let origin = b.started_ns();
    sleep_until(origin, 400_000_000);
    let (marks, next) = m.marks_since(0);
    // One step due in each direction so far.
    let want = |dir: &str, at: u64, words: &str| Mark {
        seq: 0,
        at_ns: origin + at,
        link: Some("a-b".into()),
        kind: MarkKind::Schedule,
        text: format!("schedule steps.sched {dir}: {}", link(words)),
    };
    let at: Vec<Mark> = marks.into_iter().map(|k| Mark { seq: 0, ..k }).collect();
    assert_eq!(
        at,
        [
            want("a-to-b", 300_000_000, "delay 30ms"),
            want("b-to-a", 300_000_000, "delay 30ms")
        ]
    );
    // A change that keeps the schedule keeps its clock; one that takes it
    // off stops it: b-to-a gets its second step, a-to-b none.
    run(&m, &["replace a-to-b delay 2ms"]).unwrap();
    sleep_until(origin, 1_000_000_000);
    let (marks, _) = m.marks_since(next);
    let kinds: Vec<(MarkKind, String)> = marks.iter().map(|k| (k.kind, k.text.clone())).collect();
    let step = format!("schedule steps.sched b-to-a: {}", link("delay 50ms"));
    assert_eq!(
        kinds,
        [
            (MarkKind::Change, "replace a-to-b delay 2ms".to_string()),
            (MarkKind::Schedule, step),
        ]
    );
    assert_eq!(marks[1].at_ns, origin + 900_000_000);
}

#[test]
fn a_looping_schedule_marks_each_loop_and_skips_loops_long_gone() {
    let sched = stepped(40_000_000, 80_000_000, Some(100_000_000))
        .schedule
        .unwrap();
    let mut clock = ScheduleClock::new(sched, 1_000);
    let mut due = |now: u64| {
        std::iter::from_fn(|| clock.due(now).map(|(t, _)| t - 1_000)).collect::<Vec<u64>>()
    };
    assert_eq!(due(1_000 + 90_000_000), [40_000_000, 80_000_000]);
    assert_eq!(due(1_000 + 150_000_000), [140_000_000]);
    // Read again only after ten loops: the last begun loop's steps, and the
    // one before it, as the link itself skips them.
    assert_eq!(
        due(1_000 + 1_050_000_000),
        [180_000_000, 940_000_000, 980_000_000, 1_040_000_000]
    );
}

#[test]
fn a_group_names_each_member_in_its_marks() {
    let cfg = link("delay 1ms");
    let (bridges, _threads) =
        LiveBridge::start_group(LiveOptions::new(1 << 20), vec![pair(&cfg), pair(&cfg)]).unwrap();
    let members: Vec<Arc<Model>> = bridges
        .into_iter()
        .enumerate()
        .map(|(k, b)| Arc::new(model_of(&format!("p{k}"), b, &cfg)))
        .collect();
    let g = Model::group("g".into(), members, Instant::now());
    let at_ns = run(&g, &["link p1 a-to-b delay 5ms"]).unwrap();
    run(&g, &["link p0 both loss 1%", "link p1 b-to-a delay 2ms"]).unwrap();
    let (marks, next) = g.marks_since(0);
    let seen: Vec<(Option<&str>, &str)> = marks
        .iter()
        .map(|k| (k.link.as_deref(), k.text.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            (Some("p1"), "link p1 a-to-b delay 5ms"),
            (Some("p0"), "link p0 both loss 1%"),
            (Some("p1"), "link p1 b-to-a delay 2ms"),
        ]
    );
    assert_eq!(marks[0].at_ns, at_ns);
    assert_eq!(next, 3);
    assert!(g.marks_since(next).0.is_empty(), "taken over once");
}

#[test]
fn claims_made_changed_released_and_expired_are_marked() {
    use crate::control::claims::{ClaimConfig, Limits, PortView};
    let config = ClaimConfig {
        ttl_ns: 10_000,
        limits: Limits::parse("default rate=none queue=none").unwrap(),
        port_view: || Ok(PortView::default()),
    };
    let rules = crate::control::rules::tests::rules_over_memory("pipe 1 config delay 1ms\n")
        .with_claims(config)
        .unwrap();
    let m = Model::new(
        "a-b".into(),
        Running::Rules(Box::new(rules)),
        [Default::default(), Default::default()],
        1,
        Instant::now(),
    );
    let user = PeerCred {
        uid: 1001,
        gid: 1001,
        pid: 7,
    };
    let claim = |line: &str, now_ns: u64| {
        let Request::Claim(c) = m.parse_line(line).unwrap().request else {
            panic!("{line}: not a claim")
        };
        m.claim(&user, &c, now_ns)
    };
    let made = claim("claim udp 5678 -- delay 5ms", 1_000).unwrap().at_ns;
    let changed = claim("claim udp 5678 -- delay 9ms", 2_000).unwrap().at_ns;
    claim("claim udp 6000", 3_000).unwrap();
    let released = claim("release udp 6000", 4_000).unwrap().at_ns;
    assert!(claim("release udp 7000", 4_500).is_err());
    let gone = m.expire_claims(12_000);
    assert_eq!(gone.len(), 1);
    let expired = *gone[0].1.as_ref().unwrap();
    let (marks, next) = m.marks_since(0);
    assert_eq!(next, 5);
    let seen: Vec<(u64, MarkKind, &str)> = marks
        .iter()
        .filter(|k| k.text != "claimed udp 6000 by uid 1001")
        .map(|k| (k.at_ns, k.kind, k.text.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            (made, MarkKind::Claim, "claimed udp 5678 by uid 1001"),
            (changed, MarkKind::Claim, "changed udp 5678 by uid 1001"),
            (released, MarkKind::Claim, "released udp 6000 by uid 1001"),
            (expired, MarkKind::Claim, "expired udp 5678 of uid 1001"),
        ]
    );
    assert_eq!(m.counters.changes.load(Ordering::Relaxed), 4);
}
