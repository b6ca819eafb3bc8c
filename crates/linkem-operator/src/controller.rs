//! The controller: for each `LinkChaos`, picks the pods its selector and mode
//! select (once; kept in `status.selected`, read back after a restart), and
//! writes `status.phase` (`Running`, `Ended` once `startedAt` + `duration`
//! has passed, `Refused` with `status.message` when the spec cannot apply),
//! `status.startedAt` (the creation instant finer than creationTimestamp's
//! whole second), `status.expiresAt` and `status.message`, by a JSON merge patch of the
//! status subresource holding only those keys (the agents write `pods`).
//!
//! Selection over time: a selected pod that no longer exists is dropped; a
//! pod appearing later is added only in mode `all` (Chaos Mesh picks once).
//! With no pod matching yet, nothing is picked and `selected` stays absent
//! until one appears, as Chaos Mesh retries "no pod is selected".
//! Any pod or node change re-runs every resource's reconcile (a list of the
//! caches, no API request unless the status changes); a resource with a
//! duration is requeued at its expiry.

use crate::chaos::{LinkChaos, LinkChaosStatus, PodRef};
use crate::{select, words};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long after a failed reconcile (an API error) it is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(2);
/// Pod and node events arriving together make one pass over the resources.
const DEBOUNCE: Duration = Duration::from_millis(100);

struct Ctx {
    client: Client,
    pods: Store<Pod>,
    nodes: Store<Node>,
    chaos: Store<LinkChaos>,
    /// The status last written per resource uid: a reconcile may run on a
    /// cached object from before that write (the watch lags it), and must
    /// not pick again or move `startedAt`.
    written: Mutex<HashMap<String, LinkChaosStatus>>,
}

/// A client from `kubeconfig`, else the default (in-cluster, `KUBECONFIG`,
/// `~/.kube/config`).
pub async fn client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<Client> {
    use anyhow::Context;
    let Some(path) = kubeconfig else {
        return Client::try_default()
            .await
            .context("no Kubernetes client configuration");
    };
    let kc = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading {}", path.display()))?;
    let opts = kube::config::KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(kc, &opts).await?;
    Ok(Client::try_from(config)?)
}

