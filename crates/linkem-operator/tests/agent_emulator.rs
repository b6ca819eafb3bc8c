//! The node agent against a real emulator, without the API server: a pod's
//! sandbox made by linkem-cni ADD through cnitool (runDir in a temporary
//! folder), then the agent's pass with a LinkChaos as the watch would hand
//! it over: the pod's RTT rises by the delay, the base comes back when the
//! resource goes, a refused word changes nothing and is reported with its
//! position, a restarted agent sends nothing again, and a trace reaches the
//! emulator through its `--control-files` directory.

mod node;

use linkem_operator::agent::apply::{self, apply_batch, Outcome};
use linkem_operator::agent::desired::trace_file_name;
use linkem_operator::agent::desired::ChaosView;
use linkem_operator::agent::metrics::Metrics;
use linkem_operator::agent::reconcile::{now_ns, Agent};
use linkem_operator::chaos::{LinkChaos, LinkChaosSpec, PodRef};
use std::sync::Arc;

fn slow_chaos(pod: &node::Pod) -> ChaosView {
    let spec: LinkChaosSpec = serde_yaml::from_str(
        "selector: {labelSelectors: {app: web}}\nmode: all\naction: delay\n\
         delay: {latency: 20ms}\ndirection: to\n",
    )
    .unwrap();
    let mut lc = LinkChaos::new("slow", spec);
    lc.metadata.namespace = Some(pod.namespace.clone());
    let mut c = ChaosView::from_resource(&lc);
    c.created_ns = now_ns();
    c.selected = vec![PodRef {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        node: Some("node-a".into()),
    }];
    c
}

