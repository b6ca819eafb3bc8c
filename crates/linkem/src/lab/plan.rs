//! What one machine creates for a lab, decided from the file alone (nothing
//! is looked up or touched): the namespaces (`lk-LAB-NODE` per linux node and
//! per bridge of its own, `lk-LAB` or `lk-LAB@MACHINE` for the emulator's ends), the bridges, one
//! veth per endpoint (node end where the node is, the other end in `lk-LAB`),
//! the emulator's pairs (one per link, side a = the first endpoint), the
//! VXLAN tunnels of links whose ends are on two machines, and the nodes'
//! commands. `linkem lab up` creates them in this order and removes them in
//! the reverse one.
//!
//! A link across machines is emulated once, on the machine of its endpoint a:
//! there its pair is the node's veth end and the tunnel's device; on the
//! machine of endpoint b a bridge in `lk-LAB` joins the node's veth end to
//! the tunnel. The node ends' MTU is the smaller underlay MTU less the
//! tunnel's overhead (50 bytes over IPv4, 70 over IPv6), unless the link's
//! `mtu` is smaller.

use super::file::{Lab, Link, Node, NodeKind, Rules, IFNAME_MAX_BYTES};
use anyhow::{bail, Result};
use linkem_core::rng::pair_seed;
use linkem_core::LinkSpec;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

/// What VXLAN adds to an inner frame over an IPv4 underlay: outer IPv4 (20),
/// UDP (8), VXLAN (8) and the inner Ethernet header (14).
pub const VXLAN_OVERHEAD_V4_BYTES: u32 = 50;
/// The same over IPv6 (a 40-byte outer header).
pub const VXLAN_OVERHEAD_V6_BYTES: u32 = 70;

/// Everything one machine creates for a lab, in the order to create it.
#[derive(Debug, Clone)]
pub struct MachinePlan {
    pub lab: String,
    /// The machine planned (None: a lab on one machine).
    pub machine: Option<String>,
    /// `lk-LAB` (`lk-LAB@MACHINE` with machines): the emulator's ends,
    /// tunnels and the bridges of links across.
    pub emulator_namespace: String,
    pub namespaces: Vec<NamespacePlan>,
    pub bridges: Vec<BridgePlan>,
    pub veths: Vec<VethPlan>,
    pub tunnels: Vec<TunnelPlan>,
    /// The emulator's pairs, in the file's order of links.
    pub pairs: Vec<EmulatorPair>,
    /// Commands of the nodes on this machine, in the file's order of nodes.
    pub execs: Vec<ExecPlan>,
    /// The seed pairs without a seed of their own derive theirs from.
    pub run_seed: u64,
    /// True when the run seed came from `linkem.seed` (else it is fresh).
    pub seed_given: bool,
}

/// A namespace of a node: a `linux` node's (a container's when it has an
/// image), or a bridge's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespacePlan {
    /// `lk-LAB-NODE`.
    pub name: String,
    pub node: String,
    /// A container image: the namespace is that container's.
    pub image: Option<String>,
}

/// A Linux bridge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgePlan {
    /// The bridge node, or the link whose two machines it joins.
    pub owner: String,
    /// The bridge device's name.
    pub name: String,
    /// None: the host's namespace.
    pub namespace: Option<String>,
}

/// One end of a veth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VethEnd {
    pub name: String,
    /// None: the host's namespace.
    pub namespace: Option<String>,
    /// The bridge this end is a port of.
    pub master: Option<String>,
    pub mac: Option<String>,
    /// `ADDR/LEN` to add once it is up (Containerlab's `ipv4`/`ipv6`).
    pub addresses: Vec<String>,
}

/// A veth joining a node's interface to the emulator's namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VethPlan {
    /// The link it belongs to.
    pub link: String,
    /// The node's end (`NODE:IF` of the file).
    pub node_end: VethEnd,
    /// The end in `lk-LAB`: a name unique there.
    pub emulator_end: VethEnd,
    /// Both ends' MTU (None: the kernel's default).
    pub mtu: Option<u32>,
}

/// A VXLAN device carrying one link between two machines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelPlan {
    pub link: String,
    /// The device's name; it is made in the host's namespace (its socket
    /// stays there, on the underlay) and moved into `namespace`.
    pub device: String,
    pub namespace: String,
    pub vni: u32,
    pub local: IpAddr,
    pub remote: IpAddr,
    pub port: u16,
    /// The device's MTU: the node ends' (the inner frames it carries).
    pub mtu: u32,
    /// Bytes VXLAN adds to each frame on the underlay.
    pub overhead_bytes: u32,
    /// True on the machine that emulates the link (endpoint a's).
    pub emulated_here: bool,
}

