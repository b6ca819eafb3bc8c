//! Pipes under a scheduler as `ipfw sched show` lists them: each scheduler
//! instance, its queues and their flows with their counters, as text and as
//! JSON, for `--stats` after a replay or a bridge run and for `linkem ctl
//! sched N show` / `queue N show` ([`Only`] picks what a listing shows).

use linkem_core::node::Node;
use linkem_core::pipe::MaskedKey;
use linkem_core::sched::service::SchedLink;
use linkem_core::sched::Class;
use serde_json::json;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

fn ms(ns: Option<u64>) -> String {
    ns.map_or("-".into(), |v| format!("{:.3}", v as f64 / 1e6))
}

fn flow_text(l: &SchedLink, i: usize) -> String {
    key_text(&l.class_keys[i])
}

fn key_text(k: &MaskedKey) -> String {
    if k.ip_version == 0 {
        return "-".into();
    }
    let a = |v: u128| match k.ip_version {
        6 => Ipv6Addr::from(v).to_string(),
        _ => Ipv4Addr::from(v as u32).to_string(),
    };
    format!(
        "{} {}/{} -> {}/{}",
        k.proto,
        a(k.src_ip),
        k.src_port,
        a(k.dst_ip),
        k.dst_port
    )
}

fn active(c: &Class) -> bool {
    c.stats.enqueued + c.stats.drops() > 0
}

/// Which schedulers and queues a listing shows (`sched N show`, `queue N
/// show`); the default shows all.
#[derive(Debug, Clone, Copy, Default)]
pub struct Only {
    pub sched: Option<u32>,
    pub queue: Option<u32>,
}

impl Only {
    fn links(self, node: &Node) -> Vec<&SchedLink> {
        node.sched
            .instances()
            .filter(|l| self.sched.is_none_or(|n| n == l.pipe))
            .filter(|l| {
                self.queue
                    .is_none_or(|q| l.sched.qs.classes.iter().any(|c| active(c) && c.queue == q))
            })
            .collect()
    }

    /// The queues of `l` this listing shows, with their index among its classes.
    fn classes(self, l: &SchedLink) -> impl Iterator<Item = (usize, &Class)> {
        l.sched
            .qs
            .classes
            .iter()
            .enumerate()
            .filter(move |(_, c)| active(c) && self.queue.is_none_or(|q| q == c.queue))
    }
}

/// `ipfw sched show`-like listing of every scheduled pipe, its queues and flows.
pub fn stats_text(node: &Node) -> String {
    stats_text_only(node, Only::default())
}

/// [`stats_text`] with at most `most` instances of each scheduled pipe.
pub fn stats_text_listing(node: &Node, most: usize) -> String {
    stats_text_some(node, Only::default(), most)
}

/// [`stats_text`] of the schedulers and queues `only` names.
pub fn stats_text_only(node: &Node, only: Only) -> String {
    stats_text_some(node, only, usize::MAX)
}

/// The links `only` names, at most `most` instances of each pipe (they come
/// by pipe).
fn first_links(node: &Node, only: Only, most: usize) -> Vec<&SchedLink> {
    let mut links = only.links(node);
    let mut seen = (u32::MAX, 0usize);
    links.retain(|l| {
        if seen.0 != l.pipe {
            seen = (l.pipe, 0);
        }
        seen.1 += 1;
        seen.1 <= most
    });
    links
}

