//! The bridge of a node of ipfw rules and Dummynet pipes (`--rules`, the
//! config's `rules` key, or `--claims` alone): the rule file is parsed before
//! any interface is touched (a bad file changes nothing), the delay lines are
//! sized for every pipe, and a SIGHUP re-reads the file, replacing what
//! `linkem ctl` changed (see `crate::control::rules`).

use super::{live_options, reread, Launch, Plan, Ports, Reloaded};
use crate::cli::args::BridgeArgs;
use crate::control::rules::{normalized, Rules, Source};
use crate::control::{Model, Running};
use crate::files::{config_has_rules, load_rules_recording, rules_source_or};
use crate::process::fresh_seed;
use anyhow::{bail, Context, Result};
use linkem_core::node::{Node, NodeConfig};
use linkem_core::rules::RuleSet;
use linkem_io::creds::starter_uid;
use linkem_io::outfile::FileUse;
use linkem_io::recording::{NamedFiles, Start};
use linkem_runtime::pipeline::{buffer_bytes_for, LiveBridge};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;
use std::time::Instant;

/// Where the rules come from, owned so that a SIGHUP re-read runs on a thread
/// of its own (a slow read never holds up the loop that answers SIGINT).
#[derive(Clone)]
struct RulesSource {
    config: Option<PathBuf>,
    file: Option<PathBuf>,
    words: Vec<String>,
    sides: [String; 2],
    /// Started with `--claims` and no rules: the node runs an empty set
    /// (`flush`) that the claims add to.
    claims_only: bool,
}

impl RulesSource {
    /// The rule set, the seed, the source lines and the files they read.
    fn load_source(&self) -> Result<Loaded> {
        let (text, seed) = rules_source_or(
            self.config.as_deref(),
            self.file.as_deref(),
            &self.words,
            self.claims_only.then_some("flush\n"),
        )?
        .context("no rules: the config has no 'rules' key")?;
        let base = self.file.as_deref().and_then(Path::parent);
        let sides = [self.sides[0].as_str(), self.sides[1].as_str()];
        let mut files = HashMap::new();
        let text_file = self.file.as_deref().or(self.config.as_deref());
        load_rules_recording(&text, text_file, base, sides, &mut files)?;
        // The node runs the file as the control plane has always kept it:
        // each rule's text `add N BODY`, whatever its line said.
        let rendered = normalized(&text).map_err(|e| anyhow::anyhow!("rules: {e}"))?;
        let set = load_rules_recording(&rendered, text_file, base, sides, &mut files)
            .context("the rule file, as the control socket keeps it")?;
        let source = Source::new(&rendered, set.clone(), starter_uid());
        Ok(Loaded {
            set,
            text: rendered,
            seed,
            source,
            files,
        })
    }
}

pub(super) struct Loaded {
    set: RuleSet,
    /// The rule file as the control plane renders it (what the node runs).
    text: String,
    seed: Option<u64>,
    source: Source,
    files: HashMap<String, String>,
}

/// Delay-line bytes per direction: what every pipe may hold in flight at
/// once (each sized as a plain link, see `buffer_bytes_for`), at least what an
/// unshaped link gets, at most 2 GiB; dynamic instances share their pipe's share.
/// Delay-line room added per direction with `--claims` (without `--buffer`).
const CLAIMS_BUFFER_BYTES: usize = 64 << 20;

fn buffer_for(set: &RuleSet) -> usize {
    let floor = buffer_bytes_for(&linkem_core::LinkConfig::default(), None);
    let sum: usize = set
        .pipes
        .values()
        .map(|p| buffer_bytes_for(&p.link, None))
        .fold(0usize, usize::saturating_add);
    sum.clamp(floor, 2 << 30)
}

fn summary(set: &RuleSet) -> String {
    format!(
        "{} pipe{}, {} rule{}{}",
        set.pipes.len(),
        if set.pipes.len() == 1 { "" } else { "s" },
        set.rules.len(),
        if set.rules.len() == 1 { "" } else { "s" },
        if set.one_pass { "" } else { ", one-pass off" }
    )
}

/// The bridge of `--rules`.
pub(super) struct RulesFront {
    source: RulesSource,
    /// The rules read at start, until the stage takes them.
    start: Option<Loaded>,
    seed: u64,
    seed_given: bool,
}

impl RulesFront {
    /// Parses the rules before any interface is opened: a bad file changes nothing.
    pub(super) fn load(args: &BridgeArgs) -> Result<RulesFront> {
        check_rules_args(args)?;
        let source = RulesSource {
            config: args.config.clone(),
            file: args.rules.clone(),
            words: args.words.clone(),
            sides: [args.if_a.clone(), args.if_b.clone()],
            claims_only: args.control.claims.claims
                && args.rules.is_none()
                && !args.config.as_deref().is_some_and(config_has_rules),
        };
        let loaded = source.load_source()?;
        let seed_given = loaded.seed.is_some();
        let seed = loaded.seed.unwrap_or_else(fresh_seed);
        Ok(RulesFront {
            source,
            start: Some(loaded),
            seed,
            seed_given,
        })
    }
}