/// One link of the emulator: a pair of `crate::bridge::pairs`'s group.
#[derive(Debug, Clone, PartialEq)]
pub struct EmulatorPair {
    /// The link's name, `NODE:IF--NODE:IF`: the pair's name.
    pub link: String,
    /// Side a's interface in `lk-LAB` (endpoint a's veth end).
    pub if_a: String,
    /// Side b's: endpoint b's veth end, or the tunnel's device.
    pub if_b: String,
    /// a-to-b, b-to-a.
    pub specs: [LinkSpec; 2],
    pub words: [Vec<String>; 2],
    pub seed: u64,
    /// True when the seed came from the link (`seed:` or `seed N`).
    pub seed_given: bool,
    pub rules: Option<Rules>,
    /// The files the words read, by name (for a recording).
    pub files: BTreeMap<String, String>,
}

/// A node's `exec` commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecPlan {
    pub node: String,
    /// None: the host's namespace (a `host` node).
    pub namespace: Option<String>,
    /// A container's commands run in the container, not just its namespace.
    pub container: bool,
    pub commands: Vec<String>,
    pub env: BTreeMap<String, String>,
}

/// The emulator's namespace of `lab`: `lk-LAB`, or `lk-LAB@MACHINE` for a
/// machine's part of a lab across machines (so that two "machines" that are
/// namespaces of one host do not share it; `@` is in no node's name, so no
/// node's namespace is named alike).
pub fn emulator_namespace(lab: &str, machine: Option<&str>) -> String {
    match machine {
        Some(m) => format!("lk-{lab}@{m}"),
        None => format!("lk-{lab}"),
    }
}

/// The namespace of node `node` of `lab`.
pub fn node_namespace(lab: &str, node: &str) -> String {
    format!("lk-{lab}-{node}")
}

/// The names in `lk-LAB` of link `index`: its two veth ends, its tunnel
/// device and the bridge of a link across (at most 15 bytes for any index
/// below 10^11).
pub fn emulator_names(index: usize) -> [String; 4] {
    [
        format!("l{index}a"),
        format!("l{index}b"),
        format!("l{index}vx"),
        format!("l{index}br"),
    ]
}

/// The plan of `machine` (None for a lab that names no machines).
pub fn plan(lab: &Lab, machine: Option<&str>) -> Result<MachinePlan> {
    let here = check_machine(lab, machine)?;
    let placed = Placement { lab, here };
    let emu_ns = emulator_namespace(&lab.name, here);
    let (run_seed, seed_given) = match lab.seed {
        Some(s) => (s, true),
        None => (crate::process::fresh_seed(), false),
    };
    let mut plan = MachinePlan {
        lab: lab.name.clone(),
        machine: here.map(str::to_string),
        emulator_namespace: emu_ns.clone(),
        namespaces: Vec::new(),
        bridges: Vec::new(),
        veths: Vec::new(),
        tunnels: Vec::new(),
        pairs: Vec::new(),
        execs: Vec::new(),
        run_seed,
        seed_given,
    };
    for node in lab.nodes.iter().filter(|n| placed.is_here(n)) {
        plan_node(lab, node, &mut plan)?;
    }
    for link in &lab.links {
        let [a, b] = link.endpoints.each_ref().map(|e| placed.node(&e.node));
        match (placed.is_here(a), placed.is_here(b)) {
            (true, true) => plan_local_link(lab, link, &mut plan)?,
            (false, false) => {}
            (a_here, _) => plan_link_across(lab, link, a_here, &mut plan)?,
        }
    }
    check_names(&plan)?;
    Ok(plan)
}

/// Which machine is planned, refusing a name the lab lacks or a missing one.
fn check_machine<'a>(lab: &Lab, machine: Option<&'a str>) -> Result<Option<&'a str>> {
    match (machine, lab.machines.is_empty()) {
        (None, true) => Ok(None),
        (Some(m), true) => bail!(
            "lab {}: --host {m}: the lab names no machines (linkem.machines)",
            lab.name
        ),
        (None, false) => {
            let names: Vec<&str> = lab.machines.iter().map(|m| m.name.as_str()).collect();
            bail!(
                "lab {}: its nodes are on several machines ({}): give --host NAME, the machine this is",
                lab.name,
                names.join(", ")
            )
        }
        (Some(m), false) if lab.machine(m).is_none() => {
            bail!(
                "lab {}: --host {m}: no machine '{m}' in linkem.machines",
                lab.name
            )
        }
        (Some(m), false) => Ok(Some(m)),
    }
}

