//! Claims on the running node: a claim checked against who holds what and
//! the user's limits, then applied to the rule set as typed changes at one
//! instant (two pipes and two rules per claim), released or expired as one
//! change too; and the pipes and rules a claim keeps from everyone else.

use super::{ports_text, Claim, ClaimConfig, ClaimDone, PipeAsk, Table};
use crate::control::failure::Failure;
use crate::control::rules::{target, Meta, Rules, Source, Undo};
use linkem_core::model::Change;
use linkem_core::rules::{ObjectDef, Rule};
use linkem_ctl::{ClaimAction, ClaimRequest, RuleRequest};
use linkem_io::creds::PeerCred;
use serde_json::json;
use std::collections::HashMap;

impl Rules {
    /// Refuses a request naming a pipe or rule kept for claims (they change
    /// only through `claim` and `release`), and a `flush` while claims hold
    /// pipes.
    pub(in crate::control) fn not_claims(
        &self,
        s: &Source,
        r: &RuleRequest,
    ) -> Result<(), Failure> {
        if self.claims.is_none() {
            return Ok(());
        }
        let kept = |what: String| {
            Err(Failure::Refused(format!(
                "{what}: pipes and rules {}-{} belong to claims (change them with \
                 'claim', 'release')",
                super::CLAIM_FIRST,
                super::CLAIM_LAST
            )))
        };
        match r {
            RuleRequest::Config { kind, number, .. } | RuleRequest::Delete { kind, number }
                if super::reserved(*number) =>
            {
                kept(format!("{} {number}", kind.name()))
            }
            RuleRequest::Add { number, rule } => {
                if let Some(n) = number.filter(|n| super::reserved(*n)) {
                    return kept(format!("rule {n}"));
                }
                match target(rule) {
                    Some((kind, n)) if super::reserved(n) => kept(format!("{} {n}", kind.name())),
                    _ => Ok(()),
                }
            }
            RuleRequest::DeleteRules { numbers } => {
                match numbers.iter().find(|n| super::reserved(**n)) {
                    Some(n) => kept(format!("rule {n}")),
                    None => Ok(()),
                }
            }
            RuleRequest::Flush if s.meta[2].keys().any(|n| super::reserved(*n)) => {
                Err(Failure::Refused(
                    "flush: claims hold pipes and rules; they go when released or expired".into(),
                ))
            }
            _ => Ok(()),
        }
    }

    /// The pipe of a claim: `words` parsed as `pipe number config` is, with
    /// `bw RATE` added when they give none and `rate_bps` bounds the user.
    fn claim_pipe(
        &self,
        number: u32,
        words: &[String],
        rate_bps: Option<u64>,
    ) -> Result<ObjectDef, Failure> {
        let known = self.files.lock().unwrap_or_else(|p| p.into_inner());
        let mut files = |name: &str| -> Result<String, String> {
            match known.get(name) {
                Some(t) => Ok(t.clone()),
                None => crate::control::files::read(name),
            }
        };
        let parse = |words: &[String], files: &mut dyn FnMut(&str) -> Result<String, String>| {
            let w: Vec<&str> = words.iter().map(String::as_str).collect();
            linkem_core::rules::parse_object(
                linkem_core::rules::ObjectKind::Pipe,
                number,
                &w,
                1,
                files,
            )
            .map_err(|e| Failure::Error(format!("'{}': {}", e.word, e.message)))
        };
        let def = parse(words, &mut files)?;
        let ObjectDef::Pipe {
            def: pipe, sched, ..
        } = &def
        else {
            unreachable!("a pipe's words make a pipe")
        };
        if pipe.mask.is_some() || sched.kind.is_some() {
            return Err(Failure::Error(
                "a claim's pipe takes no mask or scheduler type: each flow would get a queue \
                 of its own, beyond what the claim may hold"
                    .into(),
            ));
        }
        match (pipe.link.rate_bps, rate_bps) {
            (None, Some(r)) => {
                let mut w = words.to_vec();
                w.push("bw".into());
                w.push(format!("{r}bit/s"));
                parse(&w, &mut files)
            }
            _ => Ok(def),
        }
    }

