//! Makes a machine's plan of a lab (`super::plan`) with few processes: one
//! `ip -batch` in this machine's namespace makes every namespace, bridge
//! there and veth (each end straight in its namespace), then one `ip -n NS
//! -batch` per namespace, side by side, sets its loopback, bridges and ends
//! up ([`net::Batch`]); tunnels follow one by one. Every object of a batch
//! is in the lab's state file before the batch runs, so a SIGKILL at any
//! point leaves nothing `down` cannot find. Then the nodes' `exec`
//! commands, the nodes side by side, each node's in order.

use super::net::{self, Batch, Object, Record};
use super::plan::{MachinePlan, VethEnd};
use super::state::Recorder;
use anyhow::{bail, Result};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

/// How many `ip` or `exec` processes run at once: enough to hide their
/// start-up, few enough not to swamp a small machine.
const WORKERS: usize = 8;

/// Fails with [`crate::Interrupted`] once a signal asked to stop.
fn stopped(stop: &AtomicBool) -> Result<()> {
    if stop.load(Ordering::Relaxed) {
        bail!(crate::Interrupted {
            signal: libc::SIGTERM
        });
    }
    Ok(())
}

/// Makes the plan's objects: namespaces (the lab's first), bridges, veths
/// (addresses on the node ends), tunnels; returns every end (name,
/// namespace), for [`net::wait_until_up`].
pub fn build(
    plan: &MachinePlan,
    rec: &mut Recorder,
    stop: &AtomicBool,
) -> Result<Vec<(String, Option<String>)>> {
    stopped(stop)?;
    let mut objects = Vec::new();
    let mut host = Batch::new(None);
    // Per namespace, its lines; this machine's (`None`) too, for what is
    // set there once made.
    let mut inside: BTreeMap<Option<String>, Batch> = BTreeMap::new();
    let namespaces =
        std::iter::once(&plan.emulator_namespace).chain(plan.namespaces.iter().map(|n| &n.name));
    for ns in namespaces {
        objects.push(Object::Netns { name: ns.clone() });
        let about = format!("namespace {ns}");
        host.push(&about, format!("netns add {ns}"));
        let batch = inside
            .entry(Some(ns.clone()))
            .or_insert_with(|| Batch::new(Some(ns)));
        batch.push(&about, "link set dev lo up".into());
    }
    for b in &plan.bridges {
        objects.push(Object::Link {
            name: b.name.clone(),
            netns: b.namespace.clone(),
            what: "bridge".into(),
        });
        let about = format!("bridge {} (node {})", b.name, b.owner);
        let batch = match &b.namespace {
            None => &mut host,
            Some(ns) => inside
                .entry(Some(ns.clone()))
                .or_insert_with(|| Batch::new(Some(ns))),
        };
        batch.push(&about, format!("link add name {} type bridge", b.name));
        batch.push(&about, format!("link set dev {} up", b.name));
    }
    let mut ends = Vec::new();
    for v in &plan.veths {
        let (n, e) = (&v.node_end, &v.emulator_end);
        objects.push(Object::Link {
            name: n.name.clone(),
            netns: n.namespace.clone(),
            what: "veth".into(),
        });
        let about = format!("link {}", v.link);
        host.push(
            &about,
            format!(
                "link add name {}{} type veth peer name {}{}",
                n.name,
                netns_words(n),
                e.name,
                netns_words(e)
            ),
        );
        for (end, emulator) in [(n, false), (e, true)] {
            let batch = inside
                .entry(end.namespace.clone())
                .or_insert_with(|| Batch::new(end.namespace.as_deref()));
            end_lines(batch, &about, end, v.mtu, emulator);
            ends.push((end.name.clone(), end.namespace.clone()));
        }
    }
    rec.record_all(objects)?;
    host.run()?;
    stopped(stop)?;
    let batches: Vec<Batch> = inside.into_values().filter(|b| !b.is_empty()).collect();
    net::run_all(&batches, WORKERS)?;
    for t in &plan.tunnels {
        stopped(stop)?;
        let ns = Some(t.namespace.as_str());
        // Made where the underlay is (here), then moved into the lab's.
        rec.record(Object::Link {
            name: t.device.clone(),
            netns: None,
            what: "vxlan".into(),
        })?;
        super::vxlan::create(t, None)?;
        if !t.emulated_here {
            if let Some(b) = plan.bridges.iter().find(|b| b.owner == t.link) {
                net::set_master(&t.device, ns, &b.name)?;
            }
        }
        net::set_up_silent(&t.device, ns)?;
        ends.push((t.device.clone(), Some(t.namespace.clone())));
    }
    Ok(ends)
}

/// ` netns NS` when the end is made in a namespace.
fn netns_words(end: &VethEnd) -> String {
    end.namespace
        .as_deref()
        .map_or(String::new(), |ns| format!(" netns {ns}"))
}

/// An end's MTU, MAC, bridge, then up, then its addresses (an emulator's
/// end silent: no addresses, no IPv6 link-local, no ARP of its own).
fn end_lines(batch: &mut Batch, about: &str, end: &VethEnd, mtu: Option<u32>, emulator: bool) {
    let dev = &end.name;
    if let Some(mtu) = mtu {
        batch.push(about, format!("link set dev {dev} mtu {mtu}"));
    }
    if let Some(mac) = &end.mac {
        batch.push(about, format!("link set dev {dev} address {mac}"));
    }
    if let Some(bridge) = &end.master {
        batch.push(about, format!("link set dev {dev} master {bridge}"));
    }
    if emulator {
        batch.push(about, format!("link set dev {dev} addrgenmode none"));
        batch.push(about, format!("link set dev {dev} arp off up"));
    } else {
        batch.push(about, format!("link set dev {dev} up"));
    }
    for addr in &end.addresses {
        batch.push(about, format!("addr add {addr} dev {dev}"));
    }
}

/// Runs every node's `exec` commands in its namespace (`sh -c`, with the
/// node's `env`): each node's in order, the nodes side by side (no node
/// reaches another before the emulator runs, so none waits for another's).
/// A failure stops the lab, naming the node and the command (the first
/// node in the file's order that failed).
pub fn run_exec(plan: &MachinePlan, stop: &AtomicBool) -> Result<()> {
    let results = net::parallel(&plan.execs, WORKERS, |e| -> Result<()> {
        for cmd in &e.commands {
            stopped(stop)?;
            let mut c = match &e.namespace {
                Some(ns) => linkem_io::netns::command_in(ns, &["sh", "-c", cmd]),
                None => {
                    let mut c = std::process::Command::new("sh");
                    c.args(["-c", cmd]);
                    c
                }
            };
            let out = c
                .envs(&e.env)
                .stdin(std::process::Stdio::null())
                .output()
                .map_err(|err| {
                    anyhow::anyhow!("node {}: cannot run exec `{cmd}`: {err}", e.node)
                })?;
            if !out.status.success() {
                bail!(
                    "node {}: exec `{cmd}` failed ({}): {}",
                    e.node,
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        Ok(())
    });
    results.into_iter().collect::<Result<Vec<()>>>().map(|_| ())
}
