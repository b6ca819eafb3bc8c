//! Reading a lab file: Containerlab's topology keys (`name`, `prefix`,
//! `topology.{defaults,kinds,groups,nodes,links}`) with Containerlab's
//! meaning, linkem's per-link keys (`links.rs`), and the lab-only section
//! `linkem:` (`defaults`, `seed`, `machines`, `nodes.NODE.{machine,bridge}`,
//! `vxlan`). Everything that can be checked without touching the system is
//! checked here: names, kinds, endpoints, link words, schedules and the
//! files they name (read relative to the lab file).

use super::file::{Lab, Machine, VxlanSettings, UNDERLAY_MTU, VXLAN_PORT, VXLAN_VNI_BASE};
use super::keys::{self, Keys};
use super::links::{self, LinkContext};
use anyhow::{bail, Context, Result};
use linkem_core::LinkSpec;
use serde_yaml::{Mapping, Value};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

impl Lab {
    /// Reads and validates the lab file at `path`.
    pub fn load(path: &Path) -> Result<Lab> {
        let text = linkem_io::infile::read_text(path, linkem_io::infile::MAX_TEXT_BYTES)
            .map_err(|e| anyhow::anyhow!("lab file: {e}"))?;
        Lab::parse(&text, &path.display().to_string())
    }

    /// Validates the lab file `text`; `origin` is its path (relative paths in
    /// it start from its folder) or a name for messages.
    pub fn parse(text: &str, origin: &str) -> Result<Lab> {
        Lab::parse_files(text, origin, true)
    }

    /// [`Lab::parse`] reading no file: a file the lab names (rules, trace,
    /// a table) is an error. For checking untrusted text (the fuzz target).
    pub fn parse_without_files(text: &str, origin: &str) -> Result<Lab> {
        Lab::parse_files(text, origin, false)
    }

    fn parse_files(text: &str, origin: &str, read_files: bool) -> Result<Lab> {
        let dir = Path::new(origin)
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let value: Value =
            serde_yaml::from_str(text).with_context(|| format!("{origin}: not a YAML lab file"))?;
        let Value::Mapping(top) = value else {
            bail!("{origin}: a lab file is a mapping with 'name' and 'topology'");
        };
        parse_top(&top, origin, dir, read_files).with_context(|| format!("lab file {origin}"))
    }
}

const TOP: Keys = Keys {
    known: &["name", "prefix", "topology", "linkem"],
    ignored: &["mgmt", "settings", "debug"],
};
const TOPOLOGY: Keys = Keys {
    known: &["nodes", "links", "kinds", "defaults", "groups"],
    ignored: &[],
};
const LINKEM: Keys = Keys {
    known: &["defaults", "seed", "machines", "nodes", "vxlan"],
    ignored: &[],
};

fn parse_top(top: &Mapping, origin: &str, dir: PathBuf, read_files: bool) -> Result<Lab> {
    let files_dir = read_files.then_some(dir.as_path());
    let mut warnings = Vec::new();
    TOP.check(top, "the file", &mut warnings)?;
    let name = keys::string(top, "name", "the file")?
        .ok_or_else(|| anyhow::anyhow!("'name' is missing (the lab's name)"))?;
    check_lab_name(&name)?;
    let prefix = keys::string(top, "prefix", "the file")?;
    if prefix.is_some() {
        warnings.push(
            "'prefix' names containers only: linkem names its namespaces lk-LAB-NODE".to_string(),
        );
    }
    let topology = keys::mapping(top, "topology", "the file")?
        .ok_or_else(|| anyhow::anyhow!("'topology' is missing (its 'nodes' and 'links')"))?;
    TOPOLOGY.check(topology, "topology", &mut warnings)?;
    let lk = keys::mapping(top, "linkem", "the file")?
        .cloned()
        .unwrap_or_default();
    LINKEM.check(&lk, "linkem", &mut warnings)?;
    let seed = match lk.get("seed") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            anyhow::anyhow!("linkem.seed: a whole number, not {}", keys::scalar_text(v))
        })?),
    };
    let machines = parse_machines(&lk, &mut warnings)?;
    let vxlan = parse_vxlan(&lk)?;
    let mut nodes = super::nodes::parse_nodes(topology, &lk, &machines, &mut warnings)?;
    let default_words = match lk.get("defaults") {
        Some(v) => keys::words(v, "linkem.defaults")?,
        None => Vec::new(),
    };
    // Checked alone too, so that a lab without links still refuses bad defaults.
    LinkSpec::parse_layers(
        &[&default_words],
        linkem_core::Dialect::Linkem,
        &mut |f: &str| links::read_words_file(files_dir, f),
    )
    .map_err(|e| anyhow::anyhow!("linkem.defaults: link words: {e}"))?;
    let links_value = topology.get("links").cloned().unwrap_or(Value::Null);
    let ctx = LinkContext {
        dir: files_dir,
        default_words: &default_words,
    };
    let links = links::parse_links(&links_value, &mut nodes, &ctx, &mut warnings)?;
    Ok(Lab {
        name,
        prefix,
        origin: origin.to_string(),
        dir,
        nodes,
        links,
        machines,
        seed,
        vxlan,
        warnings,
    })
}

