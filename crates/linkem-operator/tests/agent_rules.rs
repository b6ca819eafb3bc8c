//! The node agent's `linkem:` parts against real emulators (linkem-cni ADD
//! through cnitool, without the API server): a pod whose network runs a
//! Dummynet rule set gets a resource's `linkem.rules` in its place, as one
//! batch, and its own set back when the resource goes; link words on such a
//! pod, and a rule set on a plain pod, are Refused saying why; a schedule's
//! step reaches a live emulator at its instant.

mod node;

use linkem_operator::agent::apply;
use linkem_operator::agent::desired::ChaosView;
use linkem_operator::agent::metrics::Metrics;
use linkem_operator::agent::reconcile::{now_ns, Agent, Pass};
use linkem_operator::chaos::{LinkChaos, LinkChaosSpec, PodRef};
use std::sync::Arc;
use std::time::Duration;

/// The resource `name` of `spec` (YAML after the selector), selecting `pod`.
fn chaos(name: &str, pod: &node::Pod, spec: &str) -> ChaosView {
    let spec = format!("selector: {{labelSelectors: {{app: web}}}}\nmode: all\n{spec}");
    let spec: LinkChaosSpec = serde_yaml::from_str(&spec).unwrap();
    let mut lc = LinkChaos::new(name, spec);
    lc.metadata.namespace = Some(pod.namespace.clone());
    let mut c = ChaosView::from_resource(&lc);
    c.created_ns = now_ns();
    c.selected = vec![PodRef {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        node: Some("node-r".into()),
    }];
    c
}

/// The emulator's objects (`pipe 1`, ...) and rules as `list` gives them.
fn rule_set(pod: &node::Pod) -> (Vec<String>, Vec<String>) {
    let v = apply::query(&pod.socket, "list").unwrap();
    let objects = v["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| format!("{} {}", o["kind"].as_str().unwrap(), o["number"]))
        .collect();
    let rules = v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| format!("{} {}", r["number"], r["rule"].as_str().unwrap()))
        .collect();
    (objects, rules)
}

fn states(pass: &Pass) -> Vec<(String, String)> {
    pass.updates
        .iter()
        .map(|u| (u.name.clone(), u.status.state.clone()))
        .collect()
}

const BASE_RULES: &str = "# the network's own\n\
    pipe 1 config delay 1\n\
    pipe 3 config bw 100Mbit/s\n\
    add 100 pipe 1 ip from any to any\n";

