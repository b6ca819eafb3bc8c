//! How a running node takes a change: a whole rule set ([`Node::update`]) or one typed
//! change ([`Node::change`]), keeping what stays and deciding what cannot stay held.

use super::{Decision, InFlight, Node};
use crate::change::{Change, ChangeError};
use crate::order::ReleaseQueue;
use crate::pipe::Pipe;
use crate::rules::classify::Classifier;
use crate::rules::parse::{check_set, Action, ObjectDef, ObjectKind, Rule, RuleSet};

/// Where a held packet re-enters a changed list of rules: see [`Node::update`].
#[derive(Debug)]
struct RulePositions {
    /// Numbers of the old rules, in evaluation order.
    old: Vec<u32>,
    /// Numbers of the new rules, in evaluation order.
    new: Vec<u32>,
}

impl RulePositions {
    fn new(old: &[crate::rules::parse::Rule], new: &[crate::rules::parse::Rule]) -> Self {
        RulePositions {
            old: old.iter().map(|r| r.number).collect(),
            new: new.iter().map(|r| r.number).collect(),
        }
    }

    /// The new position of `next_rule`, the old position after the rule
    /// that sent the packet: after the new rule with that rule's number and
    /// rank among equal numbers, or before the first rule numbered higher
    /// when the new list has fewer rules of that number.
    fn next_rule(&self, next_rule: usize) -> usize {
        let Some(sent) = next_rule.checked_sub(1) else {
            return 0;
        };
        let Some(&n) = self.old.get(sent) else {
            return self.new.len();
        };
        let rank = sent - self.old.partition_point(|&m| m < n);
        let first = self.new.partition_point(|&m| m < n);
        let equal = self.new[first..].partition_point(|&m| m == n);
        first + (rank + 1).min(equal)
    }
}

impl Node {
    /// Applies one typed change at `now_ns`, in place where it can, with
    /// exactly the effect of [`Node::update`] with the rule set the change
    /// makes (decisions it forces appended to `out`). A change that would
    /// leave the set naming what does not exist, or that deletes what does
    /// not exist, is refused and changes nothing.
    ///
    /// - `pipe N config` of a closed-form pipe that stays closed-form: its
    ///   instances are reconfigured ([`Pipe::reconfigure`]: queued packets
    ///   keep their release times), or, when its mask or profile presence
    ///   changed, it starts anew, as `update` does; no other pipe, no rule
    ///   is touched: O(instances of the pipe).
    /// - `add`, `delete N`: the rule list is edited and compiled again, each
    ///   remaining rule keeping its counters; no pipe is touched; a held
    ///   packet re-enters at the rule after the one that sent it, found by
    ///   number as in `update`.
    /// - `set one-pass`: the flag changes; with one-pass on, packets between
    ///   two hops are decided now (as in `update`).
    /// - Everything else (a pipe created or deleted, one served by a
    ///   scheduler before or after, a queue or scheduler, `flush`, a whole
    ///   rule set): the node's rule set edited and handed to `update`.
    ///
    /// Every change restarts the rules' `prob` draws from the seed, as a
    /// rule set handed to `update` does, so that both paths decide alike.
    pub fn change(
        &mut self,
        change: Change,
        now_ns: u64,
        out: &mut Vec<Decision>,
    ) -> Result<(), ChangeError> {
        match change {
            Change::Link { .. } => Err(ChangeError::NoLink),
            Change::Rules { set, .. } => {
                check_set(&set).map_err(invalid)?;
                self.update(*set, now_ns, out);
                Ok(())
            }
            Change::Object(def) => self.change_object(*def, now_ns, out),
            Change::DeleteObject { kind, number } => self.delete_object(kind, number, now_ns, out),
            Change::AddRule(rule) => self.add_rule(*rule),
            Change::DeleteRules(numbers) => self.delete_rules(&numbers),
            Change::Flush => {
                let set = RuleSet {
                    pipes: Default::default(),
                    rules: Vec::new(),
                    one_pass: self.one_pass,
                    sched: Default::default(),
                };
                self.update(set, now_ns, out);
                Ok(())
            }
            Change::OnePass(on) => {
                self.one_pass = on;
                self.classifier.restart_draws(self.cfg.seed);
                self.settle_reinjections(out);
                Ok(())
            }
        }
    }

