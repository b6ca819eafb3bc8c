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

    /// Records every one of `objects` (a batch's, before it runs).
    fn record_all(&mut self, objects: Vec<Object>) -> Result<()> {
        objects.into_iter().try_for_each(|o| self.record(o))
    }
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

/// Makes `name` (in `ns`) a port of bridge `bridge` (in the same namespace).
pub fn set_master(name: &str, ns: Option<&str>, bridge: &str) -> Result<()> {
    ip_in(ns, &["link", "set", "dev", name, "master", bridge])
}

/// `ip` commands run by one `ip [-n NS] -batch -` process: a lab's hundreds
/// of objects cost a process per namespace, not one per command. Each line
/// keeps what it concerns (a link, a node), so that the line `ip` stops at
/// (`-force` is off: the first failure ends the batch) is reported by the
/// object's name. Lines name every device with `dev`/`name`: a bare name
/// that is a keyword's prefix (`a`, `mtu`) would be read as the keyword.
#[derive(Debug, Default)]
pub struct Batch {
    /// `None`: this machine's namespace.
    pub ns: Option<String>,
    lines: Vec<(String, String)>,
}

impl Batch {
    pub fn new(ns: Option<&str>) -> Batch {
        Batch {
            ns: ns.map(str::to_string),
            lines: Vec::new(),
        }
    }

    /// Adds `line` (an `ip` command without `ip`), about `about` (e.g.
    /// `link r1:eth1--r2:eth1`).
    pub fn push(&mut self, about: &str, line: String) {
        self.lines.push((about.to_string(), line));
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Runs the batch; an error names the failing line's object, the
    /// command and what `ip` said.
    pub fn run(&self) -> Result<()> {
        if self.lines.is_empty() {
            return Ok(());
        }
        let mut cmd = std::process::Command::new("ip");
        if let Some(ns) = &self.ns {
            cmd.args(["-n", ns]);
        }
        let mut child = cmd
            .args(["-batch", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("cannot run `ip` (iproute2)")?;
        let mut input = String::new();
        for (_, line) in &self.lines {
            input.push_str(line);
            input.push('\n');
        }
        if let Some(mut stdin) = child.stdin.take() {
            // `ip` stops reading at a failing line: its exit says why.
            let _ = std::io::Write::write_all(&mut stdin, input.as_bytes());
        }
        let out = child
            .wait_with_output()
            .context("cannot wait for `ip -batch`")?;
        if out.status.success() {
            return Ok(());
        }
        let err = String::from_utf8_lossy(&out.stderr);
        Err(self.failure(&err))
    }

    /// The error of a failed batch: `ip` ends its stderr with `Command
    /// failed -:N` (N from 1).
    fn failure(&self, stderr: &str) -> anyhow::Error {
        let failed = stderr
            .lines()
            .filter_map(|l| l.trim().strip_prefix("Command failed -:"))
            .find_map(|n| n.trim().parse::<usize>().ok())
            .and_then(|n| self.lines.get(n.wrapping_sub(1)));
        let said: Vec<&str> = stderr
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("Command failed -:"))
            .collect();
        let ns = self
            .ns
            .as_deref()
            .map_or(String::new(), |n| format!("-n {n} "));
        match failed {
            Some((about, line)) => {
                anyhow::anyhow!("{about}: `ip {ns}{line}` failed: {}", said.join("; "))
            }
            None => anyhow::anyhow!(
                "`ip {ns}-batch -` ({} commands, from `{}`) failed: {}",
                self.lines.len(),
                self.lines[0].1,
                said.join("; ")
            ),
        }
    }
}

/// Runs `batches` at most `workers` at a time (each in its own
/// namespace, so none waits for another); the error of the first failing
/// one in their order.
pub fn run_all(batches: &[Batch], workers: usize) -> Result<()> {
    parallel(batches, workers, Batch::run)
        .into_iter()
        .collect::<Result<Vec<()>>>()
        .map(|_| ())
}

/// `f` of each item, at most `workers` at a time, results in the items' order.
pub fn parallel<T: Sync, R: Send>(
    items: &[T],
    workers: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<R>>> =
        items.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..workers.clamp(1, items.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let r = f(item);
                *results[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            });
        }
    });
    results
        .into_iter()
        .filter_map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect()
}

