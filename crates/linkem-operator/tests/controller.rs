//! The controller (`linkem-operator controller`, a real process) against a
//! real kube-apiserver and etcd: pods are objects bound to node names, as
//! envtest has them (no kubelet). Each test has a namespace of its own and
//! its own controller process; the tests run one at a time, since every
//! controller watches every namespace.

mod common;

use common::ControlPlane;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;
use linkem_operator::chaos::{LinkChaos, LinkChaosStatus, PodRef};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

// A tokio mutex: held across awaits, and each test has a runtime of its own.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The selection must show within this of the resource's creation (the 2 s).
const SELECT_WITHIN: Duration = Duration::from_secs(2);

/// A controller process, killed on drop.
struct ControllerProcess(Child);

impl ControllerProcess {
    fn start(cp: &ControlPlane) -> ControllerProcess {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_linkem-operator"));
        cmd.arg("controller")
            .arg("--kubeconfig")
            .arg(cp.kubeconfig_path())
            .stdin(Stdio::null());
        linkem_io::shellns::die_with_parent(&mut cmd, libc::SIGKILL);
        ControllerProcess(cmd.spawn().expect("the controller starts"))
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn setup(ns: &str) -> (Client, Api<Pod>, Api<LinkChaos>) {
    let cp = ControlPlane::shared();
    let client = cp.client().await.expect("a client");
    common::install_crd(&client)
        .await
        .expect("the CRD installs");
    let nss: Api<Namespace> = Api::all(client.clone());
    let n: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).expect("namespace");
    nss.create(&PostParams::default(), &n)
        .await
        .expect("namespace created");
    (
        client.clone(),
        Api::namespaced(client.clone(), ns),
        Api::namespaced(client, ns),
    )
}

/// A unique namespace per test and run (namespaces are never finalized here).
fn namespace(test: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis();
    format!("{test}-{}", t % 1_000_000_000)
}

async fn create_pod(pods: &Api<Pod>, name: &str, app: &str, node: &str) {
    let p: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "pause"}]},
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &p)
        .await
        .expect("pod created");
    let status = serde_json::json!({"status": {"phase": "Running"}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("pod status patched");
}

async fn create_chaos(api: &Api<LinkChaos>, name: &str, spec: serde_json::Value) -> LinkChaos {
    let lc: LinkChaos = serde_json::from_value(serde_json::json!({
        "apiVersion": "linkem.dev/v1alpha1", "kind": "LinkChaos",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("LinkChaos");
    api.create(&PostParams::default(), &lc)
        .await
        .expect("LinkChaos created")
}

/// Polls `name`'s status until `done` holds; the status and when it held.
async fn wait_for(
    api: &Api<LinkChaos>,
    name: &str,
    within: Duration,
    done: impl Fn(&LinkChaosStatus) -> bool,
) -> (LinkChaosStatus, Instant) {
    let deadline = Instant::now() + within;
    loop {
        let s = api.get(name).await.expect("get").status.unwrap_or_default();
        if done(&s) {
            return (s, Instant::now());
        }
        assert!(
            Instant::now() < deadline,
            "{name}: not within {within:?}: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn names(s: &LinkChaosStatus) -> Vec<String> {
    s.selected
        .iter()
        .flatten()
        .map(|r| r.name.clone())
        .collect()
}

fn delay(mode: &str, value: Option<&str>) -> serde_json::Value {
    let mut spec = serde_json::json!({
        "selector": {"labelSelectors": {"app": "web"}},
        "mode": mode, "action": "delay", "delay": {"latency": "20ms"},
    });
    if let Some(v) = value {
        spec["value"] = v.into();
    }
    spec
}

#[tokio::test]
async fn mode_all_selects_the_matching_pods_and_follows_them() {
    let _one = ONE_AT_A_TIME.lock().await;
    let ns = namespace("ctl-all");
    let (_c, pods, chaos) = setup(&ns).await;
    for (i, app) in ["web", "web", "db", "web", "db"].iter().enumerate() {
        create_pod(&pods, &format!("p{i}"), app, ["node-a", "node-b"][i % 2]).await;
    }
    let _ctl = ControllerProcess::start(ControlPlane::shared());
    let created = Instant::now();
    create_chaos(&chaos, "web-delay", delay("all", None)).await;
    let (s, seen) = wait_for(&chaos, "web-delay", Duration::from_secs(30), |s| {
        s.selected.is_some()
    })
    .await;
    // The first resource waits for the controller's start; its pick is what counts here.
    assert_eq!(names(&s), ["p0", "p1", "p3"]);
    assert_eq!(s.phase.as_deref(), Some("Running"));
    let nodes: Vec<Option<String>> = s
        .selected
        .iter()
        .flatten()
        .map(|r| r.node.clone())
        .collect();
    assert_eq!(
        nodes,
        [
            Some("node-a".into()),
            Some("node-b".into()),
            Some("node-b".into())
        ]
    );
    eprintln!("first selection after {:?}", seen - created);

    // The controller is running now: a second resource is picked within 2 s.
    let created = Instant::now();
    create_chaos(&chaos, "web-delay-2", delay("all", None)).await;
    wait_for(&chaos, "web-delay-2", SELECT_WITHIN, |s| {
        names(s).len() == 3
    })
    .await;
    eprintln!("selection after {:?}", created.elapsed());

    // A new matching pod joins (mode all); a deleted one leaves.
    create_pod(&pods, "p5", "web", "node-a").await;
    wait_for(&chaos, "web-delay", SELECT_WITHIN, |s| {
        names(s) == ["p0", "p1", "p3", "p5"]
    })
    .await;
    pods.delete("p1", &DeleteParams::default().grace_period(0))
        .await
        .expect("pod deleted");
    wait_for(&chaos, "web-delay", SELECT_WITHIN, |s| {
        names(s) == ["p0", "p3", "p5"]
    })
    .await;
}

#[tokio::test]
async fn fixed_percent_rounds_up_as_chaos_mesh_does() {
    let _one = ONE_AT_A_TIME.lock().await;
    let ns = namespace("ctl-pct");
    let (_c, pods, chaos) = setup(&ns).await;
    for i in 0..5 {
        create_pod(&pods, &format!("w{i}"), "web", "node-a").await;
    }
    create_pod(&pods, "other", "db", "node-a").await;
    let _ctl = ControllerProcess::start(ControlPlane::shared());
    // ceil(5 x 50 / 100) = 3 of the five web pods.
    create_chaos(&chaos, "half", delay("fixed-percent", Some("50"))).await;
    let (s, _) = wait_for(&chaos, "half", Duration::from_secs(30), |s| {
        s.selected.is_some()
    })
    .await;
    let picked = names(&s);
    assert_eq!(picked.len(), 3, "{picked:?}");
    assert!(picked.iter().all(|n| n.starts_with('w')), "{picked:?}");
    // ceil(5 x 10 / 100) = 1.
    create_chaos(&chaos, "tenth", delay("fixed-percent", Some("10"))).await;
    let (s, _) = wait_for(&chaos, "tenth", SELECT_WITHIN, |s| s.selected.is_some()).await;
    assert_eq!(names(&s).len(), 1);
}

#[tokio::test]
async fn duration_ends_the_resource_at_creation_plus_duration() {
    let _one = ONE_AT_A_TIME.lock().await;
    let ns = namespace("ctl-dur");
    let (_c, pods, chaos) = setup(&ns).await;
    create_pod(&pods, "w0", "web", "node-a").await;
    let _ctl = ControllerProcess::start(ControlPlane::shared());
    // The controller is up once a first resource has its status.
    create_chaos(&chaos, "warm", delay("all", None)).await;
    wait_for(&chaos, "warm", Duration::from_secs(30), |s| {
        s.phase.is_some()
    })
    .await;

    let mut spec = delay("all", None);
    spec["duration"] = "3s".into();
    let before = Instant::now();
    let lc = create_chaos(&chaos, "short", spec).await;
    let (s, _) = wait_for(&chaos, "short", SELECT_WITHIN, |s| {
        s.phase.as_deref() == Some("Running")
    })
    .await;
    let created = lc.metadata.creation_timestamp.expect("created").0;
    let stamp = |t: Option<&str>| -> k8s_openapi::jiff::Timestamp {
        t.expect("a timestamp").parse().expect("RFC 3339")
    };
    let started = stamp(s.started_at.as_deref());
    let expires = stamp(s.expires_at.as_deref());
    assert_eq!(expires.duration_since(started).as_millis(), 3000);
    // The start refines creationTimestamp's whole second.
    let into = started.duration_since(created).as_millis();
    assert!(
        (0..1000).contains(&into),
        "started {into} ms after creationTimestamp"
    );
    let (_, ended) = wait_for(&chaos, "short", Duration::from_secs(6), |s| {
        s.phase.as_deref() == Some("Ended")
    })
    .await;
    let took = ended - before;
    eprintln!("Ended {took:?} after creation (duration 3s)");
    // The bound: at the duration ± 1 s.
    assert!(
        took >= Duration::from_secs(2) && took <= Duration::from_secs(4),
        "Ended after {took:?}"
    );
}

#[tokio::test]
async fn malformed_specs_are_refused_by_the_schema_or_the_controller() {
    let _one = ONE_AT_A_TIME.lock().await;
    let ns = namespace("ctl-ref");
    let (_c, pods, chaos) = setup(&ns).await;
    create_pod(&pods, "w0", "web", "node-a").await;
    let _ctl = ControllerProcess::start(ControlPlane::shared());
    // `latency: 20xs`: the API server's validation refuses it.
    let lc: LinkChaos = serde_json::from_value(serde_json::json!({
        "apiVersion": "linkem.dev/v1alpha1", "kind": "LinkChaos", "metadata": {"name": "bad"},
        "spec": {"selector": {}, "mode": "all", "action": "delay", "delay": {"latency": "20xs"}},
    }))
    .expect("LinkChaos");
    let err = chaos
        .create(&PostParams::default(), &lc)
        .await
        .expect_err("the schema refuses 20xs");
    let text = format!("{err}");
    assert!(text.contains("latency") && text.contains("20xs"), "{text}");

    // A word only linkem's parser refuses: Refused, with the word and its
    // position in the direction's words (`delay 20ms rate 10mbit red 1%`).
    let mut spec = delay("all", None);
    spec["linkem"] = serde_json::json!({"egress": "rate 10mbit red 1%"});
    create_chaos(&chaos, "red", spec).await;
    let (s, _) = wait_for(&chaos, "red", Duration::from_secs(30), |s| {
        s.phase.is_some()
    })
    .await;
    assert_eq!(s.phase.as_deref(), Some("Refused"), "{s:?}");
    let m = s.message.unwrap_or_default();
    assert!(
        m.contains("linkem.egress") && m.contains("'red' (word 5)"),
        "{m}"
    );
    assert_eq!(s.selected, None);

    // What linkem cannot do at all: a partition toward a target.
    let spec = serde_json::json!({
        "selector": {}, "mode": "all", "action": "partition",
        "target": {"selector": {"labelSelectors": {"app": "db"}}, "mode": "all"},
    });
    create_chaos(&chaos, "split", spec).await;
    let (s, _) = wait_for(&chaos, "split", SELECT_WITHIN, |s| s.phase.is_some()).await;
    assert_eq!(s.phase.as_deref(), Some("Refused"));
    assert!(s.message.unwrap_or_default().starts_with("target:"));
}

#[tokio::test]
async fn a_restarted_controller_keeps_the_selection() {
    let _one = ONE_AT_A_TIME.lock().await;
    let ns = namespace("ctl-restart");
    let (_c, pods, chaos) = setup(&ns).await;
    for i in 0..6 {
        create_pod(&pods, &format!("w{i}"), "web", "node-a").await;
    }
    let ctl = ControllerProcess::start(ControlPlane::shared());
    create_chaos(&chaos, "two", delay("fixed", Some("2"))).await;
    let (first, _) = wait_for(&chaos, "two", Duration::from_secs(30), |s| {
        s.selected.is_some()
    })
    .await;
    assert_eq!(names(&first).len(), 2);
    drop(ctl);
    // While it is down, more matching pods: a fresh pick would index a longer list.
    for i in 6..12 {
        create_pod(&pods, &format!("w{i}"), "web", "node-b").await;
    }
    let _ctl = ControllerProcess::start(ControlPlane::shared());
    create_chaos(&chaos, "probe", delay("one", None)).await;
    wait_for(&chaos, "probe", Duration::from_secs(30), |s| {
        s.selected.is_some()
    })
    .await;
    let now = chaos
        .get("two")
        .await
        .expect("get")
        .status
        .unwrap_or_default();
    assert_eq!(now.selected, first.selected);
    let kept: Vec<PodRef> = now.selected.unwrap_or_default();
    assert!(kept.iter().all(|r| r.node.as_deref() == Some("node-a")));
}

#[tokio::test]
async fn node_selectors_match_the_nodes_labels() {
    let _one = ONE_AT_A_TIME.lock().await;
    let ns = namespace("ctl-node");
    let (client, pods, chaos) = setup(&ns).await;
    let nodes: Api<Node> = Api::all(client);
    let (east, west) = (format!("{ns}-east"), format!("{ns}-west"));
    for (name, zone) in [(&east, "east"), (&west, "west")] {
        let n: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"zone": zone}},
        }))
        .expect("node");
        nodes
            .create(&PostParams::default(), &n)
            .await
            .expect("node created");
    }
    create_pod(&pods, "e0", "web", &east).await;
    create_pod(&pods, "e1", "web", &east).await;
    create_pod(&pods, "w0", "web", &west).await;
    let _ctl = ControllerProcess::start(ControlPlane::shared());
    let mut spec = delay("all", None);
    spec["selector"]["nodeSelectors"] = serde_json::json!({"zone": "east"});
    create_chaos(&chaos, "east", spec).await;
    let (s, _) = wait_for(&chaos, "east", Duration::from_secs(30), |s| {
        s.selected.is_some()
    })
    .await;
    assert_eq!(names(&s), ["e0", "e1"]);
    let mut spec = delay("all", None);
    spec["selector"]["nodes"] = serde_json::json!([west]);
    create_chaos(&chaos, "west", spec).await;
    let (s, _) = wait_for(&chaos, "west", SELECT_WITHIN, |s| s.selected.is_some()).await;
    assert_eq!(names(&s), ["w0"]);
}

#[tokio::test]
async fn two_hundred_pods_on_two_nodes_are_selected_within_two_seconds() {
    let _one = ONE_AT_A_TIME.lock().await;
    let ns = namespace("ctl-200");
    let (_c, pods, chaos) = setup(&ns).await;
    let started = Instant::now();
    let made = futures::future::join_all((0..200).map(|i| {
        let pods = pods.clone();
        async move {
            let node = ["node-a", "node-b"][i % 2];
            create_pod(&pods, &format!("p{i:03}"), "web", node).await
        }
    }));
    made.await;
    eprintln!("200 pods created in {:?}", started.elapsed());
    let _ctl = ControllerProcess::start(ControlPlane::shared());
    create_chaos(&chaos, "warm", delay("one", None)).await;
    wait_for(&chaos, "warm", Duration::from_secs(30), |s| {
        s.selected.is_some()
    })
    .await;
    let created = Instant::now();
    create_chaos(&chaos, "all-200", delay("all", None)).await;
    let (_, seen) = wait_for(&chaos, "all-200", SELECT_WITHIN, |s| names(s).len() == 200).await;
    eprintln!(
        "200 pods selected {:?} after the resource's creation",
        seen - created
    );
}