#[test]
fn rules_replace_the_networks_rule_set_and_misfits_are_refused() {
    let cnitool = match node::prerequisites() {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let mut n = node::Node::new(cnitool, "r", 236);
    let ruled = n.add_pod_with(
        "lkns",
        "web-r",
        "uid-r",
        serde_json::json!({ "rules": BASE_RULES }),
    );
    let plain = n.add_pod("lkns", "web-p", "uid-p", "rate 1gbit");
    let mut agent = Agent::new("node-r", &n.run_dir, Arc::new(Metrics::default())).unwrap();
    assert!(agent.pass(&[], None, now_ns()).updates.is_empty());
    let base_set = rule_set(&ruled);
    assert_eq!(base_set.0, ["pipe 1", "pipe 3"], "{base_set:?}");
    let base_rtt = n.median_rtt_ms(&ruled);

    // The resource's rule set replaces the network's, in one batch: pipe 3
    // (not in the new set) goes, pipe 1 is set whole again, a new rule.
    let slow = chaos(
        "slow-rules",
        &ruled,
        "linkem:\n  rules: |\n    pipe 1 config delay 20\n    pipe 2 config bw 1Gbit/s\n    \
         add 200 pipe 1 ip from any to any\n",
    );
    let pass = agent.pass(std::slice::from_ref(&slow), None, now_ns());
    assert_eq!(
        states(&pass),
        [("slow-rules".into(), "Applied".into())],
        "{:?}",
        pass.updates
    );
    let st = &pass.updates[0].status;
    assert!(st.at.is_some(), "{st:?}");
    assert!(
        st.words
            .as_deref()
            .is_some_and(|w| w.contains("pipe 1 config delay 20")),
        "{st:?}"
    );
    let (objects, rules) = rule_set(&ruled);
    assert_eq!(objects, ["pipe 1", "pipe 2"]);
    assert_eq!(rules, ["200 pipe 1 ip from any to any"]);
    let slow_rtt = n.median_rtt_ms(&ruled);
    eprintln!("rules pod: median RTT base {base_rtt:.2} ms, with the resource {slow_rtt:.2} ms");
    let rise = slow_rtt - base_rtt;
    assert!(
        (34.0..46.0).contains(&rise),
        "RTT rose by {rise:.2} ms, want 2 x 19 ms"
    );
    // Again: nothing sent.
    assert!(agent
        .pass(std::slice::from_ref(&slow), None, now_ns())
        .updates
        .is_empty());

    // Link words on the rules pod: Refused, the rule set untouched.
    let delay = chaos(
        "words-on-rules",
        &ruled,
        "action: delay\ndelay: {latency: 20ms}\n",
    );
    let both = [slow.clone(), delay];
    let pass = agent.pass(&both, None, now_ns());
    assert_eq!(states(&pass), [("words-on-rules".into(), "Refused".into())]);
    let msg = pass.updates[0].status.message.clone().unwrap_or_default();
    assert!(
        msg.contains("Dummynet rule set") && msg.contains("linkem.rules"),
        "{msg}"
    );
    assert_eq!(rule_set(&ruled).0, ["pipe 1", "pipe 2"]);

    // A rule set on the plain pod: Refused, its link untouched.
    let rules_on_plain = chaos(
        "rules-on-plain",
        &plain,
        "linkem:\n  rules: \"pipe 1 config delay 5\\nadd pipe 1 ip from any to any\\n\"\n",
    );
    let before = n.links(&plain);
    let pass = agent.pass(
        &[slow.clone(), both[1].clone(), rules_on_plain],
        None,
        now_ns(),
    );
    assert_eq!(states(&pass), [("rules-on-plain".into(), "Refused".into())]);
    let msg = pass.updates[0].status.message.clone().unwrap_or_default();
    assert!(
        msg.contains("no `rules`") && msg.contains("link words"),
        "{msg}"
    );
    assert_eq!(n.links(&plain), before);

    // Every resource gone: the network's rule set again, reported Restored.
    let pass = agent.pass(&[], None, now_ns());
    assert!(
        states(&pass).contains(&("slow-rules".into(), "Restored".into())),
        "{:?}",
        pass.updates
    );
    assert_eq!(rule_set(&ruled), base_set);
    let back_rtt = n.median_rtt_ms(&ruled);
    assert!(
        back_rtt < base_rtt + 3.0,
        "RTT {back_rtt:.2} ms after the restore, {base_rtt:.2} ms before"
    );

    // A restarted agent sends nothing.
    let mut again = Agent::new("node-r", &n.run_dir, Arc::new(Metrics::default())).unwrap();
    assert!(again.pass(&[], None, now_ns()).updates.is_empty());
    assert_eq!(rule_set(&ruled), base_set);
}

#[test]
fn a_schedule_step_reaches_a_live_emulator_at_its_instant() {
    let cnitool = match node::prerequisites() {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let mut n = node::Node::new(cnitool, "s", 235);
    let pod = n.add_pod("lkns", "web-s", "uid-s", "rate 1gbit");
    let mut agent = Agent::new("node-r", &n.run_dir, Arc::new(Metrics::default())).unwrap();
    let base_rtt = n.median_rtt_ms(&pod);
    let stepped = chaos(
        "stepped",
        &pod,
        "linkem:\n  link: loss 0%\n  schedule:\n  - {at: 1500ms, words: delay 30ms, direction: to}\n",
    );
    let pass = agent.pass(std::slice::from_ref(&stepped), None, now_ns());
    assert_eq!(states(&pass), [("stepped".into(), "Applied".into())]);
    let step_ns = stepped.created_ns + 1_500_000_000;
    assert_eq!(pass.wake_ns, Some(step_ns));
    assert!(n.links(&pod).iter().all(|l| !l.0.contains("delay 30ms")));

    // The agent's loop sleeps until wake_ns; here the test does.
    let wait_ns = (step_ns - now_ns()).max(0) as u64;
    std::thread::sleep(Duration::from_nanos(wait_ns));
    let pass = agent.pass(std::slice::from_ref(&stepped), None, now_ns());
    assert_eq!(states(&pass), [("stepped".into(), "Applied".into())]);
    let at: jiff::Timestamp = pass.updates[0]
        .status
        .at
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    let late_ms = (at.as_nanosecond() - step_ns) as f64 / 1e6;
    eprintln!("the step applied {late_ms:.2} ms after its instant");
    assert!((0.0..200.0).contains(&late_ms), "{late_ms} ms");
    let links = n.links(&pod);
    assert!(links[0].0.contains("delay 30ms"), "{links:?}");
    let rise = n.median_rtt_ms(&pod) - base_rtt;
    assert!((29.0..36.0).contains(&rise), "RTT rose by {rise:.2} ms");
}
