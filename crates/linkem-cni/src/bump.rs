//! The bump: the container's interface goes through linkem without the
//! container seeing a change.
//!
//! In the container's network namespace, the interface the previous plugin
//! made (`CNI_IFNAME`, say `eth0`, a veth to the host's bridge) is renamed
//! `lkc-N` and stripped of its addresses; a new veth pair `eth0` <-> `lke-N`
//! takes its name, MAC address, MTU, addresses and routes; `linkem bridge
//! lke-N lkc-N` joins the two. Frames the container sends leave `eth0`, arrive
//! on `lke-N`, cross the emulated link and leave `lkc-N` toward the network.
//!
//! `lkc-N` and `lke-N` must not answer for the container's addresses, which
//! share their namespace: they get no address, no IPv6 (no router
//! solicitation, DAD or MLD), no ARP (`arp off`: a neighbour must never learn
//! one of them for the container's address) and `lkc-N` a new MAC address, so
//! that frames for the container reach the kernel on `lkc-N` as "other host"
//! (dropped by IP) and only linkem carries them on. GRO off on both, as on
//! every interface linkem owns (the frames it reads are the wire's).
//!
//! Every command runs as `nsenter --net=NETNS ip ...`: only the network
//! namespace changes, so `/run/linkem` stays the host's.

use crate::error::{CniError, COMMAND_FAILED, LINK_MISSING};
use serde_json::Value;
use std::process::Command;

/// The names of one link's interfaces inside the container's namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ifaces {
    /// The container's interface (`CNI_IFNAME`), after the bump linkem's veth.
    pub container: String,
    /// The previous plugin's interface, renamed aside (side b: the network).
    pub aside: String,
    /// The peer of the new container interface (side a: the container).
    pub inner: String,
}

impl Ifaces {
    /// `lkc-IFNAME` and `lke-IFNAME`, or with 8 hex digits of a hash of
    /// IFNAME in its place when IFNAME is too long for the kernel's 15 bytes.
    pub fn new(ifname: &str) -> Ifaces {
        let tail = if ifname.len() <= 11 {
            ifname.to_string()
        } else {
            format!("{:08x}", crate::fnv1a(ifname.as_bytes()) as u32)
        };
        Ifaces {
            container: ifname.to_string(),
            aside: format!("lkc-{tail}"),
            inner: format!("lke-{tail}"),
        }
    }
}

