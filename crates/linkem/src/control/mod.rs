//! The control plane of a running `linkem bridge`: the Unix control socket
//! (protocol in the `linkem-ctl` crate), the audit log, the Prometheus
//! endpoint, and `linkem ctl`, the client.
//!
//! Threads: one accepts on the socket and starts a thread per client (at most
//! [`server::MAX_CLIENTS`], [`server::MAX_CLIENTS_PER_UID`] per user, and
//! [`server::RESERVED_CLIENTS`] more for root and the starter); one accepts on the metrics port, a thread per
//! scrape. None of them touches packets. A client thread parses and checks a
//! request completely, then, under the one lock of [`Model`], hands the
//! changes to the live stage that owns the model (`LiveBridge::submit`),
//! which applies them all between two batches at one instant `at_ns`
//! (CLOCK_REALTIME, the clock of packet stamps) and answers with it. So a
//! change is atomic at one instant for both directions; packets already
//! queued keep their release times; a refused change touches nothing. A
//! batch (`begin`..`commit`) is checked whole and then applied in one such
//! step. A socket may serve several links (a group of pairs, a lab:
//! [`group`]), each request about one naming it first.
//!
//! Who may do what: the kernel decides who may connect (socket mode 0600, or
//! 0660 with `--control-group`, or 0666 with `--claims`); the peer's
//! uid/gid/pid come from SO_PEERCRED. With `--claims` ([`claims`]) a user
//! other than root and the starter may only claim, release and list its
//! claims and read the totals ([`Model::gate`]). Reading (show, stats, list, watch) is open to every client;
//! the two default links belong to the uid that started linkem (under sudo,
//! SUDO_UID), and only it or root may change them or zero the counters.
//! Every bound a client can reach is checked when its request arrives and
//! counted against its uid: connections (above), and per connection the
//! lines and bytes of a batch ([`linkem_ctl::MAX_BATCH_LINES`],
//! [`linkem_ctl::MAX_BATCH_BYTES`]), each line of which is checked for
//! permission as it comes ([`Model::check_line`]).
//!
//! Why hand-written: the protocol is a few lines over std's Unix sockets and
//! the metrics endpoint answers one GET; a web framework or async runtime
//! would be most of the binary for that.

pub mod audit;
pub mod claims;
pub mod client;
mod failure;
pub mod files;
mod group;
pub mod http;
pub mod marks;
pub mod metrics;
pub mod rules;
pub mod server;
pub mod web;
use linkem_io::creds as sys;

use crate::render::bridge_stats::{direction_json, wakeups_json};
use linkem_core::model::{Change, LinkModel};
use linkem_core::{Fate, LinkConfig, LinkSpec};
use linkem_ctl::{Request, RuleRequest, NO_RULE_SET};
use linkem_runtime::clock;
use linkem_runtime::pipeline::{Direction, DirectionStats, LiveBridge, Submitted, Tap};
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub use failure::Failure;
pub use sys::PeerCred;

/// The bridge's control options.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ControlArgs {
    /// Name of this emulator (default IF_A-IF_B): names the control socket
    /// (with several --pair: one socket for every pair, a request naming its pair).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Control socket (default /run/linkem/NAME.sock; 'none' for no socket).
    #[arg(long, value_name = "PATH")]
    pub control: Option<String>,
    /// Let members of GROUP use the control socket (mode 0660; default 0600, root only).
    #[arg(long, value_name = "GROUP")]
    pub control_group: Option<String>,
    /// Append one JSON line per change request, refused ones too, to FILE
    /// (a line quotes at most 200 bytes of the request; each user but root
    /// at most 200 lines at once and 50/s, the rest counted in a 'dropped' line).
    #[arg(long, value_name = "FILE")]
    pub audit: Option<PathBuf>,
    /// Let control requests name files (traces, schedules, tables) by bare
    /// name (A-Z a-z 0-9 . _ -) in DIR, tried before the system's tables;
    /// symlinks and non-regular files there are refused. Without it a
    /// request reads only the system's netem tables.
    #[arg(long, value_name = "DIR")]
    pub control_files: Option<PathBuf>,
    /// Serve Prometheus metrics on GET /metrics at ADDR:PORT (a bare PORT is 127.0.0.1:PORT;
    /// with several --pair, every pair's series labelled link="IF_A-IF_B").
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<String>,
    /// Serve a web page of the running links at http://ADDR:PORT/ (a bare PORT is
    /// 127.0.0.1:PORT; 0 picks a port): charts, topology, and a form to change a
    /// link. The address printed at start holds the run's token: without it the
    /// page is read-only.
    #[arg(long, value_name = "ADDR:PORT")]
    pub web: Option<String>,
    /// Port claims: --claims, --claim-ttl, --limits.
    #[command(flatten)]
    pub claims: claims::ClaimArgs,
}