    /// `pipe|queue|sched N config`: a closed-form pipe that stays closed-form in place,
    /// anything else through [`Node::update`].
    fn change_object(
        &mut self,
        def: ObjectDef,
        now_ns: u64,
        out: &mut Vec<Decision>,
    ) -> Result<(), ChangeError> {
        if let ObjectDef::Pipe {
            def: pipe, sched, ..
        } = &def
        {
            let n = pipe.number;
            let scheduled_after = sched.kind.is_some()
                || sched.aqm.is_some()
                || self.sched_words.scheds.contains_key(&n)
                || self
                    .sched_words
                    .queues
                    .values()
                    .any(|q| q.parent.pipe() == n);
            match self.pipe_index(n) {
                Some(idx) if !self.sched.is_scheduled(idx) && !scheduled_after => {
                    let ObjectDef::Pipe {
                        def: pipe, sched, ..
                    } = def
                    else {
                        unreachable!("matched above")
                    };
                    self.set_closed_form_pipe(idx, *pipe, sched, now_ns);
                    return Ok(());
                }
                _ => {}
            }
        }
        let mut set = self.rule_set();
        def.insert_into(&mut set);
        check_set(&set).map_err(invalid)?;
        self.update(set, now_ns, out);
        Ok(())
    }

    /// `delete pipe|queue|sched N`, through [`Node::update`]; refused when it does not exist.
    fn delete_object(
        &mut self,
        kind: ObjectKind,
        number: u32,
        now_ns: u64,
        out: &mut Vec<Decision>,
    ) -> Result<(), ChangeError> {
        let mut set = self.rule_set();
        let had = match kind {
            ObjectKind::Pipe => {
                set.sched.pipes.remove(&number);
                set.pipes.remove(&number).is_some()
            }
            ObjectKind::Queue => set.sched.queues.remove(&number).is_some(),
            ObjectKind::Sched => set.sched.scheds.remove(&number).is_some(),
        };
        if !had {
            return Err(ChangeError::Invalid(format!(
                "{} {number} does not exist",
                kind.word()
            )));
        }
        check_set(&set).map_err(invalid)?;
        self.update(set, now_ns, out);
        Ok(())
    }

    /// `add N ...`: the rule inserted after every rule numbered at most N; refused when
    /// its pipe or queue is not configured.
    fn add_rule(&mut self, rule: Rule) -> Result<(), ChangeError> {
        if !(1..=65535).contains(&rule.number) {
            return Err(ChangeError::Invalid(format!(
                "rule number {} is not 1..65535",
                rule.number
            )));
        }
        match rule.action {
            Action::Pipe(n) if self.pipe_index(n).is_none() => {
                return Err(ChangeError::Invalid(format!(
                    "rule {}: pipe {n} is not configured",
                    rule.number
                )))
            }
            Action::Queue(q) if self.sched.queue_pipe(q).is_none() => {
                return Err(ChangeError::Invalid(format!(
                    "rule {}: queue {q} is not configured",
                    rule.number
                )))
            }
            _ => {}
        }
        self.edit_rules(|rules, counters| {
            // Same numbers keep their order: after every rule numbered ≤ it.
            let at = rules.partition_point(|r| r.number <= rule.number);
            rules.insert(at, rule);
            counters.insert(at, (0, 0));
        });
        Ok(())
    }

    /// `delete N...`: every rule of those numbers; refused when one does not exist.
    fn delete_rules(&mut self, numbers: &[u32]) -> Result<(), ChangeError> {
        let rules = self.classifier.rules();
        if let Some(n) = numbers
            .iter()
            .find(|&&n| !rules.iter().any(|r| r.number == n))
        {
            return Err(ChangeError::Invalid(format!("rule {n} does not exist")));
        }
        self.edit_rules(|rules, counters| {
            let mut keep = rules.iter().map(|r| !numbers.contains(&r.number));
            counters.retain(|_| keep.next().unwrap_or(true));
            rules.retain(|r| !numbers.contains(&r.number));
        });
        Ok(())
    }

