//! The control plane of a bridge running a rule set (`linkem bridge --rules`):
//! `pipe|queue|sched N config|delete`, `add`, `delete`, `flush`, `set
//! one-pass`, and the shows, applied to the node of the running bridge.
//!
//! The running rule set is kept as its source: one line per pipe, queue and
//! scheduler (`pipe N config WORDS`), one per rule (`add NUM BODY`, in
//! evaluation order) and the one-pass flag, each with the uid that created it.
//! A change (or a batch) is applied to a copy of that source, the copy is
//! rendered as a rule file and parsed whole by the rule file's own parser
//! ([`linkem_core::rules::parse_rules`]), so a request is checked exactly as
//! the same line in a file would be, together with everything it depends on
//! (a rule naming a pipe that is deleted in the same batch fails). Only a
//! copy that parses is handed to the live stage that owns the node
//! ([`NodeBridge::submit`], a `Change::Rules`), applied between two of its
//! batches at one instant: pipes keep their
//! queued packets and release times ([`linkem_core::node::Node::update`]);
//! the packets of a deleted pipe not yet sent are counted as `flushed`.
//! A failure changes nothing and names the request and word.
//!
//! Cost of a change: a parse of the whole rule set (microseconds for tens of
//! rules), a wake-up of the live stage and its answer, and the node's update
//! there between two batches.
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

use super::failure::Failure;
use crate::render::node::{node_json, pipes_text};
use crate::render::sched::{self, Only};
use linkem_core::model::Change;
use linkem_core::rules::{
    parse_rules_cached, rule_target, statements, ObjectKind, RuleCache, RuleSet, RulesError,
    Statement,
};
use linkem_ctl::{Kind, Request, RuleRequest};
use linkem_io::creds::PeerCred;
use linkem_runtime::pipeline::NodeBridge;
use serde_json::json;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

/// One pipe, queue or scheduler: the words after `config`, and its owner.
#[derive(Debug, Clone)]
struct Object {
    words: String,
    owner: u32,
    /// Index of the request of the batch being checked that set it.
    by: Option<usize>,
}

#[derive(Debug, Clone)]
struct RuleLine {
    number: u32,
    body: String,
    owner: u32,
    by: Option<usize>,
}

/// The rule set as lines, with owners.
#[derive(Debug, Clone)]
pub struct Source {
    objects: [BTreeMap<u32, Object>; 3],
    rules: Vec<RuleLine>,
    one_pass: bool,
}

fn kind_index(k: Kind) -> usize {
    match k {
        Kind::Sched => 0,
        Kind::Queue => 1,
        Kind::Pipe => 2,
    }
}

const KIND_WORDS: [&str; 3] = ["sched", "queue", "pipe"];

fn object_index(k: ObjectKind) -> usize {
    match k {
        ObjectKind::Sched => 0,
        ObjectKind::Queue => 1,
        ObjectKind::Pipe => 2,
    }
}

impl Source {
    /// The lines of a rule file, read by the rule parser's own reader
    /// ([`linkem_core::rules::statements`]: the same numbers, the same
    /// numbering of unnumbered rules, `flush` and one-pass), all owned by
    /// `owner`. An error is the parser's for the first line it cannot read.
    pub fn from_text(text: &str, owner: u32) -> Result<Source, RulesError> {
        let mut s = Source {
            objects: Default::default(),
            rules: Vec::new(),
            one_pass: true,
        };
        for read in statements(text) {
            match read?.statement {
                Statement::Add { number, body, .. } => s.insert_rule(RuleLine {
                    number,
                    body: body.join(" "),
                    owner,
                    by: None,
                }),
                Statement::Config {
                    kind,
                    number,
                    words,
                } => {
                    s.objects[object_index(kind)].insert(
                        number,
                        Object {
                            words: words.join(" "),
                            owner,
                            by: None,
                        },
                    );
                }
                Statement::OnePass(on) => s.one_pass = on,
                Statement::Flush => s.rules.clear(),
            }
        }
        Ok(s)
    }

