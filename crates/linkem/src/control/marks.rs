//! Marks: when something changed a link, for what watches it (the web page's
//! charts draw them): a control change applied (its request lines as typed),
//! a schedule step, a claim made, changed, released or expired. Each [`Model`]
//! keeps the last [`MAX_MARKS`] in a ring, numbered by a sequence that only
//! grows, so a reader asks for what came since the last number it saw
//! ([`Model::marks_since`]).
//!
//! Schedule steps are applied inside the model by the live stage, lazily, at
//! their own instants, with no word to the control side. Their instants are
//! known from the start, though: origin (the model's start, or the change
//! that gave the link its schedule) + loop × period + the step's time, as
//! `linkem_core::Link` computes them. So each direction's schedule is
//! followed here by a clock of its own, and the steps due are marked when
//! the marks are read or a mark is added, each with its own instant: a step
//! is marked at most one read late, never at a wrong time.
//!
//! A socket of several links (a group, a lab) keeps its members' marks in
//! their own rings, named by the member; its own ring takes theirs over
//! when read, in order of their instants, numbered anew.

use super::claims::{Claim, ClaimDone};
use super::{Failure, Model, PeerCred, Running};
use linkem_core::config::schedule::Schedule;
use linkem_core::LinkConfig;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

/// The directions as the control protocol words them.
pub const DIRECTION_WORDS: [&str; 2] = ["a-to-b", "b-to-a"];
/// Marks a model keeps; older ones are dropped.
pub const MAX_MARKS: usize = 1000;
/// A mark's text at most, bytes (a batch's lines are bounded in number, not
/// to what a ring of marks should hold).
pub const MAX_MARK_TEXT_BYTES: usize = 512;

/// What made a mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkKind {
    Change,
    Schedule,
    Claim,
}

impl MarkKind {
    /// `change`, `schedule`, `claim`.
    pub fn word(self) -> &'static str {
        match self {
            MarkKind::Change => "change",
            MarkKind::Schedule => "schedule",
            MarkKind::Claim => "claim",
        }
    }
}

/// One mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// Its number in its model's ring: one more than the mark before.
    pub seq: u64,
    /// When it took effect (CLOCK_REALTIME ns, the clock of `at_ns`).
    pub at_ns: u64,
    /// The link it is about (a model's name; a member's in a group).
    pub link: Option<String>,
    pub kind: MarkKind,
    pub text: String,
}

/// Where one direction's schedule stands: the next step to mark.
#[derive(Debug, Clone)]
struct ScheduleClock {
    schedule: Arc<Schedule>,
    origin_ns: u64,
    next: usize,
    cycle: u64,
}

impl ScheduleClock {
    fn new(schedule: Arc<Schedule>, origin_ns: u64) -> Self {
        ScheduleClock {
            schedule,
            origin_ns,
            next: 0,
            cycle: 0,
        }
    }

    /// The next step due at or before `now_ns` (its instant and link),
    /// moving past it: `linkem_core::Link`'s rule, loops begun and ended
    /// before now skipped.
    fn due(&mut self, now_ns: u64) -> Option<(u64, Arc<LinkConfig>)> {
        let changes = &self.schedule.changes;
        if self.next == changes.len() {
            let period = self.schedule.period_ns?;
            self.next = 0;
            self.cycle += 1;
            let begun = now_ns.saturating_sub(self.origin_ns) / period.max(1);
            self.cycle = self.cycle.max(begun.saturating_sub(1));
        }
        let (at_ns, cfg) = changes.get(self.next)?;
        let period = self.schedule.period_ns.unwrap_or(0);
        let instant = self
            .origin_ns
            .saturating_add(self.cycle.saturating_mul(period))
            .saturating_add(*at_ns);
        if instant > now_ns {
            return None;
        }
        self.next += 1;
        Some((instant, cfg.clone()))
    }
}

/// The ring and what feeds it.
#[derive(Default)]
struct Ring {
    marks: VecDeque<Mark>,
    next_seq: u64,
    /// Each direction's schedule, when its link runs one.
    schedules: [Option<ScheduleClock>; 2],
    /// A group's: the next number to read of each member's ring.
    members_seq: Vec<u64>,
}

impl Ring {
    fn push(&mut self, at_ns: u64, link: Option<String>, kind: MarkKind, text: String) {
        if self.marks.len() == MAX_MARKS {
            self.marks.pop_front();
        }
        self.marks.push_back(Mark {
            seq: self.next_seq,
            at_ns,
            link,
            kind,
            text: bounded(text),
        });
        self.next_seq += 1;
    }

    /// Marks the schedule steps due by `now_ns` (at most [`MAX_MARKS`] per
    /// direction and call: more would only push each other out).
    fn catch_up(&mut self, now_ns: u64, link: &str) {
        for (i, dir) in DIRECTION_WORDS.iter().enumerate() {
            let mut steps = Vec::new();
            if let Some(clock) = self.schedules[i].as_mut() {
                while steps.len() < MAX_MARKS {
                    let Some((at_ns, cfg)) = clock.due(now_ns) else {
                        break;
                    };
                    let text = format!("schedule {} {dir}: {cfg}", clock.schedule.name);
                    steps.push((at_ns, text));
                }
            }
            for (at_ns, text) in steps {
                self.push(at_ns, Some(link.to_string()), MarkKind::Schedule, text);
            }
        }
    }
}

