//! Expected picks written from Chaos Mesh's documented modes and
//! Kubernetes' selector semantics, not from the code.

use super::*;
use k8s_openapi::api::core::v1::{PodIP, PodSpec, PodStatus};

fn pod(ns: &str, name: &str, labels: &[(&str, &str)], node: &str, phase: &str) -> Pod {
    let mut p = Pod::default();
    p.metadata.namespace = Some(ns.into());
    p.metadata.name = Some(name.into());
    p.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    p.spec = Some(PodSpec {
        node_name: Some(node.into()),
        ..PodSpec::default()
    });
    p.status = Some(PodStatus {
        phase: Some(phase.into()),
        ..PodStatus::default()
    });
    p
}

fn sel(yaml: &str) -> PodSelectorSpec {
    serde_yaml::from_str(yaml).expect("selector parses")
}

fn names(pods: &[Pod], s: &PodSelectorSpec, nodes: &NodeLabels) -> Vec<String> {
    check_selector(s).expect("selector is well formed");
    candidates(pods, s, "default", nodes)
        .into_iter()
        .map(|r| format!("{}/{}", r.namespace, r.name))
        .collect()
}

fn fleet() -> Vec<Pod> {
    let mut b = pod("other", "b", &[("app", "web")], "n2", "Running");
    b.metadata.annotations = Some([("team".to_string(), "blue".to_string())].into());
    b.status.as_mut().expect("status").pod_ips = Some(vec![PodIP {
        ip: "10.0.0.9".into(),
    }]);
    vec![
        pod(
            "default",
            "a",
            &[("app", "web"), ("tier", "front")],
            "n1",
            "Running",
        ),
        b,
        pod("default", "c", &[("app", "db")], "n2", "Pending"),
        pod("default", "d", &[], "n1", "Failed"),
    ]
}

#[test]
fn namespace_defaults_to_the_resources_own() {
    let none = NodeLabels::new();
    assert_eq!(
        names(&fleet(), &sel("{}"), &none),
        ["default/a", "default/c", "default/d"]
    );
    assert_eq!(
        names(&fleet(), &sel("namespaces: [other]"), &none),
        ["other/b"]
    );
    assert_eq!(
        names(
            &fleet(),
            &sel("namespaces: [other, default]\nlabelSelectors: {app: web}"),
            &none
        )
        .len(),
        2
    );
}

#[test]
fn label_and_expression_selectors() {
    let none = NodeLabels::new();
    assert_eq!(
        names(&fleet(), &sel("labelSelectors: {app: web}"), &none),
        ["default/a"]
    );
    let e = |op: &str, values: &str| {
        sel(&format!(
            "expressionSelectors: [{{key: app, operator: {op}{values}}}]"
        ))
    };
    assert_eq!(
        names(&fleet(), &e("In", ", values: [web, db]"), &none),
        ["default/a", "default/c"]
    );
    // NotIn holds for a pod without the key.
    assert_eq!(
        names(&fleet(), &e("NotIn", ", values: [web]"), &none),
        ["default/c", "default/d"]
    );
    assert_eq!(
        names(&fleet(), &e("Exists", ""), &none),
        ["default/a", "default/c"]
    );
    assert_eq!(
        names(&fleet(), &e("DoesNotExist", ""), &none),
        ["default/d"]
    );
    assert_eq!(
        check_selector(&e("Like", "")).map_err(|e| e.field),
        Err("selector.expressionSelectors[0].operator".into())
    );
    assert_eq!(
        check_selector(&e("In", "")).map_err(|e| e.field),
        Err("selector.expressionSelectors[0].values".into())
    );
}

#[test]
fn annotation_field_and_phase_selectors() {
    let none = NodeLabels::new();
    let all_ns = "namespaces: [default, other]\n";
    assert_eq!(
        names(
            &fleet(),
            &sel(&format!("{all_ns}annotationSelectors: {{team: blue}}")),
            &none
        ),
        ["other/b"]
    );
    for (f, v, want) in [
        ("metadata.name", "c", &["default/c"][..]),
        ("metadata.namespace", "other", &["other/b"]),
        ("spec.nodeName", "n2", &["default/c", "other/b"]),
        ("status.phase", "Failed", &["default/d"]),
        ("status.podIP", "10.0.0.9", &["other/b"]),
    ] {
        let s = sel(&format!("{all_ns}fieldSelectors: {{{f}: {v}}}"));
        assert_eq!(names(&fleet(), &s, &none), want, "{f}={v}");
    }
    let e = check_selector(&sel("fieldSelectors: {spec.hostname: x}")).expect_err("unknown field");
    assert!(e.message.contains("spec.hostname"), "{e}");
    assert_eq!(
        names(&fleet(), &sel("podPhaseSelectors: [Running]"), &none),
        ["default/a"]
    );
    assert_eq!(
        names(
            &fleet(),
            &sel("podPhaseSelectors: [Running, Pending]"),
            &none
        ),
        ["default/a", "default/c"]
    );
    assert_eq!(
        names(&fleet(), &sel("podPhaseSelectors: ['!Failed']"), &none),
        ["default/a", "default/c"]
    );
    assert!(check_selector(&sel("podPhaseSelectors: ['phase=Running']")).is_err());
}