    /// The failure of deleting `kind number` while rules still send to it,
    /// naming them; `None` when none does or it exists again.
    fn users_of(&self, kind: Kind, number: u32) -> Option<Failure> {
        let target = match kind {
            Kind::Pipe => ObjectKind::Pipe,
            Kind::Queue => ObjectKind::Queue,
            Kind::Sched => return None,
        };
        if self.objects[kind_index(kind)].contains_key(&number) {
            return None;
        }
        let users: Vec<String> = self
            .rules
            .iter()
            .filter(|r| {
                let body: Vec<&str> = r.body.split_whitespace().collect();
                rule_target(&body) == Some((target, number))
            })
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

    fn next_number(&self) -> u32 {
        self.rules.iter().map(|r| r.number).max().unwrap_or(0) + 100
    }

    /// Same numbers keep their order: after every rule numbered ≤ it.
    fn insert_rule(&mut self, r: RuleLine) {
        let at = self.rules.partition_point(|x| x.number <= r.number);
        self.rules.insert(at, r);
    }

    /// The source as a rule file, with the batch request behind each line.
    pub fn render(&self) -> (String, Vec<Option<usize>>) {
        let mut text = String::new();
        let mut by = Vec::new();
        for (i, objects) in self.objects.iter().enumerate() {
            for (n, o) in objects {
                text.push_str(&format!("{} {n} config {}\n", KIND_WORDS[i], o.words));
                by.push(o.by);
            }
        }
        for r in &self.rules {
            text.push_str(&format!("add {} {}\n", r.number, r.body));
            by.push(r.by);
        }
        if !self.one_pass {
            text.push_str("set one-pass off\n");
            by.push(None);
        }
        (text, by)
    }
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

/// The pipes, queues and schedulers that earlier lines of a batch being
/// collected create, by (kind index, number): the caller's own at commit.
pub type Made = HashSet<(usize, u32)>;

/// The action of a rule body (`[prob P] ACTION ...`): its word and, for
/// `pipe N` / `queue N`, the object it sends to.
fn rule_action(words: &[String]) -> (Option<&str>, Option<(Kind, u32)>) {
    let body: Vec<&str> = words.iter().map(String::as_str).collect();
    let at = if body.first() == Some(&"prob") { 2 } else { 0 };
    let target = rule_target(&body).and_then(|(kind, n)| match kind {
        ObjectKind::Pipe => Some((Kind::Pipe, n)),
        ObjectKind::Queue => Some((Kind::Queue, n)),
        _ => None,
    });
    (words.get(at).map(String::as_str), target)
}

/// The rule set of a running bridge and the bridge itself.
pub struct Rules {
    pub bridge: NodeBridge,
    source: Mutex<Source>,
    sides: [String; 2],
    /// Files the rule file named (profiles, distribution tables), as read at
    /// start: a change may name them again; otherwise only the system's
    /// netem tables by bare name are read (a client must not make linkem
    /// read files of its choosing).
    files: Mutex<HashMap<String, String>>,
    starter: u32,
    /// Rule counters at the last `zero`, by (number, body).
    zero_base: Mutex<Vec<(u32, String, u64, u64)>>,
    /// The rules of the last parse: a change re-parses only the lines it
    /// changed (a parse of hundreds of rules would cost more than the change).
    cache: Mutex<RuleCache>,
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
            cache: Mutex::new(RuleCache::default()),
        }
    }

    pub fn starter(&self) -> u32 {
        self.starter
    }

    /// Parses a rendered source with the files of the start.
    fn parse(&self, text: &str) -> Result<RuleSet, linkem_core::rules::RulesError> {
        let known = self.files.lock().unwrap_or_else(|p| p.into_inner());
        let mut files = |name: &str| -> Result<String, String> {
            match known.get(name) {
                Some(t) => Ok(t.clone()),
                None => linkem_ctl::system_tables(name),
            }
        };
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        parse_rules_cached(
            text,
            [&self.sides[0], &self.sides[1]],
            &mut files,
            &mut cache,
        )
    }