/// Runs `cmd args` in the namespace at `netns`; its stdout, or an error
/// naming the command and what it said.
fn run_in(netns: &str, cmd: &str, args: &[&str]) -> Result<String, CniError> {
    let out = Command::new("nsenter")
        .arg(format!("--net={netns}"))
        .arg(cmd)
        .args(args)
        .output()
        .map_err(|e| {
            CniError::new(
                COMMAND_FAILED,
                format!("cannot run nsenter ({e}): install util-linux"),
            )
        })?;
    if !out.status.success() {
        return Err(CniError::new(
            COMMAND_FAILED,
            format!(
                "'{cmd} {}' in {netns} failed ({})",
                args.join(" "),
                out.status
            ),
        )
        .with_details(String::from_utf8_lossy(&out.stderr).trim().to_string()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn ip(netns: &str, args: &[&str]) -> Result<String, CniError> {
    run_in(netns, "ip", args)
}

/// Whether interface `dev` exists in the namespace.
pub fn exists(netns: &str, dev: &str) -> bool {
    ip(netns, &["link", "show", "dev", dev]).is_ok()
}

/// One interface's link-layer facts.
struct LinkInfo {
    mac: String,
    mtu: u64,
}

fn link_info(netns: &str, dev: &str) -> Result<LinkInfo, CniError> {
    let text = ip(netns, &["-j", "link", "show", "dev", dev])?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| CniError::new(COMMAND_FAILED, format!("ip -j link show {dev}: {e}")))?;
    let l = &v[0];
    match (l["address"].as_str(), l["mtu"].as_u64()) {
        (Some(mac), Some(mtu)) => Ok(LinkInfo {
            mac: mac.to_string(),
            mtu,
        }),
        _ => Err(CniError::new(
            COMMAND_FAILED,
            format!("ip -j link show {dev}: no address or mtu in {text}"),
        )),
    }
}

/// An interface's addresses and routes, as `ip` arguments without the device.
#[derive(Debug, Default)]
pub struct L3 {
    addrs: Vec<Vec<String>>,
    routes: Vec<Vec<String>>,
}

/// The addresses (all but IPv6 link-local, which the kernel makes) and the
/// main table's routes (all but the kernel's own, which come with the
/// addresses) of `dev`.
pub fn capture(netns: &str, dev: &str) -> Result<L3, CniError> {
    let mut l3 = L3::default();
    let text = ip(netns, &["-j", "addr", "show", "dev", dev])?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| CniError::new(COMMAND_FAILED, format!("ip -j addr show {dev}: {e}")))?;
    for a in v[0]["addr_info"].as_array().into_iter().flatten() {
        let (Some(family), Some(local), Some(len)) = (
            a["family"].as_str(),
            a["local"].as_str(),
            a["prefixlen"].as_u64(),
        ) else {
            continue;
        };
        let mut args = vec![];
        match family {
            "inet" => {
                args.extend([
                    "-4".into(),
                    "addr".into(),
                    "add".into(),
                    format!("{local}/{len}"),
                ]);
                if let Some(b) = a["broadcast"].as_str() {
                    args.extend(["broadcast".into(), b.to_string()]);
                }
            }
            "inet6" if a["scope"].as_str() != Some("link") => {
                // Already checked for duplicates when the previous plugin set it.
                args.extend([
                    "-6".into(),
                    "addr".into(),
                    "add".into(),
                    format!("{local}/{len}"),
                    "nodad".into(),
                ]);
            }
            _ => continue,
        }
        l3.addrs.push(args);
    }
    for family in ["-4", "-6"] {
        let text = ip(
            netns,
            &["-j", family, "route", "show", "table", "main", "dev", dev],
        )?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| CniError::new(COMMAND_FAILED, format!("ip -j route show {dev}: {e}")))?;
        for r in v.as_array().into_iter().flatten() {
            let Some(dst) = r["dst"].as_str() else {
                continue;
            };
            if r["protocol"].as_str() == Some("kernel")
                || dst.starts_with("fe80:")
                || dst.starts_with("ff00:")
            {
                continue;
            }
            let mut args: Vec<String> =
                vec![family.into(), "route".into(), "add".into(), dst.into()];
            for (key, word) in [
                ("gateway", "via"),
                ("protocol", "proto"),
                ("scope", "scope"),
                ("prefsrc", "src"),
            ] {
                if let Some(s) = r[key].as_str() {
                    args.extend([word.to_string(), s.to_string()]);
                }
            }
            if let Some(m) = r["metric"].as_u64() {
                args.extend(["metric".into(), m.to_string()]);
            }
            if r["flags"]
                .as_array()
                .is_some_and(|f| f.iter().any(|x| x == "onlink"))
            {
                args.push("onlink".into());
            }
            l3.routes.push(args);
        }
    }
    Ok(l3)
}

/// Puts `l3` on `dev` (up). A route through a gateway that another of the
/// routes makes reachable may fail before that one is in: up to one retry
/// round per route.
pub fn apply(netns: &str, dev: &str, l3: &L3) -> Result<(), CniError> {
    for a in &l3.addrs {
        let mut args: Vec<&str> = a.iter().map(String::as_str).collect();
        args.extend(["dev", dev]);
        ip(netns, &args)?;
    }
    let mut pending: Vec<&Vec<String>> = l3.routes.iter().collect();
    for round in 0..=l3.routes.len() {
        let mut failed = vec![];
        let mut last_err = None;
        for r in pending {
            let mut args: Vec<&str> = r.iter().map(String::as_str).collect();
            args.extend(["dev", dev]);
            if let Err(e) = ip(netns, &args) {
                failed.push(r);
                last_err = Some(e);
            }
        }
        if failed.is_empty() {
            return Ok(());
        }
        if round == l3.routes.len() {
            return Err(last_err.expect("a failure"));
        }
        pending = failed;
    }
    Ok(())
}

/// IPv6 on or off on `dev` (nothing to do on a kernel without IPv6).
fn set_ipv6(netns: &str, dev: &str, on: bool) -> Result<(), CniError> {
    if !std::path::Path::new("/proc/sys/net/ipv6").exists() {
        return Ok(());
    }
    // The slash form: an interface name may hold a dot.
    let key = format!(
        "net/ipv6/conf/{dev}/disable_ipv6={}",
        if on { 0 } else { 1 }
    );
    run_in(netns, "sysctl", &["-q", "-w", &key]).map(|_| ())
}

/// A locally administered unicast MAC address no one else has.
fn fresh_mac() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    let b = h.finish().to_be_bytes();
    format!(
        "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[0], b[1], b[2], b[3], b[4]
    )
}

/// ADD: the bump; the container interface's MAC address (DEL gives it back).
/// On failure whatever was done is undone.
pub fn add(netns: &str, i: &Ifaces) -> Result<String, CniError> {
    if !exists(netns, &i.container) {
        return Err(CniError::new(
            LINK_MISSING,
            format!(
                "interface {} is not in {netns}: chain linkem-cni after the plugin that makes it",
                i.container
            ),
        ));
    }
    for dev in [&i.aside, &i.inner] {
        if exists(netns, dev) {
            return Err(CniError::new(
                COMMAND_FAILED,
                format!("{dev} already exists in {netns}: this interface has a linkem link (DEL it first)"),
            ));
        }
    }
    let l3 = capture(netns, &i.container)?;
    let link = link_info(netns, &i.container)?;
    let done = add_steps(netns, i, &l3, &link);
    if done.is_err() {
        let _ = del(netns, i, Some(&link.mac));
        // The addresses and routes, as they were.
        let _ = apply(netns, &i.container, &l3);
    }
    done.map(|_| link.mac)
}