#[test]
fn nodes_names_and_node_labels() {
    let nodes: NodeLabels = [
        (
            "n1".to_string(),
            [("zone".to_string(), "a".to_string())].into(),
        ),
        (
            "n2".to_string(),
            [("zone".to_string(), "b".to_string())].into(),
        ),
    ]
    .into();
    assert_eq!(
        names(&fleet(), &sel("nodes: [n1]"), &nodes),
        ["default/a", "default/d"]
    );
    assert_eq!(
        names(&fleet(), &sel("nodeSelectors: {zone: b}"), &nodes),
        ["default/c"]
    );
    // Either the name or the labels admit the node.
    assert_eq!(
        names(
            &fleet(),
            &sel("nodes: [n1]\nnodeSelectors: {zone: b}"),
            &nodes
        )
        .len(),
        3
    );
    assert!(names(&fleet(), &sel("nodeSelectors: {zone: c}"), &nodes).is_empty());
}

#[test]
fn listed_pods_replace_the_other_selectors() {
    let s = sel("pods: {other: [b], default: [d, missing]}\nlabelSelectors: {app: nothing}");
    assert_eq!(
        names(&fleet(), &s, &NodeLabels::new()),
        ["default/d", "other/b"]
    );
}

fn refs(n: usize) -> Vec<PodRef> {
    (0..n)
        .map(|i| PodRef {
            namespace: "ns".into(),
            name: format!("p{i:03}"),
            node: None,
        })
        .collect()
}

fn count(mode: Mode, value: &str, n: usize) -> usize {
    pick(&mode, Some(value), &refs(n), 7)
        .expect("valid mode")
        .len()
}

#[test]
fn fixed_counts_and_percentages_round_up() {
    assert_eq!(pick(&Mode::One, None, &refs(5), 1).map(|p| p.len()), Ok(1));
    assert_eq!(pick(&Mode::All, None, &refs(5), 1), Ok(refs(5)));
    assert_eq!(count(Mode::Fixed, "3", 5), 3);
    // More than there are: all of them.
    assert_eq!(count(Mode::Fixed, "10", 5), 5);
    // ceil(5 x 50 / 100) = 3; ceil(5 x 1 / 100) = 1; 100% = all.
    assert_eq!(count(Mode::FixedPercent, "50", 5), 3);
    assert_eq!(count(Mode::FixedPercent, "1", 5), 1);
    assert_eq!(count(Mode::FixedPercent, "100", 5), 5);
    assert_eq!(count(Mode::FixedPercent, "40", 5), 2);
    assert_eq!(pick(&Mode::All, None, &[], 1), Ok(vec![]));
}

#[test]
fn invalid_values_are_refused_naming_value() {
    for (mode, v) in [
        (Mode::Fixed, "0"),
        (Mode::Fixed, "-1"),
        (Mode::Fixed, "two"),
        (Mode::FixedPercent, "0"),
        (Mode::FixedPercent, "101"),
        (Mode::FixedPercent, "50%"),
        (Mode::RandomMaxPercent, "0"),
        (Mode::RandomMaxPercent, "1.5"),
    ] {
        let e = pick(&mode, Some(v), &refs(3), 1).expect_err(v);
        assert_eq!(e.field, "value", "{v}");
        assert!(e.message.contains(v.trim_start_matches('-')), "{e}");
    }
    assert_eq!(
        pick(&Mode::Fixed, None, &refs(3), 1).map_err(|e| e.field),
        Err("value".into())
    );
}

#[test]
fn picks_are_stable_per_seed_and_sorted() {
    let a = pick(&Mode::Fixed, Some("4"), &refs(20), seed_from_uid("uid-1")).expect("pick");
    let b = pick(&Mode::Fixed, Some("4"), &refs(20), seed_from_uid("uid-1")).expect("pick");
    assert_eq!(a, b);
    assert!(a.windows(2).all(|w| w[0] < w[1]));
    let differ = (0..20).filter(|i| {
        pick(
            &Mode::Fixed,
            Some("4"),
            &refs(20),
            seed_from_uid(&format!("uid-{i}")),
        )
        .expect("pick")
            != a
    });
    assert!(differ.count() >= 15, "different uids give different picks");
}

#[test]
fn random_picks_are_uniform_over_pods() {
    // Each of 5 pods: picked with probability 1/5 (one) and 2/5 (fixed 2);
    // 5000 seeds, bounds at 5 standard deviations of the binomial.
    let seeds = 5000u64;
    for (mode, value, p) in [(Mode::One, None, 0.2), (Mode::Fixed, Some("2"), 0.4)] {
        let mut hits = [0u32; 5];
        for s in 0..seeds {
            for r in pick(&mode, value, &refs(5), s).expect("pick") {
                hits[r.name[1..].parse::<usize>().expect("index")] += 1;
            }
        }
        let mean = seeds as f64 * p;
        let sd = (seeds as f64 * p * (1.0 - p)).sqrt();
        for h in hits {
            assert!((f64::from(h) - mean).abs() < 5.0 * sd, "{hits:?} vs {mean}");
        }
    }
}

#[test]
fn random_max_percent_draws_the_percentage_uniformly() {
    // n = 10, max 50: Q uniform in 0..=50, k = ceil(10 Q / 100) = ceil(Q / 10):
    // P(k = 0) = 1/51, P(k = j) = 10/51 for j = 1..=5; mean 150/51.
    let seeds = 5000u64;
    let mut by_k = [0u32; 11];
    for s in 0..seeds {
        by_k[pick(&Mode::RandomMaxPercent, Some("50"), &refs(10), s)
            .expect("pick")
            .len()] += 1;
    }
    assert!(by_k[6..].iter().all(|&c| c == 0), "{by_k:?}");
    for (k, p) in [(0usize, 1.0 / 51.0), (1, 10.0 / 51.0), (5, 10.0 / 51.0)] {
        let mean = seeds as f64 * p;
        let sd = (seeds as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (f64::from(by_k[k]) - mean).abs() < 5.0 * sd,
            "k={k}: {by_k:?}"
        );
    }
}
