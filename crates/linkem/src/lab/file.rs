//! A validated lab file: its nodes, links (each direction's words already
//! parsed into a `LinkSpec`), machines and lab-wide settings. `read.rs`
//! makes one ([`Lab::load`], [`Lab::parse`]); `plan.rs` turns it into what a
//! machine creates. Nothing here touches the system.

use linkem_core::LinkSpec;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

/// Linux's IFNAMSIZ less the terminating NUL: the longest interface name.
pub const IFNAME_MAX_BYTES: usize = 15;
/// The UDP port of VXLAN (IANA's), unless `linkem.vxlan.port` says otherwise.
pub const VXLAN_PORT: u16 = 4789;
/// The first link's VNI, unless `linkem.vxlan.vni` says otherwise.
pub const VXLAN_VNI_BASE: u32 = 1000;
/// An underlay's MTU unless its machine says otherwise.
pub const UNDERLAY_MTU: u32 = 1500;

/// A validated lab file.
#[derive(Debug, Clone)]
pub struct Lab {
    pub name: String,
    /// Containerlab's `prefix` of container names, when given (linkem's own
    /// objects are always named `lk-LAB...`).
    pub prefix: Option<String>,
    /// Where the file came from (its path, or what the caller named it).
    pub origin: String,
    /// The folder relative paths (`rules`, `trace`, words' files) start from.
    pub dir: PathBuf,
    /// In the file's order.
    pub nodes: Vec<Node>,
    /// In the file's order; `Link::index` is the position here.
    pub links: Vec<Link>,
    pub machines: Vec<Machine>,
    /// `linkem.seed`: the run seed every link without a seed derives its own from.
    pub seed: Option<u64>,
    pub vxlan: VxlanSettings,
    /// Keys accepted but not used, and other things worth saying at `up`.
    pub warnings: Vec<String>,
}

/// What a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// A network namespace (no image) or a container (with `image`).
    Linux,
    /// A Linux bridge: the node's endpoints are its ports.
    Bridge,
    /// This machine's own namespace: `host:veth0` is an interface there.
    Host,
}

impl NodeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKind::Linux => "linux",
            NodeKind::Bridge => "bridge",
            NodeKind::Host => "host",
        }
    }
}

/// One node of `topology.nodes` (or the implicit `host`).
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub name: String,
    pub kind: NodeKind,
    /// A container image (`linux` only): run as a container, not a bare namespace.
    pub image: Option<String>,
    /// Containerlab's `exec`: commands run in the node once its links are up
    /// (in the host's namespace for a `host` node), in order.
    pub exec: Vec<String>,
    /// Containerlab's `env`: the environment of the node's commands.
    pub env: BTreeMap<String, String>,
    /// Containerlab's `cmd` (a container's command).
    pub cmd: Option<String>,
    /// Containerlab's `binds` (a container's mounts).
    pub binds: Vec<String>,
    pub labels: BTreeMap<String, String>,
    /// `linkem.nodes.NODE.machine`: the machine the node runs on (None: every
    /// machine's own, as in a lab on one machine).
    pub machine: Option<String>,
    /// `linkem.nodes.NODE.bridge: host`: a bridge in the host's namespace
    /// (Containerlab's place for it), else in a namespace of its own.
    pub bridge_in_host: bool,
    /// Not written in the file: the `host` that `host:IF` endpoints name.
    pub implicit: bool,
}

/// One end of a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub node: String,
    pub interface: String,
    pub mac: Option<String>,
    /// Addresses (`ADDR/LEN`) to give the interface: Containerlab's `ipv4`/`ipv6`.
    pub ipv4: Option<String>,
    pub ipv6: Option<String>,
}

impl Endpoint {
    /// `NODE:IF`, as the short form writes it.
    pub fn label(&self) -> String {
        format!("{}:{}", self.node, self.interface)
    }
}

/// A link's Dummynet rules (`rules:`), read at parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// The file's path as resolved, or `LINK rules` for inline text.
    pub name: String,
    pub path: Option<PathBuf>,
    pub text: String,
}

/// One link of `topology.links`: side a is the first endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// `NODE:IF--NODE:IF`, its endpoints as written, a first.
    pub name: String,
    /// Position in `topology.links`, from 0.
    pub index: usize,
    pub endpoints: [Endpoint; 2],
    /// Containerlab's `mtu` of the node ends.
    pub mtu: Option<u32>,
    /// Each direction's words (a-to-b, b-to-a), layers in order: `linkem.defaults`,
    /// `impair`, the direction's own, then `trace` and `schedule` as words.
    pub words: [Vec<String>; 2],
    /// The parsed links of `words`, a-to-b and b-to-a.
    pub specs: [LinkSpec; 2],
    /// Each direction's schedule file text, made from `schedule:`.
    pub schedules: [Option<String>; 2],
    /// The files the words read (traces, tables, the made schedules) by the
    /// name the words give them, for a recording.
    pub files: BTreeMap<String, String>,
    pub rules: Option<Rules>,
    /// `seed:`, else a `seed N` among the words.
    pub seed: Option<u64>,
    pub labels: BTreeMap<String, String>,
}

/// One machine of `linkem.machines`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    pub name: String,
    /// The address the other machines reach this one at (the VXLAN endpoint).
    pub underlay: IpAddr,
    /// The underlay's MTU (default 1500): a link across has 50 bytes less.
    pub mtu: u32,
}

/// `linkem.vxlan`: how links across machines are carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VxlanSettings {
    pub port: u16,
    /// The VNI of link index 0; link i has `vni + i`.
    pub vni: u32,
}

impl Lab {
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name == name)
    }

    pub fn link(&self, name: &str) -> Option<&Link> {
        self.links.iter().find(|l| l.name == name)
    }

    /// The link with endpoint `node:interface`, and that endpoint's side
    /// (0: a, the first endpoint; 1: b): what `-n NODE -i IF` names.
    pub fn endpoint(&self, node: &str, interface: &str) -> Option<(&Link, usize)> {
        self.links.iter().find_map(|l| {
            let side = l
                .endpoints
                .iter()
                .position(|e| e.node == node && e.interface == interface)?;
            Some((l, side))
        })
    }

    pub fn machine(&self, name: &str) -> Option<&Machine> {
        self.machines.iter().find(|m| m.name == name)
    }
}
