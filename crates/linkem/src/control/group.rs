//! A control socket that serves several links (`linkem bridge --pair ...
//! --pair ... --name G`, a lab): one [`Model`] whose run is the links'
//! models ([`Running::Group`]), each named by its pair's name. A request
//! about one link names it first (`link NAME ...`, `show NAME`); `show`,
//! `stats`, `list`, `zero` and `watch` alone cover every link: their JSON
//! is `{"links":[...]}`, one object per link with `"link":NAME`, each as a
//! socket of that link alone would answer (`show NAME`, `stats NAME`).
//!
//! A batch may change several links: every line is checked against its
//! link (a `link` over what the batch's earlier lines made of it) before
//! any is applied, so a refused line applies nothing; then every link's
//! changes are queued for the one live stage that runs them all before any
//! answer is awaited, with the links' locks held throughout (no other
//! request changes them in between). Each link's change takes the stage's
//! instant when it gets it: the instants of one batch lie within one pass
//! of that stage over its pairs (microseconds apart), and the reply's
//! `at_ns` is the latest.

use super::sys::{self, PeerCred};
use super::{Failure, Model, Running, Staged};
use linkem_ctl::{Request, NO_RULE_SET};
use linkem_runtime::clock;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

impl Model {
    /// The model of a socket that serves `members` (each named by its
    /// `name`), called `name`.
    pub fn group(name: String, members: Vec<Arc<Model>>, started: Instant) -> Model {
        let mut m = Model::new(
            name,
            Running::Group(members),
            [Default::default(), Default::default()],
            0,
            started,
        );
        m.owner_uid = sys::starter_uid();
        m
    }

    /// The links this socket serves, when it serves several.
    pub fn members(&self) -> Option<&[Arc<Model>]> {
        match &self.running {
            Running::Group(m) => Some(m),
            _ => None,
        }
    }

    /// The body of `show [NAME]`: links and counters; with a rule set, its
    /// rules and pipes.
    pub fn show_json(&self, target: Option<&str>) -> Result<serde_json::Value, Failure> {
        if let Some(name) = target {
            let mut v = self.member(name)?.show_json(None)?;
            v["link"] = name.into();
            return Ok(v);
        }
        if let Some(members) = self.members() {
            let each: Result<Vec<_>, Failure> = members
                .iter()
                .map(|m| self.show_json(Some(&m.name)))
                .collect();
            return Ok(json!({"links": each?, "rule_set": false}));
        }
        let mut v = match self.rules() {
            Some(r) => {
                let mut v = r.list_json();
                v["rule_set"] = true.into();
                v
            }
            None => json!({"links": self.links_json(), "rule_set": false}),
        };
        v["stats"] = self.stats_json();
        Ok(v)
    }

    /// The body of `stats [NAME]`.
    pub fn stats_for(&self, target: Option<&str>) -> Result<serde_json::Value, Failure> {
        match target {
            Some(name) => {
                let mut v = self.member(name)?.stats_json();
                v["link"] = name.into();
                Ok(v)
            }
            None => Ok(self.stats_json()),
        }
    }

    fn member(&self, name: &str) -> Result<&Arc<Model>, Failure> {
        self.members()
            .and_then(|m| m.iter().find(|m| m.name == name))
            .ok_or_else(|| Failure::Error(format!("no link '{name}' in this emulator")))
    }
}

/// `stats` of a socket of several links: each link's, named.
pub(super) fn stats_json(group: &Model, members: &[Arc<Model>]) -> serde_json::Value {
    let links: Vec<serde_json::Value> = members
        .iter()
        .map(|m| {
            let mut v = m.stats_json();
            v["link"] = m.name.as_str().into();
            v
        })
        .collect();
    json!({
        "front": group.front.word(),
        "elapsed_s": group.elapsed_s(),
        "now_ns": clock::now_ns(),
        "links": links,
    })
}

/// `list` of a socket of several links: each link's directions, named.
pub(super) fn links_json(members: &[Arc<Model>]) -> serde_json::Value {
    members
        .iter()
        .map(|m| json!({"link": m.name, "links": m.links_json()}))
        .collect()
}

