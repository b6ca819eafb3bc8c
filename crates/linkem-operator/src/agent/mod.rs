//! The node agent (`linkem-operator agent --node NODE --run-dir DIR`, one
//! per node): watches every LinkChaos and the Pods bound to its node, finds
//! the pods' emulators in linkem-cni's state files (`DIR/cni/*.json`, read
//! again every 200 ms), and brings each emulator to its pod's desired link
//! ([`desired`]) with one batch through its control socket ([`apply`]),
//! recording what it applied in `DIR/agent/applied.json` ([`applied`]) so
//! that a restarted agent sends nothing twice. It writes only its pods'
//! entries of `status.pods` (a JSON merge patch of the status subresource)
//! and serves Prometheus metrics on `--metrics` ([`metrics`]).
//!
//! Timing: a change of a resource wakes the loop at once; a new sandbox is
//! seen within one scan (200 ms); schedule steps and durations wake it at
//! their instants.

pub mod applied;
pub mod apply;
pub mod desired;
pub mod emulators;
pub mod metrics;
pub mod reconcile;

use crate::chaos::LinkChaos;
use desired::ChaosView;
use emulators::PodKey;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use reconcile::{Agent, StatusUpdate};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// How often the run dir is read again for new or gone emulators.
pub const SCAN_INTERVAL: Duration = Duration::from_millis(200);

/// The `agent` subcommand's arguments.
#[derive(Debug, Clone)]
pub struct AgentArgs {
    pub node: String,
    pub run_dir: PathBuf,
    pub kubeconfig: Option<PathBuf>,
    /// `ADDR:PORT` for `/metrics`.
    pub metrics: Option<String>,
}

/// A client from `kubeconfig`, else the environment's (in-cluster, or `KUBECONFIG`).
pub async fn client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| anyhow::anyhow!("--kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(kube::Client::try_from(config)?)
}

/// Writes a pass's entries of one resource's status in one merge patch of
/// `status.pods` (those keys, nothing else): a patch per pod, one after
/// another into a status that grows with every entry, made 200 pods' entries
/// lag their emulators by 7 s. Whether they are written; a resource deleted
/// meanwhile needs no status: that counts as written.
async fn write_status(client: &kube::Client, updates: &[&StatusUpdate]) -> bool {
    let Some(first) = updates.first() else {
        return true;
    };
    let api: Api<LinkChaos> = Api::namespaced(client.clone(), &first.namespace);
    let pods: serde_json::Map<String, serde_json::Value> = updates
        .iter()
        .map(|u| (u.pod.clone(), serde_json::json!(u.status)))
        .collect();
    let patch = serde_json::json!({"status": {"pods": pods}});
    match api
        .patch_status(&first.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => true,
        Err(kube::Error::Api(s)) if s.code == 404 => true,
        Err(e) => {
            eprintln!(
                "linkem-operator agent: status of {}/{} for {} pods: {e}",
                first.namespace,
                first.name,
                updates.len()
            );
            false
        }
    }
}

/// Runs the agent until SIGTERM or SIGINT.
pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    let client = client(args.kubeconfig.as_deref()).await?;
    let metrics = Arc::new(metrics::Metrics::default());
    if let Some(addr) = &args.metrics {
        let bound = metrics.clone().serve(addr)?;
        eprintln!("linkem-operator agent: metrics on http://{bound}/metrics");
    }
    let notify = Arc::new(Notify::new());
    let (chaos, chaos_writer) = reflector::store::<LinkChaos>();
    let (pods, pods_writer) = reflector::store::<Pod>();
    let chaos_api: Api<LinkChaos> = Api::all(client.clone());
    let pods_api: Api<Pod> = Api::all(client.clone());
    let on_node = watcher::Config::default().fields(&format!("spec.nodeName={}", args.node));
    let n = notify.clone();
    tokio::spawn(
        reflector(chaos_writer, watcher(chaos_api, watcher::Config::default()))
            .default_backoff()
            .for_each(move |_| {
                n.notify_one();
                futures::future::ready(())
            }),
    );
    let n = notify.clone();
    tokio::spawn(
        reflector(pods_writer, watcher(pods_api, on_node))
            .default_backoff()
            .for_each(move |_| {
                n.notify_one();
                futures::future::ready(())
            }),
    );
    // Before the first list the store is empty: acting then would restore
    // every pod the record says carries a resource.
    chaos.wait_until_ready().await?;
    pods.wait_until_ready().await?;
    let mut agent = Agent::new(&args.node, &args.run_dir, metrics)?;
    eprintln!(
        "linkem-operator agent: node {}, run dir {}",
        args.node,
        args.run_dir.display()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        let views: Vec<ChaosView> = chaos
            .state()
            .iter()
            .map(|c| ChaosView::from_resource(c))
            .collect();
        let uids: HashMap<PodKey, String> = pods
            .state()
            .iter()
            .filter_map(|p| {
                let m = &p.metadata;
                let key = PodKey {
                    namespace: m.namespace.clone()?,
                    name: m.name.clone()?,
                };
                Some((key, m.uid.clone()?))
            })
            .collect();
        let now = reconcile::now_ns();
        let (back, pass) = tokio::task::spawn_blocking(move || {
            let pass = agent.pass(&views, Some(&uids), now);
            (agent, pass)
        })
        .await?;
        agent = back;
        let mut by_resource: BTreeMap<(&str, &str), Vec<&StatusUpdate>> = BTreeMap::new();
        for u in &pass.updates {
            by_resource
                .entry((u.namespace.as_str(), u.name.as_str()))
                .or_default()
                .push(u);
        }
        for updates in by_resource.values() {
            if !write_status(&client, updates).await {
                for u in updates {
                    agent.forget(u);
                }
            }
        }
        let mut wait = SCAN_INTERVAL;
        if let Some(w) = pass.wake_ns {
            let left_ns = (w - reconcile::now_ns()).max(0);
            wait = wait.min(Duration::from_nanos(
                left_ns.min(i128::from(u64::MAX)) as u64
            ));
        }
        tokio::select! {
            _ = notify.notified() => {}
            _ = tokio::time::sleep(wait) => {}
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
        }
    }
    eprintln!("linkem-operator agent: stopped (the emulators keep their links)");
    Ok(())
}
