//! A lab's link across machines over VXLAN, live: two namespaces stand for
//! two machines, joined by an underlay veth with their own addresses; each
//! makes its end of the tunnel the plan gives (`linkem::lab::vxlan`), moved
//! into its emulator namespace. A frame crosses, and the device has the MTU
//! of the link's node ends (the underlay's 1500 less VXLAN's 50): a 1450-byte
//! packet passes whole, a larger one is refused. Names start with `lkvx`.

#[macro_use]
mod common;

use linkem::lab::{plan, vxlan, Lab};
use linkem_io::netns;
use std::process::Command;

/// Removes every namespace and veth of the test, also when it fails.
struct Guard {
    namespaces: Vec<String>,
    underlay: String,
}

impl Drop for Guard {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = netns::ip(&["netns", "del", ns]);
        }
        let _ = netns::ip(&["link", "del", &self.underlay]);
    }
}

fn ip(args: &[&str]) {
    netns::ip(args).unwrap_or_else(|e| panic!("{e}"));
}

fn ping(ns: &str, args: &[&str]) -> bool {
    Command::new("ip")
        .args([
            "netns", "exec", ns, "ping", "-q", "-c", "2", "-i", "0.2", "-W", "1",
        ])
        .args(args)
        .output()
        .unwrap()
        .status
        .success()
}

#[test]
fn a_frame_crosses_the_tunnel_and_the_mtu_is_the_plan_s() {
    if common::skip() {
        return;
    }
    let _serial = common::serial();
    let p = format!("lkvx{}", std::process::id() % 100_000);
    let lab = Lab::parse(
        &format!(
            "name: {p}\nlinkem:\n  machines: {{m1: {{underlay: 10.197.0.1}}, m2: {{underlay: 10.197.0.2}}}}\n  \
             nodes: {{y: {{machine: m2}}}}\ntopology:\n  nodes: {{x: {{kind: linux}}, y: {{kind: linux}}}}\n  \
             links:\n    - endpoints: [\"x:e1\", \"y:e1\"]\n"
        ),
        "test",
    )
    .unwrap();
    let (m1, m2) = (
        plan(&lab, Some("m1")).unwrap(),
        plan(&lab, Some("m2")).unwrap(),
    );
    let (t1, t2) = (&m1.tunnels[0], &m2.tunnels[0]);
    let (machine1, machine2) = (format!("{p}m1"), format!("{p}m2"));
    let (under1, under2) = (format!("{p}u1"), format!("{p}u2"));
    let _guard = Guard {
        namespaces: vec![
            machine1.clone(),
            machine2.clone(),
            m1.emulator_namespace.clone(),
            m2.emulator_namespace.clone(),
        ],
        underlay: under1.clone(),
    };
    for ns in &_guard.namespaces {
        ip(&["netns", "add", ns]);
    }
    // The underlay: a veth between the two "machines", each end with its machine's address.
    ip(&[
        "link", "add", &under1, "type", "veth", "peer", "name", &under2,
    ]);
    for (ns, dev, addr) in [
        (&machine1, &under1, "10.197.0.1/24"),
        (&machine2, &under2, "10.197.0.2/24"),
    ] {
        ip(&["link", "set", dev, "netns", ns]);
        ip(&["-n", ns, "addr", "add", addr, "dev", dev]);
        ip(&["-n", ns, "link", "set", dev, "up"]);
    }
    vxlan::create(t1, Some(&machine1)).unwrap();
    vxlan::create(t2, Some(&machine2)).unwrap();
    for (t, addr) in [(t1, "10.196.0.1/24"), (t2, "10.196.0.2/24")] {
        let shown = netns::ip(&[
            "-n",
            &t.namespace,
            "-d",
            "-o",
            "link",
            "show",
            "dev",
            &t.device,
        ])
        .unwrap();
        let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
        assert!(shown.contains("mtu 1450"), "{shown}");
        assert!(shown.contains(&format!("vxlan id {}", t.vni)), "{shown}");
        assert!(shown.contains("dstport 4789"), "{shown}");
        ip(&["-n", &t.namespace, "addr", "add", addr, "dev", &t.device]);
    }
    let emu1 = &m1.emulator_namespace;
    assert!(ping(emu1, &["10.196.0.2"]), "no frame crossed the tunnel");
    // 1422 bytes of ICMP + 28 of headers = 1450, the tunnel's MTU; one more is refused.
    assert!(
        ping(emu1, &["-M", "do", "-s", "1422", "10.196.0.2"]),
        "a 1450-byte packet did not cross"
    );
    assert!(
        !ping(emu1, &["-M", "do", "-s", "1423", "10.196.0.2"]),
        "a 1451-byte packet was sent"
    );
    vxlan::delete(t1).unwrap();
    vxlan::delete(t1).unwrap();
    assert!(netns::ip(&["-n", emu1, "link", "show", "dev", &t1.device]).is_err());
}
