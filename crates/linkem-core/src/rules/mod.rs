//! ipfw/dnctl rule sets: the words users type, parsed ([`parse`]), compiled
//! for fast matching ([`classify`]), and the packet fields they read ([`flow`]).
//!
//! A rule file holds lines as typed after `ipfw` or `dnctl` (the leading word
//! may be kept), `#` and `//` start comments:
//!
//! ```text
//! pipe 10 config bw 2000Kbit/s delay 3ms
//! add 100 pipe 10 in dst-ip 192.0.2.0/24
//! add 200 prob 0.05 deny src-ip 10.0.0.0/8
//! set one-pass off
//! ```
//!
//! Semantics follow ipfw(8): rules are tried in number order (same numbers in
//! file order), the first whose options all match takes its action (`count`
//! counts and goes on, `skipto N` goes on at the first rule numbered ≥ N, a
//! failed `prob` goes on); a packet no rule takes passes unimpaired (linkem has
//! no default deny). With one-pass off, a packet leaving a pipe goes back to
//! the rule after the one that sent it.

pub mod classify;
pub mod flow;
pub mod parse;

pub use classify::{Classifier, Hit};
pub use flow::{FlowKey, L2Kind, SocketOwner};
pub use parse::{
    check_set, parse_decimal, parse_object, parse_rule, parse_rules, parse_rules_cached,
    rule_target, says_something, statements, Action, Cond, CondKind, Line, Net, ObjectDef,
    ObjectKind, Rule, RuleCache, RuleSet, RulesError, Statement, Statements,
};

/// Which interface a packet came in on. Replay feeds everything as `A`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// Received on IF_A, to be sent on IF_B (`in`, `a-to-b`).
    A,
    /// Received on IF_B, to be sent on IF_A (`out`, `b-to-a`).
    B,
}

impl Side {
    /// 0 for [`Side::A`], 1 for [`Side::B`]: the index of per-side arrays.
    pub fn index(self) -> usize {
        self as usize
    }
}
