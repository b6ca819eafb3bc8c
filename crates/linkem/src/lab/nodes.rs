//! `topology.nodes`, each property taken from the node, its group, its kind's
//! entry in `topology.kinds`, or `topology.defaults`, in that order
//! (Containerlab's inheritance), and `linkem.nodes.NODE` (where it runs).
//! Kinds linkem starts: `linux`, `bridge`, `host`; any other is refused by name.

use super::file::{Machine, Node, NodeKind};
use super::keys::{self, Keys};
use anyhow::{bail, Result};
use serde_yaml::{Mapping, Value};

/// Containerlab's node keys linkem reads.
const NODE_KEYS: &[&str] = &[
    "kind", "image", "exec", "env", "cmd", "binds", "labels", "group",
];
/// Containerlab's node keys linkem accepts without using them.
const NODE_IGNORED: &[&str] = &[
    "type",
    "startup-config",
    "startup-delay",
    "enforce-startup-config",
    "suppress-startup-config",
    "auto-remove",
    "license",
    "ports",
    "user",
    "entrypoint",
    "mgmt-ipv4",
    "mgmt-ipv6",
    "mgmt_ipv4",
    "mgmt_ipv6",
    "publish",
    "network-mode",
    "runtime",
    "cpu",
    "cpu-set",
    "memory",
    "sysctls",
    "extras",
    "wait-for",
    "dns",
    "certificate",
    "healthcheck",
    "stages",
    "aliases",
    "config",
    "devices",
    "cap-add",
    "shm-size",
    "components",
    "restart-policy",
    "image-pull-policy",
];
const LINKEM_NODE: Keys = Keys {
    known: &["machine", "bridge"],
    ignored: &[],
};

/// A node's name goes into `lk-LAB-NODE` and `NODE:IF`.
pub(super) fn check_node_name(name: &str, what: &str) -> Result<()> {
    if name.is_empty() || name.len() > 64 {
        bail!("{what}: a name of 1 to 64 characters");
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-' || *c == '.'))
    {
        bail!("{what}: '{name}' has '{c}' (letters, digits, '_', '-' and '.' only)");
    }
    Ok(())
}

/// The property `key` of a node: its own, its group's, its kind's, the defaults'.
struct Layers<'a> {
    layers: Vec<&'a Mapping>,
}

impl Layers<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.layers
            .iter()
            .find_map(|m| m.get(key).filter(|v| !v.is_null()))
    }
}

pub(super) fn parse_nodes(
    topology: &Mapping,
    lk: &Mapping,
    machines: &[Machine],
    warnings: &mut Vec<String>,
) -> Result<Vec<Node>> {
    let empty = Mapping::new();
    let defaults = keys::mapping(topology, "defaults", "topology")?.unwrap_or(&empty);
    let kinds = keys::mapping(topology, "kinds", "topology")?.unwrap_or(&empty);
    let groups = keys::mapping(topology, "groups", "topology")?.unwrap_or(&empty);
    let all = Keys {
        known: NODE_KEYS,
        ignored: NODE_IGNORED,
    };
    all.check(defaults, "topology.defaults", warnings)?;
    for (what, map) in [("topology.kinds", kinds), ("topology.groups", groups)] {
        for (k, v) in map {
            let name = keys::scalar(k).unwrap_or_default();
            match v {
                Value::Mapping(m) => all.check(m, &format!("{what}.{name}"), warnings)?,
                Value::Null => {}
                other => bail!(
                    "{what}.{name}: must be a mapping, not {}",
                    keys::scalar_text(other)
                ),
            }
        }
    }
    let lk_nodes = keys::mapping(lk, "nodes", "linkem")?.unwrap_or(&empty);
    let Some(nodes) = keys::mapping(topology, "nodes", "topology")? else {
        bail!("topology.nodes is missing (a lab has at least one node)");
    };
    let mut out = Vec::new();
    for (k, v) in nodes {
        let name = keys::scalar(k).unwrap_or_default();
        let what = format!("node '{name}'");
        check_node_name(&name, &what)?;
        let own = match v {
            Value::Mapping(m) => m,
            Value::Null => &empty,
            other => bail!(
                "{what}: must be a mapping, not {}",
                keys::scalar_text(other)
            ),
        };
        all.check(own, &what, warnings)?;
        out.push(parse_node(&name, own, defaults, kinds, groups, warnings)?);
    }
    for (k, v) in lk_nodes {
        let name = keys::scalar(k).unwrap_or_default();
        let what = format!("linkem.nodes.{name}");
        let Some(node) = out.iter_mut().find(|n| n.name == name) else {
            bail!("{what}: no node '{name}' in topology.nodes");
        };
        let Value::Mapping(m) = v else {
            bail!("{what}: must be a mapping ('machine: NAME')");
        };
        LINKEM_NODE.check(m, &what, warnings)?;
        if let Some(machine) = keys::string(m, "machine", &what)? {
            if !machines.iter().any(|mc| mc.name == machine) {
                bail!("{what}.machine: no machine '{machine}' in linkem.machines");
            }
            node.machine = Some(machine);
        }
        match keys::string(m, "bridge", &what)?.as_deref() {
            None | Some("own") => {}
            Some("host") if node.kind == NodeKind::Bridge => node.bridge_in_host = true,
            Some("host") => bail!("{what}.bridge: node '{name}' is not a bridge"),
            Some(other) => bail!("{what}.bridge: 'host' or 'own', not '{other}'"),
        }
    }
    Ok(out)
}