    /// `pipe N config` of closed-form pipe `idx` that stays closed-form.
    fn set_closed_form_pipe(
        &mut self,
        idx: usize,
        def: crate::pipe::PipeDef,
        sched: crate::sched::words::PipeSched,
        now_ns: u64,
    ) {
        self.sched_words.pipes.insert(def.number, sched);
        let p = &mut self.pipes[idx];
        if p.can_reconfigure(&def) {
            p.reconfigure(def, now_ns);
        } else {
            // As a pipe `update` does not keep: anew, its instances gone.
            self.budget.live -= p.active_instances();
            self.budget.bytes -= p.charged_bytes();
            *p = Pipe::new(def, self.cfg.seed);
            if self.start_ns.is_some() {
                p.start(now_ns);
            }
        }
        self.classifier.restart_draws(self.cfg.seed);
    }

    /// Edits the rule list (each rule with its counters) and compiles it
    /// again; held packets re-enter at the same rule, found by number.
    fn edit_rules(&mut self, edit: impl FnOnce(&mut Vec<Rule>, &mut Vec<(u64, u64)>)) {
        let seed = self.cfg.seed;
        let old = std::mem::replace(&mut self.classifier, Classifier::new(Vec::new(), seed));
        let (mut rules, mut counters) = old.into_parts();
        let old_numbers: Vec<u32> = rules.iter().map(|r| r.number).collect();
        edit(&mut rules, &mut counters);
        let positions = RulePositions {
            old: old_numbers,
            new: rules.iter().map(|r| r.number).collect(),
        };
        self.classifier = Classifier::new(rules, seed);
        self.classifier.counters = counters;
        for f in self.in_flight.values_mut() {
            f.next_rule = positions.next_rule(f.next_rule);
        }
        // Popped in (release, push) order and pushed again: the order stays.
        let mut held = std::mem::take(&mut self.reinject);
        while let Some((r, mut f)) = held.pop() {
            f.next_rule = positions.next_rule(f.next_rule);
            self.reinject.push(r, f);
        }
    }

