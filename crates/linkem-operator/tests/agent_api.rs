//! The node agent as a process against a real kube-apiserver (tests/common)
//! and a real emulator (a sandbox made by linkem-cni ADD through cnitool,
//! tests/node): a LinkChaos whose `status.selected` names the pod (written
//! here: the controller is not part of this test) is applied within 2 s and
//! reported Applied; a restarted agent sends nothing again; a new sandbox of
//! the pod gets the link within 2 s; the resource deleted, the base is back
//! within 2 s.

mod common;
mod node;

use node::{free_port, scrape, until, AgentProc};

use common::{install_crd, ControlPlane};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use linkem_operator::chaos::LinkChaos;
use serde_json::json;
use std::time::{Duration, Instant};

const NODE: &str = "node-a";
/// The agent's promise for a change of a resource or a new sandbox.
const WITHIN: Duration = Duration::from_secs(2);

fn delayed(n: &node::Node, pod: &node::Pod) -> bool {
    n.links(pod)
        .first()
        .is_some_and(|l| l.0.contains("delay 20ms"))
}

/// The test's world: the API, the node, the pod and the agent.
struct World {
    ns: String,
    uid: String,
    chaos: Api<LinkChaos>,
    pods: Api<Pod>,
    node: node::Node,
    kubeconfig: std::path::PathBuf,
    port: u16,
    log: std::path::PathBuf,
}

/// A namespace, a Pod bound to NODE, its sandbox through linkem-cni.
async fn world(cnitool: std::path::PathBuf) -> World {
    let cp = ControlPlane::shared();
    let client = cp.client().await.unwrap();
    install_crd(&client).await.unwrap();
    let ns = format!("lkok{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let nsobj = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
    namespaces
        .create(&PostParams::default(), &nsobj)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod_obj: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web-0", "labels": {"app": "web"}},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "none"}]}}))
    .unwrap();
    let created = pods.create(&PostParams::default(), &pod_obj).await.unwrap();
    let node = node::Node::new(cnitool, "k", 238);
    World {
        uid: created.metadata.uid.clone().unwrap(),
        chaos: Api::namespaced(client.clone(), &ns),
        pods,
        log: node.run_dir.join("agent.log"),
        node,
        ns,
        kubeconfig: cp.kubeconfig_path(),
        port: free_port(),
    }
}

impl World {
    fn agent(&self) -> AgentProc {
        std::fs::create_dir_all(&self.node.run_dir).unwrap();
        let agent = AgentProc::start(&self.node.run_dir, &self.kubeconfig, self.port, &self.log);
        assert!(
            until(Duration::from_secs(20), || scrape(self.port).is_some()).is_some(),
            "the agent did not serve metrics:\n{}",
            agent.log()
        );
        agent
    }

    /// The resource, and the controller's pick written by hand.
    async fn create_chaos(&self, name: &str, duration: Option<&str>) {
        let mut lc: LinkChaos = serde_json::from_value(json!({
            "apiVersion": "linkem.dev/v1alpha1", "kind": "LinkChaos",
            "metadata": {"name": name},
            "spec": {"selector": {"labelSelectors": {"app": "web"}}, "mode": "all",
                     "action": "delay", "delay": {"latency": "20ms"}, "direction": "to"}}))
        .unwrap();
        lc.spec.duration = duration.map(str::to_string);
        self.chaos
            .create(&PostParams::default(), &lc)
            .await
            .unwrap();
        let selected = json!({"status": {"phase": "Running",
            "selected": [{"namespace": self.ns, "name": "web-0", "node": NODE}]}});
        self.chaos
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&selected))
            .await
            .unwrap();
    }

    /// The pod's entry of `name`'s `status.pods`, once the agent wrote it
    /// in `state`.
    async fn pod_status(
        &self,
        name: &str,
        state: &str,
        agent: &AgentProc,
    ) -> linkem_operator::chaos::PodStatus {
        let mut last = None;
        for _ in 0..100 {
            let got = self.chaos.get_status(name).await.unwrap();
            last = got
                .status
                .and_then(|s| s.pods)
                .and_then(|p| p.get(&format!("{}/web-0", self.ns)).cloned());
            if last.as_ref().is_some_and(|e| e.state == state) {
                return last.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "status.pods entry of {name}: {last:?}, not {state}:\n{}",
            agent.log()
        )
    }
}

