//! The controller and two node agents as processes against a real
//! kube-apiserver, each node its own run dir and sandboxes made by
//! linkem-cni: a LinkChaos selecting `app=web` (mode all) reaches the web
//! pods on both nodes within 2 s of its creation and leaves the other pod
//! alone; both writers' status keys survive each other; deleted, every web
//! pod has its base link back within 2 s.

mod common;
mod node;

use common::{install_crd, ControlPlane};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use linkem_operator::chaos::LinkChaos;
use node::{free_port, scrape, until, AgentProc};
use serde_json::json;
use std::time::{Duration, Instant};

const WITHIN: Duration = Duration::from_secs(2);

fn delayed(n: &node::Node, pod: &node::Pod) -> bool {
    n.links(pod)
        .first()
        .is_some_and(|l| l.0.contains("delay 20ms"))
}

async fn create_pod(pods: &Api<Pod>, name: &str, app: &str, node: &str) -> String {
    common::create_pod(pods, name, &[("app", app)], node)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_controller_and_two_agents_apply_a_resource_to_the_selected_pods_only() {
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
    let cp = ControlPlane::shared();
    let client = cp.client().await.unwrap();
    install_crd(&client).await.unwrap();
    let ns = format!("lkoc{}", std::process::id());
    let nsobj = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &nsobj)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut a = node::Node::new(cnitool.clone(), "a", 239);
    let mut b = node::Node::new(cnitool, "b", 240);
    let uid = create_pod(&pods, "web-0", "web", "node-a").await;
    let web0 = a.add_pod(&ns, "web-0", &uid, "rate 1gbit");
    let uid = create_pod(&pods, "db-0", "db", "node-a").await;
    let db0 = a.add_pod(&ns, "db-0", &uid, "rate 1gbit");
    let uid = create_pod(&pods, "web-1", "web", "node-b").await;
    let web1 = b.add_pod(&ns, "web-1", &uid, "rate 1gbit");

    let kc = cp.kubeconfig_path();
    let log = a.run_dir.join("processes.log");
    let controller = AgentProc::operator(&["controller".to_string()], &kc, &log);
    let (port_a, port_b) = (free_port(), free_port());
    let agent_a = AgentProc::start_node("node-a", &a.run_dir, &kc, port_a, &log);
    let agent_b = AgentProc::start_node("node-b", &b.run_dir, &kc, port_b, &log);
    for port in [port_a, port_b] {
        let up = until(Duration::from_secs(20), || scrape(port).is_some());
        assert!(up.is_some(), "an agent did not start:\n{}", agent_a.log());
    }

    let chaos: Api<LinkChaos> = Api::namespaced(client.clone(), &ns);
    let lc: LinkChaos = serde_json::from_value(json!({
        "apiVersion": "linkem.dev/v1alpha1", "kind": "LinkChaos",
        "metadata": {"name": "web-slow"},
        "spec": {"selector": {"namespaces": [ns], "labelSelectors": {"app": "web"}},
                 "mode": "all", "action": "delay", "delay": {"latency": "20ms"}}}))
    .unwrap();
    let t = Instant::now();
    chaos.create(&PostParams::default(), &lc).await.unwrap();
    let took = until(WITHIN, || delayed(&a, &web0) && delayed(&b, &web1));
    eprintln!("both web pods applied {took:?} after the create");
    assert!(
        took.is_some(),
        "not applied within {WITHIN:?}:\n{}",
        controller.log()
    );
    assert!(
        !delayed(&a, &db0),
        "db-0 is not selected: {:?}",
        a.links(&db0)
    );

    // Each writer's keys: the controller's phase and pick, each agent's pod.
    let mut status = None;
    while t.elapsed() < Duration::from_secs(5) {
        status = chaos.get_status("web-slow").await.unwrap().status;
        if status
            .as_ref()
            .and_then(|s| s.pods.as_ref())
            .is_some_and(|p| p.len() == 2)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = status.expect("no status");
    assert_eq!(status.phase.as_deref(), Some("Running"), "{status:?}");
    assert_eq!(
        status.selected.as_ref().map(Vec::len),
        Some(2),
        "{status:?}"
    );
    let entries = status.pods.clone().unwrap_or_default();
    for (pod, node) in [("web-0", "node-a"), ("web-1", "node-b")] {
        let e = entries.get(&format!("{ns}/{pod}"));
        let e = e.unwrap_or_else(|| panic!("no entry for {pod}: {status:?}"));
        assert_eq!(
            (e.state.as_str(), e.node.as_str()),
            ("Applied", node),
            "{e:?}"
        );
    }

    chaos
        .delete("web-slow", &DeleteParams::default())
        .await
        .unwrap();
    let took = until(WITHIN, || !delayed(&a, &web0) && !delayed(&b, &web1));
    eprintln!("both web pods restored {took:?} after the delete");
    assert!(
        took.is_some(),
        "not restored within {WITHIN:?}:\n{}",
        agent_b.log()
    );
    drop((controller, agent_a, agent_b));
}