// Defined with the renderers that name it, which control imports (not the reverse).
pub use crate::render::bridge_stats::FrontEnd;

/// Control requests by result, for the metrics endpoint.
#[derive(Default)]
pub struct Counters {
    pub ok: AtomicU64,
    pub error: AtomicU64,
    pub refused: AtomicU64,
    /// Changes applied (a batch counts once).
    pub changes: AtomicU64,
}

struct LinkEntry {
    config: LinkConfig,
    words: String,
    changed_by: Option<u32>,
    changed_at_ns: Option<u64>,
    changes: u64,
}

/// The handles to the model state of a running bridge, shared by the main
/// thread (SIGHUP, stats) and the control threads.
pub struct Model {
    pub name: String,
    /// The command that runs it (set once it starts).
    pub front: FrontEnd,
    running: Running,
    owner_uid: u32,
    seed: u64,
    started: Instant,
    links: Mutex<[LinkEntry; 2]>,
    baseline: Mutex<Option<Vec<DirectionStats>>>,
    pub counters: Counters,
    marks: marks::Marks,
}

/// What a bridge runs: the one thing control asks about before it answers
/// a request, counts or stops.
pub enum Running {
    /// The plain link of both directions, in the live stage.
    Link(LiveBridge<LinkModel>),
    /// `--forward-only`: the two forwarders, no model.
    Forward(Vec<Direction>),
    /// A node of rules and pipes (`--rules`, `--claims`) and its control
    /// plane; the node's bridge holds the directions.
    Rules(Box<rules::Rules>),
    /// The links of a socket that serves several (a group of pairs, a lab),
    /// each its own model, named by its name; their runs are theirs to stop.
    Group(Vec<Arc<Model>>),
}

impl Running {
    /// The counts of the two directions (a->b, b->a).
    pub fn stats(&self) -> Vec<DirectionStats> {
        match self {
            Running::Link(b) => b.stats(),
            Running::Forward(d) => d.iter().map(Direction::stats).collect(),
            Running::Rules(r) => r.bridge.stats(),
            Running::Group(m) => m.iter().flat_map(|m| m.raw_stats()).collect(),
        }
    }

    /// An I/O error that stopped a stage, if any.
    pub fn error(&self) -> Option<String> {
        match self {
            Running::Link(b) => b.error(),
            Running::Forward(d) => d.iter().find_map(Direction::error),
            Running::Rules(r) => r.bridge.error(),
            // A link that stops is its own model's to report.
            Running::Group(_) => None,
        }
    }

    /// Stops the stages; returns the final counts. A node stays readable
    /// for its listings.
    pub fn stop(&mut self) -> Vec<DirectionStats> {
        match self {
            Running::Link(b) => b.stop(),
            Running::Forward(d) => d.drain(..).map(Direction::stop).collect(),
            Running::Rules(r) => r.bridge.stop(),
            Running::Group(_) => Vec::new(),
        }
    }

    /// The tap given at start, once the stages have stopped (a forwarder
    /// takes none).
    pub fn take_tap(&mut self) -> Option<Box<dyn Tap>> {
        match self {
            Running::Link(b) => b.take_tap(),
            Running::Forward(_) | Running::Group(_) => None,
            Running::Rules(r) => r.bridge.take_tap(),
        }
    }

    /// The rule set, when the bridge runs one.
    pub fn rules(&self) -> Option<&rules::Rules> {
        match self {
            Running::Rules(r) => Some(r),
            _ => None,
        }
    }
}