/// The options a rules bridge refuses, before anything is read.
fn check_rules_args(args: &BridgeArgs) -> Result<()> {
    if args.forward_only {
        bail!("--forward-only bypasses the model: it takes no --rules");
    }
    if !args.a_to_b.is_empty() || !args.b_to_a.is_empty() {
        bail!(
            "--a-to-b/--b-to-a: with --rules, link words go in 'pipe N config' lines \
             (select a direction in the rule: 'in'/'a-to-b' or 'out'/'b-to-a')"
        );
    }
    Ok(())
}

impl RulesFront {
    /// What the start-up needs to know before any interface is touched. A
    /// recording starts from the rule text the node starts from (as the
    /// control plane renders it, as a reload's text is), with the node's
    /// limits and one-pass.
    pub(super) fn plan(&self, args: &BridgeArgs) -> Plan {
        let mut inputs: Vec<FileUse> = args
            .config
            .iter()
            .map(|p| FileUse::new("--config", p))
            .collect();
        inputs.extend(args.rules.iter().map(|p| FileUse::new("--rules", p)));
        let mut options = serde_json::Map::new();
        options.insert("max_flows".into(), (args.run.max_flows as u64).into());
        options.insert(
            "max_flow_memory".into(),
            (args.run.max_flow_memory as u64).into(),
        );
        let (text, one_pass) = match &self.start {
            Some(l) => (l.text.clone(), l.set.one_pass),
            None => (String::new(), true),
        };
        options.insert("one_pass".into(), one_pass.into());
        let file = args.rules.as_ref().or(args.config.as_ref());
        let what = format!(
            "rules {}",
            file.map(|f| f.display().to_string()).unwrap_or_default()
        );
        Plan {
            seed: self.seed,
            seed_given: self.seed_given,
            inputs,
            start: Start::Rules(text),
            options,
            read: self
                .start
                .as_ref()
                .map(|l| sorted_files(&l.files).into_iter().collect())
                .unwrap_or_default(),
            duplicates: self
                .start
                .as_ref()
                .is_some_and(|l| l.set.pipes.values().any(|p| p.link.duplicate > 0.0)),
            link_words: [what.clone(), what],
            links: [None, None],
            sighup_ignored: None,
        }
    }

    /// Starts the stages on the opened ports; returns the control model.
    pub(super) fn start(&mut self, launch: Launch<'_>) -> Result<Model> {
        let (args, timing) = (launch.args, launch.timing);
        let Ports { rx, tx, used } = launch.ports;
        let Loaded {
            set,
            source: lines,
            files,
            ..
        } = self.start.take().context("the rules were taken already")?;
        // Claims add pipes later: room for what they may hold.
        let claims_room = if args.control.claims.claims {
            CLAIMS_BUFFER_BYTES
        } else {
            0
        };
        let buffer_bytes = timing
            .buffer
            .unwrap_or_else(|| buffer_for(&set).saturating_add(claims_room));
        let what = summary(&set);
        let node = Node::new(set, self.node_config(args));
        let opts = live_options(args, timing, [buffer_bytes; 2], launch.tap);
        let bridge = LiveBridge::start(opts, node, rx, tx).map_err(|e| anyhow::anyhow!(e))?;
        let file = match (&args.rules, &args.config) {
            (Some(f), _) | (None, Some(f)) => f.display().to_string(),
            (None, None) => String::new(),
        };
        eprintln!(
            "linkem: rules {file}: {what}; a->b {} -> {} ({}), b->a {} -> {} ({})",
            args.if_a, args.if_b, used[0], args.if_b, args.if_a, used[1]
        );
        let rules = Rules::new(
            bridge,
            lines,
            [args.if_a.clone(), args.if_b.clone()],
            files,
            starter_uid(),
        );
        Ok(Model::new(
            launch.control_name,
            Running::Rules(Box::new(rules)),
            Default::default(),
            self.seed,
            Instant::now(),
        ))
    }

    /// Reads the rules again, on a thread of its own.
    pub(super) fn reload(&self) -> Receiver<Result<Reloaded>> {
        let src = self.source.clone();
        reread(move || {
            src.load_source()
                .map(Reloaded::Rules)
                .map_err(|e| e.context("keeping the current rules"))
        })
    }

    /// The node of a pair of a group, its delay lines' size and what
    /// its start line says; the rules are taken (once).
    pub(super) fn group_node(
        &mut self,
        args: &BridgeArgs,
        timing: &crate::cli::args::Timing,
    ) -> Result<GroupNode> {
        let Loaded {
            set, source, files, ..
        } = self.start.take().context("the rules were taken already")?;
        let buffer_bytes = timing.buffer.unwrap_or_else(|| buffer_for(&set));
        let summary = summary(&set);
        Ok(GroupNode {
            node: Node::new(set, self.node_config(args)),
            buffer_bytes,
            summary,
            control: NodeControl {
                lines: source,
                files,
            },
        })
    }

