//! `linkem bridge IF_A IF_B --rules FILE`: the live bridge through a node of
//! ipfw rules and Dummynet pipes ([`linkem_core::node`]), driven by the node
//! stage of `linkem_runtime::pipeline::NodeBridge` (one thread for both
//! directions, since a pipe fed from both is one shared medium).
//!
//! As for `linkem replay --rules`, the rules come from FILE or the config's
//! `rules` key, and the only link word allowed beside them is `seed N` (a
//! link word would have no link to apply to: pipes carry their own). The rule
//! file is parsed before any interface is touched, so a bad file changes
//! nothing. SIGHUP re-reads it and swaps the node: packets the old node holds
//! keep their release times; a file that no longer parses keeps the running
//! rules. The control socket (`linkem ctl`, see `crate::control::rules`)
//! changes pipes and rules while traffic flows; a SIGHUP afterwards re-reads
//! the file, replacing what `linkem ctl` changed, and gives its objects to
//! the uid that started linkem.

use crate::args::{timing, BridgeArgs, Realtime, Timing, REALTIME_PRIORITY};
use crate::backend::{
    check_capabilities, claim_interfaces, drop_capabilities, open_interface, BackendKind, Claimed,
};
use crate::control::rules::{normalized, Rules, Source};
use crate::control::Model;
use crate::files::{load_rules_recording, rules_source};
use crate::process::{fresh_seed, signal_flags};
use crate::render::bridge_stats::print_rules_stats;
use anyhow::{bail, Context, Result};
use linkem_core::node::{Node, NodeConfig};
use linkem_core::rules::RuleSet;
use linkem_io::creds::starter_uid;
use linkem_runtime::pipeline::{buffer_bytes_for, NodeBridge, NodeOptions};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where the rules come from, owned so that a SIGHUP re-read runs on a thread
/// of its own (a slow read never holds up the loop that answers SIGINT).
#[derive(Clone)]
struct RulesSource {
    config: Option<PathBuf>,
    file: Option<PathBuf>,
    words: Vec<String>,
    sides: [String; 2],
}

impl RulesSource {
    /// The rule set, the seed, the source lines and the files they read.
    fn load_source(&self) -> Result<Loaded> {
        let (text, seed) = rules_source(self.config.as_deref(), self.file.as_deref(), &self.words)?
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
            seed,
            source,
            files,
        })
    }
}

struct Loaded {
    set: RuleSet,
    seed: Option<u64>,
    source: Source,
    files: HashMap<String, String>,
}

/// Delay-line bytes per direction: what every pipe may hold in flight at
/// once (each sized as a plain link, see `buffer_bytes_for`), at least what an
/// unshaped link gets, at most 2 GiB; dynamic instances share their pipe's share.
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

/// `linkem bridge --rules`: parse the rules, open the interfaces, start the
/// node stage and the control socket, then serve until stopped.
pub fn run(args: &BridgeArgs) -> Result<()> {
    check_args(args)?;
    let source = RulesSource {
        config: args.config.clone(),
        file: args.rules.clone(),
        words: args.words.clone(),
        sides: [args.if_a.clone(), args.if_b.clone()],
    };
    // Parsed before any interface is opened: a bad file changes nothing.
    let Loaded {
        set,
        seed,
        source: lines,
        files,
    } = source.load_source()?;
    let timing = timing(args)?;
    if args.if_a == args.if_b {
        bail!(
            "IF_A and IF_B are both '{}': a bridge needs two interfaces",
            args.if_a
        );
    }
    let seed_given = seed.is_some();
    let seed = seed.unwrap_or_else(fresh_seed);
    let buffer_bytes = timing.buffer.unwrap_or_else(|| buffer_for(&set));
    let what = summary(&set);
    let node_cfg = NodeConfig {
        seed,
        max_flows: args.max_flows,
        max_flow_bytes: args.max_flow_memory,
        ..Default::default()
    };
    let node = Node::new(set, node_cfg);

    let realtime = args.realtime != Realtime::Off;
    let backend = check_capabilities(args.backend, realtime)?;
    // Held until this function returns, after the bridge has stopped: no second
    // linkem on these interfaces (its lock comes before its control socket, as
    // in the plain bridge, so it is the lock that refuses it).
    let claimed = claim_interfaces(&args.if_a, &args.if_b)?;
    // Before the socket is placed: a SIGINT during the start-up ends the run
    // through `serve`, which removes the socket (see `bridge::run`).
    let (stop, reload) = signal_flags()?;
    // control: opened while linkem may still create /run/linkem and chown the socket.
    let control = crate::control::server::prepare(&args.control, &args.if_a, &args.if_b)?;
    let bridge = start_node(args, backend, &claimed, &timing, buffer_bytes, node, &what)?;
    if !seed_given {
        eprintln!("linkem: seed {seed} (add 'seed {seed}' to repeat the random draws)");
    }
    for line in control.announce() {
        eprintln!("{line}");
    }
    let rules = Rules::new(
        bridge,
        lines,
        [args.if_a.clone(), args.if_b.clone()],
        files,
        starter_uid(),
    );
    let model = Arc::new(Model::with_rules(
        control.name.clone(),
        rules,
        seed,
        Instant::now(),
    ));
    let server = control.start(model.clone());
    let started = Instant::now();
    let flags = Flags {
        stop: &stop,
        reload: &reload,
    };
    serve(args, &model, &source, flags, node_cfg, started)?;
    // control: stop the control threads (removes the socket), then the bridge.
    drop(server);
    let mut bridge = Arc::try_unwrap(model)
        .map_err(|_| anyhow::anyhow!("a control thread outlived its server"))?
        .into_rules()
        .expect("a rules model")
        .bridge;
    let stats = bridge.stop();
    print_rules_stats(args.stats, &bridge, &stats, started, seed, true);
    Ok(())
}

