//! The lab file's parser: every key's meaning and every refusal's message.

use super::file::{Lab, NodeKind};

fn parse(text: &str) -> Lab {
    Lab::parse(text, "test.clab.yml").unwrap_or_else(|e| panic!("{e:#}"))
}

fn error(text: &str) -> String {
    format!("{:#}", Lab::parse(text, "test.clab.yml").unwrap_err())
}

const TWO: &str =
    "name: t\ntopology:\n  nodes:\n    r1: {kind: linux}\n    r2: {kind: linux}\n  links:\n";

#[test]
fn short_form_link_with_words_per_direction() {
    let lab = parse(&format!(
        "{TWO}    - endpoints: [\"r1:eth1\", \"r2:eth1\"]\n      impair: delay 10ms loss 1%\n      \
         b-to-a: delay 30ms\n      seed: 7\n"
    ));
    assert_eq!(lab.name, "t");
    let link = &lab.links[0];
    assert_eq!(link.name, "r1:eth1--r2:eth1");
    assert_eq!(link.endpoints[0].node, "r1");
    assert_eq!(link.endpoints[1].interface, "eth1");
    assert_eq!(link.words[0], ["delay", "10ms", "loss", "1%"]);
    assert_eq!(
        link.words[1],
        ["delay", "10ms", "loss", "1%", "delay", "30ms"]
    );
    assert_eq!(link.specs[0].link.delay_ns, 10_000_000);
    assert_eq!(link.specs[1].link.delay_ns, 30_000_000);
    assert_eq!(link.seed, Some(7));
}

#[test]
fn extended_form_with_addresses_and_mtu() {
    let lab = parse(&format!(
        "{TWO}    - type: veth\n      mtu: 9000\n      endpoints:\n        - {{node: r1, interface: e1, \
         mac: \"02:00:00:00:00:01\", ipv4: 10.0.0.1/24}}\n        - node: r2\n          interface: e2\n      \
         vars: {{x: 1}}\n"
    ));
    let link = &lab.links[0];
    assert_eq!(link.name, "r1:e1--r2:e2");
    assert_eq!(link.mtu, Some(9000));
    assert_eq!(link.endpoints[0].mac.as_deref(), Some("02:00:00:00:00:01"));
    assert_eq!(link.endpoints[0].ipv4.as_deref(), Some("10.0.0.1/24"));
    assert_eq!(link.endpoints[1].ipv4, None);
}

#[test]
fn inheritance_node_group_kind_defaults() {
    let lab = parse(
        "name: t\ntopology:\n  defaults:\n    kind: linux\n    exec: [\"echo d\"]\n  kinds:\n    linux:\n      \
         env: {A: k}\n  groups:\n    g:\n      exec: [\"echo g\"]\n  nodes:\n    a:\n    b: {group: g}\n    \
         c: {group: g, exec: [\"echo c\"]}\n    br: {kind: bridge}\n",
    );
    let exec = |n: &str| lab.node(n).unwrap().exec.clone();
    assert_eq!(exec("a"), ["echo d"]);
    assert_eq!(exec("b"), ["echo g"]);
    assert_eq!(exec("c"), ["echo c"]);
    assert_eq!(lab.node("a").unwrap().env["A"], "k");
    assert_eq!(lab.node("br").unwrap().kind, NodeKind::Bridge);
}

#[test]
fn schedule_list_becomes_schedule_file_text() {
    let lab = parse(&format!(
        "{TWO}    - endpoints: [\"r1:eth1\", \"r2:eth1\"]\n      impair: delay 5ms\n      schedule:\n        \
         - at: 5s\n          words: loss 100%\n        - at: 7s\n          words: loss 0%\n"
    ));
    let link = &lab.links[0];
    assert_eq!(
        link.schedules[0].as_deref(),
        Some("5s loss 100%\n7s loss 0%\n")
    );
    assert_eq!(link.schedules[0], link.schedules[1]);
    assert!(link.specs[0].link.schedule.is_some());
    assert!(link.files.contains_key("r1:eth1--r2:eth1.a-to-b.sched"));
}