/// Brings up an end the emulator owns, silent: no addresses, no IPv6
/// link-local, no ARP of its own (as `linkem shell`'s middle ends).
pub fn set_up_silent(name: &str, ns: Option<&str>) -> Result<()> {
    ip_in(ns, &["link", "set", "dev", name, "addrgenmode", "none"])?;
    ip_in(ns, &["link", "set", "dev", name, "arp", "off", "up"])
}

/// Waits (up to 3 s) until every end is up with its carrier: frames sent
/// before the kernel turns a veth's transmit on are lost (a node's first
/// ARP request would wait a second for its retry). One `ip -o link show`
/// per namespace and look, the namespaces side by side.
pub fn wait_until_up(ends: &[(String, Option<String>)]) -> Result<()> {
    let until = Instant::now() + Duration::from_secs(3);
    let mut by_ns: std::collections::BTreeMap<Option<String>, Vec<String>> =
        std::collections::BTreeMap::new();
    for (dev, ns) in ends {
        by_ns.entry(ns.clone()).or_default().push(dev.clone());
    }
    let mut waiting: Vec<(Option<String>, Vec<String>)> = by_ns.into_iter().collect();
    loop {
        let looked = parallel(&waiting, 8, |(ns, devs)| not_up(ns.as_deref(), devs));
        let mut left = Vec::new();
        let mut first = None;
        for ((ns, _), devs) in waiting.iter().zip(looked) {
            if let Some(d) = devs.first() {
                first.get_or_insert_with(|| (ns.clone(), d.clone()));
                left.push((ns.clone(), devs.into_iter().map(|(d, _)| d).collect()));
            }
        }
        let Some((ns, (dev, line))) = first else {
            return Ok(());
        };
        if Instant::now() > until {
            bail!(
                "{dev} ({}) did not come up within 3 s: {}",
                where_(ns.as_deref()),
                line.trim()
            );
        }
        // Each look costs a process per namespace; the kernel's link watch
        // turns carriers on in bursts.
        std::thread::sleep(Duration::from_millis(50));
        waiting = left;
    }
}

/// Which of `devs` (in `ns`) are not up with a carrier yet, each with what
/// `ip -o link show` says of it (nothing when it is missing).
fn not_up(ns: Option<&str>, devs: &[String]) -> Vec<(String, String)> {
    let mut args = Vec::new();
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    args.extend(["-o", "link", "show"]);
    let text = netns::ip(&args)
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    devs.iter()
        .filter_map(|dev| {
            // `N: DEV: <...>` or `N: DEV@PEER: <...>`.
            let line = text.lines().find(|l| {
                l.split(": ")
                    .nth(1)
                    .is_some_and(|n| n.split('@').next() == Some(dev.as_str()))
            });
            let up = line.is_some_and(|l| {
                l.contains("state UP") && !l.contains("NO-CARRIER") || l.contains("state UNKNOWN")
            });
            (!up).then(|| (dev.clone(), line.unwrap_or("missing").to_string()))
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_batch_is_named_by_the_object_of_its_failing_line() {
        let mut b = Batch::new(Some("lk-t-r1"));
        b.push("namespace lk-t-r1", "link set dev lo up".into());
        b.push("link r1:eth1--r2:eth1", "link set dev eth1 up".into());
        let e = b.failure("Cannot find device \"eth1\"\nCommand failed -:2\n");
        assert_eq!(
            e.to_string(),
            "link r1:eth1--r2:eth1: `ip -n lk-t-r1 link set dev eth1 up` failed: \
             Cannot find device \"eth1\""
        );
        let e = b.failure("ip: out of memory\n");
        assert!(e.to_string().contains("2 commands"), "{e}");
    }

    #[test]
    fn parallel_keeps_the_order_of_its_items() {
        let items: Vec<u32> = (0..50).collect();
        assert_eq!(
            parallel(&items, 4, |i| i * 2),
            (0..50).map(|i| i * 2).collect::<Vec<_>>()
        );
        assert!(parallel(&Vec::<u32>::new(), 4, |i| *i).is_empty());
    }
}