    /// The seed the node draws from: the rule file's `seed N`, else `seed`.
    pub(super) fn seed_or(mut self, seed: u64) -> RulesFront {
        if !self.seed_given {
            self.seed = seed;
        }
        self
    }

    /// The seed the node draws from.
    pub(super) fn seed(&self) -> u64 {
        self.seed
    }

    fn node_config(&self, args: &BridgeArgs) -> NodeConfig {
        NodeConfig {
            seed: self.seed,
            max_flows: args.run.max_flows,
            max_flow_bytes: args.run.max_flow_memory,
            ..NodeConfig::default()
        }
    }
}

/// A node of rules ready to run as a pair of a group
/// ([`RulesFront::group_node`]).
pub(super) struct GroupNode {
    pub node: Node,
    pub buffer_bytes: usize,
    /// Its pipes and rules, counted, for its start line.
    pub summary: String,
    pub control: NodeControl,
}

/// What a node's control object keeps beside its bridge.
pub(super) struct NodeControl {
    lines: Source,
    files: HashMap<String, String>,
}

impl NodeControl {
    /// The running node of the pair of `sides` (IF_A, IF_B), for its control
    /// socket, once its bridge runs.
    pub(super) fn running(self, bridge: LiveBridge<Node>, sides: [String; 2]) -> Running {
        let rules = Rules::new(bridge, self.lines, sides, self.files, starter_uid());
        Running::Rules(Box::new(rules))
    }
}

/// The re-read rule set replaces the running one at one instant
/// (`Node::update`: pipes that stay keep their queued packets).
pub(super) fn apply_reload(model: &Model, loaded: Loaded) {
    eprintln!("linkem: SIGHUP: rules re-read: {}", summary(&loaded.set));
    let Some(rules) = model.rules() else {
        eprintln!("linkem: SIGHUP: keeping the current rules: this bridge runs no rules");
        return;
    };
    let Loaded { source, files, .. } = loaded;
    match rules.reload(source, files) {
        Ok(()) => model.mark_change(linkem_runtime::clock::now_ns(), &["SIGHUP: rules re-read"]),
        Err(e) => eprintln!("linkem: SIGHUP: keeping the current rules: {e}"),
    }
}

/// A rule set's files (by name) in name order, as a change carries them.
fn sorted_files(files: &HashMap<String, String>) -> Vec<(String, String)> {
    let sorted: NamedFiles = files.iter().map(|(n, t)| (n.clone(), t.clone())).collect();
    sorted.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Loaded> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("lab.rules");
        std::fs::write(&path, text)?;
        RulesSource {
            config: None,
            file: Some(path),
            words: Vec::new(),
            sides: ["a".into(), "b".into()],
            claims_only: false,
        }
        .load_source()
    }

    /// Start and SIGHUP read the file through `load_source`: an empty or
    /// comment-only file (one being written, say) is refused, so SIGHUP
    /// keeps the running rules; `flush` asks for an empty set on purpose.
    #[test]
    fn an_empty_rule_file_is_refused_unless_it_says_flush() {
        for text in ["", "\n\n", "# being written\n", "ipfw -q\n"] {
            let e = load(text).err().expect("refused");
            let msg = format!("{e:#}");
            assert!(
                msg.contains("no rule, pipe or 'flush' line"),
                "{text:?}: {msg}"
            );
            assert!(msg.contains("lab.rules"), "{msg}");
        }
        let loaded = load("# nothing on purpose\nflush\n").unwrap();
        assert!(loaded.set.rules.is_empty() && loaded.set.pipes.is_empty());
        let loaded = load("pipe 1 config delay 1ms\n").unwrap();
        assert_eq!(loaded.set.pipes.len(), 1);
    }

    /// `--claims` with no rule file: a node of no rules of its own, which
    /// SIGHUP reads again the same; link words beside it are still refused.
    #[test]
    fn claims_alone_start_an_empty_node() {
        let source = |words: &[&str]| RulesSource {
            config: None,
            file: None,
            words: words.iter().map(|w| w.to_string()).collect(),
            sides: ["received".into(), "sent".into()],
            claims_only: true,
        };
        let loaded = source(&["seed", "7"]).load_source().unwrap();
        assert!(loaded.set.rules.is_empty() && loaded.set.pipes.is_empty());
        assert_eq!(loaded.seed, Some(7));
        let e = source(&["delay", "10ms"])
            .load_source()
            .err()
            .expect("refused");
        assert!(format!("{e:#}").contains("'delay'"), "{e:#}");
    }
}
