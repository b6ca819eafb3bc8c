//! A node of ipfw rules and Dummynet pipes as ipfw and dnctl show it: the
//! pipes with their flows (`ipfw pipe show`), the rules with their counters
//! (`ipfw -a list`) and the schedulers ([`super::sched`]), as text and as
//! JSON. `--stats` prints them after `linkem replay --rules` and `linkem
//! bridge --rules`; `linkem ctl` answers `pipe N show` and `show` with them.

use super::sched;
use linkem_core::node::Node;
use linkem_core::pipe::{FlowMask, Instance, Pipe};
use linkem_core::units::{format_rate_bps, format_time_ns};
use serde_json::json;
use std::net::{Ipv4Addr, Ipv6Addr};

/// The node's pipes with their flows (`ipfw pipe show`), rules with their
/// counters (`ipfw -a list`) and schedulers (`ipfw sched show`), as
/// `--stats` prints them after a replay or a bridge run.
pub fn node_text(node: &Node) -> String {
    node_text_listing(node, usize::MAX)
}

/// [`node_text`] listing at most `most` instances of each pipe and scheduler
/// (see [`node_json_listing`]).
pub fn node_text_listing(node: &Node, most: usize) -> String {
    let mut s = String::new();
    use std::fmt::Write as _;
    let _ = writeln!(s, "\n# ipfw pipe show");
    s.push_str(&pipes_text_listing(node, None, most));
    let _ = writeln!(s, "\n# ipfw -a list");
    s.push_str(&rule_counters_text(node));
    s.push_str(&sched::stats_text_listing(node, most));
    s
}

/// The rules with their counters, as `ipfw -a list` prints them.
pub fn rule_counters_text(node: &Node) -> String {
    let mut s = String::new();
    use std::fmt::Write as _;
    let c = node.classifier();
    for (r, (pk, by)) in c.rules().iter().zip(&c.counters) {
        let text = r.text.strip_prefix("add").unwrap_or(&r.text).trim_start();
        let text = text
            .strip_prefix(&r.number.to_string())
            .unwrap_or(text)
            .trim_start();
        let _ = writeln!(s, "{:05} {pk:>10} {by:>12} {text}", r.number);
    }
    let _ = writeln!(s, "unmatched {:>10} (passed unimpaired)", node.unmatched);
    s
}

/// Pipe `idx`'s instances expired and packets refused for want of a new
/// one (`flow-limit`): a scheduled pipe's instances are its scheduler's, so
/// are their counts.
fn expired_and_refused(node: &Node, idx: usize) -> (u64, u64) {
    match node.sched.links.get(idx) {
        Some(Some(sp)) => (sp.expired, sp.flow_limit_drops),
        _ => {
            let p = &node.pipes()[idx];
            (p.expired, p.flow_limit_drops)
        }
    }
}

/// The pipes (or pipe `only`) with their flows, as `ipfw pipe show` prints them.
pub fn pipes_text(node: &Node, only: Option<u32>) -> String {
    pipes_text_listing(node, only, usize::MAX)
}

/// [`pipes_text`] with at most `most` flows of each pipe, and a line saying
/// how many more there are.
fn pipes_text_listing(node: &Node, only: Option<u32>, most: usize) -> String {
    let mut s = String::new();
    use std::fmt::Write as _;
    for (idx, p) in node
        .pipes()
        .iter()
        .enumerate()
        .filter(|(_, p)| only.is_none_or(|n| n == p.def.number))
    {
        let d = &p.def;
        let _ = writeln!(
            s,
            "{:05}: {} {:>4} burst {}",
            d.number,
            bw_text(p),
            format_time_ns(d.link.delay_ns),
            d.burst_bytes
        );
        let plr = match d.link.loss {
            linkem_core::LossConfig::Random { p, .. } if p > 0.0 => format!(" plr {p:.6}"),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "q{:05} {}{} {} flows ({} buckets) droptail  [{}]",
            d.number,
            queue_text(p),
            plr,
            p.instances().count(),
            d.buckets,
            d.words
        );
        if let Some(pf) = &d.profile {
            let _ = writeln!(
                s,
                "\t profile: name \"{}\" loss {:.6} samples {}",
                pf.name,
                pf.loss_level,
                pf.table_ns.len()
            );
        }
        if let Some(m) = &d.mask {
            let _ = writeln!(s, "    {}", mask_text(m));
            let (expired, refused) = expired_and_refused(node, idx);
            let _ = writeln!(s, "    expired {expired} flow-limit drops {refused}");
        }
        let _ = writeln!(
            s,
            "BKT Prot ___Source IP/port____ ____Dest. IP/port____ Tot_pkt/bytes Pkt Drp"
        );
        for i in p.instances().take(most) {
            let _ = writeln!(s, "{}", flow_line(i));
        }
        let more = p.active_instances().saturating_sub(most);
        if more > 0 {
            let _ = writeln!(s, "    ({more} more flows not listed)");
        }
    }
    s
}

fn proto_name(p: u8) -> String {
    match p {
        0 => "ip".into(),
        1 => "icmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        58 => "ipv6-icmp".into(),
        132 => "sctp".into(),
        _ => p.to_string(),
    }
}

/// An address of a flow key (IPv4 in the low 32 bits unless `version` is 6).
pub fn addr(version: u8, a: u128) -> String {
    match version {
        6 => Ipv6Addr::from(a).to_string(),
        _ => Ipv4Addr::from(a as u32).to_string(),
    }
}