    /// `claim ...` / `release ...` by `cred` at `now_ns` (see
    /// [`super`]): checked against who holds what and the user's
    /// limits, then applied as typed changes at one instant: a new claim
    /// adds its two pipes and rules, a change reconfigures its pipes in
    /// place (queued packets keep their release times), a release deletes
    /// them.
    pub fn claim(
        &self,
        cred: &PeerCred,
        r: &ClaimRequest,
        now_ns: u64,
    ) -> Result<ClaimDone, Failure> {
        let Some((table, config)) = &self.claims else {
            return Err(Failure::Error(
                "claims are off in this emulator (start it with --claims)".into(),
            ));
        };
        let mut table = table.lock().unwrap_or_else(|p| p.into_inner());
        let name = ports_text(r.proto, r.ports);
        let words = match &r.action {
            ClaimAction::Release => return self.release(&mut table, cred, r, &name),
            ClaimAction::Set { words } => words,
        };
        // Whether the user could bind the ports (module doc of `claims`):
        // at every claim, a renewal too, after the cheaper checks.
        let may_have_ports = || self.may_have_ports(cred, r, config, &name);
        let held = table.find(cred.uid, r.proto, r.ports)?;
        let old = held.and_then(|s| table.get(s)).cloned();
        if let (Some(old), [None, None]) = (&old, words) {
            may_have_ports()?;
            let mut c = old.clone();
            c.pid = cred.pid;
            c.renewed_ns = now_ns;
            c.expires_ns = now_ns.saturating_add(config.ttl_ns);
            table.put(c.clone());
            return Ok(ClaimDone {
                at_ns: now_ns,
                what: "renewed",
                claim: c,
            });
        }
        let slot = match held {
            Some(s) => s,
            None => table.free_slot()?,
        };
        let numbers = super::numbers(slot);
        let limit = config.limits.of(cred.uid);
        let mut chosen: [Vec<String>; 2] = Default::default();
        let mut defs = Vec::with_capacity(2);
        for dir in 0..2 {
            chosen[dir] = match (&words[dir], &old) {
                (Some(w), _) => w.clone(),
                (None, Some(o)) => o.words[dir].clone(),
                (None, None) => Vec::new(),
            };
            let def = self
                .claim_pipe(numbers[dir], &chosen[dir], limit.rate_bps)
                .map_err(|f| Failure::Error(format!("{name}: {}", f.message())))?;
            defs.push(def);
        }
        let asks = [0, 1].map(|i| match &defs[i] {
            ObjectDef::Pipe { def, .. } => PipeAsk::of(&def.link),
            _ => unreachable!("claim_pipe makes pipes"),
        });
        table.check_limits(cred.uid, &limit, held, r.ports, &asks)?;
        may_have_ports()?;
        let at_ns = self.install(cred, r, numbers, defs, old.is_none())?;
        let claim = Claim {
            proto: r.proto,
            ports: r.ports,
            uid: cred.uid,
            pid: cred.pid,
            slot,
            words: chosen,
            held_bytes: asks[0].held_bytes.saturating_add(asks[1].held_bytes),
            created_ns: old.as_ref().map_or(at_ns, |o| o.created_ns),
            renewed_ns: now_ns,
            expires_ns: now_ns.saturating_add(config.ttl_ns),
            changes: old.as_ref().map_or(0, |o| o.changes + 1),
        };
        table.put(claim.clone());
        Ok(ClaimDone {
            at_ns,
            what: if old.is_some() { "changed" } else { "claimed" },
            claim,
        })
    }

    /// A claim's pipes (`defs`, numbered `numbers`) put in place, and with
    /// a new claim (`new`) its two rules, as one change; returns its instant.
    fn install(
        &self,
        cred: &PeerCred,
        r: &ClaimRequest,
        numbers: [u32; 2],
        defs: Vec<ObjectDef>,
        new: bool,
    ) -> Result<u64, Failure> {
        let mut s = self.source.lock().unwrap_or_else(|p| p.into_inner());
        let mut changes = Vec::with_capacity(4);
        let mut undo = Vec::new();
        for (dir, def) in defs.into_iter().enumerate() {
            let words = def.words().to_string();
            let n = numbers[dir];
            undo.push(Undo::Object(2, n, s.def(2, n)));
            s.remove(2, n);
            s.put(
                2,
                def.clone(),
                Meta {
                    words,
                    owner: cred.uid,
                },
            );
            changes.push(Change::Object(Box::new(def)));
        }
        if new {
            for (dir, n) in numbers.into_iter().enumerate() {
                let rule = claim_rule(n, r.proto, r.ports, dir, [&self.sides[0], &self.sides[1]]);
                let at = s.set.rules.partition_point(|x| x.number <= n);
                s.set.rules.insert(at, rule.clone());
                s.rule_owners.insert(at, cred.uid);
                undo.push(Undo::RuleIn(at));
                changes.push(Change::AddRule(Box::new(rule)));
            }
        }
        let at_ns = match self.bridge.submit(changes) {
            Ok(at) => at,
            Err(e) => {
                s.undo(undo);
                return Err(Failure::Error(e.to_string()));
            }
        };
        Ok(at_ns)
    }

