//! The running rule set as the control plane keeps it, typed ([`Source`]:
//! the [`RuleSet`], each object's words and each object's and rule's owner
//! uid), and what undoes a staged change ([`Undo`]).

use super::Failure;
use linkem_core::rules::{statements, Action, ObjectDef, Rule, RuleSet, RulesError, Statement};
use linkem_ctl::{Kind, Request, RuleRequest};
use std::collections::BTreeMap;

/// An object's words after `config` and its owner.
#[derive(Debug, Clone)]
pub(in crate::control) struct Meta {
    pub(in crate::control) words: String,
    pub(in crate::control) owner: u32,
}

/// The running rule set, typed, with owners.
#[derive(Debug, Clone)]
pub struct Source {
    pub(in crate::control) set: RuleSet,
    /// By kind index ([`kind_index`]) and number.
    pub(in crate::control) meta: [BTreeMap<u32, Meta>; 3],
    /// The owner of each rule of `set.rules`, in the same order.
    pub(in crate::control) rule_owners: Vec<u32>,
}

pub(in crate::control) fn kind_index(k: Kind) -> usize {
    match k {
        Kind::Sched => 0,
        Kind::Queue => 1,
        Kind::Pipe => 2,
    }
}

pub(in crate::control) const KIND_WORDS: [&str; 3] = ["sched", "queue", "pipe"];

/// What undoes one step of staging.
pub(in crate::control) enum Undo {
    /// Object (kind index, number) was this before (None: absent).
    Object(usize, u32, Option<(ObjectDef, Meta)>),
    /// A rule was inserted at this index.
    RuleIn(usize),
    /// This rule and owner were removed from this index.
    RuleOut(usize, Box<Rule>, u32),
    /// Everything was this before (a flush).
    All(Box<Source>),
    OnePass(bool),
}