/// A lab's name goes into namespace names and the control socket's name.
fn check_lab_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 32 {
        bail!("'name' must have 1 to 32 characters, not {}", name.len());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-' || *c == '.'))
    {
        bail!("'name': '{name}' has '{c}' (letters, digits, '_', '-' and '.' only)");
    }
    Ok(())
}

const MACHINE: Keys = Keys {
    known: &["underlay", "mtu"],
    ignored: &[],
};

fn parse_machines(lk: &Mapping, warnings: &mut Vec<String>) -> Result<Vec<Machine>> {
    let Some(map) = keys::mapping(lk, "machines", "linkem")? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (k, v) in map {
        let name = keys::scalar(k).unwrap_or_default();
        let what = format!("linkem.machines.{name}");
        super::nodes::check_node_name(&name, &what)?;
        let Value::Mapping(m) = v else {
            bail!("{what}: must be a mapping with 'underlay: ADDRESS'");
        };
        MACHINE.check(m, &what, warnings)?;
        let underlay = keys::string(m, "underlay", &what)?
            .ok_or_else(|| anyhow::anyhow!("{what}: 'underlay' (its address) is missing"))?;
        let underlay: IpAddr = underlay
            .parse()
            .map_err(|_| anyhow::anyhow!("{what}.underlay: '{underlay}' is not an IP address"))?;
        let mtu = match m.get("mtu") {
            None => UNDERLAY_MTU,
            Some(v) => v
                .as_u64()
                .filter(|m| (1280..=65535).contains(m))
                .ok_or_else(|| {
                    anyhow::anyhow!("{what}.mtu: 1280 to 65535, not {}", keys::scalar_text(v))
                })? as u32,
        };
        if let Some(other) = out.iter().find(|o: &&Machine| o.underlay == underlay) {
            bail!(
                "{what}.underlay: {underlay} is machine '{}''s too",
                other.name
            );
        }
        out.push(Machine {
            name,
            underlay,
            mtu,
        });
    }
    Ok(out)
}

const VXLAN: Keys = Keys {
    known: &["port", "vni"],
    ignored: &[],
};

fn parse_vxlan(lk: &Mapping) -> Result<VxlanSettings> {
    let mut s = VxlanSettings {
        port: VXLAN_PORT,
        vni: VXLAN_VNI_BASE,
    };
    let Some(m) = keys::mapping(lk, "vxlan", "linkem")? else {
        return Ok(s);
    };
    VXLAN.check(m, "linkem.vxlan", &mut Vec::new())?;
    if let Some(v) = m.get("port") {
        s.port = v
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p > 0)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "linkem.vxlan.port: 1 to 65535, not {}",
                    keys::scalar_text(v)
                )
            })?;
    }
    if let Some(v) = m.get("vni") {
        s.vni = v
            .as_u64()
            .and_then(|p| u32::try_from(p).ok())
            .filter(|p| *p < (1 << 24))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "linkem.vxlan.vni: 0 to 16777215, not {}",
                    keys::scalar_text(v)
                )
            })?;
    }
    Ok(s)
}
