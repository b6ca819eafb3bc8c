use super::*;
use crate::control::claims;
use crate::control::failure::Failure;
use crate::control::rules::tests::{parse, request, rules_over_memory};
use crate::control::rules::Rules;
use crate::control::rules::{normalized, Source};
use linkem_ctl::Request;
use linkem_io::creds::PeerCred;
use std::collections::HashMap;

fn cred(uid: u32) -> PeerCred {
    PeerCred {
        uid,
        gid: uid,
        pid: 7,
    }
}

fn claim_line(rules: &Rules, uid: u32, line: &str, now_ns: u64) -> Result<ClaimDone, Failure> {
    match rules
        .parse_line(line)
        .map_err(|e| Failure::Error(e.to_string()))?
        .request
    {
        Request::Claim(c) => rules.claim(&cred(uid), &c, now_ns),
        other => panic!("{line}: {other:?}"),
    }
}

type NodeState = (Vec<(u32, u64)>, Vec<(u32, String)>);

/// (pipe number, delay) of the node's pipes, and its rules' numbers and texts.
fn node_state(rules: &Rules) -> NodeState {
    rules.bridge.with_model(|n| {
        (
            n.pipes()
                .iter()
                .map(|p| (p.def.number, p.def.link.delay_ns))
                .collect(),
            n.classifier()
                .rules()
                .iter()
                .map(|r| (r.number, r.text.clone()))
                .collect(),
        )
    })
}

/// Every port bindable by anyone, no socket anywhere: the port rule
/// out of the way of the tests about other things.
fn open_ports() -> Result<claims::PortView, String> {
    Ok(claims::PortView::default())
}

fn claims_config(ttl_ns: u64, limits: &str) -> ClaimConfig {
    ClaimConfig {
        ttl_ns,
        limits: claims::Limits::parse(limits).unwrap(),
        port_view: open_ports,
    }
}

/// Below 1024 (the sysctl's default) nobody binds; uid 107 holds udp 6000.
fn a_host_s_ports() -> Result<claims::PortView, String> {
    Ok(claims::PortView {
        unprivileged_start: 1024,
        tcp: vec![],
        udp: vec![claims::PortHolder {
            port: 6000,
            uid: 107,
        }],
    })
}

#[test]
fn a_user_claims_only_ports_it_could_bind_unless_root_allows_more() {
    let mut config = claims_config(10_000, "default rate=none queue=none\n1002 allow=udp:53");
    config.port_view = a_host_s_ports;
    let mut rules = rules_over_memory("pipe 1 config delay 1ms\n")
        .with_claims(config)
        .unwrap();
    let before = node_state(&rules);
    for (uid, line, says) in [
        (
            1001,
            "claim udp 53 -- delay 1s",
            "udp 53: udp port 53 is below ip_unprivileged_port_start (1024); uid 1001 may \
         claim only ports it could bind, or those root's --limits allows it \
         (allow=udp:PORT)",
        ),
        (
            1001,
            "claim udp 6000 -- plr 1",
            "udp 6000: udp port 6000 is held by a socket of uid 107; uid 1001",
        ),
        // A range is checked port by port and names the port refused.
        (
            1001,
            "claim udp 5990-6010 -- plr 1",
            "udp 5990-6010: udp port 6000 is held by a socket of uid 107",
        ),
        (
            1002,
            "claim udp 53-54",
            "udp 53-54: udp port 54 is below ip_unprivileged_port_start (1024)",
        ),
    ] {
        let e = claim_line(&rules, uid, line, 0).unwrap_err();
        assert!(
            matches!(&e, Failure::Refused(m) if m.starts_with(says)),
            "uid {uid} '{line}': {e:?}"
        );
    }
    assert_eq!(
        node_state(&rules),
        before,
        "a refused claim changed the node"
    );
    // The same port over tcp is free; uid 107 may claim its own port;
    // root's file allows 1002 udp 53; root keeps every port.
    claim_line(&rules, 1001, "claim tcp 6000", 0).unwrap();
    claim_line(&rules, 107, "claim udp 6000", 0).unwrap();
    claim_line(&rules, 1002, "claim udp 53 -- delay 1ms", 0).unwrap();
    claim_line(&rules, 0, "claim tcp 22", 0).unwrap();
    // Release is never refused by the port rule.
    claim_line(&rules, 1002, "release udp 53", 0).unwrap();
    rules.bridge.stop();
}