const DIRECTION_NAMES: [&str; 2] = ["a->b", "b->a"];

impl Model {
    /// `links`: each direction's link and the words it came from (a rule
    /// set's are the defaults: its links are its pipes).
    pub fn new(
        name: String,
        running: Running,
        links: [(LinkConfig, String); 2],
        seed: u64,
        started: Instant,
    ) -> Model {
        let [ab, ba] = links;
        let entry = |(config, words): (LinkConfig, String)| LinkEntry {
            config,
            words,
            changed_by: None,
            changed_at_ns: None,
            changes: 0,
        };
        let owner_uid = match &running {
            Running::Rules(r) => r.starter(),
            _ => sys::starter_uid(),
        };
        let origin_ns = match &running {
            Running::Link(b) => Some(b.started_ns()),
            _ => None,
        };
        let marks = marks::Marks::new([&ab.0, &ba.0], origin_ns);
        Model {
            name,
            front: FrontEnd::Bridge,
            running,
            owner_uid,
            seed,
            started,
            links: Mutex::new([entry(ab), entry(ba)]),
            baseline: Mutex::new(None),
            counters: Counters::default(),
            marks,
        }
    }

    pub fn rules(&self) -> Option<&rules::Rules> {
        self.running.rules()
    }

    /// Turns claims on (`--claims`): only on a model running rules.
    pub fn enable_claims(&mut self, config: claims::ClaimConfig) -> Result<(), String> {
        match &mut self.running {
            Running::Rules(r) => r.enable_claims(config),
            _ => Err("--claims needs rules (--rules FILE): a claim is a pipe and rules".into()),
        }
    }

    /// Whether claims are on.
    pub fn claims_on(&self) -> bool {
        self.rules().is_some_and(rules::Rules::claims_on)
    }

    /// With claims on, what a user other than root and the starter may ask:
    /// liveness, help, the totals (`stats`, `watch`: counts of the two
    /// directions, no flow, rule or pipe of anyone), and its claims. Every
    /// other request (links, pipes, rules, their shows, batches) is refused
    /// naming this: the socket is open to every local user.
    pub fn gate(&self, cred: &PeerCred, request: &Request) -> Result<(), Failure> {
        if !self.claims_on() || cred.uid == 0 || cred.uid == self.owner_uid {
            return Ok(());
        }
        match request {
            Request::Ping
            | Request::Version
            | Request::Help
            | Request::Stats { .. }
            | Request::Watch { .. }
            | Request::Claim(_)
            | Request::Claims => Ok(()),
            _ => Err(Failure::Refused(format!(
                "uid {} may only claim, release and list its claims here (and ping, version, \
                 help, stats, watch): pipes, rules and their listings belong to root and uid {}",
                cred.uid, self.owner_uid
            ))),
        }
    }

    pub fn running(&self) -> &Running {
        &self.running
    }

    pub fn into_running(self) -> Running {
        self.running
    }

    /// An I/O error that stopped a stage, if any.
    pub fn error(&self) -> Option<String> {
        self.running.error()
    }

    fn forward_only(&self) -> bool {
        matches!(self.running, Running::Forward(_))
    }