    /// `release ...`: the claim's pipes and rules deleted at one instant;
    /// root may free anyone's claim.
    fn release(
        &self,
        table: &mut Table,
        cred: &PeerCred,
        r: &ClaimRequest,
        name: &str,
    ) -> Result<ClaimDone, Failure> {
        let slot = match table.find(cred.uid, r.proto, r.ports) {
            Err(Failure::Refused(_)) if cred.uid == 0 => table
                .iter()
                .find(|c| c.proto == r.proto && c.ports == r.ports)
                .map(|c| c.slot),
            found => found?,
        };
        let slot = slot.ok_or_else(|| Failure::Error(format!("{name} is not claimed")))?;
        let claim = table.get(slot).expect("found above").clone();
        let at_ns = self.drop_claim(&claim)?;
        table.remove(slot);
        Ok(ClaimDone {
            at_ns,
            what: "released",
            claim,
        })
    }

    /// Whether `cred` could bind the ports of `r` itself (or `--limits`
    /// allows them): root and the starter may claim any.
    fn may_have_ports(
        &self,
        cred: &PeerCred,
        r: &ClaimRequest,
        config: &ClaimConfig,
        name: &str,
    ) -> Result<(), Failure> {
        if cred.uid == 0 || cred.uid == self.starter {
            return Ok(());
        }
        let view = (config.port_view)().map_err(|e| {
            Failure::Error(format!(
                "{name}: cannot tell which ports uid {} could bind: {e}",
                cred.uid
            ))
        })?;
        super::check_ports(
            cred.uid,
            r.proto,
            r.ports,
            &view,
            config.limits.allowed(cred.uid),
        )
    }

    /// Deletes a claim's rules and pipes at one instant (returned); the
    /// packets its pipes still held are counted as `flushed`.
    fn drop_claim(&self, c: &Claim) -> Result<u64, Failure> {
        let mut s = self.source.lock().unwrap_or_else(|p| p.into_inner());
        let numbers = c.numbers();
        let mut undo = Vec::new();
        let mut gone = Vec::new();
        for n in numbers {
            while let Some(at) = s.set.rules.iter().position(|r| r.number == n) {
                let rule = s.set.rules.remove(at);
                let owner = s.rule_owners.remove(at);
                undo.push(Undo::RuleOut(at, Box::new(rule), owner));
                gone.push(n);
            }
        }
        let mut changes = Vec::new();
        if !gone.is_empty() {
            changes.push(Change::DeleteRules(gone));
        }
        for n in numbers {
            if let Some(old) = s.def(2, n) {
                s.remove(2, n);
                undo.push(Undo::Object(2, n, Some(old)));
                changes.push(Change::DeleteObject {
                    kind: linkem_core::rules::ObjectKind::Pipe,
                    number: n,
                });
            }
        }
        match self.bridge.submit(changes) {
            Ok(at) => Ok(at),
            Err(e) => {
                s.undo(undo);
                Err(Failure::Error(e.to_string()))
            }
        }
    }

    /// Removes the claims whose time is up at `now_ns`, each with the
    /// instant its rules and pipes went (or why they could not).
    pub fn expire_claims(&self, now_ns: u64) -> Vec<(Claim, Result<u64, Failure>)> {
        let Some((table, _)) = &self.claims else {
            return Vec::new();
        };
        let mut table = table.lock().unwrap_or_else(|p| p.into_inner());
        if table.next_expiry_ns().is_none_or(|t| t > now_ns) {
            return Vec::new();
        }
        table
            .take_expired(now_ns)
            .into_iter()
            .map(|c| {
                let r = self.drop_claim(&c);
                (c, r)
            })
            .collect()
    }