#[test]
fn the_agent_applies_restores_and_refuses_on_a_real_emulator() {
    let cnitool = match node::prerequisites() {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let mut n = node::Node::new(cnitool, "e", 237);
    let pod = n.add_pod("lkns", "web-0", "uid-0", "rate 1gbit");
    let metrics = Arc::new(Metrics::default());
    let mut agent = Agent::new("node-a", &n.run_dir, metrics.clone()).unwrap();

    // The emulator is found; with no resource nothing is sent.
    let pass = agent.pass(&[], None, now_ns());
    assert!(pass.updates.is_empty(), "{:?}", pass.updates);
    let changes = |n: &node::Node| n.links(&pod).iter().map(|l| l.1).sum::<u64>();
    assert_eq!(
        changes(&n),
        0,
        "the base was sent again: {:?}",
        n.links(&pod)
    );
    let base_rtt = n.median_rtt_ms(&pod);

    // A pod selected on this node without an emulator is Waiting.
    let mut elsewhere = slow_chaos(&pod);
    elsewhere.selected[0].name = "web-9".into();
    let pass = agent.pass(&[elsewhere], None, now_ns());
    let said: Vec<_> = pass
        .updates
        .iter()
        .map(|u| (u.pod.as_str(), u.status.state.as_str()))
        .collect();
    assert_eq!(said, [("lkns/web-9", "Waiting")]);
    assert_eq!(changes(&n), 0);

    // A 20 ms delay on the pod's egress: RTT + 20 ms.
    let chaos = [slow_chaos(&pod)];
    let pass = agent.pass(&chaos, None, now_ns());
    let st = &pass.updates[0].status;
    assert_eq!(
        (st.state.as_str(), pass.updates[0].pod.as_str()),
        ("Applied", "lkns/web-0")
    );
    assert!(st.at.as_deref().is_some_and(|a| a.ends_with('Z')), "{st:?}");
    let slow_rtt = n.median_rtt_ms(&pod);
    eprintln!("median RTT: base {base_rtt:.2} ms, with the resource {slow_rtt:.2} ms");
    let rise = slow_rtt - base_rtt;
    assert!(
        (19.0..26.0).contains(&rise),
        "RTT rose by {rise:.2} ms, want 20 ms + a little"
    );
    let links = n.links(&pod);
    assert!(
        links[0].0.contains("delay 20ms") && !links[1].0.contains("delay"),
        "{links:?}"
    );

    // Again, and from a restarted agent (its record read back): nothing sent.
    let before = changes(&n);
    assert!(agent.pass(&chaos, None, now_ns()).updates.is_empty());
    let mut restarted = Agent::new("node-a", &n.run_dir, Arc::new(Metrics::default())).unwrap();
    restarted.pass(&chaos, None, now_ns());
    assert_eq!(
        changes(&n),
        before,
        "a batch was sent twice: {:?}",
        n.links(&pod)
    );

    // The resource gone: the base again, reported Restored.
    // (Written to an expired resource; a deleted one answers 404, ignored.)
    let pass = restarted.pass(&[], None, now_ns());
    let states: Vec<_> = pass
        .updates
        .iter()
        .map(|u| (u.name.as_str(), u.status.state.as_str()))
        .collect();
    assert_eq!(states, [("slow", "Restored")]);
    let back_rtt = n.median_rtt_ms(&pod);
    eprintln!("median RTT after the restore {back_rtt:.2} ms");
    assert!(
        back_rtt < base_rtt + 3.0,
        "RTT {back_rtt:.2} ms after the restore, {base_rtt:.2} ms before"
    );
    let links = n.links(&pod);
    assert!(
        links.iter().all(|l| !l.0.contains("delay 20ms")),
        "{links:?}"
    );

    // A word the emulator refuses: nothing changes, the word and its place are said.
    let before = n.links(&pod);
    let out = apply_batch(&pod.socket, "rate 1gbit delay 20xs", "rate 1gbit").unwrap();
    match out {
        Outcome::Refused {
            direction,
            word,
            position,
            ..
        } => {
            assert_eq!(direction, "a-to-b");
            assert_eq!((word.as_deref(), position), (Some("20xs"), Some(4)));
        }
        other => panic!("'delay 20xs' was not refused: {other:?}"),
    }
    assert_eq!(n.links(&pod), before, "a refused batch changed the link");
    let after = n.median_rtt_ms(&pod);
    assert!(
        after < base_rtt + 3.0,
        "RTT {after:.2} ms after a refused batch"
    );
    let c = metrics.counts(&("lkns".into(), "web-0".into(), pod.emulator.clone()));
    assert_eq!(c.applies, 1, "{c:?}");

    // A trace: the agent writes it into the emulator's --control-files
    // directory under its content's name and sends `trace NAME`; the
    // emulator reads it there and runs it.
    let mut traced = slow_chaos(&pod);
    let spec: LinkChaosSpec = serde_yaml::from_str(
        "selector: {labelSelectors: {app: web}}\nmode: all\n\
         linkem: {link: loss 0%, trace: {egress: \"1\\n2\\n\"}}\n",
    )
    .unwrap();
    traced.words = linkem_operator::chaos::words::link_words(&spec);
    let pass = restarted.pass(std::slice::from_ref(&traced), None, now_ns());
    let st = &pass.updates[0].status;
    assert_eq!(st.state, "Applied", "{st:?}");
    let name = trace_file_name("1\n2\n");
    let files = n.run_dir.join("files").join(&pod.emulator);
    assert_eq!(
        std::fs::read_to_string(files.join(&name)).unwrap(),
        "1\n2\n"
    );
    let show = apply::query(&pod.socket, "show --json").unwrap();
    let said = show.to_string();
    assert!(said.contains(&format!("trace {name}")), "{said}");
    assert!(restarted
        .pass(std::slice::from_ref(&traced), None, now_ns())
        .updates
        .is_empty());

    // Gone: the base again, and the trace file with it.
    let pass = restarted.pass(&[], None, now_ns());
    assert_eq!(pass.updates[0].status.state, "Restored");
    assert!(!files.join(&name).exists(), "the trace was left behind");
    assert!(n.links(&pod).iter().all(|l| !l.0.contains("trace")));
}