fn add_steps(netns: &str, i: &Ifaces, l3: &L3, link: &LinkInfo) -> Result<(), CniError> {
    let mtu = link.mtu.to_string();
    ip(netns, &["link", "set", "dev", &i.container, "down"])?;
    ip(
        netns,
        &["link", "set", "dev", &i.container, "name", &i.aside],
    )?;
    ip(netns, &["addr", "flush", "dev", &i.aside])?;
    ip(
        netns,
        &[
            "link",
            "set",
            "dev",
            &i.aside,
            "address",
            &fresh_mac(),
            "arp",
            "off",
        ],
    )?;
    ip(
        netns,
        &[
            "link",
            "add",
            &i.container,
            "mtu",
            &mtu,
            "address",
            &link.mac,
            "type",
            "veth",
            "peer",
            "name",
            &i.inner,
            "mtu",
            &mtu,
        ],
    )?;
    ip(netns, &["link", "set", "dev", &i.inner, "arp", "off"])?;
    for dev in [&i.aside, &i.inner] {
        set_ipv6(netns, dev, false)?;
        // Best effort: a veth without XDP has GRO off already, and ethtool may be absent.
        let _ = run_in(netns, "ethtool", &["-K", dev, "gro", "off"]);
    }
    for dev in [&i.aside, &i.inner, &i.container] {
        ip(netns, &["link", "set", "dev", dev, "up"])?;
    }
    apply(netns, &i.container, l3)
}

/// DEL: the container's interface back as the previous plugin made it (name,
/// MAC address, addresses, routes), so that its own DEL finds it. Nothing to
/// undo is no error.
/// `mac`: the address the interface had before ADD (else the bumped
/// interface's, when it is still there).
pub fn del(netns: &str, i: &Ifaces, mac: Option<&str>) -> Result<(), CniError> {
    if !exists(netns, &i.aside) {
        // Not bumped, or undone already; a half-made pair goes.
        if exists(netns, &i.inner) {
            ip(netns, &["link", "del", "dev", &i.inner])?;
        }
        return Ok(());
    }
    let ours = exists(netns, &i.inner);
    let l3 = if ours && exists(netns, &i.container) {
        capture(netns, &i.container)?
    } else {
        L3::default()
    };
    let mac = match mac {
        Some(m) => Some(m.to_string()),
        None if ours && exists(netns, &i.container) => Some(link_info(netns, &i.container)?.mac),
        None => None,
    };
    if ours {
        // Deleting one end of a veth deletes the other (the container's interface).
        ip(netns, &["link", "del", "dev", &i.inner])?;
    }
    if exists(netns, &i.container) {
        return Err(CniError::new(
            COMMAND_FAILED,
            format!(
                "{} in {netns} is not linkem's: cannot give its name back to {}",
                i.container, i.aside
            ),
        ));
    }
    ip(netns, &["link", "set", "dev", &i.aside, "down"])?;
    ip(
        netns,
        &["link", "set", "dev", &i.aside, "name", &i.container],
    )?;
    if let Some(mac) = &mac {
        ip(netns, &["link", "set", "dev", &i.container, "address", mac])?;
    }
    ip(netns, &["link", "set", "dev", &i.container, "arp", "on"])?;
    set_ipv6(netns, &i.container, true)?;
    ip(netns, &["link", "set", "dev", &i.container, "up"])?;
    apply(netns, &i.container, &l3)
}

/// CHECK: the three interfaces are there.
pub fn check(netns: &str, i: &Ifaces) -> Result<(), CniError> {
    for dev in [&i.container, &i.aside, &i.inner] {
        if !exists(netns, dev) {
            return Err(CniError::new(
                LINK_MISSING,
                format!(
                    "the linkem link of {} is broken: interface {dev} is missing in {netns}",
                    i.container
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_the_kernels_15_bytes() {
        let i = Ifaces::new("eth0");
        assert_eq!(
            (i.aside.as_str(), i.inner.as_str()),
            ("lkc-eth0", "lke-eth0")
        );
        let long = Ifaces::new("a-very-long-if1");
        assert!(long.aside.len() <= 15 && long.inner.len() <= 15, "{long:?}");
        assert_ne!(Ifaces::new("a-very-long-if2").aside, long.aside);
    }

    #[test]
    fn fresh_macs_are_local_unicast() {
        let m = fresh_mac();
        assert!(m.starts_with("02:") && m.len() == 17, "{m}");
    }
}