    /// Checks every request against a copy of the rule set, then applies
    /// all of them at one instant, or none. `lines` are the requests as
    /// typed (for the position of a word in an error).
    pub fn apply(
        &self,
        cred: &PeerCred,
        requests: &[&Request],
        lines: &[&str],
    ) -> Result<u64, Failure> {
        let mut source = self.source.lock().unwrap_or_else(|p| p.into_inner());
        let mut staged = source.clone();
        let mut deleted = Vec::new();
        for (i, r) in requests.iter().enumerate() {
            if let Request::Rule(RuleRequest::Delete { kind, number }) = r {
                deleted.push((i, *kind, *number));
            }
            let Request::Rule(rr) = r else {
                return Err(Failure::Error(
                    "this bridge runs a rule set: it has no default link to change \
                     (change its pipes with 'pipe N config ...')"
                        .into(),
                ));
            };
            self.stage(&mut staged, cred.uid, rr, i)
                .map_err(|f| in_batch(f, i, requests.len(), lines))?;
        }
        // A pipe or queue deleted while a rule still sends to it (after the
        // whole batch) names those rules: the parse would only say the pipe
        // is not configured.
        for (i, kind, number) in deleted {
            if let Some(f) = staged.users_of(kind, number) {
                return Err(in_batch(f, i, requests.len(), lines));
            }
        }
        let (text, by) = staged.render();
        let set = match self.parse(&text) {
            Ok(set) => set,
            Err(e) => {
                let req = by.get(e.line.saturating_sub(1)).copied().flatten();
                let f = match req.and_then(|i| lines.get(i).map(|l| (i, l))) {
                    Some((i, line)) => {
                        let position = line.split_whitespace().position(|w| w == e.word);
                        let f = match position {
                            Some(p) => Failure::Word {
                                message: e.message.clone(),
                                position: p + 1,
                                word: e.word.clone(),
                            },
                            None => Failure::Error(format!("'{}': {}", e.word, e.message)),
                        };
                        in_batch(f, i, requests.len(), lines)
                    }
                    None => Failure::Error(format!("the rule set would not parse: {e}")),
                };
                return Err(f);
            }
        };
        let change = Change::Rules {
            set: Box::new(set),
            text: text.into(),
        };
        let at_ns = self.bridge.submit(vec![change]);
        for o in staged.objects.iter_mut().flat_map(|m| m.values_mut()) {
            o.by = None;
        }
        for r in &mut staged.rules {
            r.by = None;
        }
        // An error only when the bridge is stopping: the source follows either way.
        *source = staged;
        at_ns.map_err(|e| Failure::Error(e.to_string()))
    }