fn changes(n: &node::Node, p: &node::Pod) -> u64 {
    n.links(p).iter().map(|l| l.1).sum()
}

#[tokio::test]
async fn the_agent_applies_restores_and_survives_a_restart_against_the_api_server() {
    let cnitool = match node::prerequisites() {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    if !common::bin_dir().join("kube-apiserver").is_file() {
        eprintln!("skipped: no kube-apiserver ({})", common::MISSING_HINT);
        return;
    }
    let mut w = world(cnitool).await;
    let (ns, uid) = (w.ns.clone(), w.uid.clone());
    let pod = w.node.add_pod(&ns, "web-0", &uid, "rate 1gbit");
    let base_rtt = w.node.median_rtt_ms(&pod);
    let mut agent = w.agent();

    w.create_chaos("slow", None).await;
    let took = until(WITHIN, || delayed(&w.node, &pod));
    eprintln!("applied {took:?} after status.selected was written");
    assert!(
        took.is_some(),
        "not applied within {WITHIN:?}: {:?}\n{}",
        w.node.links(&pod),
        agent.log()
    );
    let rise = w.node.median_rtt_ms(&pod) - base_rtt;
    assert!(
        (19.0..26.0).contains(&rise),
        "RTT rose by {rise:.2} ms, want 20 ms"
    );
    let status = w.pod_status("slow", "Applied", &agent).await;
    assert_eq!(
        (status.state.as_str(), status.node.as_str()),
        ("Applied", NODE),
        "{status:?}"
    );
    assert_eq!(status.emulator.as_deref(), Some(pod.emulator.as_str()));
    assert!(status.at.is_some(), "{status:?}");

    // Killed and restarted: nothing is sent again, the link stays.
    agent.kill();
    let before = changes(&w.node, &pod);
    let agent = w.agent();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        changes(&w.node, &pod),
        before,
        "the restarted agent sent a batch again"
    );
    let text = scrape(w.port).unwrap();
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("linkem_agent_applies_total{") && !l.ends_with(" 0")),
        "the restarted agent counts an apply:\n{text}"
    );
    assert!(delayed(&w.node, &pod));

    // A new sandbox of the pod (the old one DELeted): the link within 2 s.
    w.node.del_pod(&pod);
    let t = Instant::now();
    let pod2 = w.node.add_pod(&ns, "web-0", &uid, "rate 1gbit");
    let add_s = t.elapsed();
    let took = until(WITHIN, || delayed(&w.node, &pod2));
    eprintln!("new sandbox: ADD took {add_s:?}, applied {took:?} after it");
    assert!(
        took.is_some(),
        "new sandbox not applied within {WITHIN:?}:\n{}",
        agent.log()
    );

    // The resource deleted: the base within 2 s.
    w.chaos
        .delete("slow", &DeleteParams::default())
        .await
        .unwrap();
    let took = until(WITHIN, || !delayed(&w.node, &pod2));
    eprintln!("restored {took:?} after the delete");
    assert!(
        took.is_some(),
        "not restored within {WITHIN:?}:\n{}",
        agent.log()
    );
    let text = scrape(w.port).unwrap();
    let restores = format!(
        "linkem_agent_restores_total{{namespace=\"{ns}\",pod=\"web-0\",emulator=\"{}\"}} 1",
        pod2.emulator
    );
    assert!(text.contains(&restores), "{text}");

    // A duration of 3 s: restored when it runs out (creationTimestamp, whole
    // seconds, + 3 s), reported Restored.
    let t = Instant::now();
    w.create_chaos("short", Some("3s")).await;
    assert!(until(WITHIN, || delayed(&w.node, &pod2)).is_some());
    let restored = until(Duration::from_secs(6), || !delayed(&w.node, &pod2));
    let at_s = t.elapsed().as_secs_f64();
    eprintln!("duration 3s: restored {at_s:.2} s after the create");
    assert!(
        restored.is_some() && (2.0..4.3).contains(&at_s),
        "restored at {at_s:.2} s"
    );
    let status = w.pod_status("short", "Restored", &agent).await;
    assert!(status.at.is_some(), "{status:?}");
    drop(agent);
    let _ = w.pods.delete("web-0", &DeleteParams::default()).await;
}