/// uid 107 binds tcp 7000 after 1001 claimed it: 1001's renewal (and
/// change) is refused, its claim runs on until it expires or is released.
#[test]
fn a_renewal_is_refused_once_another_user_binds_the_port() {
    fn bound_later() -> Result<claims::PortView, String> {
        Ok(claims::PortView {
            unprivileged_start: 1024,
            tcp: vec![claims::PortHolder {
                port: 7000,
                uid: 107,
            }],
            udp: vec![],
        })
    }
    let mut rules = rules_over_memory("pipe 1 config delay 1ms\n")
        .with_claims(claims_config(10_000, "default rate=none queue=none"))
        .unwrap();
    claim_line(&rules, 1001, "claim tcp 7000 -- delay 5ms", 0).unwrap();
    if let Some((_, config)) = &mut rules.claims {
        config.port_view = bound_later;
    }
    for line in ["claim tcp 7000", "claim tcp 7000 -- delay 9ms"] {
        let e = claim_line(&rules, 1001, line, 1_000).unwrap_err();
        assert!(
            matches!(&e, Failure::Refused(m) if m.contains("tcp port 7000 is held by a socket of uid 107")),
            "{line}: {e:?}"
        );
    }
    claim_line(&rules, 1001, "release tcp 7000", 2_000).unwrap();
    rules.bridge.stop();
}

#[test]
fn a_claim_makes_changes_renews_and_releases_its_pipes_and_rules() {
    let mut rules = rules_over_memory("pipe 1 config delay 1ms\nadd 100 pipe 1 icmp\n")
        .with_claims(claims_config(10_000, "default rate=none queue=none"))
        .unwrap();
    let d = claim_line(&rules, 1001, "claim udp 5678 -- delay 50ms", 1_000).unwrap();
    assert_eq!((d.what, d.claim.numbers()), ("claimed", [40_000, 40_001]));
    assert_eq!(d.claim.expires_ns, 11_000);
    let (pipes, node_rules) = node_state(&rules);
    assert_eq!(
        pipes,
        [(1, 1_000_000), (40_000, 50_000_000), (40_001, 50_000_000)]
    );
    assert_eq!(
        node_rules.iter().map(|r| r.0).collect::<Vec<_>>(),
        [100, 40_000, 40_001]
    );
    assert!(
        node_rules[1]
            .1
            .contains("udp from any to any dst-port 5678 in"),
        "{node_rules:?}"
    );
    assert!(
        node_rules[2]
            .1
            .contains("udp from any to any src-port 5678 out"),
        "{node_rules:?}"
    );
    // Another user: refused naming the owner; the node unchanged.
    let e = claim_line(&rules, 1002, "claim udp 5678 -- delay 1ms", 2_000).unwrap_err();
    assert!(
        matches!(&e, Failure::Refused(m) if m.contains("claimed by uid 1001")),
        "{e:?}"
    );
    let e = claim_line(&rules, 1002, "release udp 5678", 2_000).unwrap_err();
    assert!(
        matches!(&e, Failure::Refused(m) if m.contains("claimed by uid 1001")),
        "{e:?}"
    );
    // The owner changes one direction in place: same rules, the pipe reconfigured.
    let d = claim_line(&rules, 1001, "claim udp 5678 --out delay 7ms", 3_000).unwrap();
    assert_eq!(
        (d.what, d.claim.changes, d.claim.created_ns),
        ("changed", 1, 1_000u64.max(d.claim.created_ns))
    );
    let (pipes, after) = node_state(&rules);
    assert_eq!(pipes[1..], [(40_000, 50_000_000), (40_001, 7_000_000)]);
    assert_eq!(after, node_rules);
    // Claiming again without words renews it, nothing else.
    let d = claim_line(&rules, 1001, "claim udp 5678", 4_000).unwrap();
    assert_eq!((d.what, d.claim.expires_ns), ("renewed", 14_000));
    // Pipes and rules of claims are not for other requests, root's included.
    for line in [
        "pipe 40000 config delay 1ms",
        "delete 40001",
        "add 40100 pipe 1 ip",
        "add 200 pipe 40000 ip",
        "flush",
    ] {
        let e = request(&rules, line).unwrap_err();
        assert!(matches!(e, Failure::Refused(_)), "{line}: {e:?}");
    }
    // An added rule without a number is numbered after the others, claims aside.
    request(&rules, "add pipe 1 tcp").unwrap();
    assert_eq!(node_state(&rules).1[1].0, 200);
    request(&rules, "delete 200").unwrap();
    // Expiry at its time: rules and pipes go.
    assert!(rules.expire_claims(13_999).is_empty());
    let gone = rules.expire_claims(14_000);
    assert_eq!(gone.len(), 1);
    assert!(gone[0].1.is_ok());
    assert_eq!(
        node_state(&rules),
        (vec![(1, 1_000_000)], vec![(100, node_rules[0].1.clone())])
    );
    // Released by its owner.
    claim_line(&rules, 1002, "claim tcp 80-90 delay 1ms", 20_000).unwrap();
    let d = claim_line(&rules, 1002, "claim tcp 80-90 release", 21_000).unwrap();
    assert_eq!(d.what, "released");
    assert_eq!(node_state(&rules).0, [(1, 1_000_000)]);
    let e = claim_line(&rules, 1002, "release tcp 80-90", 21_000).unwrap_err();
    assert_eq!(e, Failure::Error("tcp 80-90 is not claimed".into()));
    rules.bridge.stop();
}