    /// Whether `uid` may add the rule `add [number] words` (see the module
    /// doc): `owns` tells whether a pipe or queue is the caller's, `others_max`
    /// is the highest number of a rule that is not.
    fn may_add(
        &self,
        uid: u32,
        number: Option<u32>,
        words: &[String],
        owns: &dyn Fn(Kind, u32) -> bool,
        others_max: Option<u32>,
    ) -> Result<(), Failure> {
        if uid == 0 || uid == self.starter {
            return Ok(());
        }
        match rule_action(words) {
            (Some("count"), _) => {}
            (_, Some((kind, n))) if owns(kind, n) => {}
            (_, Some((kind, n))) => {
                return Err(Failure::Refused(format!(
                    "{} {n} is not yours: uid {uid} may add only rules that send to its own \
                     pipes or queues (or count)",
                    kind.name()
                )))
            }
            (action, None) => {
                return Err(Failure::Refused(format!(
                    "'{}': uid {uid} may add only rules that send to its own pipes or queues \
                     (or count); allow, deny, skipto and the like belong to root and uid {}",
                    action.unwrap_or(""),
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

    /// The permission checks of one change, made as a line of a batch
    /// arrives, against the running rule set and the objects that the
    /// batch's earlier lines create (`made`, updated): a refused line is
    /// refused at once and never stored. What only the whole batch can tell
    /// (a missing pipe, a rule naming one deleted) waits for `commit`.
    pub fn check(&self, uid: u32, r: &RuleRequest, made: &mut Made) -> Result<(), Failure> {
        let source = self.source.lock().unwrap_or_else(|p| p.into_inner());
        let owner = |kind: Kind, n: u32| -> Option<u32> {
            source.objects[kind_index(kind)].get(&n).map(|o| o.owner)
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
            RuleRequest::Add { number, words } => {
                let owns = |kind: Kind, n: u32| {
                    owner(kind, n) == Some(uid) || made.contains(&(kind_index(kind), n))
                };
                let others_max = source
                    .rules
                    .iter()
                    .filter(|r| r.owner != uid)
                    .map(|r| r.number)
                    .max();
                self.may_add(uid, *number, words, &owns, others_max)?;
            }
            RuleRequest::DeleteRules { numbers } => {
                for n in numbers {
                    for r in source.rules.iter().filter(|r| r.number == *n) {
                        may(uid, r.owner, &format!("rule {n}"))?;
                    }
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

    // Kept whole: one arm per rule request, each its owner checks and then the change.
    fn stage(&self, s: &mut Source, uid: u32, r: &RuleRequest, i: usize) -> Result<(), Failure> {
        match r {
            RuleRequest::Config {
                kind,
                number,
                words,
            } => {
                let objects = &mut s.objects[kind_index(*kind)];
                let owner = match objects.get(number) {
                    Some(o) => {
                        may(uid, o.owner, &format!("{} {number}", kind.name()))?;
                        o.owner
                    }
                    None => uid,
                };
                objects.insert(
                    *number,
                    Object {
                        words: words.join(" "),
                        owner,
                        by: Some(i),
                    },
                );
            }
            RuleRequest::Delete { kind, number } => {
                let what = format!("{} {number}", kind.name());
                let objects = &mut s.objects[kind_index(*kind)];
                let o = objects
                    .get(number)
                    .ok_or_else(|| Failure::Error(format!("{what} does not exist")))?;
                may(uid, o.owner, &what)?;
                objects.remove(number);
                // A rule or queue left naming it fails the parse, naming it.
                for r in &mut s.rules {
                    r.by.get_or_insert(i);
                }
            }
            RuleRequest::Add { number, words } => {
                let number = match number {
                    Some(n) => *n,
                    None => s.next_number(),
                };
                if number > 65535 {
                    return Err(Failure::Error(
                        "automatic rule number beyond 65535: give one".into(),
                    ));
                }
                let owns = |kind: Kind, n: u32| {
                    s.objects[kind_index(kind)]
                        .get(&n)
                        .is_some_and(|o| o.owner == uid)
                };
                let others_max = s
                    .rules
                    .iter()
                    .filter(|r| r.owner != uid)
                    .map(|r| r.number)
                    .max();
                self.may_add(uid, Some(number), words, &owns, others_max)?;
                s.insert_rule(RuleLine {
                    number,
                    body: words.join(" "),
                    owner: uid,
                    by: Some(i),
                });
            }
            RuleRequest::DeleteRules { numbers } => {
                for n in numbers {
                    let mut found = false;
                    for r in s.rules.iter().filter(|r| r.number == *n) {
                        may(uid, r.owner, &format!("rule {n}"))?;
                        found = true;
                    }
                    if !found {
                        return Err(Failure::Error(format!("rule {n} does not exist")));
                    }
                    s.rules.retain(|r| r.number != *n);
                }
            }
            RuleRequest::Flush => {
                flush_allowed(s, uid)?;
                s.rules.clear();
                for m in &mut s.objects {
                    m.clear();
                }
            }
            RuleRequest::OnePass(on) => {
                may(uid, self.starter, "one-pass (a setting of the whole node)")?;
                s.one_pass = *on;
            }
            RuleRequest::Show { .. } => {
                return Err(Failure::Error("a show changes nothing".into()));
            }
        }
        Ok(())
    }

    /// SIGHUP: the file's rule set replaces the running one (`replace` hands
    /// the new node to the stage), its objects the starter's again.
    pub fn reload(&self, source: Source, files: HashMap<String, String>, replace: impl FnOnce()) {
        let mut s = self.source.lock().unwrap_or_else(|p| p.into_inner());
        *self.files.lock().unwrap_or_else(|p| p.into_inner()) = files;
        replace();
        *s = source;
    }

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
        // rules and their source lines.
        let source = self.source.lock().unwrap_or_else(|p| p.into_inner());
        let counts = self.rule_counts();
        let mut base = self
            .zero_base
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut text = String::new();
        let mut rules = Vec::new();
        // Node rules and source rules are in the same order (both by number, then as added).
        for ((number, rule_text, p, b), line) in counts.into_iter().zip(&source.rules) {
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
            text.push_str(&format!("{number:05} {p:>10} {b:>12} {}\n", line.body));
            rules.push(json!({
                "number": number,
                "rule": line.body,
                "packets": p,
                "bytes": b,
                "owner_uid": line.owner,
            }));
        }
        let objects: Vec<serde_json::Value> = source
            .objects
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
            "one_pass": source.one_pass,
            "text": text,
        })
    }

    /// `pipe|queue|sched [N] show`.
    pub fn show_json(&self, kind: Kind, number: Option<u32>) -> Result<serde_json::Value, Failure> {
        let source = self
            .source
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(n) = number {
            if !source.objects[kind_index(kind)].contains_key(&n) {
                return Err(Failure::Error(format!(
                    "{} {n} does not exist",
                    kind.name()
                )));
            }
        }
        let owners: BTreeMap<u32, u32> = source.objects[kind_index(kind)]
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
                for (n, o) in &source.objects[kind_index(kind)] {
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

/// `flush` deletes everything: only root, or a caller who owns it all.
fn flush_allowed(s: &Source, uid: u32) -> Result<(), Failure> {
    if uid == 0 {
        return Ok(());
    }
    let theirs = s
        .objects
        .iter()
        .flat_map(|m| m.values().map(|o| o.owner))
        .chain(s.rules.iter().map(|r| r.owner))
        .find(|&o| o != uid);
    match theirs {
        Some(o) => Err(Failure::Refused(format!(
            "flush: some pipes or rules belong to uid {o}: only root may delete them all"
        ))),
        None => Ok(()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use linkem_core::rules::{parse_rules, Action};

    #[test]
    fn source_round_trips_a_rule_file() {
        let text = "ipfw pipe 1 config bw 1Mbit/s # slow\npipe 2 config delay 5\n\
                    add pipe 1 ip\nipfw add 50 deny udp\nadd pipe 2 tcp\nset one-pass off\n";
        let s = Source::from_text(text, 7).unwrap();
        let (r, by) = s.render();
        assert_eq!(
            r,
            "pipe 1 config bw 1Mbit/s\npipe 2 config delay 5\nadd 50 deny udp\nadd 100 pipe 1 ip\n\
             add 200 pipe 2 tcp\nset one-pass off\n"
        );
        assert_eq!(by.len(), 6);
        let a = parse_rules(text, ["a", "b"], &mut linkem_core::config::no_files).unwrap();
        let b = parse_rules(&r, ["a", "b"], &mut linkem_core::config::no_files).unwrap();
        let nums = |s: &RuleSet| s.rules.iter().map(|r| r.number).collect::<Vec<_>>();
        assert_eq!(nums(&a), nums(&b));
        assert_eq!(
            a.pipes.keys().collect::<Vec<_>>(),
            b.pipes.keys().collect::<Vec<_>>()
        );
        assert_eq!(a.one_pass, b.one_pass);
    }

    /// The rule set without where its lines stood: what runs.
    fn what_runs(set: &RuleSet) -> RuleSet {
        let mut s = set.clone();
        for p in s.pipes.values_mut() {
            p.line = 0;
        }
        for r in &mut s.rules {
            r.line = 0;
            r.text.clear();
        }
        for d in s.sched.scheds.values_mut() {
            d.line = 0;
        }
        for q in s.sched.queues.values_mut() {
            q.line = 0;
        }
        s
    }

    fn parse(text: &str) -> Result<RuleSet, linkem_core::rules::RulesError> {
        parse_rules(text, ["a", "b"], &mut linkem_core::config::no_files)
    }

    /// What the bridge runs for a file: the file as its control plane keeps
    /// it, rendered and parsed again.
    fn as_bridge_runs(text: &str) -> Result<RuleSet, linkem_core::rules::RulesError> {
        parse(text)?;
        let (rendered, _) = Source::from_text(text, 0)?.render();
        parse(&rendered)
    }

    #[test]
    fn replay_and_bridge_read_numbers_alike() {
        // `pipe 010` is pipe 10 in every position, as ipfw's atoi and
        // strtoul(…, 10) read it; before, the file's reading made it pipe 8
        // and the bridge's rendering pipe 10.
        let text = "pipe 010 config delay 5ms\npipe 8 config delay 100ms\n\
                    add pipe 010 ip\nadd 0200 skipto 0300 ip\nadd 300 pipe 8 ip\n";
        let replay = parse(text).unwrap();
        assert_eq!(replay.rules[0].action, Action::Pipe(10));
        assert_eq!(replay.pipes[&10].link.delay_ns, 5_000_000);
        assert_eq!(
            replay.rules.iter().map(|r| r.number).collect::<Vec<_>>(),
            [100, 200, 300]
        );
        assert_eq!(replay.rules[1].action, Action::Skipto(300));
        assert_eq!(
            what_runs(&as_bridge_runs(text).unwrap()),
            what_runs(&replay)
        );
        // `pipe 0x10`: refused alike, naming the word, wherever it stands.
        for text in [
            "pipe 0x10 config delay 5ms\n",
            "pipe 16 config delay 5ms\nadd pipe 0x10 ip\n",
            "pipe 16 config\nqueue 1 config pipe 0x10\n",
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.word, "0x10", "{text}: {e}");
            assert!(e.message.contains("decimal"), "{e}");
            assert_eq!(as_bridge_runs(text).unwrap_err(), e);
        }
    }

    #[test]
    fn one_pass_words_with_more_words_are_refused() {
        // A word after them once changed one-pass in the file's reading and
        // not in the bridge's (or emptied the rules in one and not the other).
        for text in [
            "disable one_pass now\n",
            "enable one_pass 1\n",
            "net.inet.ip.fw.one_pass=0 x\n",
            "set one-pass off please\n",
            "add allow ip\nflush all\n",
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.message.contains("unexpected word"), "{text}: {e}");
            assert_eq!(Source::from_text(text, 0).unwrap_err(), e);
        }
    }

    const LINES: &[&str] = &[
        "pipe 1 config delay 5ms",
        "pipe 010 config bw 1Mbit/s delay 20",
        "pipe 8 config delay 1ms mask dst-ip 0x000000ff",
        "pipe 0x10 config delay 3ms",
        "ipfw -q pipe 2 config delay 7 queue 010",
        "sched 2 config type wf2q+",
        "queue 3 config pipe 2 weight 010",
        "queue 4 config sched 02",
        "add pipe 010 ip from any to any",
        "add 0100 pipe 1 udp",
        "add 200 pipe 8 tcp dst-port 0x50",
        "add pipe 0x10 ip",
        "add queue 3 udp",
        "add 50 skipto 0300 ip",
        "add 300 deny icmp",
        "add prob 0.5 count ip",
        "flush",
        "set one-pass off",
        "disable one_pass",
        "net.inet.ip.fw.one_pass=1",
        "# a comment",
        "",
    ];

    proptest::proptest! {
        /// parse(render(from_text(x))) runs what parse(x) runs: the file,
        /// replay and the bridge agree, numbers in any base included.
        #[test]
        fn rendered_source_runs_what_the_file_runs(
            picks in proptest::collection::vec(0..LINES.len(), 0..12)
        ) {
            let text: String = picks.iter().map(|&i| format!("{}\n", LINES[i])).collect();
            match parse(&text) {
                Ok(set) => {
                    let again = as_bridge_runs(&text);
                    proptest::prop_assert!(again.is_ok(), "{text}: {again:?}");
                    proptest::prop_assert_eq!(what_runs(&again.unwrap()), what_runs(&set), "{}", text);
                }
                // The bridge parses the file first, so its error is the one
                // shown; the control plane's reader reads only the first
                // words of each line and never fails before it.
                Err(e) => {
                    if let Err(f) = Source::from_text(&text, 0) {
                        proptest::prop_assert!(f.line >= e.line, "{text}: {f} before {e}");
                    }
                }
            }
        }
    }

    /// The control plane of a bridge over in-memory ports, running `text`.
    fn rules_over_memory(text: &str) -> Rules {
        use linkem_core::node::{Node, NodeConfig};
        use linkem_runtime::pipeline::LiveOptions;
        use linkem_runtime::port::memory::{MemoryRx, MemoryTx};
        let set = parse(text).unwrap();
        let node = Node::new(
            set,
            NodeConfig {
                seed: 1,
                ..Default::default()
            },
        );
        let (_in_a, rx_a) = std::sync::mpsc::channel::<(u64, Vec<u8>)>();
        let (_in_b, rx_b) = std::sync::mpsc::channel::<(u64, Vec<u8>)>();
        let (tx_a, _) = MemoryTx::new();
        let (tx_b, _) = MemoryTx::new();
        let mut opts = LiveOptions::new(1 << 20);
        opts.max_lag_ns = None;
        opts.batch = 8;
        let bridge = NodeBridge::start(
            opts,
            node,
            [Box::new(MemoryRx::new(rx_a)), Box::new(MemoryRx::new(rx_b))],
            [Box::new(tx_b), Box::new(tx_a)],
        )
        .unwrap();
        let source = Source::from_text(text, 0).unwrap();
        Rules::new(bridge, source, ["a".into(), "b".into()], HashMap::new(), 0)
    }

    fn request(rules: &Rules, line: &str) -> Result<u64, Failure> {
        let parsed = linkem_ctl::parse_line(line, &mut linkem_ctl::system_tables).unwrap();
        let cred = PeerCred {
            uid: 0,
            gid: 0,
            pid: 1,
        };
        rules.apply(&cred, &[&parsed.request], &[line])
    }

    #[test]
    fn ctl_requests_read_numbers_as_the_file_does() {
        // Over ctl `pipe 010 config` made pipe 10 while `add ... pipe 010`
        // named pipe 8.
        let mut rules = rules_over_memory("pipe 1 config delay 1ms\nadd 50 pipe 1 ip\n");
        request(&rules, "pipe 010 config delay 5ms").unwrap();
        request(&rules, "add 100 pipe 010 udp").unwrap();
        let (pipes, actions) = rules.bridge.with_model(|n| {
            let pipes: Vec<(u32, u64)> = n
                .pipes()
                .iter()
                .map(|p| (p.def.number, p.def.link.delay_ns))
                .collect();
            let actions: Vec<Action> = n.classifier().rules().iter().map(|r| r.action).collect();
            (pipes, actions)
        });
        assert_eq!(pipes, [(1, 1_000_000), (10, 5_000_000)]);
        assert_eq!(actions, [Action::Pipe(1), Action::Pipe(10)]);
        let e = request(&rules, "add 200 pipe 0x10 udp").unwrap_err();
        assert!(e.message().contains("decimal"), "{}", e.message());
        rules.bridge.stop();
    }

    #[test]
    fn deleting_a_pipe_a_rule_uses_names_the_rule() {
        // It said "pipe 1 is not configured", of the pipe being deleted.
        let mut rules = rules_over_memory(
            "pipe 1 config delay 1ms\npipe 2 config delay 2ms\nqueue 5 config pipe 2\n\
             add 100 pipe 1 ip\nadd 200 prob 0.5 pipe 1 udp\nadd 300 pipe 2 tcp\n\
             add 400 queue 5 icmp\n",
        );
        let e = request(&rules, "pipe 1 delete").unwrap_err();
        assert_eq!(
            e.message(),
            "pipe 1 is used by rules 100, 200: delete or change them first"
        );
        let e = request(&rules, "queue 5 delete").unwrap_err();
        assert_eq!(
            e.message(),
            "queue 5 is used by rule 400: delete or change it first"
        );
        // In a batch that deletes the rules too, the pipe goes.
        let lines = ["delete 100 200", "pipe 1 delete"];
        let parsed: Vec<Request> = lines
            .iter()
            .map(|l| {
                linkem_ctl::parse_line(l, &mut linkem_ctl::system_tables)
                    .unwrap()
                    .request
            })
            .collect();
        let cred = PeerCred {
            uid: 0,
            gid: 0,
            pid: 1,
        };
        rules
            .apply(&cred, &parsed.iter().collect::<Vec<_>>(), &lines)
            .unwrap();
        let pipes: Vec<u32> = rules
            .bridge
            .with_model(|n| n.pipes().iter().map(|p| p.def.number).collect());
        assert_eq!(pipes, [2]);
        rules.bridge.stop();
    }
}