    /// `claims`: those of `uid` (root's and the starter's: all), each with
    /// the packets, bytes and drops of its two pipes.
    pub fn claims_json(&self, uid: u32, now_ns: u64) -> serde_json::Value {
        let Some((table, config)) = &self.claims else {
            return json!({"claims": [], "on": false});
        };
        let table = table.lock().unwrap_or_else(|p| p.into_inner());
        let all = uid == 0 || uid == self.starter;
        let mine: Vec<Claim> = table
            .iter()
            .filter(|c| all || c.uid == uid)
            .cloned()
            .collect();
        drop(table);
        let counts: HashMap<u32, (u64, u64, u64)> = self.bridge.with_model(|node| {
            node.pipes()
                .iter()
                .filter(|p| super::reserved(p.def.number))
                .map(|p| (p.def.number, p.totals()))
                .collect()
        });
        let mut text = String::new();
        let list: Vec<serde_json::Value> = mine
            .iter()
            .map(|c| {
                let dirs = [0, 1].map(|d| {
                    let n = c.numbers()[d];
                    let (p, b, drops) = counts.get(&n).copied().unwrap_or_default();
                    json!({"pipe": n, "words": c.words[d].join(" "), "packets": p, "bytes": b, "drops": drops})
                });
                let left_s = c.expires_ns.saturating_sub(now_ns) as f64 / 1e9;
                text.push_str(&format!(
                    "{:<16} uid {:<6} expires in {:>7.1}s  a-to-b pipe {} [{}] {} pkts {} bytes {} drops  \
                     b-to-a pipe {} [{}] {} pkts {} bytes {} drops\n",
                    c.name(),
                    c.uid,
                    left_s,
                    dirs[0]["pipe"],
                    dirs[0]["words"].as_str().unwrap_or(""),
                    dirs[0]["packets"],
                    dirs[0]["bytes"],
                    dirs[0]["drops"],
                    dirs[1]["pipe"],
                    dirs[1]["words"].as_str().unwrap_or(""),
                    dirs[1]["packets"],
                    dirs[1]["bytes"],
                    dirs[1]["drops"],
                ));
                let [ab, ba] = dirs;
                json!({
                    "claim": c.name(),
                    "proto": c.proto.word(),
                    "ports": [c.ports.0, c.ports.1],
                    "uid": c.uid,
                    "pid": c.pid,
                    "created_ns": c.created_ns,
                    "renewed_ns": c.renewed_ns,
                    "expires_ns": c.expires_ns,
                    "expires_in_s": left_s,
                    "changes": c.changes,
                    "held_bytes_bound": c.held_bytes,
                    "a_to_b": ab,
                    "b_to_a": ba,
                })
            })
            .collect();
        let limit = config.limits.of(uid);
        json!({
            "on": true,
            "claims": list,
            "ttl_ns": config.ttl_ns,
            "limits": {
                "claims": limit.claims,
                "ports": limit.ports,
                "rate_bps": limit.rate_bps,
                "delay_ns": limit.delay_ns,
                "queue_bytes": limit.queue_bytes,
            },
            "text": text,
        })
    }
}

/// The rule of a claim's side `dir` (0: a, received, the ports as
/// destination; 1: b, sent, the ports as source), numbered as its pipe.
fn claim_rule(
    n: u32,
    proto: linkem_ctl::Proto,
    (a, b): (u16, u16),
    dir: usize,
    sides: [&str; 2],
) -> Rule {
    let ports = if a == b {
        a.to_string()
    } else {
        format!("{a}-{b}")
    };
    let pipe = n.to_string();
    // Side a (received): the port as destination; side b (sent): as source.
    let (port_word, side_word) = if dir == 0 {
        ("dst-port", "in")
    } else {
        ("src-port", "out")
    };
    let words: Vec<&str> = vec![
        "pipe",
        &pipe,
        proto.word(),
        "from",
        "any",
        "to",
        "any",
        port_word,
        &ports,
        side_word,
    ];
    linkem_core::rules::parse_rule(Some(n), &words, 1, sides).expect("a claim's rule parses")
}