#[test]
fn schedule_per_direction() {
    let lab = parse(&format!(
        "{TWO}    - endpoints: [\"r1:eth1\", \"r2:eth1\"]\n      schedule:\n        a-to-b:\n          \
         - {{at: 1s, words: delay 9ms}}\n          - \"2s delay 1ms\"\n"
    ));
    assert_eq!(
        lab.links[0].schedules[0].as_deref(),
        Some("1s delay 9ms\n2s delay 1ms\n")
    );
    assert_eq!(lab.links[0].schedules[1], None);
    assert!(lab.links[0].specs[1].link.schedule.is_none());
}

#[test]
fn implicit_host_and_linkem_defaults() {
    let lab = parse(
        "name: t\nlinkem:\n  defaults: delay 1ms\n  seed: 3\ntopology:\n  nodes:\n    r1: {kind: linux}\n  \
         links:\n    - endpoints: [\"r1:eth1\", \"host:lk-r1\"]\n",
    );
    assert_eq!(lab.node("host").unwrap().kind, NodeKind::Host);
    assert!(lab.node("host").unwrap().implicit);
    assert_eq!(lab.links[0].specs[0].link.delay_ns, 1_000_000);
    assert_eq!(lab.seed, Some(3));
}

#[test]
fn unknown_containerlab_keys_warn() {
    let lab = parse(&format!(
        "mgmt: {{network: x}}\n{TWO}    - endpoints: [\"r1:eth1\", \"r2:eth1\"]\n      somekey: 1\n"
    ));
    assert!(
        lab.warnings.iter().any(|w| w.contains("'mgmt'")),
        "{:?}",
        lab.warnings
    );
    assert!(
        lab.warnings.iter().any(|w| w.contains("'somekey'")),
        "{:?}",
        lab.warnings
    );
}

