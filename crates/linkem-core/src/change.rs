//! A change to a running model, typed: what a control request, a reload and
//! a recorded change become, parsed once ([`crate::rules::parse_object`],
//! [`crate::rules::parse_rule`]) and applied by [`crate::model::Model::apply`].
//! Its `Display` is the one control line that carries it, so a recording
//! keeps changes as lines and a replay parses them back to the same changes.

use crate::config::LinkConfig;
use crate::rules::parse::{ObjectDef, ObjectKind, Rule, RuleSet};

/// A change to a running model, parsed and checked before it reaches the model.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// The plain link of side a (`sides[0]`), side b, or both becomes exactly
    /// `config` ([`crate::link::Link::reconfigure`]: packets decided keep their times).
    Link {
        /// Which sides' links change.
        sides: [bool; 2],
        /// Their new parameters.
        config: Box<LinkConfig>,
    },
    /// The node's rule set becomes this one ([`crate::node::Node::update`]: pipes that stay
    /// keep their queued packets and state): a reload.
    Rules {
        /// The rules, parsed.
        set: Box<RuleSet>,
        /// The rule file's text they were parsed from, kept for recordings.
        text: std::sync::Arc<str>,
        /// The files that text read (profiles, tables), by the name the rules
        /// gave each, with the text read: what a recording copies so that its
        /// replay reads the same bytes. Empty when the set was made from files
        /// already read (a control batch reads the start's or a table).
        files: Vec<(String, String)>,
    },
    /// `pipe|queue|sched N config WORDS`: the object is created, or replaced
    /// whole by this definition ([`crate::node::Node::change`]: a closed-form pipe keeps
    /// its instances and their queued packets).
    Object(Box<ObjectDef>),
    /// `pipe|queue|sched N delete`: the object goes (nothing may still name it).
    DeleteObject {
        /// Which kind of object.
        kind: ObjectKind,
        /// Its number.
        number: u32,
    },
    /// `add N BODY`: the rule, numbered, joins the rules after every rule
    /// numbered ≤ N; its pipe or queue must exist.
    AddRule(Box<Rule>),
    /// `delete N...`: every rule of each number goes (each must exist).
    DeleteRules(Vec<u32>),
    /// `flush`: every rule, pipe, queue and scheduler goes (a control
    /// request's flush, not a rule file's, which keeps the objects).
    Flush,
    /// `set one-pass on|off`.
    OnePass(bool),
}

impl Change {
    /// Whether the model would duplicate packets after this change: a link
    /// or a pipe it sets has `duplicate` above 0. A front end whose ports
    /// can send each packet only once (host mode) refuses such a change.
    pub fn duplicates(&self) -> bool {
        match self {
            Change::Link { config, .. } => config.duplicate > 0.0,
            Change::Rules { set, .. } => set.pipes.values().any(|p| p.link.duplicate > 0.0),
            Change::Object(def) => match def.as_ref() {
                ObjectDef::Pipe { def, .. } => def.link.duplicate > 0.0,
                ObjectDef::Queue(_) | ObjectDef::Sched(_) => false,
            },
            Change::DeleteObject { .. }
            | Change::AddRule(_)
            | Change::DeleteRules(_)
            | Change::Flush
            | Change::OnePass(_) => false,
        }
    }
}

impl std::fmt::Display for Change {
    /// One line a control request would carry for the change (`replace a-to-b
    /// WORDS`, `pipe 3 config delay 5ms`, `add 100 pipe 3 ip`): the control
    /// protocol's parse of the line gives the same change back. A whole rule
    /// set is named by its size only, its text being in
    /// [`Change::Rules::text`].
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::Link { sides, config } => {
                let dir = match sides {
                    [true, false] => "a-to-b",
                    [false, true] => "b-to-a",
                    _ => "both",
                };
                write!(f, "replace {dir} {config}")
            }
            Change::Rules { set, .. } => write!(f, "rules ({} rules)", set.rules.len()),
            Change::Object(def) => {
                let (kind, n) = (def.kind().word(), def.number());
                match def.words() {
                    "" => write!(f, "{kind} {n} config"),
                    words => write!(f, "{kind} {n} config {words}"),
                }
            }
            Change::DeleteObject { kind, number } => write!(f, "{} {number} delete", kind.word()),
            Change::AddRule(rule) => write!(f, "add {} {}", rule.number, rule.body()),
            Change::DeleteRules(numbers) => {
                f.write_str("delete")?;
                numbers.iter().try_for_each(|n| write!(f, " {n}"))
            }
            Change::Flush => f.write_str("flush"),
            Change::OnePass(on) => write!(f, "set one-pass {}", if *on { "on" } else { "off" }),
        }
    }
}

/// Why a [`Change`] does not fit the model it was given to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    /// A rules change to a plain link.
    #[error("this emulator runs a plain link, not a rule set")]
    NoRuleSet,
    /// A link change to a node of rules.
    #[error("this emulator runs a rule set: change its pipes, not the link")]
    NoLink,
    /// A change that would leave the rule set naming what does not exist
    /// (a rule's pipe, a queue's scheduler), deleting what does not exist,
    /// or a queue whose weight its scheduler refuses.
    #[error("{0}")]
    Invalid(String),
    /// The model's driver has stopped: nothing applies any more.
    #[error("the emulator is stopping: change not applied")]
    Stopped,
}
