//! Who may change what, and a request staged on the running rule set: the
//! checks of a batch line as it arrives ([`Rules::check`]) and of a change
//! as it is applied ([`Rules::stage`]), each with what undoes it.

use super::source::{not_configured, target};
use super::{kind_index, Made, Meta, Rules, Source, Undo};
use crate::control::failure::Failure;
use linkem_core::model::Change;
use linkem_core::rules::{Action, Rule, RuleSet};
use linkem_ctl::{Kind, RuleRequest};

impl Rules {
    /// Whether `uid` may add `rule` numbered `number` (see the module doc):
    /// `owns` tells whether a pipe or queue is the caller's, `others_max` is
    /// the highest number of a rule that is not.
    fn may_add(
        &self,
        uid: u32,
        number: Option<u32>,
        rule: &Rule,
        owns: &dyn Fn(Kind, u32) -> bool,
        others_max: Option<u32>,
    ) -> Result<(), Failure> {
        if uid == 0 || uid == self.starter {
            return Ok(());
        }
        match (rule.action, target(rule)) {
            (Action::Count, _) => {}
            (_, Some((kind, n))) if owns(kind, n) => {}
            (_, Some((kind, n))) => {
                return Err(Failure::Refused(format!(
                    "{} {n} is not yours: uid {uid} may add only rules that send to its own \
                     pipes or queues (or count)",
                    kind.name()
                )))
            }
            (_, None) => {
                return Err(Failure::Refused(format!(
                    "'{}': uid {uid} may add only rules that send to its own pipes or queues \
                     (or count); allow, deny, skipto and the like belong to root and uid {}",
                    action_word(rule),
                    self.starter
                )))
            }
        }
        if let (Some(n), Some(max)) = (number, others_max) {
            if n <= max {
                return Err(Failure::Refused(format!(
                    "rule {n}: uid {uid} may add rules only after every rule not its own \
                     (numbered above {max})"
                )));
            }
        }
        Ok(())
    }

    /// The highest number of a rule not owned by `uid`.
    fn others_max(s: &Source, uid: u32) -> Option<u32> {
        s.set
            .rules
            .iter()
            .zip(&s.rule_owners)
            .filter(|(_, o)| **o != uid)
            .map(|(r, _)| r.number)
            .max()
    }

    /// The permission checks of one change, made as a line of a batch
    /// arrives, against the running rule set and the objects that the
    /// batch's earlier lines create (`made`, updated): a refused line is
    /// refused at once and never stored. What only the lines before it can
    /// tell (a missing pipe, a rule naming one deleted) waits for `commit`.
    pub fn check(&self, uid: u32, r: &RuleRequest, made: &mut Made) -> Result<(), Failure> {
        let source = self.source.lock().unwrap_or_else(|p| p.into_inner());
        self.not_claims(&source, r)?;
        let owner = |kind: Kind, n: u32| -> Option<u32> {
            source.meta[kind_index(kind)].get(&n).map(|o| o.owner)
        };
        match r {
            RuleRequest::Config { kind, number, .. } => match owner(*kind, *number) {
                Some(o) => may(uid, o, &format!("{} {number}", kind.name()))?,
                None => {
                    made.insert((kind_index(*kind), *number));
                }
            },
            RuleRequest::Delete { kind, number } => {
                if let Some(o) = owner(*kind, *number) {
                    may(uid, o, &format!("{} {number}", kind.name()))?;
                }
            }
            RuleRequest::Add { number, rule } => {
                let owns = |kind: Kind, n: u32| {
                    owner(kind, n) == Some(uid) || made.contains(&(kind_index(kind), n))
                };
                let others_max = Rules::others_max(&source, uid);
                self.may_add(uid, *number, rule, &owns, others_max)?;
            }
            RuleRequest::DeleteRules { numbers } => {
                for n in numbers {
                    may_delete_rules(&source, uid, *n)?;
                }
            }
            RuleRequest::Flush => flush_allowed(&source, uid)?,
            RuleRequest::OnePass(_) => {
                may(uid, self.starter, "one-pass (a setting of the whole node)")?
            }
            RuleRequest::Show { .. } => {}
        }
        Ok(())
    }

    /// Stages one request on `s`; `batch`: the checks only the whole batch
    /// can settle (what a line names exists, what it deletes is unused) wait
    /// for [`Source::check_whole`].
    pub(super) fn stage(
        &self,
        s: &mut Source,
        undo: &mut Vec<Undo>,
        uid: u32,
        r: &RuleRequest,
        batch: bool,
    ) -> Result<Change, Failure> {
        self.not_claims(s, r)?;
        match r {
            RuleRequest::Config { kind, number, def } => {
                let k = kind_index(*kind);
                let old = s.def(k, *number);
                let owner = match &old {
                    Some((_, m)) => {
                        may(uid, m.owner, &format!("{} {number}", kind.name()))?;
                        m.owner
                    }
                    None => uid,
                };
                let words = def.words().to_string();
                s.remove(k, *number);
                undo.push(Undo::Object(k, *number, old));
                s.put(k, (**def).clone(), Meta { words, owner });
                if !batch {
                    s.check_objects()?;
                }
                Ok(Change::Object(def.clone()))
            }
            RuleRequest::Delete { kind, number } => {
                let what = format!("{} {number}", kind.name());
                let k = kind_index(*kind);
                let old = s
                    .def(k, *number)
                    .ok_or_else(|| Failure::Error(format!("{what} does not exist")))?;
                may(uid, old.1.owner, &what)?;
                s.remove(k, *number);
                undo.push(Undo::Object(k, *number, Some(old)));
                if !batch {
                    if let Some(f) = s.users_of(*kind, *number) {
                        return Err(f);
                    }
                    s.check_objects()?;
                }
                Ok(Change::DeleteObject {
                    kind: kind.object(),
                    number: *number,
                })
            }
            RuleRequest::Add { number, rule } => self.stage_add(s, undo, uid, *number, rule, batch),
            RuleRequest::DeleteRules { numbers } => stage_delete_rules(s, undo, uid, numbers),
            RuleRequest::Flush => {
                flush_allowed(s, uid)?;
                let one_pass = s.set.one_pass;
                let empty = Source {
                    set: RuleSet {
                        pipes: Default::default(),
                        rules: Vec::new(),
                        one_pass,
                        sched: Default::default(),
                    },
                    meta: Default::default(),
                    rule_owners: Vec::new(),
                };
                undo.push(Undo::All(Box::new(std::mem::replace(s, empty))));
                Ok(Change::Flush)
            }
            RuleRequest::OnePass(on) => {
                may(uid, self.starter, "one-pass (a setting of the whole node)")?;
                undo.push(Undo::OnePass(s.set.one_pass));
                s.set.one_pass = *on;
                Ok(Change::OnePass(*on))
            }
            RuleRequest::Show { .. } => Err(Failure::Error("a show changes nothing".into())),
        }
    }

