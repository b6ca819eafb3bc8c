//! Which pods a `LinkChaos` selects, and how many of them it picks, as Chaos
//! Mesh does (`pkg/selector/pod`, `pkg/selector/generic`), with the random
//! picks drawn from a generator seeded by the resource's uid, so that a
//! restarted controller that lost its status would pick the same pods.
//!
//! Matching (every given selector must hold): `namespaces` (default: the
//! resource's own, as Chaos Mesh's webhook defaults it), `labelSelectors` and
//! `expressionSelectors` (one Kubernetes label selector: `In`, `NotIn`,
//! `Exists`, `DoesNotExist`), `annotationSelectors` (equality),
//! `fieldSelectors` (equality on Chaos Mesh's pod fields: `metadata.name`,
//! `metadata.namespace`, `spec.nodeName`, `spec.restartPolicy`,
//! `spec.schedulerName`, `spec.serviceAccountName`, `status.phase`,
//! `status.podIP`, `status.nominatedNodeName`; another field is an error),
//! `nodes` and `nodeSelectors` (the pod's node is named, or its Node's labels
//! hold the selectors: either suffices), `podPhaseSelectors` (`Running`
//! includes, `!Failed` excludes). `pods` (namespace to names) replaces every
//! other selector, as in Chaos Mesh's `selectSpecifiedPods`.
//!
//! Modes (`FilterObjectsByMode`), for n candidates: `one` 1; `all` n;
//! `fixed` N: min(N, n), N an integer above 0; `fixed-percent` P:
//! ceil(n·P/100), P an integer in 1..=100; `random-max-percent` P: ceil(n·Q/100)
//! with Q uniform in 0..=P (so possibly none). The picked pods are a uniform
//! random subset of that size.

use crate::chaos::words::SpecError;
use crate::chaos::{LabelSelectorRequirement, Mode, PodRef, PodSelectorSpec};
use k8s_openapi::api::core::v1::Pod;
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::collections::BTreeMap;

/// Node name to the Node's labels (for `nodeSelectors`).
pub type NodeLabels = BTreeMap<String, BTreeMap<String, String>>;

use crate::chaos::words::refuse_field as refuse;

/// Checks the selector's own form (operators, values, phases, fields), so
/// that a malformed selector is refused even when no pod exists.
pub fn check_selector(sel: &PodSelectorSpec) -> Result<(), SpecError> {
    for (i, r) in sel.expression_selectors.iter().flatten().enumerate() {
        check_requirement(r, &format!("selector.expressionSelectors[{i}]"))?;
    }
    for f in sel.field_selectors.iter().flatten().map(|(k, _)| k) {
        if !POD_FIELDS.contains(&f.as_str()) {
            return Err(refuse(
                "selector.fieldSelectors",
                format!(
                    "'{f}' is not a pod field Chaos Mesh selects on ({})",
                    POD_FIELDS.join(", ")
                ),
            ));
        }
    }
    phase_terms(sel).map(|_| ())
}

const POD_FIELDS: [&str; 9] = [
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];

fn check_requirement(r: &LabelSelectorRequirement, field: &str) -> Result<(), SpecError> {
    let n = r.values.as_ref().map_or(0, Vec::len);
    match r.operator.as_str() {
        "In" | "NotIn" if n == 0 => Err(refuse(
            &format!("{field}.values"),
            format!("operator {} needs values", r.operator),
        )),
        "Exists" | "DoesNotExist" if n > 0 => Err(refuse(
            &format!("{field}.values"),
            format!("operator {} takes no values", r.operator),
        )),
        "In" | "NotIn" | "Exists" | "DoesNotExist" => Ok(()),
        other => Err(refuse(
            &format!("{field}.operator"),
            format!("'{other}' is not one of In, NotIn, Exists, DoesNotExist"),
        )),
    }
}

/// `podPhaseSelectors` as (phase, included) terms.
fn phase_terms(sel: &PodSelectorSpec) -> Result<Vec<(String, bool)>, SpecError> {
    let mut out = Vec::new();
    for entry in sel.pod_phase_selectors.iter().flatten() {
        for term in entry.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (phase, included) = match term.strip_prefix('!') {
                Some(p) => (p.trim(), false),
                None => (term, true),
            };
            let ok = !phase.is_empty() && phase.chars().all(|c| c.is_ascii_alphanumeric());
            if !ok {
                return Err(refuse(
                    "selector.podPhaseSelectors",
                    format!("'{term}': a phase (Running) or an excluded phase (!Failed)"),
                ));
            }
            out.push((phase.to_string(), included));
        }
    }
    Ok(out)
}

