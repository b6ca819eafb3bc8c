//! The control plane of a bridge running a rule set (`linkem bridge --rules`):
//! `pipe|queue|sched N config|delete`, `add`, `delete`, `flush`, `set
//! one-pass`, and the shows, applied to the node of the running bridge.
//!
//! # How a change lands
//! A request arrives parsed once, typed: `pipe N config WORDS` as the
//! pipe's definition, `add` as the rule, by the rule file's own entry points
//! ([`linkem_core::rules::parse_object`], [`linkem_core::rules::parse_rule`],
//! through [`linkem_ctl::parse_line_for`]), so a word is refused exactly as
//! in a file, at its position. The running rule set is kept typed
//! ([`Source`]: the [`RuleSet`], each object's words and each object's and
//! rule's owner uid). A request (or each line of a batch, in order) is
//! checked against it and staged in place: who may change what, what must
//! exist (the object deleted, the rules deleted), what must still exist
//! after it (a rule's pipe or queue, a queue's pipe, a weight its
//! scheduler takes). A batch is checked as a rule file is, as a whole
//! ([`Source::check_whole`]), so its lines may come in any order a file's
//! may. A failure undoes every line staged and names the request and the
//! word. A single request becomes one [`Change`], applied at one instant
//! ([`NodeBridge::submit`], between two of the live stage's batches of
//! frames); a batch becomes the rule set it makes ([`Change::Rules`],
//! [`linkem_core::node::Node::update`]: pipes that stay keep their packets),
//! since its lines may name what only later lines make. A change is applied
//! in place ([`linkem_core::node::Node::change`]: a pipe
//! reconfigured keeps its queued packets and release times; a rule added
//! or deleted recompiles the rules only; the packets of a deleted pipe not
//! yet sent are counted as `flushed`). No rule file is rendered or parsed
//! again: a `pipe N config` costs its own words' parse and O(queues) of
//! checks, whatever the number of rules.
//!
//! Who may do what: every pipe, queue, scheduler and rule belongs to the uid
//! that created it (the rule file's to the uid that started linkem); only it
//! or root may reconfigure or delete it. `flush` needs every object to be the
//! caller's; `set one-pass` and `zero` belong to the starter and root.
//! Root and the starter may add any rule. Any other user (a member of
//! `--control-group`) may add only a rule whose action is `pipe N` or `queue
//! N` with N its own, or `count`, numbered after every rule that is not its
//! own: its rules see only the packets that everyone else's rules let pass
//! (with one-pass on, the default, none a pipe of theirs took), so a member
//! can neither `deny` nor slow down every flow, only the traffic no one
//! else claimed. The same checks run on each line of a batch as it arrives
//! ([`Rules::check`]) and again on the whole batch at `commit`.

mod show;
mod source;
mod stage;
#[cfg(test)]
pub(in crate::control) mod tests;

use super::claims::{reserved_in, ClaimConfig, Table};
use super::failure::Failure;
use linkem_core::model::Change;
use linkem_ctl::Request;
use linkem_io::creds::PeerCred;
use linkem_runtime::pipeline::{NodeBridge, SubmitError};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

pub use super::claims::ClaimDone;
pub(in crate::control) use source::target;
pub(in crate::control) use source::{kind_index, Meta, Undo, KIND_WORDS};
pub use source::{normalized, Source};

/// The pipes, queues and schedulers that earlier lines of a batch being
/// collected create, by (kind index, number): the caller's own at commit.
pub type Made = HashSet<(usize, u32)>;

/// The rule set of a running bridge and the bridge itself.
pub struct Rules {
    pub bridge: NodeBridge,
    pub(in crate::control) source: Mutex<Source>,
    pub(in crate::control) sides: [String; 2],
    /// Files the rule file named (profiles, distribution tables), as read at
    /// start: a change may name them again; otherwise only the system's
    /// netem tables by bare name are read (a client must not make linkem
    /// read files of its choosing).
    pub(in crate::control) files: Mutex<HashMap<String, String>>,
    pub(in crate::control) starter: u32,
    /// Rule counters at the last `zero`, by (number, body).
    pub(in crate::control) zero_base: Mutex<Vec<(u32, String, u64, u64)>>,
    /// Port claims, when on (`--claims`). Lock order: the claims, then the source.
    pub(in crate::control) claims: Option<(Mutex<Table>, ClaimConfig)>,
}

impl Rules {
    pub fn new(
        bridge: NodeBridge,
        source: Source,
        sides: [String; 2],
        files: HashMap<String, String>,
        starter: u32,
    ) -> Rules {
        Rules {
            bridge,
            source: Mutex::new(source),
            sides,
            files: Mutex::new(files),
            starter,
            zero_base: Mutex::new(Vec::new()),
            claims: None,
        }
    }

    /// Turns claims on; refused when the running rule set uses a number
    /// kept for them.
    pub fn with_claims(mut self, config: ClaimConfig) -> Result<Rules, String> {
        self.enable_claims(config)?;
        Ok(self)
    }

    /// Turns claims on: refused while a rule or object holds a claim's number.
    pub fn enable_claims(&mut self, config: ClaimConfig) -> Result<(), String> {
        reserved_in(
            self.source
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .numbers(),
        )?;
        self.claims = Some((Mutex::new(Table::default()), config));
        Ok(())
    }

    pub fn claims_on(&self) -> bool {
        self.claims.is_some()
    }

