//! What `list`, `show` and `pipe|queue|sched [N] show` answer: each rule
//! with its owner and counters since `zero`, each object with its owner.

use super::{kind_index, Rules, KIND_WORDS};
use crate::control::failure::Failure;
use crate::render::node::{node_json, pipes_text};
use crate::render::sched::{self, Only};
use linkem_ctl::Kind;
use serde_json::json;
use std::collections::BTreeMap;

impl Rules {
    /// `zero`: rule counters seen by `list`/`show` restart from zero.
    pub fn zero(&self) {
        let now = self.rule_counts();
        *self.zero_base.lock().unwrap_or_else(|p| p.into_inner()) = now;
    }

    fn rule_counts(&self) -> Vec<(u32, String, u64, u64)> {
        self.bridge.with_model(|n| {
            let c = n.classifier();
            c.rules()
                .iter()
                .zip(&c.counters)
                .map(|(r, &(p, b))| (r.number, r.text.clone(), p, b))
                .collect()
        })
    }

    /// `list`/`show`: each rule with its owner and its counters since `zero`,
    /// as JSON and in `ipfw -a list` layout.
    pub fn list_json(&self) -> serde_json::Value {
        // Under the source's lock, so that no change comes between the node's
        // rules and the typed copy.
        let source = self.source.lock().unwrap_or_else(|p| p.into_inner());
        let counts = self.rule_counts();
        let mut base = self
            .zero_base
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut text = String::new();
        let mut rules = Vec::new();
        // Node rules and the copy's are in the same order (by number, then as added).
        let typed = source.set.rules.iter().zip(&source.rule_owners);
        for ((number, rule_text, p, b), (rule, owner)) in counts.into_iter().zip(typed) {
            let (bp, bb) = match base
                .iter()
                .position(|(n, t, _, _)| *n == number && *t == rule_text)
            {
                Some(i) => {
                    let (_, _, p, b) = base.remove(i);
                    (p, b)
                }
                None => (0, 0),
            };
            let (p, b) = (p.saturating_sub(bp), b.saturating_sub(bb));
            let body = rule.body().split_whitespace().collect::<Vec<_>>().join(" ");
            text.push_str(&format!("{number:05} {p:>10} {b:>12} {body}\n"));
            rules.push(json!({
                "number": number,
                "rule": body,
                "packets": p,
                "bytes": b,
                "owner_uid": owner,
            }));
        }
        let objects: Vec<serde_json::Value> = source
            .meta
            .iter()
            .enumerate()
            .flat_map(|(i, m)| {
                m.iter().map(move |(n, o)| {
                    json!({"kind": KIND_WORDS[i], "number": n, "config": o.words, "owner_uid": o.owner})
                })
            })
            .collect();
        json!({
            "rules": rules,
            "objects": objects,
            "one_pass": source.set.one_pass,
            "text": text,
        })
    }

    /// `pipe|queue|sched [N] show`.
    pub fn show_json(&self, kind: Kind, number: Option<u32>) -> Result<serde_json::Value, Failure> {
        let meta =
            self.source.lock().unwrap_or_else(|p| p.into_inner()).meta[kind_index(kind)].clone();
        if let Some(n) = number {
            if !meta.contains_key(&n) {
                return Err(Failure::Error(format!(
                    "{} {n} does not exist",
                    kind.name()
                )));
            }
        }
        let owners: BTreeMap<u32, u32> = meta
            .iter()
            .filter(|(n, _)| number.is_none_or(|m| m == **n))
            .map(|(n, o)| (*n, o.owner))
            .collect();
        Ok(self.bridge.with_model(|node| match kind {
            Kind::Pipe => {
                let mut pipes: Vec<serde_json::Value> = node_json(node)["pipes"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|p| number.is_none_or(|n| p["pipe"] == n))
                    .collect();
                for p in &mut pipes {
                    let n = p["pipe"].as_u64().unwrap_or(0) as u32;
                    p["owner_uid"] = owners.get(&n).copied().into();
                }
                json!({"pipes": pipes, "text": pipes_text(node, number)})
            }
            Kind::Sched | Kind::Queue => {
                let only = match kind {
                    Kind::Sched => Only {
                        sched: number,
                        queue: None,
                    },
                    _ => Only {
                        sched: None,
                        queue: number,
                    },
                };
                // The objects' own lines first: a queue or scheduler with no
                // traffic yet has no counters to list.
                let mut text = String::new();
                let mut objects = Vec::new();
                for (n, o) in &meta {
                    if number.is_some_and(|m| m != *n) {
                        continue;
                    }
                    text.push_str(&format!(
                        "{} {n} config {}  (owner uid {})\n",
                        kind.name(),
                        o.words,
                        o.owner
                    ));
                    objects.push(json!({"number": n, "config": o.words, "owner_uid": o.owner}));
                }
                text.push_str(&sched::stats_text_only(node, only));
                json!({
                    kind_plural(kind): objects,
                    "schedulers": sched::stats_json_only(node, only),
                    "text": text,
                    "owners": owners,
                })
            }
        }))
    }
}

fn kind_plural(kind: Kind) -> &'static str {
    match kind {
        Kind::Pipe => "pipes",
        Kind::Queue => "queues",
        Kind::Sched => "scheds",
    }
}