#[test]
fn refusals_name_the_problem() {
    let link = |rest: &str| {
        error(&format!(
            "{TWO}    - endpoints: [\"r1:eth1\", \"r2:eth1\"]\n{rest}"
        ))
    };
    let cases: Vec<(String, &str)> = vec![
        (link("      impiar: delay 1ms\n"), "link r1:eth1--r2:eth1: unknown key 'impiar' (did you mean 'impair'?)"),
        (link("      impair: delay 10\n"), "link r1:eth1--r2:eth1 a-to-b: link words"),
        (link("      a-to-b: bogus 1\n"), "link r1:eth1--r2:eth1 a-to-b: link words"),
        (link("      b-to-a: rate\n"), "link r1:eth1--r2:eth1 b-to-a"),
        (link("      type: macvlan\n"), "type 'macvlan' is not one linkem makes"),
        (link("      mtu: 10\n"), "'mtu' is 68 to 65535"),
        (link("      seed: -1\n"), "'seed' is a whole number"),
        (link("      schedule: [{at: 5, words: loss 1%}]\n"), "'at: 5' needs a unit"),
        (link("      schedule: [{at: 5s}]\n"), "'words' (the link words from then on) is missing"),
        (link("      trace: missing.trace\n"), "link r1:eth1--r2:eth1 a-to-b"),
        (link("      rules: missing.rules\n"), "link r1:eth1--r2:eth1: 'rules'"),
        (link("      rules: pipe 1 config bw 1Mbit/s\n      impair: delay 1ms\n"), "give one or the other"),
        (link("      seed: 1\n      impair: seed 2\n"), "differ"),
        (link("    - endpoints: [\"r1:eth1\", \"r2:eth2\"]\n"), "endpoint r1:eth1 is also link r1:eth1--r2:eth1's"),
        (link("    - endpoints: [\"r1:eth2\", \"r3:eth2\"]\n"), "no node 'r3' in topology.nodes"),
        (link("    - endpoints: [\"r1:eth2\"]\n"), "'endpoints' has 1 items"),
        (link("    - endpoints: [\"r1eth2\", \"r2:eth2\"]\n"), "endpoint 'r1eth2' is not NODE:INTERFACE"),
        (link("    - endpoints: [\"r1:averyveryverylongname\", \"r2:eth2\"]\n"), "has 21 bytes (Linux takes 1 to 15)"),
        (link("    - endpoints: [\"r1:e1/1\", \"r2:eth2\"]\n"), "'e1/1' is not an interface name"),
        (link("    - endpoints: [\"r1:eth2\", \"mgmt-net:x\"]\n"), "'mgmt-net' links are not made by linkem"),
        (link("    - endpoints: [{node: r1, interface: eth2, mac: zz}, \"r2:eth2\"]\n"), "mac 'zz'"),
        (link("    - endpoints: [\"r1:eth2\", \"r2:eth2\"]\n      ipv4: [\"10.0.0.1\"]\n"), "'10.0.0.1' is not ADDRESS/LENGTH"),
        (error("topology: {nodes: {a: {kind: linux}}}\n"), "'name' is missing"),
        (error("name: a b\ntopology: {nodes: {a: {kind: linux}}}\n"), "has ' '"),
        (error("name: t\n"), "'topology' is missing"),
        (error("name: t\ntopolgy: {}\n"), "did you mean 'topology'?"),
        (error("name: t\ntopology: {nodes: {a: {}}}\n"), "node 'a': no 'kind'"),
        (error("name: t\ntopology: {nodes: {a: {kind: nokia_srlinux}}}\n"), "kind 'nokia_srlinux' is not one linkem starts"),
        (error("name: t\ntopology: {nodes: {a: {kind: linux, exce: [x]}}}\n"), "did you mean 'exec'?"),
        (error("name: t\ntopology: {nodes: {a: {kind: linux, group: g}}}\n"), "group 'g' is not in topology.groups"),
        (error("name: t\ntopology: {nodes: {a: {kind: bridge, exec: [x]}}}\n"), "a bridge runs no commands"),
        (error("name: t\nlinkem: {machines: {m: {underlay: x}}}\ntopology: {nodes: {a: {kind: linux}}}\n"), "'x' is not an IP address"),
        (error("name: t\nlinkem: {nodes: {a: {machine: m}}}\ntopology: {nodes: {a: {kind: linux}}}\n"), "no machine 'm'"),
        (error("name: t\nlinkem: {nodes: {b: {machine: m}}}\ntopology: {nodes: {a: {kind: linux}}}\n"), "no node 'b'"),
        (error("name: t\nlinkem: {defaults: delay}\ntopology: {nodes: {a: {kind: linux}}}\n"), "linkem.defaults: link words"),
        (link("      trace: {atob: x.trace}\n"), "unknown key 'atob' (did you mean 'a-to-b'?)"),
        (link("      schedule: [{at: 5s, loop: true, words: x}]\n"), "'loop' takes no 'words'"),
        (link("      schedule: 5s loss 1%\n"), "a list of '- at: TIME'"),
        (link("      labels: [a]\n"), "'labels': must be a mapping"),
        (link("      impair: {delay: 1ms}\n"), "link words must be a string or a list of strings"),
        (link("    - endpoint: {node: r1, interface: eth9}\n"), "'endpoint' (one end) is a link type linkem does not make"),
        (error("name: t\nlinkem: {seed: x}\ntopology: {nodes: {a: {kind: linux}}}\n"), "linkem.seed: a whole number"),
        (error("name: t\nlinkem: {vxlan: {port: 0}}\ntopology: {nodes: {a: {kind: linux}}}\n"), "linkem.vxlan.port: 1 to 65535"),
        (error("name: t\nlinkem: {vxlan: {vni: 16777216}}\ntopology: {nodes: {a: {kind: linux}}}\n"), "linkem.vxlan.vni: 0 to 16777215"),
        (error("name: t\nlinkem: {machines: {m: {underlay: 10.0.0.1, mtu: 100}}}\ntopology: {nodes: {a: {kind: linux}}}\n"), "linkem.machines.m.mtu: 1280 to 65535"),
        (error("name: t\nlinkem: {machines: {m: {underlay: 10.0.0.1}, n: {underlay: 10.0.0.1}}}\ntopology: {nodes: {a: {kind: linux}}}\n"), "is machine 'm''s too"),
        (error("name: t\nlinkem: {nodes: {a: {bridge: host}}}\ntopology: {nodes: {a: {kind: linux}}}\n"), "node 'a' is not a bridge"),
        (error("name: t\nlinkem: {nodes: {a: {machne: m}}}\ntopology: {nodes: {a: {kind: linux}}}\n"), "did you mean 'machine'?"),
        (error("name: t\ntopology: {nodes: {a: {kind: ovs-bridge}}}\n"), "use kind 'bridge'"),
        (error("name: t\ntopology: {nodes: {a: {kind: linux, exec: {x: y}}}}\n"), "must be a list of strings"),
        (error("name: t\ntopology: {nodes: {\"a b\": {kind: linux}}}\n"), "node 'a b': 'a b' has ' '"),
        (error("- a\n"), "a lab file is a mapping"),
        (error("name: [\n"), "not a YAML lab file"),
    ];
    for (got, want) in cases {
        assert!(got.contains(want), "error {got:?} should contain {want:?}");
    }
}

