//! The controller's status from a resource, the pods and the clock.

use super::*;
use crate::chaos::LinkChaosSpec;
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn lc(yaml: &str, created: Timestamp) -> LinkChaos {
    let spec: LinkChaosSpec = serde_yaml::from_str(yaml).expect("spec parses");
    let mut lc = LinkChaos::new("x", spec);
    lc.metadata.namespace = Some("default".into());
    lc.metadata.uid = Some("0b6e6f0e-uid".into());
    lc.metadata.creation_timestamp = Some(Time(created));
    lc
}

fn pod(name: &str, app: &str) -> Pod {
    let mut p = Pod::default();
    p.metadata.namespace = Some("default".into());
    p.metadata.name = Some(name.into());
    p.metadata.labels = Some([("app".to_string(), app.to_string())].into());
    p.spec = Some(PodSpec {
        node_name: Some("n1".into()),
        ..PodSpec::default()
    });
    p
}

fn at(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

const DELAY: &str =
    "action: delay\ndelay: {latency: 20ms}\nselector: {labelSelectors: {app: web}}\n";

fn names(s: &LinkChaosStatus) -> Vec<String> {
    s.selected
        .iter()
        .flatten()
        .map(|r| r.name.clone())
        .collect()
}

#[test]
fn running_until_start_plus_duration_then_ended() {
    let mut r = lc(
        &format!("{DELAY}mode: all\nduration: 10s"),
        at("2026-01-01T00:00:00Z"),
    );
    let pods = [pod("a", "web"), pod("b", "db")];
    // First seen 0.3 s into creationTimestamp's second: the start is then.
    let (s, requeue) = desired(&r, &pods, &Default::default(), at("2026-01-01T00:00:00.3Z"));
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(s.started_at.as_deref(), Some("2026-01-01T00:00:00.3Z"));
    assert_eq!(s.expires_at.as_deref(), Some("2026-01-01T00:00:10.3Z"));
    assert_eq!(names(&s), ["a"]);
    let requeue = requeue.expect("requeued at the expiry");
    assert!(
        requeue >= Duration::from_secs(10) && requeue < Duration::from_millis(10_100),
        "{requeue:?}"
    );
    // Read back after a restart: the same start.
    r.status = Some(s);
    let (s, _) = desired(&r, &pods, &Default::default(), at("2026-01-01T00:00:10.2Z"));
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(s.expires_at.as_deref(), Some("2026-01-01T00:00:10.3Z"));
    let (s, requeue) = desired(&r, &pods, &Default::default(), at("2026-01-01T00:00:10.3Z"));
    assert_eq!(s.phase.as_deref(), Some("Ended"));
    assert_eq!(requeue, None);
    // First seen later than that second (the controller was down): its middle.
    r.status = None;
    let (s, _) = desired(&r, &pods, &Default::default(), at("2026-01-01T00:00:04Z"));
    assert_eq!(s.started_at.as_deref(), Some("2026-01-01T00:00:00.5Z"));
}

#[test]
fn a_spec_that_cannot_apply_is_refused_with_the_reason() {
    let now = at("2026-01-01T00:00:00Z");
    let r = lc(
        "action: delay\ndelay: {latency: 20xs}\nselector: {}\nmode: all",
        now,
    );
    let (s, _) = desired(&r, &[pod("a", "web")], &Default::default(), now);
    assert_eq!(s.phase.as_deref(), Some("Refused"));
    let m = s.message.expect("a message");
    assert!(
        m.contains("delay.latency") && m.contains("'20xs' (word 2)"),
        "{m}"
    );
    assert_eq!(s.selected, None);
    let r = lc(&format!("{DELAY}mode: fixed-percent\nvalue: \"150\""), now);
    let (s, _) = desired(&r, &[pod("a", "web")], &Default::default(), now);
    assert!(s.message.is_some_and(|m| m.starts_with("value:")));
}

#[test]
fn the_kept_selection_drops_gone_pods_and_only_all_adds() {
    let now = at("2026-01-01T00:00:00Z");
    let kept = |names: &[&str]| LinkChaosStatus {
        selected: Some(
            names
                .iter()
                .map(|n| PodRef {
                    namespace: "default".into(),
                    name: n.to_string(),
                    node: Some("n1".into()),
                })
                .collect(),
        ),
        ..LinkChaosStatus::default()
    };
    let pods = [pod("a", "web"), pod("c", "web"), pod("d", "web")];
    let mut r = lc(&format!("{DELAY}mode: fixed\nvalue: \"2\""), now);
    r.status = Some(kept(&["a", "b"]));
    let (s, _) = desired(&r, &pods, &Default::default(), now);
    assert_eq!(names(&s), ["a"]);
    let mut r = lc(&format!("{DELAY}mode: all"), now);
    r.status = Some(kept(&["a", "b"]));
    let (s, _) = desired(&r, &pods, &Default::default(), now);
    assert_eq!(names(&s), ["a", "c", "d"]);
}

#[test]
fn nothing_matching_yet_picks_nothing_and_says_so() {
    let now = at("2026-01-01T00:00:00Z");
    let r = lc(&format!("{DELAY}mode: one"), now);
    let (s, _) = desired(&r, &[pod("z", "db")], &Default::default(), now);
    assert_eq!((s.phase.as_deref(), s.selected), (Some("Running"), None));
    assert!(s.message.is_some_and(|m| m.contains("no pod matches")));
    let (s, _) = desired(
        &r,
        &[pod("z", "db"), pod("w", "web")],
        &Default::default(),
        now,
    );
    assert_eq!(names(&s), ["w"]);
}