/// Where each node runs: its `machine`, else the first machine listed.
struct Placement<'a> {
    lab: &'a Lab,
    here: Option<&'a str>,
}

impl<'a> Placement<'a> {
    fn node(&self, name: &str) -> &'a Node {
        self.lab
            .node(name)
            .expect("a validated lab's endpoints name its nodes")
    }

    fn machine_of(&self, node: &Node) -> Option<&'a str> {
        match &node.machine {
            Some(m) => self.lab.machine(m).map(|m| m.name.as_str()),
            None => self.lab.machines.first().map(|m| m.name.as_str()),
        }
    }

    fn is_here(&self, node: &Node) -> bool {
        self.machine_of(node) == self.here
    }
}

/// A node's namespace, bridge and commands.
fn plan_node(lab: &Lab, node: &Node, plan: &mut MachinePlan) -> Result<()> {
    let ns = node_namespace(&lab.name, &node.name);
    match node.kind {
        NodeKind::Linux => plan.namespaces.push(NamespacePlan {
            name: ns.clone(),
            node: node.name.clone(),
            image: node.image.clone(),
        }),
        NodeKind::Bridge => {
            if node.name.len() > IFNAME_MAX_BYTES {
                bail!(
                    "node '{}': a bridge is a Linux interface named after its node: \
                     at most {IFNAME_MAX_BYTES} bytes",
                    node.name
                );
            }
            let namespace = (!node.bridge_in_host).then(|| ns.clone());
            if let Some(ns) = &namespace {
                plan.namespaces.push(NamespacePlan {
                    name: ns.clone(),
                    node: node.name.clone(),
                    image: None,
                });
            }
            plan.bridges.push(BridgePlan {
                owner: node.name.clone(),
                name: node.name.clone(),
                namespace,
            });
        }
        NodeKind::Host => {}
    }
    if !node.exec.is_empty() {
        plan.execs.push(ExecPlan {
            node: node.name.clone(),
            namespace: (node.kind == NodeKind::Linux).then_some(ns),
            container: node.image.is_some(),
            commands: node.exec.clone(),
            env: node.env.clone(),
        });
    }
    Ok(())
}

/// The node end of endpoint `side` of `link`: in the node's namespace, a port
/// of the node's bridge for a bridge.
fn node_end(lab: &Lab, link: &Link, side: usize) -> VethEnd {
    let e = &link.endpoints[side];
    let node = lab
        .node(&e.node)
        .expect("a validated lab's endpoints name its nodes");
    let (namespace, master) = match node.kind {
        NodeKind::Linux => (Some(node_namespace(&lab.name, &node.name)), None),
        NodeKind::Bridge => (
            (!node.bridge_in_host).then(|| node_namespace(&lab.name, &node.name)),
            Some(node.name.clone()),
        ),
        NodeKind::Host => (None, None),
    };
    VethEnd {
        name: e.interface.clone(),
        namespace,
        master,
        mac: e.mac.clone(),
        addresses: e.ipv4.iter().chain(&e.ipv6).cloned().collect(),
    }
}

fn emulator_end(plan: &MachinePlan, name: &str) -> VethEnd {
    VethEnd {
        name: name.to_string(),
        namespace: Some(plan.emulator_namespace.clone()),
        master: None,
        mac: None,
        addresses: Vec::new(),
    }
}

fn pair(plan: &MachinePlan, link: &Link, if_a: &str, if_b: &str) -> EmulatorPair {
    EmulatorPair {
        link: link.name.clone(),
        if_a: if_a.to_string(),
        if_b: if_b.to_string(),
        specs: link.specs.clone(),
        words: link.words.clone(),
        seed: link
            .seed
            .unwrap_or_else(|| pair_seed(plan.run_seed, link.index as u64)),
        seed_given: link.seed.is_some(),
        rules: link.rules.clone(),
        files: link.files.clone(),
    }
}