impl Source {
    /// Every object's number (with its kind's word) and every rule's.
    pub(in crate::control) fn numbers(&self) -> impl Iterator<Item = (&'static str, u32)> + '_ {
        self.meta
            .iter()
            .zip(KIND_WORDS)
            .flat_map(|(m, k)| m.keys().map(move |n| (k, *n)))
            .chain(self.set.rules.iter().map(|r| ("rule", r.number)))
    }

    /// The running set `set`, parsed from `text`, all owned by `owner`; the
    /// words of each object from its (last) line of `text`.
    pub fn new(text: &str, set: RuleSet, owner: u32) -> Source {
        let mut meta: [BTreeMap<u32, Meta>; 3] = Default::default();
        for line in statements(text).flatten() {
            if let Statement::Config {
                kind,
                number,
                words,
            } = line.statement
            {
                let k = KIND_WORDS
                    .iter()
                    .position(|w| *w == kind.word())
                    .expect("a kind");
                let words = words.join(" ");
                meta[k].insert(number, Meta { words, owner });
            }
        }
        // Only what the set holds (a file's flush does not remove objects).
        meta[0].retain(|n, _| set.sched.scheds.contains_key(n));
        meta[1].retain(|n, _| set.sched.queues.contains_key(n));
        meta[2].retain(|n, _| set.pipes.contains_key(n));
        let rule_owners = vec![owner; set.rules.len()];
        Source {
            set,
            meta,
            rule_owners,
        }
    }

    /// Object `number` of kind index `k`, as its `config` line defined it.
    pub(in crate::control) fn def(&self, k: usize, number: u32) -> Option<(ObjectDef, Meta)> {
        let meta = self.meta[k].get(&number)?.clone();
        let def = match k {
            0 => ObjectDef::Sched(Box::new(self.set.sched.scheds.get(&number)?.clone())),
            1 => ObjectDef::Queue(Box::new(self.set.sched.queues.get(&number)?.clone())),
            _ => ObjectDef::Pipe {
                def: Box::new(self.set.pipes.get(&number)?.clone()),
                sched: self
                    .set
                    .sched
                    .pipes
                    .get(&number)
                    .cloned()
                    .unwrap_or_default(),
                words: meta.words.clone(),
            },
        };
        Some((def, meta))
    }

    pub(in crate::control) fn remove(&mut self, k: usize, number: u32) {
        self.meta[k].remove(&number);
        match k {
            0 => {
                self.set.sched.scheds.remove(&number);
            }
            1 => {
                self.set.sched.queues.remove(&number);
            }
            _ => {
                self.set.pipes.remove(&number);
                self.set.sched.pipes.remove(&number);
            }
        }
    }

    pub(in crate::control) fn put(&mut self, k: usize, def: ObjectDef, meta: Meta) {
        self.meta[k].insert(def.number(), meta);
        def.insert_into(&mut self.set);
    }

    pub(in crate::control) fn undo(&mut self, undo: Vec<Undo>) {
        for u in undo.into_iter().rev() {
            match u {
                Undo::Object(k, n, old) => {
                    self.remove(k, n);
                    if let Some((def, meta)) = old {
                        self.put(k, def, meta);
                    }
                }
                Undo::RuleIn(at) => {
                    self.set.rules.remove(at);
                    self.rule_owners.remove(at);
                }
                Undo::RuleOut(at, rule, owner) => {
                    self.set.rules.insert(at, *rule);
                    self.rule_owners.insert(at, owner);
                }
                Undo::All(old) => *self = *old,
                Undo::OnePass(on) => self.set.one_pass = on,
            }
        }
    }

    /// The failure of deleting `kind number` while rules still send to it,
    /// naming them; `None` when none does.
    pub(in crate::control) fn users_of(&self, kind: Kind, number: u32) -> Option<Failure> {
        let users: Vec<String> = self
            .set
            .rules
            .iter()
            .filter(|r| target(r) == Some((kind, number)))
            .map(|r| r.number.to_string())
            .collect();
        let (rules, them) = match users.len() {
            0 => return None,
            1 => ("rule", "it"),
            _ => ("rules", "them"),
        };
        Some(Failure::Error(format!(
            "{} {number} is used by {rules} {}: delete or change {them} first",
            kind.name(),
            users.join(", ")
        )))
    }

    /// What only the whole set can tell after a change to an object: every
    /// queue's pipe and scheduler exist, every scheduler's pipe, and each
    /// queue's weight and `lmax` fit its scheduler. O(queues + schedulers).
    pub(in crate::control) fn check_objects(&self) -> Result<(), Failure> {
        linkem_core::sched::words::check(&self.set.sched, &self.set.pipes, &[])
            .map_err(|e| Failure::Error(format!("'{}': {}", e.word, e.message)))
    }

    /// The checks a batch's lines left to the whole batch, on the set they
    /// made: every object a deletion removed is unused, every rule's pipe or
    /// queue exists, the objects fit together. The failure names the
    /// request it comes from where one does (its index in `requests`).
    pub(in crate::control) fn check_whole(
        &self,
        requests: &[&Request],
    ) -> Result<(), (Failure, Option<usize>)> {
        for (i, r) in requests.iter().enumerate() {
            if let Request::Rule(RuleRequest::Delete { kind, number }) = r {
                if self.def(kind_index(*kind), *number).is_none() {
                    if let Some(f) = self.users_of(*kind, *number) {
                        return Err((f, Some(i)));
                    }
                }
            }
        }
        for rule in &self.set.rules {
            let missing = match target(rule) {
                Some((Kind::Pipe, n)) => !self.set.pipes.contains_key(&n),
                Some((_, n)) => !self.set.sched.queues.contains_key(&n),
                None => false,
            };
            if let (true, Some((kind, n))) = (missing, target(rule)) {
                let by = requests.iter().rposition(|r| {
                    matches!(r, Request::Rule(RuleRequest::Add { rule: a, .. })
                        if target(a) == Some((kind, n)))
                });
                return Err((not_configured(rule, kind, n), by));
            }
        }
        self.check_objects().map_err(|f| (f, None))
    }

    /// The set as a rule file: each object's `config` line, the rules in
    /// evaluation order, one-pass; what a recording keeps of a batch.
    pub(in crate::control) fn text(&self) -> String {
        let mut out = String::new();
        for k in [2, 0, 1] {
            for (n, m) in &self.meta[k] {
                out.push_str(&format!("{} {n} config {}\n", KIND_WORDS[k], m.words));
            }
        }
        for r in &self.set.rules {
            out.push_str(&format!("add {} {}\n", r.number, r.body()));
        }
        if !self.set.one_pass {
            out.push_str("set one-pass off\n");
        }
        out
    }

    /// The number of a rule added without one: 100 after the highest,
    /// claims' rules aside (beyond them when it would fall among them).
    pub(in crate::control) fn next_number(&self) -> u32 {
        let n = self
            .set
            .rules
            .iter()
            .map(|r| r.number)
            .filter(|n| !crate::control::claims::reserved(*n))
            .max()
            .unwrap_or(0)
            + 100;
        if crate::control::claims::reserved(n) {
            crate::control::claims::CLAIM_LAST + 1
        } else {
            n
        }
    }
}

/// A rule file as the control plane has always run it: one line per
/// object (its last `config`), then the rules numbered in evaluation order,
/// then one-pass; a rule's text is `add N BODY` wherever it came from.
pub fn normalized(text: &str) -> Result<String, RulesError> {
    let mut objects: [BTreeMap<u32, String>; 3] = Default::default();
    let mut rules: Vec<(u32, String)> = Vec::new();
    let mut one_pass = true;
    for read in statements(text) {
        match read?.statement {
            Statement::Add { number, body, .. } => {
                let at = rules.partition_point(|(n, _)| *n <= number);
                rules.insert(at, (number, body.join(" ")));
            }
            Statement::Config {
                kind,
                number,
                words,
            } => {
                let k = KIND_WORDS
                    .iter()
                    .position(|w| *w == kind.word())
                    .expect("a kind");
                objects[k].insert(number, words.join(" "));
            }
            Statement::OnePass(on) => one_pass = on,
            Statement::Flush => rules.clear(),
        }
    }
    let mut out = String::new();
    for (k, objects) in objects.iter().enumerate() {
        for (n, words) in objects {
            out.push_str(&format!("{} {n} config {words}\n", KIND_WORDS[k]));
        }
    }
    for (n, body) in &rules {
        out.push_str(&format!("add {n} {body}\n"));
    }
    if !one_pass {
        out.push_str("set one-pass off\n");
    }
    Ok(out)
}

/// The failure of a rule sending to pipe or queue `n` that does not exist.
pub(in crate::control) fn not_configured(rule: &Rule, kind: Kind, n: u32) -> Failure {
    let (what, how) = match kind {
        Kind::Pipe => ("pipe", format!("pipe {n} config ...")),
        _ => ("queue", format!("queue {n} config sched M ...")),
    };
    Failure::Error(format!(
        "rule {}: {what} {n} is not configured (add '{how}')",
        rule.number
    ))
}

/// The pipe or queue a rule sends to.
pub(in crate::control) fn target(r: &Rule) -> Option<(Kind, u32)> {
    match r.action {
        Action::Pipe(n) => Some((Kind::Pipe, n)),
        Action::Queue(n) => Some((Kind::Queue, n)),
        _ => None,
    }
}