fn requirement_holds(r: &LabelSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&r.key);
    let listed = |v: &String| r.values.iter().flatten().any(|x| x == v);
    match r.operator.as_str() {
        "In" => value.is_some_and(listed),
        "NotIn" => !value.is_some_and(listed),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        _ => false,
    }
}

fn subset(
    want: Option<&BTreeMap<String, String>>,
    have: Option<&BTreeMap<String, String>>,
) -> bool {
    want.into_iter()
        .flatten()
        .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
}

fn pod_field(pod: &Pod, field: &str) -> String {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let s = |v: Option<&String>| v.cloned().unwrap_or_default();
    match field {
        "metadata.name" => s(pod.metadata.name.as_ref()),
        "metadata.namespace" => s(pod.metadata.namespace.as_ref()),
        "spec.nodeName" => s(spec.and_then(|p| p.node_name.as_ref())),
        "spec.restartPolicy" => s(spec.and_then(|p| p.restart_policy.as_ref())),
        "spec.schedulerName" => s(spec.and_then(|p| p.scheduler_name.as_ref())),
        "spec.serviceAccountName" => s(spec.and_then(|p| p.service_account_name.as_ref())),
        "status.phase" => s(status.and_then(|p| p.phase.as_ref())),
        "status.podIP" => s(status
            .and_then(|p| p.pod_ips.as_ref())
            .and_then(|ips| ips.first())
            .map(|ip| &ip.ip)),
        "status.nominatedNodeName" => s(status.and_then(|p| p.nominated_node_name.as_ref())),
        _ => String::new(),
    }
}

/// Whether `pod` matches `sel` of a resource in namespace `own_ns`.
/// `sel` is assumed checked ([`check_selector`]).
pub fn matches(pod: &Pod, sel: &PodSelectorSpec, own_ns: &str, nodes: &NodeLabels) -> bool {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    let name = pod.metadata.name.as_deref().unwrap_or("");
    if let Some(pods) = sel.pods.as_ref().filter(|p| !p.is_empty()) {
        return pods
            .get(ns)
            .is_some_and(|names| names.iter().any(|n| n == name));
    }
    let in_ns = match sel.namespaces.as_ref().filter(|n| !n.is_empty()) {
        Some(list) => list.iter().any(|n| n == ns),
        None => ns == own_ns,
    };
    let labels = pod.metadata.labels.as_ref();
    let empty = BTreeMap::new();
    let in_labels = subset(sel.label_selectors.as_ref(), labels)
        && sel
            .expression_selectors
            .iter()
            .flatten()
            .all(|r| requirement_holds(r, labels.unwrap_or(&empty)));
    let in_annotations = subset(
        sel.annotation_selectors.as_ref(),
        pod.metadata.annotations.as_ref(),
    );
    let in_fields = sel
        .field_selectors
        .iter()
        .flatten()
        .all(|(f, v)| pod_field(pod, f) == *v);
    in_ns
        && in_labels
        && in_annotations
        && in_fields
        && on_nodes(pod, sel, nodes)
        && in_phase(pod, sel)
}

fn on_nodes(pod: &Pod, sel: &PodSelectorSpec, nodes: &NodeLabels) -> bool {
    let named = sel.nodes.as_ref().filter(|n| !n.is_empty());
    let by_label = sel.node_selectors.as_ref().filter(|n| !n.is_empty());
    if named.is_none() && by_label.is_none() {
        return true;
    }
    let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
        return false;
    };
    named.is_some_and(|list| list.iter().any(|n| n == node))
        || by_label.is_some_and(|want| {
            nodes
                .get(node)
                .is_some_and(|have| subset(Some(want), Some(have)))
        })
}