    pub fn starter(&self) -> u32 {
        self.starter
    }

    /// Parses a request line as this bridge reads it: its interface names
    /// for `recv`/`xmit`, the files of the start (then the system's tables)
    /// for `profile` and `distribution`.
    pub fn parse_line(&self, line: &str) -> Result<linkem_ctl::Line, linkem_ctl::ParseError> {
        let known = self.files.lock().unwrap_or_else(|p| p.into_inner());
        let mut files = |name: &str| -> Result<String, String> {
            match known.get(name) {
                Some(t) => Ok(t.clone()),
                None => crate::control::files::read(name),
            }
        };
        linkem_ctl::parse_line_for(line, &mut files, [&self.sides[0], &self.sides[1]])
    }

    /// Checks every request against the running rule set, each as it
    /// stands after the ones before, then applies all of them at one
    /// instant, or none. `lines` are the requests as typed (for messages).
    pub fn apply(
        &self,
        cred: &PeerCred,
        requests: &[&Request],
        lines: &[&str],
    ) -> Result<u64, Failure> {
        let mut source = self.source.lock().unwrap_or_else(|p| p.into_inner());
        let mut undo = Vec::new();
        let mut changes = Vec::with_capacity(requests.len());
        // A batch is checked as a rule file is: as a whole, so its lines may
        // come in any order a file's may (a scheduler before its pipe).
        let batch = requests.len() > 1;
        for (i, r) in requests.iter().enumerate() {
            let staged = match r {
                Request::Rule(rr) => self.stage(&mut source, &mut undo, cred.uid, rr, batch),
                _ => Err(Failure::Error(
                    "this emulator runs a rule set: it has no default link to change \
                     (change its pipes with 'pipe N config ...')"
                        .into(),
                )),
            };
            match staged {
                Ok(c) => changes.push(c),
                Err(f) => {
                    source.undo(undo);
                    return Err(in_batch(f, i, requests.len(), lines));
                }
            }
        }
        if batch {
            if let Err((f, i)) = source.check_whole(requests) {
                source.undo(undo);
                return Err(match i {
                    Some(i) => in_batch(f, i, requests.len(), lines),
                    None => f,
                });
            }
            // The batch's lines may name objects only later lines make: the
            // node takes the resulting set at one instant (pipes that stay
            // keep their packets), the text only for a recording.
            changes = vec![Change::Rules {
                set: Box::new(source.set.clone()),
                text: source.text().into(),
                files: Vec::new(),
            }];
        }
        // The source follows the node even when the bridge is stopping; a
        // change the stage refuses (one that duplicates on ports that cannot
        // send a copy) leaves both as they were.
        self.bridge.submit(changes).map_err(|e| {
            if e != SubmitError::Stopped {
                source.undo(undo);
            }
            Failure::Error(e.to_string())
        })
    }

    /// SIGHUP: the file's rule set replaces the running one at one instant
    /// (`Node::update`: pipes that stay keep their packets), its objects
    /// the starter's again; the claims held stay, their pipes and rules
    /// put back into the new set. Refused (the running set kept) when the
    /// file uses a number kept for claims.
    pub fn reload(&self, mut source: Source, files: HashMap<String, String>) -> Result<(), String> {
        let table = self
            .claims
            .as_ref()
            .map(|(t, _)| t.lock().unwrap_or_else(|p| p.into_inner()));
        let mut s = self.source.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(table) = &table {
            reserved_in(source.numbers())?;
            for c in table.iter() {
                for dir in 0..2 {
                    let n = c.numbers()[dir];
                    if let Some((def, meta)) = s.def(2, n) {
                        source.put(2, def, meta);
                    }
                    let old = s.set.rules.iter().position(|r| r.number == n);
                    if let Some(at) = old {
                        let rule = s.set.rules[at].clone();
                        let to = source.set.rules.partition_point(|x| x.number <= n);
                        source.set.rules.insert(to, rule);
                        source.rule_owners.insert(to, c.uid);
                    }
                }
            }
        }
        // What the new rules read, in name order, for a recording to copy.
        let read: std::collections::BTreeMap<_, _> =
            files.iter().map(|(n, t)| (n.clone(), t.clone())).collect();
        let change = Change::Rules {
            set: Box::new(source.set.clone()),
            text: source.text().into(),
            files: read.into_iter().collect(),
        };
        match self.bridge.submit(vec![change]) {
            // Once the bridge stops the new rules no longer matter.
            Ok(_) | Err(SubmitError::Stopped) => {}
            Err(e) => return Err(e.to_string()),
        }
        *self.files.lock().unwrap_or_else(|p| p.into_inner()) = files;
        *s = source;
        Ok(())
    }
}

/// Names the request of a batch that failed.
fn in_batch(f: Failure, i: usize, n: usize, lines: &[&str]) -> Failure {
    if n <= 1 {
        return f;
    }
    let line = lines.get(i).copied().unwrap_or("");
    let prefix = format!("request {} of the batch ('{line}'): ", i + 1);
    match f {
        Failure::Error(m) => Failure::Error(format!("{prefix}{m}")),
        Failure::Refused(m) => Failure::Refused(format!("{prefix}{m}")),
        Failure::Word {
            message,
            position,
            word,
        } => Failure::Word {
            message: format!("{prefix}{message}"),
            position,
            word,
        },
    }
}