/// The options a rules bridge refuses, before anything is read.
fn check_args(args: &BridgeArgs) -> Result<()> {
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

/// Opens both interfaces (claimed by the caller, who holds their locks for
/// the bridge's life), gives up the capabilities no longer needed and starts
/// the node stage with its two output stages.
fn start_node(
    args: &BridgeArgs,
    backend: BackendKind,
    claimed: &Claimed,
    timing: &Timing,
    buffer_bytes: usize,
    node: Node,
    what: &str,
) -> Result<NodeBridge> {
    let realtime = args.realtime != Realtime::Off;
    let (rx_a, tx_a, used_a) = open_interface(backend, &args.if_a, claimed.a.mtu)?;
    let (rx_b, tx_b, used_b) = open_interface(backend, &args.if_b, claimed.b.mtu)?;
    drop_capabilities(realtime)?;
    let opts = NodeOptions {
        names: ["a->b".into(), "b->a".into()],
        buffer_bytes: [buffer_bytes; 2],
        spin_ns: timing.spin_ns,
        max_lag_ns: timing.max_lag_ns,
        batch: args.batch.max(1),
        realtime_priority: realtime.then_some(REALTIME_PRIORITY),
        realtime_input: args.realtime == Realtime::All,
    };
    let bridge = NodeBridge::start(opts, node, [rx_a, rx_b], [tx_b, tx_a])
        .map_err(|e| anyhow::anyhow!(e))?;
    let file = match (&args.rules, &args.config) {
        (Some(f), _) | (None, Some(f)) => f.display().to_string(),
        (None, None) => String::new(),
    };
    eprintln!(
        "linkem: rules {file}: {what}; a->b {} -> {} ({used_a}), b->a {} -> {} ({used_b})",
        args.if_a, args.if_b, args.if_b, args.if_a
    );
    Ok(bridge)
}

/// The signal flags the serving loop watches.
#[derive(Clone, Copy)]
struct Flags<'a> {
    /// SIGINT or SIGTERM came.
    stop: &'a AtomicBool,
    /// SIGHUP came: re-read the rules.
    reload: &'a AtomicBool,
}

type Reload = std::sync::mpsc::Receiver<Result<Loaded>>;

/// Every 20 ms until a signal or `--duration` stops it: a stage's error ends
/// the run, SIGHUP re-reads the rules on a thread of its own, counts are
/// printed every `--stats-interval`.
fn serve(
    args: &BridgeArgs,
    model: &Model,
    source: &RulesSource,
    flags: Flags<'_>,
    node_cfg: NodeConfig,
    started: Instant,
) -> Result<()> {
    let bridge = &model.rules().expect("a rules model").bridge;
    let mut reloading: Option<Reload> = None;
    let mut next_print = args
        .stats_interval
        .map(|s| started + Duration::from_secs_f64(s.max(0.1)));
    while !flags.stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
        if let Some(d) = args.duration {
            if started.elapsed().as_secs_f64() >= d {
                break;
            }
        }
        if let Some(e) = bridge.error() {
            bail!("{e}");
        }
        if reloading.is_none() && flags.reload.swap(false, Ordering::Relaxed) {
            let (tx, rx) = std::sync::mpsc::channel();
            let src = source.clone();
            std::thread::spawn(move || {
                let _ = tx.send(src.load_source());
            });
            reloading = Some(rx);
        }
        if let Some(answer) = reloading.as_ref().map(Reload::try_recv) {
            if !matches!(answer, Err(std::sync::mpsc::TryRecvError::Empty)) {
                reloading = None;
            }
            match answer {
                Ok(Ok(loaded)) => apply_reload(model, loaded, node_cfg),
                // A broken file must not stop a running emulation.
                Ok(Err(e)) => eprintln!("linkem: SIGHUP: keeping the current rules: {e:#}"),
                Err(_) => {}
            }
        }
        if let (Some(at), Some(every)) = (next_print, args.stats_interval) {
            if Instant::now() >= at {
                let stats = bridge.stats();
                print_rules_stats(args.stats, bridge, &stats, started, node_cfg.seed, false);
                next_print = Some(at + Duration::from_secs_f64(every.max(0.1)));
            }
        }
    }
    Ok(())
}

/// Swaps in the node of a re-read rule file (its own seed if it gives one).
fn apply_reload(model: &Model, loaded: Loaded, node_cfg: NodeConfig) {
    eprintln!("linkem: SIGHUP: rules re-read: {}", summary(&loaded.set));
    let cfg = NodeConfig {
        seed: loaded.seed.unwrap_or(node_cfg.seed),
        ..node_cfg
    };
    let rules = model.rules().expect("a rules model");
    rules.reload(loaded.source, loaded.files, || {
        // None only once the bridge stops, when the new rules no longer matter.
        let _ = rules.bridge.reload(Node::new(loaded.set, cfg));
    });
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
}
