//! Plans of every example lab and of the refusals the plan makes.

use super::file::Lab;
use super::plan::{plan, MachinePlan};
use std::path::PathBuf;

fn example(name: &str) -> Lab {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/labs")
        .join(name);
    Lab::load(&path).unwrap_or_else(|e| panic!("{name}: {e:#}"))
}

fn parse(text: &str) -> Lab {
    Lab::parse(text, "test.clab.yml").unwrap_or_else(|e| panic!("{e:#}"))
}

fn plan_of(lab: &Lab, machine: Option<&str>) -> MachinePlan {
    plan(lab, machine).unwrap_or_else(|e| panic!("{e:#}"))
}

fn plan_error(text: &str, machine: Option<&str>) -> String {
    format!("{:#}", plan(&parse(text), machine).unwrap_err())
}

/// The one-way delay (ms) of each link, a-to-b.
fn delays_ms(lab: &Lab) -> Vec<u64> {
    lab.links
        .iter()
        .map(|l| l.specs[0].link.delay_ns / 1_000_000)
        .collect()
}

#[test]
fn every_example_parses_without_warnings_and_plans() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/labs");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".clab.yml"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "clab-style.clab.yml",
            "hub50.clab.yml",
            "line3.clab.yml",
            "ring10.clab.yml",
            "two-machines.clab.yml"
        ]
    );
    for name in &names {
        let lab = example(name);
        assert!(lab.warnings.is_empty(), "{name}: {:?}", lab.warnings);
        let machines: Vec<Option<&str>> = if lab.machines.is_empty() {
            vec![None]
        } else {
            lab.machines.iter().map(|m| Some(m.name.as_str())).collect()
        };
        let pairs: usize = machines.iter().map(|m| plan_of(&lab, *m).pairs.len()).sum();
        assert_eq!(pairs, lab.links.len(), "{name}: each link is emulated once");
    }
}

#[test]
fn line3() {
    let lab = example("line3.clab.yml");
    assert_eq!(delays_ms(&lab), [10, 10]);
    let p = plan_of(&lab, None);
    assert_eq!(p.emulator_namespace, "lk-line3");
    let ns: Vec<&str> = p.namespaces.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(ns, ["lk-line3-h1", "lk-line3-r", "lk-line3-h2"]);
    assert_eq!(p.veths.len(), 4);
    let v = &p.veths[1];
    assert_eq!(v.node_end.name, "eth1");
    assert_eq!(v.node_end.namespace.as_deref(), Some("lk-line3-r"));
    assert_eq!(v.emulator_end.name, "l0b");
    assert_eq!(v.emulator_end.namespace.as_deref(), Some("lk-line3"));
    assert_eq!(p.pairs[1].link, "r:eth2--h2:eth1");
    assert_eq!(
        (p.pairs[1].if_a.as_str(), p.pairs[1].if_b.as_str()),
        ("l1a", "l1b")
    );
    assert_eq!(p.execs.len(), 3);
    let (link, side) = lab.endpoint("h2", "eth1").unwrap();
    assert_eq!((link.name.as_str(), side), ("r:eth2--h2:eth1", 1));
    assert!(lab.endpoint("h2", "eth2").is_none());
    assert_eq!(p.execs[1].namespace.as_deref(), Some("lk-line3-r"));
    assert!(p.tunnels.is_empty() && p.bridges.is_empty());
}

#[test]
fn ring10_mixed_links_and_seeds() {
    let lab = example("ring10.clab.yml");
    assert_eq!(delays_ms(&lab), [5, 10, 2, 5, 20, 1, 5, 10, 2, 5]);
    assert_eq!(lab.links[5].specs[1].link.delay_ns, 1_000_000);
    assert_ne!(lab.links[5].specs[0].link, lab.links[5].specs[1].link);
    assert_eq!(
        lab.links[3].schedules[0].as_deref(),
        Some("5s loss 100%\n7s loss 0%\n")
    );
    let p = plan_of(&lab, None);
    assert_eq!(p.pairs.len(), 10);
    assert_eq!((p.run_seed, p.seed_given), (10, true));
    let seeds: Vec<u64> = p.pairs.iter().map(|x| x.seed).collect();
    let again: Vec<u64> = plan_of(&lab, None).pairs.iter().map(|x| x.seed).collect();
    assert_eq!(seeds, again, "a lab with linkem.seed plans the same seeds");
    assert_eq!(seeds[3], linkem_core::rng::pair_seed(10, 3));
    let mut unique = seeds.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 10);
}

#[test]
fn hub50_is_a_bridge_in_its_own_namespace() {
    let lab = example("hub50.clab.yml");
    let p = plan_of(&lab, None);
    assert_eq!(p.namespaces.len(), 51);
    assert_eq!(p.bridges.len(), 1);
    assert_eq!(p.bridges[0].name, "hub");
    assert_eq!(p.bridges[0].namespace.as_deref(), Some("lk-hub50-hub"));
    assert_eq!(p.pairs.len(), 50);
    let port = &p.veths[99].node_end;
    assert_eq!(
        (port.name.as_str(), port.master.as_deref()),
        ("p50", Some("hub"))
    );
    assert_eq!(port.namespace.as_deref(), Some("lk-hub50-hub"));
    assert_eq!(lab.links[9].specs[0].link.delay_ns, 1_000_000);
    assert!(lab.links[9].specs[0].link.rate_bps.is_some());
    assert!(lab.links[8].specs[0].link.rate_bps.is_none());
    assert!(p.execs.iter().all(|e| e.node != "hub"));
}

