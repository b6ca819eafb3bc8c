//! The kernel objects of a lab: named network namespaces, veth pairs made
//! with each end directly in its namespace (no name ever appears in this
//! machine's namespace on the way), Linux bridges, all
//! through iproute2's `ip` ([`linkem_io::netns::ip`]). Each is recorded in
//! the lab's state ([`Record::record`]) before it is made, so that a
//! SIGKILL at any point leaves nothing the next `up` or `down` cannot find.
//!
//! A `None` namespace is this machine's own (the one `linkem lab` runs in).

use anyhow::{bail, Context, Result};
use linkem_io::netns;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Something a lab made, and how it goes away.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Object {
    /// A named network namespace (`ip netns`); its processes are killed
    /// and its interfaces go with it.
    Netns { name: String },
    /// An interface (veth, bridge, VXLAN) in `netns`, or in this machine's
    /// namespace when `None`; `what` names its kind in messages.
    Link {
        name: String,
        netns: Option<String>,
        what: String,
    },
    /// A file (a control socket).
    File { path: PathBuf },
}

/// What keeps each object before it is made (the lab's state file).
pub trait Record {
    fn record(&mut self, object: Object) -> Result<()>;
}

/// `ip [-n NS] ARGS`; an error names the command and what `ip` said.
pub fn ip_in(ns: Option<&str>, args: &[&str]) -> Result<()> {
    let mut all: Vec<&str> = Vec::with_capacity(args.len() + 2);
    if let Some(ns) = ns {
        all.extend(["-n", ns]);
    }
    all.extend_from_slice(args);
    netns::ip(&all)?;
    Ok(())
}

/// Makes the named namespace `name` with its loopback up.
pub fn add_netns(rec: &mut impl Record, name: &str) -> Result<()> {
    rec.record(Object::Netns { name: name.into() })?;
    ip_in(None, &["netns", "add", name])
        .with_context(|| format!("cannot make network namespace '{name}'"))?;
    ip_in(Some(name), &["link", "set", "lo", "up"])
}

/// Makes a veth pair whose end `a.0` is in namespace `a.1` and end `b.0` in
/// `b.1`, both down.
pub fn add_veth(
    rec: &mut impl Record,
    a: (&str, Option<&str>),
    b: (&str, Option<&str>),
) -> Result<()> {
    rec.record(Object::Link {
        name: a.0.into(),
        netns: a.1.map(str::to_string),
        what: "veth".into(),
    })?;
    let mut args = vec!["link", "add", a.0];
    if let Some(ns) = a.1 {
        args.extend(["netns", ns]);
    }
    args.extend(["type", "veth", "peer", "name", b.0]);
    if let Some(ns) = b.1 {
        args.extend(["netns", ns]);
    }
    ip_in(None, &args).with_context(|| {
        format!(
            "cannot make the veth pair {} ({}) - {} ({})",
            a.0,
            where_(a.1),
            b.0,
            where_(b.1)
        )
    })
}

/// Makes Linux bridge `name` in `ns`, up.
pub fn add_bridge(rec: &mut impl Record, name: &str, ns: Option<&str>) -> Result<()> {
    rec.record(Object::Link {
        name: name.into(),
        netns: ns.map(str::to_string),
        what: "bridge".into(),
    })?;
    ip_in(ns, &["link", "add", name, "type", "bridge"])
        .with_context(|| format!("cannot make bridge '{name}' ({})", where_(ns)))?;
    ip_in(ns, &["link", "set", name, "up"])
}

/// Makes `name` (in `ns`) a port of bridge `bridge` (in the same namespace).
pub fn set_master(name: &str, ns: Option<&str>, bridge: &str) -> Result<()> {
    ip_in(ns, &["link", "set", name, "master", bridge])
}

/// Brings `name` up.
pub fn set_up(name: &str, ns: Option<&str>) -> Result<()> {
    ip_in(ns, &["link", "set", name, "up"])
}

/// Brings up an end the emulator owns, silent: no addresses, no IPv6
/// link-local, no ARP of its own (as `linkem shell`'s middle ends).
pub fn set_up_silent(name: &str, ns: Option<&str>) -> Result<()> {
    ip_in(ns, &["link", "set", name, "addrgenmode", "none"])?;
    ip_in(ns, &["link", "set", name, "arp", "off", "up"])
}

/// Waits (up to 3 s) until every end is up with its carrier: frames sent
/// before the kernel turns a veth's transmit on are lost (a node's first
/// ARP request would wait a second for its retry).
pub fn wait_until_up(ends: &[(String, Option<String>)]) -> Result<()> {
    let until = Instant::now() + Duration::from_secs(3);
    for (dev, ns) in ends {
        loop {
            let mut args = Vec::new();
            if let Some(ns) = ns {
                args.extend(["-n", ns.as_str()]);
            }
            args.extend(["-o", "link", "show", "dev", dev.as_str()]);
            let line = netns::ip(&args)
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            if line.contains("state UP") && !line.contains("NO-CARRIER")
                || line.contains("state UNKNOWN")
            {
                break;
            }
            if Instant::now() > until {
                bail!(
                    "{dev} ({}) did not come up within 3 s: {}",
                    where_(ns.as_deref()),
                    line.trim()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Ok(())
}

/// Removes `objects`, newest first: each namespace with its processes and
/// interfaces, each interface, each file. What is gone already is no error;
/// anything else is said and the rest removed.
pub fn remove_all(objects: &[Object]) {
    for object in objects.iter().rev() {
        match object {
            Object::Netns { name } => netns::delete_namespace(name),
            Object::Link { name, netns, what } => {
                if netns.as_deref().is_some_and(|ns| !namespace_exists(ns)) {
                    continue;
                }
                let mut args = Vec::new();
                if let Some(ns) = netns {
                    args.extend(["-n", ns.as_str()]);
                }
                args.extend(["link", "del", name.as_str()]);
                if let Err(e) = netns::ip(&args) {
                    let msg = e.to_string();
                    if !msg.contains("Cannot find device") && !msg.contains("does not exist") {
                        eprintln!("linkem: lab: cannot remove {what} {name}: {msg}");
                    }
                }
            }
            Object::File { path } => {
                if let Err(e) = std::fs::remove_file(path) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        eprintln!("linkem: lab: cannot remove {}: {e}", path.display());
                    }
                }
            }
        }
    }
}

/// Whether the named namespace exists.
pub fn namespace_exists(name: &str) -> bool {
    std::path::Path::new("/run/netns").join(name).exists()
}

/// How a message names namespace `ns`.
fn where_(ns: Option<&str>) -> String {
    match ns {
        Some(ns) => format!("namespace {ns}"),
        None => "this machine's namespace".into(),
    }
}