    /// A changed rule set (`linkem ctl`) applied at `now_ns` to this node.
    /// Decisions made by the change (below) are appended to `out`; every
    /// other packet the node holds ([`Node::holds_packets`]) stays held and
    /// is decided later, as without the change. No event is added before
    /// those pending: [`Node::next_event_ns`] is no earlier than before.
    ///
    /// - A closed-form pipe whose number stays, with the same mask and
    ///   profile presence, and served by no scheduler before or after, keeps
    ///   its instances: their links are reconfigured ([`Pipe::reconfigure`]),
    ///   so packets already queued keep their release times and new ones
    ///   queue behind them.
    /// - A scheduled pipe whose number stays with the same scheduler (type,
    ///   parameters, mask; the same queues with the same numbers, parameters
    ///   and masks, the pipe's own `queue` limit and AQM included) is kept
    ///   whole: instances, queued packets, counters, the link's busy-until
    ///   time t_L and its next service. If its link words changed (rate,
    ///   delay, impairments, `burst`), its instances' links are reconfigured
    ///   as a closed-form pipe's are: the packet on the wire and those
    ///   already served keep their times, the queued ones are served at the
    ///   new parameters from `now_ns` on, after the link frees.
    /// - Any other scheduled pipe of this node (its scheduler changed, it is
    ///   no longer scheduled, or deleted) is drained: every packet waiting in
    ///   it is decided now, as if nothing more arrived there (the fate and
    ///   release time its old queues, AQM and link give it, possibly later
    ///   than `now_ns`; with one-pass off a delivered one then waits to
    ///   re-enter the rules, below). Such a pipe, as every pipe not kept
    ///   above, starts anew as in a new node.
    /// - A packet between two hops (`set one-pass off`) stays, to re-enter
    ///   the new rules at its release time, unless the new set has one-pass
    ///   on or the pipe it last left was deleted: then it is decided now,
    ///   delivered at its release time from that pipe (`Decision::pipe`;
    ///   the caller flushes a deleted pipe's packets). A held packet re-enters
    ///   at the rule after the one that sent it, found by number: after the
    ///   rule with its number and position among equal numbers, or, if there
    ///   is none, before the first rule numbered higher.
    /// - A rule that stays (same number and text) keeps its packet and byte
    ///   counters; `unmatched` is kept.
    pub fn update(&mut self, set: RuleSet, now_ns: u64, out: &mut Vec<Decision>) {
        self.input_at(now_ns);
        let new_sched: Vec<u32> = set
            .pipes
            .keys()
            .copied()
            .filter(|&n| set.sched.scheduled(n))
            .collect();
        let mut set = set;
        let rules = std::mem::take(&mut set.rules);
        let mut next = Node::new(set, self.cfg);
        let renumber = if self.classifier.same_rules(&rules) {
            None
        } else {
            Some(RulePositions::new(self.classifier.rules(), &rules))
        };
        if renumber.is_none() {
            // Rule counters stay with the compiled rules.
            let old = std::mem::replace(&mut self.classifier, next.classifier);
            next.classifier = old.renew(rules, self.cfg.seed);
        } else {
            next.classifier = Classifier::new(rules, self.cfg.seed);
            next.classifier.carry_counters(&self.classifier);
        }
        let mut old: Vec<Option<Pipe>> = std::mem::take(&mut self.pipes)
            .into_iter()
            .enumerate()
            .map(|(i, p)| (!self.sched.is_scheduled(i)).then_some(p))
            .collect();
        let mut live = 0;
        let mut charged = 0;
        for p in next.pipes.iter_mut() {
            let n = p.def.number;
            let at = self.pipe_at.get(n as usize).copied().unwrap_or(u32::MAX);
            let taken = match old.get_mut(at as usize) {
                Some(slot) if !new_sched.contains(&n) => slot.take(),
                _ => None,
            };
            match taken {
                Some(mut kept) if kept.can_reconfigure(&p.def) => {
                    kept.reconfigure((*p.def).clone(), now_ns);
                    *p = kept;
                }
                _ => {}
            }
            live += p.active_instances();
            charged += p.charged_bytes();
        }
        // Held packets move over (scheduled ones by the tag their scheduler
        // knows them by), their next rule found again in the new rules.
        let renumber = |i: usize| renumber.as_ref().map_or(i, |r| r.next_rule(i));
        next.seq = self.seq;
        next.in_flight = std::mem::take(&mut self.in_flight);
        for f in next.in_flight.values_mut() {
            f.next_rule = renumber(f.next_rule);
        }
        // Popped in (release, push) order and pushed again: the order stays.
        while let Some((r, mut f)) = self.reinject.pop() {
            f.next_rule = renumber(f.next_rule);
            next.reinject.push(r, f);
        }
        next.sched
            .carry_over(std::mem::take(&mut self.sched), now_ns);
        next.finish_departures(out);
        next.settle_reinjections(out);
        next.budget.live = live + next.sched.active_instances();
        next.budget.bytes = charged + next.sched.charged_bytes();
        next.unmatched = self.unmatched;
        next.next_sweep_ns = self.next_sweep_ns;
        next.clock_ns = self.clock_ns;
        next.start_ns = self.start_ns;
        if next.start_ns.is_some() {
            // The pipes kept have their origin; the new ones start here.
            next.start_pipes(now_ns);
        }
        *self = next;
    }

    /// After a change: decides the reinjections that cannot re-enter the
    /// rules (one-pass on, or the pipe they last left deleted) as delivered
    /// at their release time.
    fn settle_reinjections(&mut self, out: &mut Vec<Decision>) {
        let gone = |n: u32| self.pipe_at.get(n as usize).is_none_or(|&i| i == u32::MAX);
        let stuck = |f: &InFlight| self.one_pass || f.d.pipe.is_some_and(gone);
        let mut held = std::mem::take(&mut self.reinject);
        let mut kept = ReleaseQueue::new();
        while let Some((r, f)) = held.pop() {
            if stuck(&f) {
                debug_assert_eq!(f.d.release_ns, r);
                out.push(f.d);
            } else {
                kept.push(r, f);
            }
        }
        self.reinject = kept;
    }
}

/// A change that leaves the rule set naming what does not exist.
fn invalid(e: crate::rules::RulesError) -> ChangeError {
    ChangeError::Invalid(format!("'{}': {}", e.word, e.message))
}