/// Both ends here: two veths and a pair between their emulator ends.
fn plan_local_link(lab: &Lab, link: &Link, plan: &mut MachinePlan) -> Result<()> {
    let [ea, eb, _, _] = emulator_names(link.index);
    for (side, name) in [(0, &ea), (1, &eb)] {
        plan.veths.push(VethPlan {
            link: link.name.clone(),
            node_end: node_end(lab, link, side),
            emulator_end: emulator_end(plan, name),
            mtu: link.mtu,
        });
    }
    let p = pair(plan, link, &ea, &eb);
    plan.pairs.push(p);
    Ok(())
}

/// One end here, the other on another machine: the tunnel, and the pair on
/// endpoint a's machine or the bridge on endpoint b's.
fn plan_link_across(lab: &Lab, link: &Link, a_here: bool, plan: &mut MachinePlan) -> Result<()> {
    let placed = Placement {
        lab,
        here: plan.machine.as_deref(),
    };
    let what = format!("link {}", link.name);
    let machine_of = |side: usize| {
        let node = placed.node(&link.endpoints[side].node);
        let name = placed
            .machine_of(node)
            .expect("a lab across machines has machines");
        lab.machine(name).expect("placed on a listed machine")
    };
    let (ma, mb) = (machine_of(0), machine_of(1));
    let (local, remote) = if a_here { (ma, mb) } else { (mb, ma) };
    if local.underlay.is_ipv4() != remote.underlay.is_ipv4() {
        bail!(
            "{what}: machines '{}' ({}) and '{}' ({}) have underlays of two IP versions",
            ma.name,
            ma.underlay,
            mb.name,
            mb.underlay
        );
    }
    let overhead_bytes = if local.underlay.is_ipv4() {
        VXLAN_OVERHEAD_V4_BYTES
    } else {
        VXLAN_OVERHEAD_V6_BYTES
    };
    let inner_max = ma.mtu.min(mb.mtu) - overhead_bytes;
    let mtu = match link.mtu {
        Some(m) if m > inner_max => bail!(
            "{what}: 'mtu: {m}' is over what the tunnel carries between '{}' and '{}' \
             ({inner_max}: the underlay's {} less VXLAN's {overhead_bytes})",
            ma.name,
            mb.name,
            ma.mtu.min(mb.mtu)
        ),
        Some(m) => m,
        None => inner_max,
    };
    let vni = lab.vxlan.vni as u64 + link.index as u64;
    if vni >= 1 << 24 {
        bail!("{what}: its VNI {vni} (linkem.vxlan.vni + its index) is over 16777215");
    }
    let side = if a_here { 0 } else { 1 };
    let [ea, eb, vx, br] = emulator_names(link.index);
    let my_end = if a_here { ea } else { eb };
    let mut emu = emulator_end(plan, &my_end);
    if !a_here {
        emu.master = Some(br.clone());
        plan.bridges.push(BridgePlan {
            owner: link.name.clone(),
            name: br.clone(),
            namespace: Some(plan.emulator_namespace.clone()),
        });
    }
    plan.veths.push(VethPlan {
        link: link.name.clone(),
        node_end: node_end(lab, link, side),
        emulator_end: emu,
        mtu: Some(mtu),
    });
    plan.tunnels.push(TunnelPlan {
        link: link.name.clone(),
        device: vx.clone(),
        namespace: plan.emulator_namespace.clone(),
        vni: vni as u32,
        local: local.underlay,
        remote: remote.underlay,
        port: lab.vxlan.port,
        mtu,
        overhead_bytes,
        emulated_here: a_here,
    });
    if a_here {
        let p = pair(plan, link, &my_end, &vx);
        plan.pairs.push(p);
    }
    Ok(())
}

/// Refuses two interfaces of one name in one namespace (a `host` endpoint
/// named as a bridge in the host's namespace, say).
fn check_names(plan: &MachinePlan) -> Result<()> {
    let mut seen: HashMap<(Option<&str>, &str), String> = HashMap::new();
    let bridges = plan.bridges.iter().map(|b| {
        (
            b.namespace.as_deref(),
            b.name.as_str(),
            format!("bridge {}", b.owner),
        )
    });
    let node_ends = plan.veths.iter().map(|v| {
        let e = &v.node_end;
        (
            e.namespace.as_deref(),
            e.name.as_str(),
            format!("link {}", v.link),
        )
    });
    for (ns, name, what) in bridges.chain(node_ends) {
        if let Some(other) = seen.insert((ns, name), what.clone()) {
            let place = ns.unwrap_or("the host's namespace");
            bail!("{what}: interface '{name}' in {place} is also {other}'s");
        }
    }
    Ok(())
}