/// `text` cut to [`MAX_MARK_TEXT_BYTES`] at a character boundary.
fn bounded(mut text: String) -> String {
    if text.len() > MAX_MARK_TEXT_BYTES {
        let mut end = MAX_MARK_TEXT_BYTES - '…'.len_utf8();
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// A model's marks.
#[derive(Default)]
pub struct Marks {
    ring: Mutex<Ring>,
}

impl Marks {
    /// The marks of a model whose links are `links` (a->b, b->a), started at
    /// `origin_ns` (None: no schedule of its runs by the model's clock).
    pub(super) fn new(links: [&LinkConfig; 2], origin_ns: Option<u64>) -> Marks {
        let marks = Marks::default();
        if let Some(origin) = origin_ns {
            let mut ring = marks.lock();
            for (i, l) in links.iter().enumerate() {
                ring.schedules[i] = l.schedule.clone().map(|s| ScheduleClock::new(s, origin));
            }
        }
        marks
    }

    fn lock(&self) -> MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Model {
    /// The marks numbered `seq` and after (oldest first; those dropped from
    /// the ring are gone), and the number to ask from next time.
    pub fn marks_since(&self, seq: u64) -> (Vec<Mark>, u64) {
        let now_ns = linkem_runtime::clock::now_ns();
        let mut ring = self.marks.lock();
        if let Running::Group(members) = &self.running {
            ring.members_seq.resize(members.len(), 0);
            let mut taken = Vec::new();
            for (m, next) in members.iter().zip(ring.members_seq.iter_mut()) {
                let (marks, after) = m.marks_since(*next);
                *next = after;
                taken.extend(marks);
            }
            taken.sort_by_key(|m| m.at_ns);
            for m in taken {
                ring.push(m.at_ns, m.link, m.kind, m.text);
            }
        }
        ring.catch_up(now_ns, &self.name);
        let marks = ring
            .marks
            .iter()
            .filter(|m| m.seq >= seq)
            .cloned()
            .collect();
        (marks, ring.next_seq)
    }

    /// Marks what took effect at `at_ns` on this model's link (its name).
    pub fn mark(&self, kind: MarkKind, at_ns: u64, text: String) {
        let mut ring = self.marks.lock();
        ring.catch_up(at_ns, &self.name);
        ring.push(at_ns, Some(self.name.clone()), kind, text);
    }

    /// A change applied at `at_ns` by `lines` (as typed, a batch's joined
    /// with "; ").
    pub fn mark_change(&self, at_ns: u64, lines: &[&str]) {
        self.mark(MarkKind::Change, at_ns, lines.join("; "));
    }

    /// `claim ...`/`release ...` on the running rules at `now_ns`: counted
    /// as a change and marked when done.
    pub fn claim(
        &self,
        cred: &PeerCred,
        c: &linkem_ctl::ClaimRequest,
        now_ns: u64,
    ) -> Result<ClaimDone, Failure> {
        let done = match self.rules() {
            Some(r) => r.claim(cred, c, now_ns)?,
            None => {
                return Err(Failure::Error(
                    "claims are off in this emulator (start it with --rules and --claims)".into(),
                ))
            }
        };
        self.counters
            .changes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let c = &done.claim;
        let text = format!("{} {} by uid {}", done.what, c.name(), c.uid);
        self.mark(MarkKind::Claim, done.at_ns, text);
        Ok(done)
    }

    /// Removes the claims whose time is up at `now_ns` (with claims on),
    /// marking each that went.
    pub fn expire_claims(&self, now_ns: u64) -> Vec<(Claim, Result<u64, Failure>)> {
        let Some(rules) = self.rules().filter(|r| r.claims_on()) else {
            return Vec::new();
        };
        let gone = rules.expire_claims(now_ns);
        for (c, result) in &gone {
            if let Ok(at_ns) = result {
                let text = format!("expired {} of uid {}", c.name(), c.uid);
                self.mark(MarkKind::Claim, *at_ns, text);
            }
        }
        gone
    }

    /// Each direction's link as its schedule has made it by now (the step
    /// last due; a loop keeps its last step until its next first), None
    /// without a schedule or before its first step.
    pub fn scheduled_now(&self) -> [Option<Arc<LinkConfig>>; 2] {
        let mut ring = self.marks.lock();
        ring.catch_up(linkem_runtime::clock::now_ns(), &self.name);
        ring.schedules.each_ref().map(|c| {
            let c = c.as_ref()?;
            let changes = &c.schedule.changes;
            match c.next {
                0 if c.cycle > 0 => changes.last(),
                0 => None,
                n => changes.get(n - 1),
            }
            .map(|(_, cfg)| cfg.clone())
        })
    }

    /// The links became `links` at `at_ns` (None: unchanged): a schedule
    /// put on a direction starts there, one taken off stops, the same one
    /// goes on (as `linkem_core::Link` runs them). Steps due before the
    /// change are marked first.
    pub(super) fn follow_schedules(&self, at_ns: u64, links: [Option<&LinkConfig>; 2]) {
        let mut ring = self.marks.lock();
        ring.catch_up(at_ns, &self.name);
        for (i, l) in links.iter().enumerate() {
            let Some(l) = l else { continue };
            let same = match (&ring.schedules[i], &l.schedule) {
                (Some(c), Some(s)) => c.schedule == *s,
                _ => false,
            };
            if !same {
                ring.schedules[i] = l.schedule.clone().map(|s| ScheduleClock::new(s, at_ns));
            }
        }
    }
}

#[cfg(test)]
#[path = "marks_tests.rs"]
mod tests;
