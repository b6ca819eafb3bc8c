//! A link's VXLAN tunnel between two machines ([`TunnelPlan`]): its device is
//! made in the namespace that holds the underlay address (the host's, or a
//! test's "machine"), so that its UDP socket lives there, then moved into the
//! lab's emulator namespace with the MTU of the link's node ends, and set up.
//! Learning is off: the one remote is the only destination.

use super::plan::TunnelPlan;
use anyhow::{Context, Result};
use linkem_io::netns;

/// `ip link add` arguments of the tunnel's device (after `-n NS` if any).
pub fn add_args(t: &TunnelPlan) -> Vec<String> {
    [
        "link",
        "add",
        &t.device,
        "type",
        "vxlan",
        "id",
        &t.vni.to_string(),
        "local",
        &t.local.to_string(),
        "remote",
        &t.remote.to_string(),
        "dstport",
        &t.port.to_string(),
        "nolearning",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// `ip ARGS` in namespace `ns` (None: this process's).
fn ip_in(ns: Option<&str>, args: &[&str]) -> Result<()> {
    let mut all: Vec<&str> = Vec::new();
    if let Some(ns) = ns {
        all.extend(["-n", ns]);
    }
    all.extend_from_slice(args);
    netns::ip(&all)?;
    Ok(())
}

/// Makes the tunnel's device in `underlay_ns` (None: this process's namespace,
/// the host's), moves it into `t.namespace`, sets its MTU and brings it up.
/// On failure the device is removed again.
pub fn create(t: &TunnelPlan, underlay_ns: Option<&str>) -> Result<()> {
    let what = || format!("link {}: VXLAN device {} (VNI {})", t.link, t.device, t.vni);
    let args = add_args(t);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ip_in(underlay_ns, &args).with_context(what)?;
    let moved = ip_in(
        underlay_ns,
        &["link", "set", &t.device, "netns", &t.namespace],
    );
    if let Err(e) = moved {
        let _ = ip_in(underlay_ns, &["link", "del", &t.device]);
        return Err(e).with_context(what);
    }
    let mtu = t.mtu.to_string();
    let set = ip_in(
        Some(&t.namespace),
        &["link", "set", &t.device, "mtu", &mtu, "up"],
    );
    if let Err(e) = set {
        let _ = delete(t);
        return Err(e).with_context(what);
    }
    Ok(())
}

/// Removes the tunnel's device (gone already is not an error).
pub fn delete(t: &TunnelPlan) -> Result<()> {
    let shown = netns::ip(&["-n", &t.namespace, "link", "show", "dev", &t.device]);
    if shown.is_err() {
        return Ok(());
    }
    ip_in(Some(&t.namespace), &["link", "del", &t.device])
        .with_context(|| format!("link {}: removing VXLAN device {}", t.link, t.device))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_is_made_with_the_plan_s_numbers() {
        let t = TunnelPlan {
            link: "a:e1--b:e1".into(),
            device: "l3vx".into(),
            namespace: "lk-x@m1".into(),
            vni: 1003,
            local: "10.0.0.1".parse().unwrap(),
            remote: "10.0.0.2".parse().unwrap(),
            port: 4789,
            mtu: 1450,
            overhead_bytes: 50,
            emulated_here: true,
        };
        assert_eq!(
            add_args(&t).join(" "),
            "link add l3vx type vxlan id 1003 local 10.0.0.1 remote 10.0.0.2 dstport 4789 nolearning"
        );
    }
}