    /// Hands link changes to the live stage; returns their instant.
    fn submit_links(&self, changes: Vec<Change>) -> Result<u64, Failure> {
        match &self.running {
            Running::Link(b) => b.submit(changes).map_err(|e| Failure::Error(e.to_string())),
            _ => Err(Failure::Error(
                "this emulator runs --forward-only: it has no link to change".into(),
            )),
        }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// When the bridge started serving.
    pub fn started(&self) -> Instant {
        self.started
    }

    pub fn elapsed_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Current link configs (for metrics).
    pub fn link_configs(&self) -> [LinkConfig; 2] {
        let l = self.links.lock().unwrap_or_else(|p| p.into_inner());
        [l[0].config.clone(), l[1].config.clone()]
    }

    /// SIGHUP: new links for both directions from the files and words, by
    /// the starter, at one instant (returned).
    pub fn reload(
        &self,
        ab: LinkConfig,
        ba: LinkConfig,
        words: [String; 2],
    ) -> Result<u64, Failure> {
        let mut links = self.links.lock().unwrap_or_else(|p| p.into_inner());
        let at_ns = self.submit_links(link_changes([Some(&ab), Some(&ba)]))?;
        self.follow_schedules(at_ns, [Some(&ab), Some(&ba)]);
        self.mark_change(at_ns, &["SIGHUP: links re-read"]);
        for (i, (cfg, w)) in [(ab, &words[0]), (ba, &words[1])].into_iter().enumerate() {
            let e = &mut links[i];
            e.config = cfg;
            e.words = w.clone();
            e.changed_by = Some(self.owner_uid);
            e.changed_at_ns = Some(at_ns);
            e.changes += 1;
        }
        self.counters.changes.fetch_add(1, Ordering::Relaxed);
        Ok(at_ns)
    }

    /// Parses a request line: with a rule set, as its bridge reads it
    /// ([`rules::Rules::parse_line`]: its interface names, its files).
    pub fn parse_line(&self, line: &str) -> Result<linkem_ctl::Line, linkem_ctl::ParseError> {
        match &self.running {
            Running::Rules(r) => r.parse_line(line),
            Running::Group(members) => {
                let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
                linkem_ctl::parse_line_named(line, &mut files::read, &names)
            }
            _ => linkem_ctl::parse_line(line, &mut files::read),
        }
    }

    /// An `add` line whose rule `cred` may not add whatever its words say,
    /// refused as such even when its words do not parse: a member of the
    /// control group learns that such rules are not its to add, as it would
    /// for a rule that parses (see [`rules::Rules::check`]). None: the
    /// parse's error stands.
    pub fn refused_before_parse(&self, cred: &PeerCred, line: &str) -> Option<Failure> {
        let rules = self.rules()?;
        if cred.uid == 0 || cred.uid == rules.starter() {
            return None;
        }
        let mut words = line
            .split_whitespace()
            .skip_while(|w| w.starts_with('@') || matches!(*w, "ipfw" | "dnctl"));
        if words.next() != Some("add") {
            return None;
        }
        let mut words = words.skip_while(|w| w.starts_with(|c: char| c.is_ascii_digit()));
        let mut action = words.next()?;
        while matches!(action, "prob" | "set") {
            words.next()?;
            action = words.next()?;
        }
        (!matches!(action, "pipe" | "queue" | "count")).then(|| {
            Failure::Refused(format!(
                "'{action}': uid {} may add only rules that send to its own pipes or queues \
                 (or count); allow, deny, skipto and the like belong to root and uid {}",
                cred.uid,
                rules.starter()
            ))
        })
    }

    /// The uid that started linkem (under sudo, SUDO_UID): with root, the
    /// owner of the links, of the rule file's objects and of the reserved
    /// control connections.
    pub fn owner_uid(&self) -> u32 {
        self.owner_uid
    }

    /// The permission checks of one change line of a batch, made as it
    /// arrives, so that a refused line is never stored (`made`: what the
    /// batch's earlier lines create, see [`rules::Rules::check`]). The whole
    /// batch is checked again at `commit`.
    pub fn check_line(
        &self,
        cred: &PeerCred,
        request: &Request,
        made: &mut rules::Made,
    ) -> Result<(), Failure> {
        match (request, self.rules()) {
            (Request::Zero, _) | (Request::Link { .. }, None) => self.may_change_links(cred.uid),
            (Request::Rule(r), Some(rules)) => rules.check(cred.uid, r, made),
            _ => Ok(()),
        }
    }

    fn may_change_links(&self, uid: u32) -> Result<(), Failure> {
        if uid == 0 || uid == self.owner_uid {
            Ok(())
        } else {
            Err(Failure::Refused(format!(
                "the links belong to uid {} (who started linkem): only it or root may change them",
                self.owner_uid
            )))
        }
    }

    /// Checks every request of a batch (or a single one), then applies all of
    /// them at one instant, or none. Returns that instant. In a socket of
    /// several links, each link's requests go to its model ([`group`]).
    pub fn apply(
        &self,
        cred: &PeerCred,
        requests: &[&Request],
        lines: &[&str],
    ) -> Result<u64, Failure> {
        if let Some(rules) = self.rules() {
            return self.apply_to_rules(rules, cred, requests, lines);
        }
        if let Running::Group(members) = &self.running {
            return group::apply(self, members, cred, requests, lines);
        }
        let mut links = self.lock_links();
        let staged = self.stage(&links, cred, requests)?;
        let at_ns = self.commit(&mut links, cred.uid, staged)?;
        self.mark_change(at_ns, lines);
        self.counters.changes.fetch_add(1, Ordering::Relaxed);
        Ok(at_ns)
    }

    fn lock_links(&self) -> std::sync::MutexGuard<'_, [LinkEntry; 2]> {
        self.links.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What `requests` make of the links `links` (a `link` over what the
    /// batch's earlier lines staged, else over the running link), checked
    /// whole: nothing is applied yet.
    fn stage(
        &self,
        links: &[LinkEntry; 2],
        cred: &PeerCred,
        requests: &[&Request],
    ) -> Result<Staged, Failure> {
        let mut staged = Staged::default();
        for r in requests {
            match r {
                Request::Link {
                    dir,
                    replace,
                    link,
                    words,
                    first,
                    ..
                } => {
                    if self.forward_only() {
                        return Err(Failure::Error(
                            "this emulator runs --forward-only: it has no link to change".into(),
                        ));
                    }
                    self.may_change_links(cred.uid)?;
                    for &i in dir.indices() {
                        let config = match (replace, link) {
                            (true, Some(link)) => (**link).clone(),
                            _ => {
                                let base = staged.links[i]
                                    .as_ref()
                                    .map_or(&links[i].config, |(c, _)| c);
                                patch(base, words, *first)?
                            }
                        };
                        // The words as given (`list`'s `words`); `link` shows the whole link.
                        staged.links[i] = Some((config, words.join(" ")));
                    }
                }
                Request::Zero => {
                    self.may_change_links(cred.uid)?;
                    staged.zero = true;
                }
                Request::Rule(_) => return Err(Failure::Error(NO_RULE_SET.into())),
                _ => {
                    return Err(Failure::Error(
                        "only changes may be applied (not allowed in a batch)".into(),
                    ))
                }
            }
        }
        Ok(staged)
    }

    /// Hands what [`Model::stage`] made to the live stage and keeps it as
    /// the links' state; returns the instant it applies from.
    fn commit(&self, links: &mut [LinkEntry; 2], uid: u32, staged: Staged) -> Result<u64, Failure> {
        let at_ns = match self.send(&staged, false)? {
            Some(sent) => sent.wait().map_err(|e| Failure::Error(e.to_string()))?,
            None => clock::now_ns(),
        };
        self.keep(links, uid, staged, at_ns);
        Ok(at_ns)
    }

    /// Queues the staged link changes for the live stage without waiting
    /// for it; None when the batch changes no link. `check_only`: only
    /// whether the stage would take them now.
    fn send(&self, staged: &Staged, check_only: bool) -> Result<Option<Submitted>, Failure> {
        let changes = link_changes([0, 1].map(|i| staged.links[i].as_ref().map(|(c, _)| c)));
        if changes.is_empty() {
            return Ok(None);
        }
        let failed = |e: linkem_runtime::pipeline::SubmitError| Failure::Error(e.to_string());
        match &self.running {
            Running::Link(b) if check_only => {
                b.check_submit(&changes).map(|_| None).map_err(failed)
            }
            Running::Link(b) => b.submit_later(changes).map(Some).map_err(failed),
            _ => Err(Failure::Error(
                "this emulator runs --forward-only: it has no link to change".into(),
            )),
        }
    }

    /// Keeps what a batch applied at `at_ns` as the links' state.
    fn keep(&self, links: &mut [LinkEntry; 2], uid: u32, staged: Staged, at_ns: u64) {
        self.follow_schedules(
            at_ns,
            [0, 1].map(|i| staged.links[i].as_ref().map(|(c, _)| c)),
        );
        for (i, s) in staged.links.into_iter().enumerate() {
            if let Some((cfg, words)) = s {
                let e = &mut links[i];
                e.config = cfg;
                e.words = words;
                e.changed_by = Some(uid);
                e.changed_at_ns = Some(at_ns);
                e.changes += 1;
            }
        }
        if staged.zero {
            *self.baseline.lock().unwrap_or_else(|p| p.into_inner()) = Some(self.raw_stats());
        }
    }

    /// [`Model::apply`] on a bridge running rules: the rule requests go to
    /// the rule set; `zero` also restarts the counts, after the other changes.
    fn apply_to_rules(
        &self,
        rules: &rules::Rules,
        cred: &PeerCred,
        requests: &[&Request],
        lines: &[&str],
    ) -> Result<u64, Failure> {
        let zero = requests.iter().any(|r| matches!(r, Request::Zero));
        if zero {
            self.may_change_links(cred.uid)?;
            let rest: Vec<&Request> = requests
                .iter()
                .copied()
                .filter(|r| !matches!(r, Request::Zero))
                .collect();
            let rest_lines: Vec<&str> = requests
                .iter()
                .zip(lines)
                .filter(|(r, _)| !matches!(r, Request::Zero))
                .map(|(_, l)| *l)
                .collect();
            let at_ns = if rest.is_empty() {
                clock::now_ns()
            } else {
                rules.apply(cred, &rest, &rest_lines)?
            };
            rules.zero();
            *self.baseline.lock().unwrap_or_else(|p| p.into_inner()) = Some(self.raw_stats());
            self.mark_change(at_ns, lines);
            self.counters.changes.fetch_add(1, Ordering::Relaxed);
            return Ok(at_ns);
        }
        let at_ns = rules.apply(cred, requests, lines)?;
        self.mark_change(at_ns, lines);
        self.counters.changes.fetch_add(1, Ordering::Relaxed);
        Ok(at_ns)
    }

    /// Counts since start (what `--stats json` and the metrics report).
    pub fn raw_stats(&self) -> Vec<DirectionStats> {
        self.running.stats()
    }

    /// Counts since the last `zero`.
    pub fn stats_since_zero(&self) -> Vec<DirectionStats> {
        let now = self.raw_stats();
        let base = self.baseline.lock().unwrap_or_else(|p| p.into_inner());
        match &*base {
            None => now,
            Some(b) => now.iter().zip(b).map(|(n, b)| minus(n, b)).collect(),
        }
    }

    /// The body of a `stats` reply: `--stats json`'s fields, since the last zero.
    pub fn stats_json(&self) -> serde_json::Value {
        if let Running::Group(members) = &self.running {
            return group::stats_json(self, members);
        }
        let stats = self.stats_since_zero();
        let dirs: Vec<serde_json::Value> = stats
            .iter()
            .map(|s| direction_json(s, self.rules().is_some()))
            .collect();
        let zeroed = self
            .baseline
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some();
        // Why the link stopped while the process goes on (a bridge of
        // several pairs keeps its others): an interface gone, an I/O error.
        let stopped = self.running.error();
        json!({
            "front": self.front.word(),
            "elapsed_s": self.elapsed_s(),
            "seed": self.seed,
            "stopped": stopped,
            "zeroed": zeroed,
            "now_ns": clock::now_ns(),
            "directions": dirs,
            "wakeups_per_packet": wakeups_json(&stats),
        })
    }

    pub fn links_json(&self) -> serde_json::Value {
        if let Running::Group(members) = &self.running {
            return group::links_json(members);
        }
        let links = self.links.lock().unwrap_or_else(|p| p.into_inner());
        let v: Vec<serde_json::Value> = links
            .iter()
            .zip(DIRECTION_NAMES)
            .map(|(e, name)| {
                json!({
                    "direction": name,
                    "link": if self.forward_only() { "forward only".to_string() } else { e.config.to_string() },
                    "words": e.words,
                    "owner_uid": self.owner_uid,
                    "changed_by": e.changed_by,
                    "changed_at_ns": e.changed_at_ns,
                    "changes": e.changes,
                })
            })
            .collect();
        serde_json::Value::Array(v)
    }
}

/// What a batch makes of one model's links before it is applied: each
/// direction's new link and words (None: unchanged), and whether the
/// counters restart.
#[derive(Default)]
struct Staged {
    links: [Option<(LinkConfig, String)>; 2],
    zero: bool,
}

/// `words` over `base` (a `link` request, PATCH), an error naming the word
/// at its place in the line (`first`: the 1-based position of `words[0]`).
fn patch(base: &LinkConfig, words: &[String], first: usize) -> Result<LinkConfig, Failure> {
    LinkSpec::patch(base, words, &mut files::read)
        .map(|s| s.link)
        .map_err(|e| Failure::Word {
            position: first + e.position - 1,
            word: e.word,
            message: e.message,
        })
}

/// The changes that give side a `links[0]` and side b `links[1]` (None: unchanged):
/// one change for both sides when they get the same link.
fn link_changes(links: [Option<&LinkConfig>; 2]) -> Vec<Change> {
    let change = |sides, cfg: &LinkConfig| Change::Link {
        sides,
        config: Box::new(cfg.clone()),
    };
    match links {
        [Some(a), Some(b)] if a == b => vec![change([true, true], a)],
        [a, b] => a
            .map(|a| change([true, false], a))
            .into_iter()
            .chain(b.map(|b| change([false, true], b)))
            .collect(),
    }
}

/// `now - base` for the cumulative counts (in flight is a level, kept).
/// The packets in flight at the zero (`base.in_flight`: waiting in a pipe or
/// a delay line, or of a pipe deleted by `flush` and not yet counted as
/// `flushed`) meet their fates after it, and those fates are counted since
/// the zero; so they are counted as `received` since the zero too, and the
/// counts since a zero add up as every count does
/// ([`DirectionStats::adds_up`]: received + segmented = fates + node drops +
/// in flight), whatever came before it (zero, flush, changes). Subtracting
/// the two instants' invariants gives it: with `r`, `f`, `q` received +
/// segmented, fates and in flight, `(r1 - r0 + q0) = (f1 - f0) + q1`.
fn minus(now: &DirectionStats, base: &DirectionStats) -> DirectionStats {
    let mut d = now.clone();
    for f in Fate::ALL {
        d.fates
            .set(f, now.fates.get(f).saturating_sub(base.fates.get(f)));
    }
    d.fates.duplicated = now.fates.duplicated.saturating_sub(base.fates.duplicated);
    d.fates.corrupted = now.fates.corrupted.saturating_sub(base.fates.corrupted);
    d.received = now
        .received
        .saturating_sub(base.received)
        .saturating_add(base.in_flight);
    d.segmented = now.segmented.saturating_sub(base.segmented);
    // Bytes of what was in flight at the zero are not known: a delivered
    // count since the zero may exceed the received one by them.
    d.received_bytes = now.received_bytes.saturating_sub(base.received_bytes);
    d.delivered_bytes = now.delivered_bytes.saturating_sub(base.delivered_bytes);
    d.rx_kernel_drops = now.rx_kernel_drops.saturating_sub(base.rx_kernel_drops);
    d.copies_sent = now.copies_sent.saturating_sub(base.copies_sent);
    d.coalesced = now.coalesced.saturating_sub(base.coalesced);
    d.super_frames = now.super_frames.saturating_sub(base.super_frames);
    d.whole = now.whole.saturating_sub(base.whole);
    d.kernel_forwarded = now.kernel_forwarded.saturating_sub(base.kernel_forwarded);
    d.rx_wakeups = now.rx_wakeups.saturating_sub(base.rx_wakeups);
    d.rx_on_beat = now.rx_on_beat.saturating_sub(base.rx_on_beat);
    d.rx_yields_lost = now.rx_yields_lost.saturating_sub(base.rx_yields_lost);
    d.tx_wakeups = now.tx_wakeups.saturating_sub(base.tx_wakeups);
    d.spin.spun_ns = now.spin.spun_ns.saturating_sub(base.spin.spun_ns);
    // Counts only grow, so the base is contained in now.
    if d.lateness.subtract(&base.lateness).is_err() {
        d.lateness.reset();
    }
    if d.delay.subtract(&base.delay).is_err() {
        d.delay.reset();
    }
    d
}

/// Whether a request line asks for a change even when it does not parse
/// (so that refused garbage aimed at changes is audited too).
pub fn looks_like_change(line: &str) -> bool {
    let mut words = line.split_whitespace().skip_while(|w| w.starts_with('@'));
    let mut first = words.next();
    if matches!(first, Some("ipfw" | "dnctl")) {
        first = words.next();
    }
    matches!(
        first,
        Some(
            "link"
                | "replace"
                | "zero"
                | "pipe"
                | "queue"
                | "sched"
                | "add"
                | "delete"
                | "flush"
                | "set"
                | "commit"
        )
    )
}

/// Read-only rule requests (`pipe show`) are not audited.
pub fn is_audited(r: &Request) -> bool {
    r.is_change() && !matches!(r, Request::Rule(RuleRequest::Show { .. }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use linkem_core::FateCounts;
    use proptest::prelude::*;

    /// A direction's counts at one instant: every packet received has a fate
    /// or is in flight (as the pipeline publishes them).
    fn snapshot(received: u64, segmented: u64, fates: &[u64], in_flight: u64) -> DirectionStats {
        let mut counts = FateCounts::default();
        for (f, n) in Fate::ALL.iter().zip(fates) {
            counts.set(*f, *n);
        }
        DirectionStats {
            fates: counts,
            received,
            received_bytes: received * 100,
            segmented,
            in_flight,
            delivered_bytes: fates.first().copied().unwrap_or(0) * 100,
            ..DirectionStats::empty("a->b")
        }
    }

    /// One step of a run: packets arrive (some cut into wire frames), and
    /// some of those in flight meet a fate (delivered, flushed by a deleted
    /// pipe, or another drop); `zero` takes a baseline.
    #[derive(Debug, Clone)]
    enum Step {
        Arrive { packets: u64, extra_frames: u64 },
        Settle { frames: u64, fate: usize },
        Zero,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0u64..50, 0u64..10).prop_map(|(packets, extra_frames)| Step::Arrive {
                packets,
                extra_frames
            }),
            (0u64..60, 0usize..Fate::ALL.len())
                .prop_map(|(frames, fate)| Step::Settle { frames, fate }),
            Just(Step::Zero),
        ]
    }

    proptest! {
        /// Issue 34 item 14: after any sequence of arrivals, fates (flushes
        /// among them) and zeros, the counts since the last zero add up:
        /// received + segmented = fates + in flight. Before, the packets in
        /// flight at a zero (e.g. those of pipes just flushed) counted in the
        /// fates since the zero but not in its receptions (received 80,
        /// fates 90).
        #[test]
        fn counts_since_any_zero_add_up(steps in proptest::collection::vec(step(), 1..40)) {
            let (mut received, mut segmented, mut in_flight) = (0u64, 0u64, 0u64);
            let mut fates = vec![0u64; Fate::ALL.len()];
            let mut base: Option<DirectionStats> = None;
            for s in &steps {
                match *s {
                    Step::Arrive { packets, extra_frames } => {
                        let extra = if packets > 0 { extra_frames } else { 0 };
                        received += packets;
                        segmented += extra;
                        in_flight += packets + extra;
                    }
                    Step::Settle { frames, fate } => {
                        let n = frames.min(in_flight);
                        in_flight -= n;
                        fates[fate] += n;
                    }
                    Step::Zero => {
                        base = Some(snapshot(received, segmented, &fates, in_flight));
                    }
                }
                let now = snapshot(received, segmented, &fates, in_flight);
                prop_assert!(now.adds_up());
                if let Some(b) = &base {
                    let since = minus(&now, b);
                    prop_assert!(
                        since.adds_up(),
                        "since zero: received {} + segmented {} != fates {} + in flight {} ({:?})",
                        since.received, since.segmented, since.fates.arrived(), since.in_flight, steps
                    );
                }
            }
        }
    }
}