fn stats_text_some(node: &Node, only: Only, most: usize) -> String {
    let mut s = String::new();
    let links = first_links(node, only, most);
    if links.is_empty() {
        return s;
    }
    let _ = writeln!(s, "\n# ipfw sched show");
    for l in links {
        let p = &l.sched.params;
        let _ = writeln!(
            s,
            "{:05}: type {} quantum {} limit {} flows {} aqm {}  (queued {}){}",
            l.pipe,
            p.kind.name(),
            p.quantum_bytes,
            p.limit_packets,
            p.flows,
            if p.kind.is_fq() {
                p.flow_aqm.name()
            } else {
                "per queue"
            },
            l.queued(),
            if l.flow_id != 0 {
                format!("  instance {}", key_text(&l.key))
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            s,
            "  queue   weight pri  aqm       enq_pkts  enq_bytes  deq_pkts  tail  early   aqm  marked  len  soj_p50_ms soj_p99_ms  soj_max_ms  flow"
        );
        for (i, c) in only.classes(l) {
            let st = &c.stats;
            let _ = writeln!(
                s,
                "  {:<7} {:>6} {:>3}  {:<8} {:>9} {:>10} {:>9} {:>5} {:>6} {:>5} {:>7} {:>4} {:>11} {:>10} {:>11}  {}",
                c.queue,
                c.params.weight,
                c.params.pri,
                c.params.aqm.name(),
                st.enqueued,
                st.enqueued_bytes,
                st.dequeued,
                st.drops_tail,
                st.drops_early,
                st.drops_aqm,
                st.marked,
                c.fifo.len(),
                ms(st.sojourn.quantile(0.5)),
                ms(st.sojourn.quantile(0.99)),
                ms((st.sojourn.count > 0).then_some(st.sojourn.max_ns)),
                flow_text(l, i),
            );
        }
    }
    s
}

/// The same as JSON.
pub fn stats_json(node: &Node) -> serde_json::Value {
    stats_json_only(node, Only::default())
}

/// [`stats_json`] with at most `most` instances of each scheduled pipe.
pub fn stats_json_listing(node: &Node, most: usize) -> serde_json::Value {
    stats_json_some(node, Only::default(), most)
}

/// [`stats_json`] of the schedulers and queues `only` names.
pub fn stats_json_only(node: &Node, only: Only) -> serde_json::Value {
    stats_json_some(node, only, usize::MAX)
}

fn stats_json_some(node: &Node, only: Only, most: usize) -> serde_json::Value {
    let v: Vec<_> = first_links(node, only, most)
        .into_iter()
        .map(|l| {
            let p = &l.sched.params;
            let classes: Vec<_> = only
                .classes(l)
                .map(|(i, c)| {
                    let st = &c.stats;
                    json!({
                        "queue": c.queue,
                        "flow_id": format!("{:016x}", c.flow_id),
                        "flow": flow_text(l, i),
                        "weight": c.params.weight,
                        "pri": c.params.pri,
                        "aqm": c.params.aqm.name(),
                        "enqueued": st.enqueued,
                        "enqueued_bytes": st.enqueued_bytes,
                        "dequeued": st.dequeued,
                        "dequeued_bytes": st.dequeued_bytes,
                        "drops": {"tail": st.drops_tail, "red_early": st.drops_early, "aqm": st.drops_aqm, "loss": st.drops_loss},
                        "marked": st.marked,
                        "length": c.fifo.len(),
                        "sojourn_ns": {
                            "p50": st.sojourn.quantile(0.5),
                            "p90": st.sojourn.quantile(0.9),
                            "p99": st.sojourn.quantile(0.99),
                            "max": (st.sojourn.count > 0).then_some(st.sojourn.max_ns),
                            "mean": (st.sojourn.count > 0).then(|| (st.sojourn.sum_ns / st.sojourn.count as u128) as u64),
                        },
                    })
                })
                .collect();
            json!({
                "pipe": l.pipe,
                "instance": format!("{:016x}", l.flow_id),
                "instance_key": key_text(&l.key),
                "type": p.kind.name(),
                "quantum_bytes": p.quantum_bytes,
                "limit_packets": p.limit_packets,
                "flows": p.flows,
                "queued": l.queued(),
                "queues": classes,
            })
        })
        .collect();
    serde_json::Value::Array(v)
}

#[cfg(test)]
#[path = "sched_tests.rs"]
mod tests;