#[test]
fn clab_style_both_link_forms() {
    let lab = example("clab-style.clab.yml");
    assert_eq!(delays_ms(&lab), [5, 5, 5, 1, 1]);
    assert_eq!(lab.links[3].name, "PC1:eth1--router1:eth3");
    assert_eq!(lab.links[3].mtu, Some(1500));
    assert_eq!(lab.node("router1").unwrap().labels["role"], "router");
    let p = plan_of(&lab, None);
    assert_eq!(
        p.veths[6].node_end.mac.as_deref(),
        Some("02:00:00:00:11:02")
    );
    assert_eq!(p.veths[6].mtu, Some(1500));
}

#[test]
fn two_machines_each_plans_its_part() {
    let lab = example("two-machines.clab.yml");
    let e = format!("{:#}", plan(&lab, None).unwrap_err());
    assert!(e.contains("give --host NAME"), "{e}");
    let m1 = plan_of(&lab, Some("m1"));
    let names = |p: &MachinePlan| {
        p.namespaces
            .iter()
            .map(|n| n.node.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&m1), ["a", "b"]);
    assert_eq!(m1.pairs.len(), 2);
    let across = &m1.pairs[1];
    assert_eq!(
        (
            across.link.as_str(),
            across.if_a.as_str(),
            across.if_b.as_str()
        ),
        ("b:eth2--c:eth1", "l1a", "l1vx")
    );
    let t = &m1.tunnels[0];
    assert_eq!(
        (t.vni, t.port, t.mtu, t.overhead_bytes),
        (1001, 4789, 1450, 50)
    );
    assert_eq!(
        (t.local.to_string(), t.remote.to_string()),
        ("10.99.0.1".into(), "10.99.0.2".into())
    );
    assert!(t.emulated_here);
    assert_eq!(m1.veths[2].mtu, Some(1450));

    let m2 = plan_of(&lab, Some("m2"));
    assert_eq!(names(&m2), ["c", "d"]);
    assert_eq!(m2.pairs.len(), 1);
    assert_eq!(m2.pairs[0].link, "c:eth2--d:eth1");
    let t = &m2.tunnels[0];
    assert_eq!(
        (t.local.to_string(), t.remote.to_string()),
        ("10.99.0.2".into(), "10.99.0.1".into())
    );
    assert!(!t.emulated_here);
    assert_eq!(m2.bridges[0].name, "l1br");
    assert_eq!(m1.emulator_namespace, "lk-two-machines@m1");
    assert_eq!(
        m2.bridges[0].namespace.as_deref(),
        Some("lk-two-machines@m2")
    );
    let v = &m2.veths[0];
    assert_eq!(
        (v.node_end.name.as_str(), v.node_end.namespace.as_deref()),
        ("eth1", Some("lk-two-machines-c"))
    );
    assert_eq!(v.emulator_end.master.as_deref(), Some("l1br"));
    assert_eq!(v.mtu, Some(1450));
}

const MACHINES: &str = "name: t\nlinkem:\n  machines: {m1: {underlay: 10.0.0.1}, m2: {underlay: 10.0.0.2, mtu: 9000}}\n  \
                        nodes: {y: {machine: m2}}\ntopology:\n  nodes: {x: {kind: linux}, y: {kind: linux}}\n  links:\n";

#[test]
fn a_link_across_is_emulated_on_its_endpoint_a_machine() {
    let lab = parse(&format!(
        "{MACHINES}    - endpoints: [\"y:e1\", \"x:e1\"]\n"
    ));
    let (m1, m2) = (plan_of(&lab, Some("m1")), plan_of(&lab, Some("m2")));
    assert!(m1.pairs.is_empty() && m1.bridges.len() == 1);
    assert_eq!(m2.pairs[0].if_b, "l0vx");
    // The smaller underlay MTU counts.
    assert_eq!(m2.tunnels[0].mtu, 1450);
    assert_eq!(m2.tunnels[0].vni, 1000);
}

#[test]
fn plan_refusals_name_the_problem() {
    let one = "name: t\ntopology:\n  nodes: {x: {kind: linux}}\n";
    let cases = [
        (plan_error(one, Some("m1")), "the lab names no machines"),
        (plan_error(MACHINES, Some("m3")), "no machine 'm3' in linkem.machines"),
        (
            plan_error(&format!("{MACHINES}    - endpoints: [\"x:e1\", \"y:e1\"]\n      mtu: 1490\n"), Some("m1")),
            "link x:e1--y:e1: 'mtu: 1490' is over what the tunnel carries",
        ),
        (
            plan_error("name: t\ntopology:\n  nodes: {averyveryverylongbridge: {kind: bridge}}\n", None),
            "node 'averyveryverylongbridge': a bridge is a Linux interface",
        ),
        (
            plan_error(
                "name: t\nlinkem: {nodes: {br0: {bridge: host}}}\ntopology:\n  nodes: {br0: {kind: bridge}, x: {kind: linux}}\n  \
                 links:\n    - endpoints: [\"x:e1\", \"host:br0\"]\n",
                None,
            ),
            "link x:e1--host:br0: interface 'br0' in the host's namespace is also bridge br0's",
        ),
    ];
    for (got, want) in cases {
        assert!(got.contains(want), "error {got:?} should contain {want:?}");
    }
}

#[test]
fn vni_over_24_bits_is_refused() {
    let text = format!(
        "{}    - endpoints: [\"x:e2\", \"x:e3\"]\n    - endpoints: [\"x:e1\", \"y:e1\"]\n",
        MACHINES.replace("linkem:\n", "linkem:\n  vxlan: {vni: 16777215}\n")
    );
    let e = plan_error(&text, Some("m1"));
    assert!(e.contains("link x:e1--y:e1: its VNI 16777216"), "{e}");
}