/// Runs the controller until the process ends (or its watches end).
pub async fn run(client: Client) -> anyhow::Result<()> {
    let (pods, pod_writer) = reflector::store();
    let pod_events = reflector::reflector(
        pod_writer,
        watcher(Api::<Pod>::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .touched_objects()
    .filter_map(|r| async move { event("pods", r) });
    let (nodes, node_writer) = reflector::store();
    let node_events = reflector::reflector(
        node_writer,
        watcher(Api::<Node>::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .touched_objects()
    .filter_map(|r| async move { event("nodes", r) });
    // The caches run as tasks of their own and are awaited here, once:
    // `Store::wait_until_ready` wakes only one of several waiters (its
    // oneshot keeps one waker), so concurrent reconciles must not wait on it.
    let (tx, triggers) = futures::channel::mpsc::channel::<()>(1);
    tokio::spawn(forward(pod_events, tx.clone()));
    tokio::spawn(forward(node_events, tx));
    pods.wait_until_ready().await?;
    nodes.wait_until_ready().await?;
    let config = kube::runtime::controller::Config::default().debounce(DEBOUNCE);
    let controller = Controller::new(
        Api::<LinkChaos>::all(client.clone()),
        watcher::Config::default(),
    );
    let ctx = Arc::new(Ctx {
        client,
        pods,
        nodes,
        chaos: controller.store(),
        written: Mutex::new(HashMap::new()),
    });
    controller
        .with_config(config)
        .reconcile_all_on(triggers)
        .run(
            reconcile,
            |_, err, _| {
                eprintln!("linkem-operator controller: {err:#}");
                Action::requeue(RETRY_AFTER)
            },
            ctx,
        )
        .for_each(|r| async move {
            // A reconcile's own failure was said by the error policy.
            if let Err(e) = r {
                if !matches!(e, kube::runtime::controller::Error::ReconcilerFailed(..)) {
                    eprintln!("linkem-operator controller: {e}");
                }
            }
        })
        .await;
    Ok(())
}

/// A reconcile's failure (an API request).
#[derive(Debug)]
pub struct ReconcileError(String);

impl std::fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReconcileError {}

fn failed(e: impl std::fmt::Display) -> ReconcileError {
    ReconcileError(e.to_string())
}

/// Drives a cache's watch, passing its events on as triggers. A trigger
/// that finds the channel full is dropped: the one waiting there runs after
/// this event reached the cache, so it covers it.
async fn forward(
    events: impl futures::Stream<Item = ()>,
    mut tx: futures::channel::mpsc::Sender<()>,
) {
    let mut events = std::pin::pin!(events);
    while events.next().await.is_some() {
        if tx.try_send(()).is_err_and(|e| e.is_disconnected()) {
            return;
        }
    }
}

/// A watch event as a trigger; a watch error is said (the watch retries).
fn event<K>(what: &str, r: Result<K, watcher::Error>) -> Option<()> {
    match r {
        Ok(_) => Some(()),
        Err(e) => {
            eprintln!("linkem-operator controller: watching {what}: {e}");
            None
        }
    }
}

async fn reconcile(lc: Arc<LinkChaos>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    if lc.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let pods: Vec<Pod> = ctx.pods.state().iter().map(|p| Pod::clone(p)).collect();
    let nodes: select::NodeLabels = ctx
        .nodes
        .state()
        .iter()
        .map(|n| (n.name_any(), n.metadata.labels.clone().unwrap_or_default()))
        .collect();
    let uid = lc.metadata.uid.clone().unwrap_or_default();
    let mut lc = LinkChaos::clone(&lc);
    if let Some(newer) = remembered(&ctx, &uid) {
        lc.status = Some(newer);
    }
    let now = Timestamp::now();
    let (want, requeue) = desired(&lc, &pods, &nodes, now);
    let have = lc.status.clone().unwrap_or_default();
    if status_differs(&want, &have) {
        let ns = lc.namespace().unwrap_or_default();
        let api: Api<LinkChaos> = Api::namespaced(ctx.client.clone(), &ns);
        let patch = serde_json::json!({ "status": {
            "phase": want.phase,
            "message": want.message,
            "expiresAt": want.expires_at,
        "startedAt": want.started_at,
            "selected": want.selected,
        }});
        api.patch_status(
            &lc.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(failed)?;
        if let Ok(mut w) = ctx.written.lock() {
            w.insert(uid, want.clone());
        }
        eprintln!(
            "linkem-operator controller: {ns}/{}: {} ({} selected)",
            lc.name_any(),
            want.phase.as_deref().unwrap_or("-"),
            want.selected.as_ref().map_or(0, Vec::len)
        );
    }
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// The status this controller last wrote for `uid` (forgetting resources
/// that are gone).
fn remembered(ctx: &Ctx, uid: &str) -> Option<LinkChaosStatus> {
    let mut w = ctx.written.lock().ok()?;
    if w.len() > ctx.chaos.state().len() {
        let live: BTreeSet<String> = ctx
            .chaos
            .state()
            .iter()
            .filter_map(|c| c.metadata.uid.clone())
            .collect();
        w.retain(|k, _| live.contains(k));
    }
    w.get(uid).cloned()
}

fn status_differs(want: &LinkChaosStatus, have: &LinkChaosStatus) -> bool {
    want.phase != have.phase
        || want.message != have.message
        || want.expires_at != have.expires_at
        || want.started_at != have.started_at
        || want.selected != have.selected
}

/// The controller's keys of the status (`pods` left out) for `lc` at `now`
/// among `pods`, and when to look again (the expiry).
pub fn desired(
    lc: &LinkChaos,
    pods: &[Pod],
    nodes: &select::NodeLabels,
    now: Timestamp,
) -> (LinkChaosStatus, Option<Duration>) {
    let refused = |message: String| {
        let status = LinkChaosStatus {
            phase: Some("Refused".into()),
            message: Some(message),
            ..LinkChaosStatus::default()
        };
        (status, None)
    };
    let spec = &lc.spec;
    let notes = match words::link_words(spec) {
        Ok(w) => w.notes,
        Err(e) => return refused(e.to_string()),
    };
    let checks = select::check_selector(&spec.selector)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            select::check_mode(&spec.mode, spec.value.as_deref()).map_err(|e| e.to_string())
        });
    if let Err(message) = checks {
        return refused(message);
    }
    let have = lc.status.clone().unwrap_or_default();
    let started = started_at(lc, &have, now);
    let expires = match spec
        .duration
        .as_deref()
        .map(words::go_duration_ns)
        .transpose()
    {
        Ok(d) => d.map(|ns| started + SignedDuration::from_nanos(ns as i64)),
        Err(e) => return refused(format!("duration: {e}")),
    };
    let ended = expires.is_some_and(|at| at <= now);
    let selected = if ended {
        have.selected.clone()
    } else {
        select_pods(lc, have.selected.as_deref(), pods, nodes)
    };
    let mut message: Vec<String> = notes;
    if selected.is_none() && !ended {
        message.push("no pod matches the selector yet".into());
    }
    let status = LinkChaosStatus {
        phase: Some(if ended { "Ended" } else { "Running" }.into()),
        message: (!message.is_empty()).then(|| message.join("; ")),
        expires_at: expires.map(|t| t.to_string()),
        started_at: Some(started.to_string()),
        selected,
        pods: None,
    };
    let requeue = match expires {
        Some(at) if !ended => {
            let left = now.duration_until(at);
            Some(Duration::from_nanos(left.as_nanos().max(0) as u64) + Duration::from_millis(5))
        }
        _ => None,
    };
    (status, requeue)
}

/// The kept `startedAt`, else an estimate of the creation instant finer
/// than creationTimestamp's whole second: now, when now lies within that
/// second (the controller sees a resource within milliseconds of its
/// creation), else the middle of the second.
fn started_at(lc: &LinkChaos, have: &LinkChaosStatus, now: Timestamp) -> Timestamp {
    if let Some(t) = have.started_at.as_deref().and_then(|t| t.parse().ok()) {
        return t;
    }
    let Some(created) = lc.metadata.creation_timestamp.as_ref().map(|t| t.0) else {
        return now;
    };
    let second = SignedDuration::from_secs(1);
    if now < created {
        created
    } else if now < created + second {
        now
    } else {
        created + second / 2
    }
}

/// The kept selection less the pods gone (plus, in mode `all`, the pods now
/// matching); without a kept one, a fresh pick, or `None` when nothing
/// matches yet.
fn select_pods(
    lc: &LinkChaos,
    kept: Option<&[PodRef]>,
    pods: &[Pod],
    nodes: &select::NodeLabels,
) -> Option<Vec<PodRef>> {
    let spec = &lc.spec;
    let own_ns = lc.namespace().unwrap_or_default();
    let matching = select::candidates(pods, &spec.selector, &own_ns, nodes);
    let Some(kept) = kept else {
        if matching.is_empty() {
            return None;
        }
        let seed = select::seed_from_uid(lc.metadata.uid.as_deref().unwrap_or(&lc.name_any()));
        return select::pick(&spec.mode, spec.value.as_deref(), &matching, seed).ok();
    };
    let alive: BTreeSet<(String, String)> = pods
        .iter()
        .map(|p| (p.namespace().unwrap_or_default(), p.name_any()))
        .collect();
    let mut out: Vec<PodRef> = kept
        .iter()
        .filter(|r| alive.contains(&(r.namespace.clone(), r.name.clone())))
        .cloned()
        .collect();
    if spec.mode == crate::chaos::Mode::All {
        for m in matching {
            if !out
                .iter()
                .any(|r| r.namespace == m.namespace && r.name == m.name)
            {
                out.push(m);
            }
        }
    }
    // A pod rescheduled under the same name may have a new node.
    for r in &mut out {
        if let Some(p) = pods
            .iter()
            .find(|p| p.namespace().as_deref() == Some(&r.namespace) && p.name_any() == r.name)
        {
            r.node = select::pod_ref(p).node;
        }
    }
    out.sort();
    Some(out)
}

#[cfg(test)]
#[path = "controller_tests.rs"]
mod tests;