#[test]
fn rules_inline_and_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("r.rules"),
        "pipe 1 config bw 1Mbit/s\nadd 100 pipe 1 ip from any to any\n",
    )
    .unwrap();
    let text = format!("{TWO}    - endpoints: [\"r1:eth1\", \"r2:eth1\"]\n      rules: r.rules\n");
    let path = dir.path().join("lab.clab.yml");
    std::fs::write(&path, &text).unwrap();
    let lab = Lab::load(&path).unwrap();
    let rules = lab.links[0].rules.as_ref().unwrap();
    assert_eq!(
        rules.path.as_deref(),
        Some(dir.path().join("r.rules").as_path())
    );
    let inline = parse(&format!(
        "{TWO}    - endpoints: [\"r1:eth1\", \"r2:eth1\"]\n      rules: |\n        pipe 1 config bw 1Mbit/s\n        \
         add 100 pipe 1 ip from any to any\n"
    ));
    assert!(inline.links[0].rules.as_ref().unwrap().path.is_none());
}

#[test]
fn the_guide_s_example_parses() {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/guide/labs.md"
    ))
    .unwrap();
    let start = page
        .find("```yaml\nname:")
        .expect("the guide's lab example")
        + "```yaml\n".len();
    let end = start + page[start..].find("```").unwrap();
    let lab = parse(&page[start..end]);
    assert_eq!(lab.links[1].name, "r:eth2--h2:eth1");
    assert!(lab.links[1].schedules[1].is_some());
    assert!(lab.warnings.is_empty(), "{:?}", lab.warnings);
}

#[test]
fn without_files_every_file_is_refused() {
    let link = format!("{TWO}    - endpoints: [\"r1:eth1\", \"r2:eth1\"]\n");
    for (rest, want) in [
        (
            "      trace: /etc/hostname\n",
            "'/etc/hostname': this lab is read without its files",
        ),
        (
            "      rules: /etc/hostname\n",
            "'/etc/hostname': this lab is read without its files",
        ),
        (
            "      impair: delay 1ms 1ms distribution t.dist\n",
            "'t.dist': this lab is read without its files",
        ),
    ] {
        let e = format!(
            "{:#}",
            Lab::parse_without_files(&format!("{link}{rest}"), "x").unwrap_err()
        );
        assert!(e.contains(want), "{e:?} should contain {want:?}");
    }
    let e = format!("{:#}", Lab::parse_without_files("name: t\nlinkem: {defaults: delay 1ms 1ms distribution t.dist}\ntopology: {nodes: {a: {kind: linux}}}\n", "x").unwrap_err());
    assert!(e.contains("without its files"), "{e}");
}