    /// Stages `add [N] RULE`: numbered after the last rule when N is not
    /// given; refused when `uid` may not add it or, outside a batch, when
    /// its pipe or queue does not exist.
    fn stage_add(
        &self,
        s: &mut Source,
        undo: &mut Vec<Undo>,
        uid: u32,
        number: Option<u32>,
        rule: &Rule,
        batch: bool,
    ) -> Result<Change, Failure> {
        let rule = match number {
            Some(_) => rule.clone(),
            None => {
                let n = s.next_number();
                if n > 65535 {
                    return Err(Failure::Error(
                        "automatic rule number beyond 65535: give one".into(),
                    ));
                }
                rule.clone()
                    .numbered(n)
                    .map_err(|e| Failure::Error(format!("'{}': {}", e.word, e.message)))?
            }
        };
        let owns = |kind: Kind, n: u32| {
            s.meta[kind_index(kind)]
                .get(&n)
                .is_some_and(|o| o.owner == uid)
        };
        let others_max = Rules::others_max(s, uid);
        self.may_add(uid, Some(rule.number), &rule, &owns, others_max)?;
        let exists = match target(&rule) {
            Some((Kind::Pipe, n)) => s.set.pipes.contains_key(&n),
            Some((_, n)) => s.set.sched.queues.contains_key(&n),
            None => true,
        };
        if let (false, false, Some((kind, n))) = (exists, batch, target(&rule)) {
            return Err(not_configured(&rule, kind, n));
        }
        // Same numbers keep their order: after every rule numbered ≤ it.
        let at = s.set.rules.partition_point(|x| x.number <= rule.number);
        s.set.rules.insert(at, rule.clone());
        s.rule_owners.insert(at, uid);
        undo.push(Undo::RuleIn(at));
        Ok(Change::AddRule(Box::new(rule)))
    }
}

/// Whether `uid` may delete every rule numbered `n` (refused naming the
/// first it may not); false: there is none.
fn may_delete_rules(s: &Source, uid: u32, n: u32) -> Result<bool, Failure> {
    let mut found = false;
    for (_, o) in s
        .set
        .rules
        .iter()
        .zip(&s.rule_owners)
        .filter(|(r, _)| r.number == n)
    {
        may(uid, *o, &format!("rule {n}"))?;
        found = true;
    }
    Ok(found)
}

fn may(uid: u32, owner: u32, what: &str) -> Result<(), Failure> {
    if uid == 0 || uid == owner {
        Ok(())
    } else {
        Err(Failure::Refused(format!(
            "{what} belongs to uid {owner}: only it or root may change or delete it"
        )))
    }
}

/// The action word of a rule, for messages.
fn action_word(r: &Rule) -> &'static str {
    match r.action {
        Action::Pipe(_) => "pipe",
        Action::Queue(_) => "queue",
        Action::Allow => "allow",
        Action::Deny => "deny",
        Action::Count => "count",
        Action::Skipto(_) => "skipto",
    }
}

/// `flush` deletes everything: only root, or a caller who owns it all.
fn flush_allowed(s: &Source, uid: u32) -> Result<(), Failure> {
    if uid == 0 {
        return Ok(());
    }
    let theirs = s
        .meta
        .iter()
        .flat_map(|m| m.values().map(|o| o.owner))
        .chain(s.rule_owners.iter().copied())
        .find(|&o| o != uid);
    match theirs {
        Some(o) => Err(Failure::Refused(format!(
            "flush: some pipes or rules belong to uid {o}: only root may delete them all"
        ))),
        None => Ok(()),
    }
}

/// Stages `delete N...`: every rule of each number, each `uid`'s to delete.
fn stage_delete_rules(
    s: &mut Source,
    undo: &mut Vec<Undo>,
    uid: u32,
    numbers: &[u32],
) -> Result<Change, Failure> {
    for n in numbers {
        if !may_delete_rules(s, uid, *n)? {
            return Err(Failure::Error(format!("rule {n} does not exist")));
        }
        while let Some(at) = s.set.rules.iter().position(|r| r.number == *n) {
            let rule = s.set.rules.remove(at);
            let owner = s.rule_owners.remove(at);
            undo.push(Undo::RuleOut(at, Box::new(rule), owner));
        }
    }
    Ok(Change::DeleteRules(numbers.to_vec()))
}