#[test]
fn a_claim_over_its_limits_is_refused_and_changes_nothing() {
    let mut rules = rules_over_memory("pipe 1 config delay 1ms\n")
        .with_claims(claims_config(
            10_000,
            "default claims=1 rate=10Mbit/s delay=100ms queue=2MiB",
        ))
        .unwrap();
    let before = node_state(&rules);
    for (line, says) in [
        (
            "claim udp 1 -- delay 200ms",
            "limit delay=100ms for uid 1001: the a-to-b pipe asks delay 200ms",
        ),
        (
            "claim udp 1 --in bw 20Mbit/s",
            "limit rate=10mbit for uid 1001: the a-to-b pipe asks bw 20mbit",
        ),
        ("claim udp 1 -- queue 1000", "limit queue=2MiB for uid 1001"),
    ] {
        let e = claim_line(&rules, 1001, line, 0).unwrap_err();
        assert!(
            matches!(&e, Failure::Refused(m) if m.starts_with(says)),
            "{line}: {e:?}"
        );
    }
    assert_eq!(node_state(&rules), before);
    // Without bw the pipe runs at the user's rate limit, so it holds a bounded amount.
    let d = claim_line(&rules, 1001, "claim udp 1 -- delay 50ms", 0).unwrap();
    assert!(d.claim.held_bytes < 2 << 20, "{}", d.claim.held_bytes);
    let rate = rules.bridge.with_model(|n| n.pipes()[1].def.link.rate_bps);
    assert_eq!(rate, Some(10_000_000));
    let e = claim_line(&rules, 1001, "claim udp 2", 0).unwrap_err();
    assert!(
        matches!(&e, Failure::Refused(m) if m.starts_with("limit claims=1 for uid 1001")),
        "{e:?}"
    );
    // A mask would give each flow its own queue.
    let e = claim_line(&rules, 1002, "claim udp 3 -- mask dst-port 0xffff", 0).unwrap_err();
    assert!(e.message().contains("no mask"), "{e:?}");
    // Root is not bounded unless named.
    claim_line(&rules, 0, "claim udp 4 -- delay 1s", 0).unwrap();
    let listed = rules.claims_json(1001, 0);
    assert_eq!(listed["claims"].as_array().unwrap().len(), 1);
    assert_eq!(
        rules.claims_json(0, 0)["claims"].as_array().unwrap().len(),
        2
    );
    rules.bridge.stop();
}

#[test]
fn a_reload_keeps_the_claims_and_refuses_their_numbers() {
    let mut rules = rules_over_memory("pipe 1 config delay 1ms\n")
        .with_claims(claims_config(10_000, ""))
        .unwrap();
    claim_line(&rules, 1001, "claim udp 5678 -- delay 50ms bw 1Mbit/s", 0).unwrap();
    let text = normalized("pipe 2 config delay 2ms\nadd 100 pipe 2 tcp\n").unwrap();
    let set = parse(&text).unwrap();
    rules
        .reload(Source::new(&text, set, 0), HashMap::new())
        .unwrap();
    let (pipes, node_rules) = node_state(&rules);
    assert_eq!(
        pipes.iter().map(|p| p.0).collect::<Vec<_>>(),
        [2, 40_000, 40_001]
    );
    assert_eq!(
        node_rules.iter().map(|r| r.0).collect::<Vec<_>>(),
        [100, 40_000, 40_001]
    );
    let text = normalized("pipe 40000 config delay 2ms\n").unwrap();
    let set = parse(&text).unwrap();
    let e = rules
        .reload(Source::new(&text, set, 0), HashMap::new())
        .unwrap_err();
    assert!(e.starts_with("pipe 40000: with --claims"), "{e}");
    assert_eq!(node_state(&rules).0.len(), 3);
    // The claim still releases cleanly.
    claim_line(&rules, 1001, "release udp 5678", 0).unwrap();
    assert_eq!(node_state(&rules).0, [(2, 2_000_000)]);
    rules.bridge.stop();
}