fn in_phase(pod: &Pod, sel: &PodSelectorSpec) -> bool {
    let terms = phase_terms(sel).unwrap_or_default();
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("");
    let includes: Vec<&(String, bool)> = terms.iter().filter(|t| t.1).collect();
    let included = includes.is_empty() || includes.iter().any(|t| t.0 == phase);
    let excluded = terms.iter().any(|t| !t.1 && t.0 == phase);
    included && !excluded
}

/// The pods of `pods` that `sel` matches, as references sorted by
/// namespace and name (the order the picks index into).
pub fn candidates(
    pods: &[Pod],
    sel: &PodSelectorSpec,
    own_ns: &str,
    nodes: &NodeLabels,
) -> Vec<PodRef> {
    let mut out: Vec<PodRef> = pods
        .iter()
        .filter(|p| matches(p, sel, own_ns, nodes))
        .map(pod_ref)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// A pod as `status.selected` records it.
pub fn pod_ref(pod: &Pod) -> PodRef {
    PodRef {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
    }
}

/// How many of `count` candidates `mode`/`value` pick, before the random
/// draw of `random-max-percent`'s percentage: the checks of Chaos Mesh's
/// webhook and `FilterObjectsByMode`.
pub fn check_mode(mode: &Mode, value: Option<&str>) -> Result<(), SpecError> {
    let int = || -> Result<i64, SpecError> {
        let v = value.unwrap_or("");
        v.trim().parse::<i64>().map_err(|_| {
            refuse(
                "value",
                format!("'{v}': mode {} needs an integer value", mode_name(mode)),
            )
        })
    };
    match mode {
        Mode::One | Mode::All => Ok(()),
        Mode::Fixed => match int()? {
            n if n > 0 => Ok(()),
            n => Err(refuse(
                "value",
                format!("{n}: mode fixed needs a count above 0"),
            )),
        },
        Mode::FixedPercent | Mode::RandomMaxPercent => match int()? {
            p if (1..=100).contains(&p) => Ok(()),
            p => Err(refuse(
                "value",
                format!(
                    "{p}: mode {} needs a percentage in 1..=100",
                    mode_name(mode)
                ),
            )),
        },
    }
}

fn mode_name(mode: &Mode) -> &'static str {
    match mode {
        Mode::One => "one",
        Mode::All => "all",
        Mode::Fixed => "fixed",
        Mode::FixedPercent => "fixed-percent",
        Mode::RandomMaxPercent => "random-max-percent",
    }
}

/// A seed from the resource's uid (FNV-1a 64).
pub fn seed_from_uid(uid: &str) -> u64 {
    uid.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Uniform in 0..n (n > 0), by rejection so no value is favoured.
fn below(rng: &mut Xoshiro256PlusPlus, n: u64) -> u64 {
    let zone = u64::MAX - (u64::MAX % n);
    loop {
        let x = rng.next_u64();
        if x < zone {
            return x % n;
        }
    }
}

/// The pods `mode`/`value` pick from `candidates` (sorted), drawn from a
/// generator seeded by `seed`; the result is sorted. No candidates: none.
pub fn pick(
    mode: &Mode,
    value: Option<&str>,
    candidates: &[PodRef],
    seed: u64,
) -> Result<Vec<PodRef>, SpecError> {
    check_mode(mode, value)?;
    let n = candidates.len() as u64;
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let int = || value.unwrap_or("0").trim().parse::<u64>().unwrap_or(0);
    let ceil_percent = |p: u64| (n * p).div_ceil(100);
    let k = match mode {
        Mode::One => 1,
        Mode::All => n,
        Mode::Fixed => int().min(n),
        Mode::FixedPercent => ceil_percent(int()),
        Mode::RandomMaxPercent => {
            let q = below(&mut rng, int() + 1);
            ceil_percent(q)
        }
    };
    // A partial Fisher-Yates shuffle: the first k are a uniform k-subset.
    let mut idx: Vec<usize> = (0..candidates.len()).collect();
    for i in 0..k as usize {
        let j = i + below(&mut rng, n - i as u64) as usize;
        idx.swap(i, j);
    }
    let mut out: Vec<PodRef> = idx[..k as usize]
        .iter()
        .map(|&i| candidates[i].clone())
        .collect();
    out.sort();
    Ok(out)
}

#[cfg(test)]
#[path = "select_tests.rs"]
mod tests;