/// [`Model::apply`] for a socket of several links: every request checked
/// against its link first, then applied link by link (see the module doc).
pub(super) fn apply(
    group: &Model,
    members: &[Arc<Model>],
    cred: &PeerCred,
    requests: &[&Request],
    lines: &[&str],
) -> Result<u64, Failure> {
    let mut by_member: Vec<Vec<&Request>> = vec![Vec::new(); members.len()];
    // Each link's lines as typed, for its mark.
    let mut lines_of: Vec<Vec<&str>> = vec![Vec::new(); members.len()];
    for (k, r) in requests.iter().enumerate() {
        let line = lines.get(k).copied().unwrap_or("");
        match r {
            Request::Link {
                target: Some(name), ..
            } => {
                let i = members
                    .iter()
                    .position(|m| &m.name == name)
                    .ok_or_else(|| Failure::Error(format!("no link '{name}' in this emulator")))?;
                by_member[i].push(r);
                lines_of[i].push(line);
            }
            Request::Link { target: None, .. } => {
                return Err(Failure::Error(linkem_ctl::NAME_A_LINK.into()))
            }
            Request::Zero => {
                by_member.iter_mut().for_each(|v| v.push(r));
                lines_of.iter_mut().for_each(|v| v.push(line));
            }
            Request::Rule(_) => return Err(Failure::Error(NO_RULE_SET.into())),
            _ => {
                return Err(Failure::Error(
                    "only changes may be applied (not allowed in a batch)".into(),
                ))
            }
        }
    }
    let touched: Vec<(&Arc<Model>, Vec<&Request>, Vec<&str>)> = members
        .iter()
        .zip(by_member)
        .zip(lines_of)
        .filter(|((_, r), _)| !r.is_empty())
        .map(|((m, r), l)| (m, r, l))
        .collect();
    // Locked in the members' order, so two batches never wait on each other.
    let mut locks = Vec::with_capacity(touched.len());
    let mut staged: Vec<Staged> = Vec::with_capacity(touched.len());
    for (m, reqs, _) in &touched {
        let links = m.lock_links();
        let changes_link = reqs.iter().any(|r| matches!(r, Request::Link { .. }));
        if let (true, Some(e)) = (changes_link, m.error()) {
            return Err(Failure::Error(format!(
                "link {} has stopped ({e}): nothing applied",
                m.name
            )));
        }
        staged.push(
            m.stage(&links, cred, reqs)
                .map_err(|f| name_link(f, &m.name))?,
        );
        locks.push(links);
    }
    // What the stage would refuse at once (copies a port cannot send)
    // refuses the whole batch before anything is queued.
    for ((m, _, _), s) in touched.iter().zip(&staged) {
        m.send(s, true).map_err(|f| name_link(f, &m.name))?;
    }
    // Every link's changes queued before any answer is awaited: the stage
    // takes them in one pass over its pairs.
    let mut sent = Vec::with_capacity(touched.len());
    let mut refused = None;
    for ((m, _, _), s) in touched.iter().zip(&staged) {
        match m.send(s, false) {
            Ok(x) => sent.push(x),
            Err(f) => {
                refused = Some(name_link(f, &m.name));
                break;
            }
        }
    }
    let mut at_ns = clock::now_ns();
    let mut done: Vec<&str> = Vec::new();
    let answers = touched.iter().zip(locks.iter_mut()).zip(staged).zip(sent);
    for ((((m, _, lines), links), s), sent) in answers {
        let answer = match sent {
            Some(x) => x.wait().map_err(|e| Failure::Error(e.to_string())),
            None => Ok(clock::now_ns()),
        };
        match answer {
            Ok(t) => {
                m.keep(links, cred.uid, s, t);
                m.mark_change(t, lines);
                // Each link's own count of changes (the web page's), beside the socket's.
                m.counters.changes.fetch_add(1, Ordering::Relaxed);
                at_ns = at_ns.max(t);
                done.push(&m.name);
            }
            Err(f) => {
                refused.get_or_insert(name_link(f, &m.name));
            }
        }
    }
    if let Some(f) = refused {
        // A link refused after others were handed to the stage (it stopped
        // meanwhile): say which links changed.
        return Err(match done.is_empty() {
            true => f,
            false => Failure::Error(format!(
                "{}; already changed: {}",
                f.message(),
                done.join(", ")
            )),
        });
    }
    group.counters.changes.fetch_add(1, Ordering::Relaxed);
    Ok(at_ns)
}

/// A failure of one link's change, saying which link.
fn name_link(f: Failure, name: &str) -> Failure {
    match f {
        Failure::Error(m) => Failure::Error(format!("link {name}: {m}")),
        Failure::Refused(m) => Failure::Refused(format!("link {name}: {m}")),
        w @ Failure::Word { .. } => w,
    }
}

#[cfg(test)]
#[path = "group_tests.rs"]
mod tests;