fn bw_text(p: &Pipe) -> String {
    match p.def.link.rate_bps {
        None => "unlimited     ".into(),
        Some(b) if b >= 1_000_000 => format!("{:7.3} Mbit/s", b as f64 / 1e6),
        Some(b) if b >= 1_000 => format!("{:7.3} Kbit/s", b as f64 / 1e3),
        Some(b) => format!("{:7.3} bit/s ", b as f64),
    }
}

fn queue_text(p: &Pipe) -> String {
    match (p.def.link.queue_packets, p.def.link.queue_bytes) {
        (_, Some(b)) if b >= 8192 => format!("{} KB", b / 1024),
        (_, Some(b)) => format!("{b} B"),
        (Some(n), None) => format!("{n:3} sl."),
        (None, None) => "unlimited".into(),
    }
}

fn mask_text(m: &FlowMask) -> String {
    if m.src_ip6 != 0 || m.dst_ip6 != 0 || m.flow_label != 0 {
        format!(
            "mask: proto: 0x{:02x}, flow_id: 0x{:08x}, {}/0x{:04x} -> {}/0x{:04x}",
            m.proto,
            m.flow_label,
            Ipv6Addr::from(m.src_ip6),
            m.src_port,
            Ipv6Addr::from(m.dst_ip6),
            m.dst_port
        )
    } else {
        format!(
            "mask: 0x{:02x} 0x{:08x}/0x{:04x} -> 0x{:08x}/0x{:04x}",
            m.proto, m.src_ip4, m.src_port, m.dst_ip4, m.dst_port
        )
    }
}

fn flow_line(i: &Instance) -> String {
    let k = &i.key;
    let v6 = k.ip_version == 6;
    let w = if v6 { 39 } else { 15 };
    format!(
        "{:3} {:<4} {:>w$}/{:<5} {:>w$}/{:<5} {:4} {:8} {:3} {:4}",
        i.flow_id & 0xff,
        proto_name(k.proto),
        addr(k.ip_version, k.src_ip),
        k.src_port,
        addr(k.ip_version, k.dst_ip),
        k.dst_port,
        i.tot_pkts,
        i.tot_bytes,
        i.queued_packets(),
        i.drops,
    )
}

/// [`node_text`] as JSON: `one_pass`, `unmatched`, `flow_instances` (live
/// dynamic instances, pipe and scheduler), `flow_memory_bytes` (what they and
/// their scheduler classes are charged against `--max-flow-memory`), `pipes`,
/// `rules`, `schedulers`. Every live instance is listed.
pub fn node_json(node: &Node) -> serde_json::Value {
    node_json_listing(node, usize::MAX)
}

/// [`node_json`] listing at most `most` instances of each pipe (its `flows`)
/// and of each scheduled pipe (its entries under `schedulers`); each pipe's
/// `instances` gives how many are live. The bridge's periodic lines list a
/// few: the listing is built under the node's lock, and a flood of flows
/// would otherwise stall forwarding and take memory in proportion to the
/// flows at every line.
pub fn node_json_listing(node: &Node, most: usize) -> serde_json::Value {
    let pipes: Vec<_> = node
        .pipes()
        .iter()
        .enumerate()
        .map(|(idx, p)| {
            let d = &p.def;
            let (expired, flow_limit_drops) = expired_and_refused(node, idx);
            let instances = match node.sched.links.get(idx) {
                Some(Some(sp)) => sp.active_instances(),
                _ => p.active_instances(),
            };
            let flows: Vec<_> = p
                .instances()
                .take(most)
                .map(|i| {
                    json!({
                        "flow_id": format!("{:016x}", i.flow_id),
                        "proto": i.key.proto,
                        "src": format!("{}/{}", addr(i.key.ip_version, i.key.src_ip), i.key.src_port),
                        "dst": format!("{}/{}", addr(i.key.ip_version, i.key.dst_ip), i.key.dst_port),
                        "packets": i.tot_pkts,
                        "bytes": i.tot_bytes,
                        "queued": i.queued_packets(),
                        "drops": i.drops,
                    })
                })
                .collect();
            let (packets, bytes, drops) = p.totals();
            json!({
                "pipe": d.number,
                "config": d.words,
                "packets": packets,
                "bytes": bytes,
                "drops": drops,
                "rate_bps": d.link.rate_bps,
                "rate": d.link.rate_bps.map(format_rate_bps),
                "delay_ns": d.link.delay_ns,
                "queue_packets": d.link.queue_packets,
                "queue_bytes": d.link.queue_bytes,
                "burst_bytes": d.burst_bytes,
                "profile": d.profile.as_ref().map(|pf| json!({"name": pf.name, "loss_level": pf.loss_level, "samples": pf.table_ns.len()})),
                "mask": d.mask.as_ref().map(mask_text),
                "instances": instances,
                "expired": expired,
                "flow_limit_drops": flow_limit_drops,
                "flows": flows,
            })
        })
        .collect();
    let c = node.classifier();
    let rules: Vec<_> = c
        .rules()
        .iter()
        .zip(&c.counters)
        .map(|(r, (pk, by))| json!({"number": r.number, "line": r.line, "rule": r.text, "packets": pk, "bytes": by}))
        .collect();
    json!({
        "one_pass": node.one_pass(),
        "unmatched": node.unmatched,
        "flow_instances": node.live_flows(),
        "flow_memory_bytes": node.flow_memory_bytes(),
        "pipes": pipes,
        "rules": rules,
        "schedulers": sched::stats_json_listing(node, most),
    })
}

#[cfg(test)]
#[path = "node_tests.rs"]
mod tests;