fn parse_node(
    name: &str,
    own: &Mapping,
    defaults: &Mapping,
    kinds: &Mapping,
    groups: &Mapping,
    warnings: &mut Vec<String>,
) -> Result<Node> {
    let what = format!("node '{name}'");
    let empty = Mapping::new();
    let group = match own.get("group").or(defaults.get("group")) {
        None | Some(Value::Null) => &empty,
        Some(g) => {
            let g = keys::scalar(g).unwrap_or_default();
            match groups.get(g.as_str()) {
                Some(Value::Mapping(m)) => m,
                Some(_) => &empty,
                None => bail!("{what}: group '{g}' is not in topology.groups"),
            }
        }
    };
    let kind_name = [own, group, defaults]
        .iter()
        .find_map(|m| m.get("kind").and_then(keys::scalar))
        .ok_or_else(|| {
            anyhow::anyhow!("{what}: no 'kind' (linux, bridge or host; or topology.defaults.kind)")
        })?;
    let kind = match kind_name.as_str() {
        "linux" => NodeKind::Linux,
        "bridge" => NodeKind::Bridge,
        "host" => NodeKind::Host,
        "ovs-bridge" => bail!("{what}: kind 'ovs-bridge' is not started by linkem (use kind 'bridge', a Linux bridge)"),
        other => bail!(
            "{what}: kind '{other}' is not one linkem starts (linux, bridge, host; \
             a network OS's kind needs Containerlab)"
        ),
    };
    let of_kind = match kinds.get(kind_name.as_str()) {
        Some(Value::Mapping(m)) => m,
        _ => &empty,
    };
    let layers = Layers {
        layers: vec![own, group, of_kind, defaults],
    };
    let image = layers.get("image").and_then(keys::scalar);
    let get_strings = |key: &str| match layers.get(key) {
        Some(v) => keys::strings(v, &format!("{what}: '{key}'")),
        None => Ok(Vec::new()),
    };
    let get_map = |key: &str| match layers.get(key) {
        Some(v) => keys::string_map(v, &format!("{what}: '{key}'")),
        None => Ok(Default::default()),
    };
    let mut node = Node {
        name: name.to_string(),
        kind,
        exec: get_strings("exec")?,
        env: get_map("env")?,
        cmd: layers.get("cmd").and_then(keys::scalar),
        binds: get_strings("binds")?,
        labels: get_map("labels")?,
        image: image.filter(|_| kind == NodeKind::Linux),
        machine: None,
        bridge_in_host: false,
        implicit: false,
    };
    if kind != NodeKind::Linux && layers.get("image").is_some() {
        warnings.push(format!(
            "{what}: a {} node has no image ('image' ignored)",
            kind.as_str()
        ));
    }
    if node.image.is_none() && (node.cmd.is_some() || !node.binds.is_empty()) {
        warnings.push(format!(
            "{what}: 'cmd' and 'binds' are a container's; without 'image' the node is a namespace (ignored)"
        ));
    }
    if kind == NodeKind::Bridge && own.get("exec").is_some_and(|v| !v.is_null()) {
        bail!("{what}: a bridge runs no commands ('exec')");
    }
    if kind == NodeKind::Bridge {
        // The defaults' or a group's commands are the other nodes'.
        node.exec.clear();
    }
    Ok(node)
}
