//! `linkem bridge`: live emulation between interfaces, a run of 1..n pairs
//! (one pair the common case: `IF_A IF_B [WORDS]`, or `--pair` given once;
//! several, [`pairs`]). The live stage (`linkem_runtime::pipeline::LiveBridge`)
//! owns each pair's model: a plain link ([`link`], from link words) or a node
//! of ipfw rules and Dummynet pipes ([`rules`], from `--rules` or the config's
//! `rules` key). One start-up of the interfaces ([`interfaces`]), one serving
//! loop ([`serve`]) and the sinks a run writes ([`outputs`]) serve every
//! model and every number of pairs.
//!
//! linkem is a transparent layer-2 bridge: every frame (ARP, IPv4, IPv6,
//! anything) goes through the model unchanged; the hosts on either side need
//! no configuration.
//!
//! Shared by every model: the interface lock, the signals, the control
//! socket, the ports, the serving loop (errors, `--duration`,
//! `--stats-interval`), SIGHUP (re-read on a thread of its own, handed to the
//! stage as one change: a link change for both directions, or the new rule
//! set), `--events` and `--record` (the seed, the start configuration and the
//! options that change decisions come from the model's [`Plan`]).

pub mod backend;
mod group_sinks;
mod group_start;
mod interfaces;
mod link;
mod outputs;
pub mod pairs;
mod plan;
mod rules;
mod serve;

use crate::bridge::backend::Rings;
use crate::bridge::interfaces::{Interfaces, Ports};
use crate::cli::args::{timing, BridgeArgs, OnOff, Realtime, Timing, REALTIME_PRIORITY};
use crate::control::{FrontEnd, Model};
use crate::files::config_has_rules;
use crate::process::signal_flags;
use anyhow::{bail, Context, Result};
use linkem_core::{LinkConfig, LinkSpec};
use linkem_io::outfile::FileUse;
use linkem_io::recording::{NamedFiles, Start};
use linkem_runtime::pipeline::{LiveOptions, Tap};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Instant;

/// What a command that embeds the bridge (`linkem shell`) adds to its run.
#[derive(Default)]
pub struct Hooks {
    /// Ends the run as SIGTERM does once set (the shell's command ended).
    pub done: Option<Arc<AtomicBool>>,
    /// Told once the stages run, so that traffic may start.
    pub started: Option<std::sync::mpsc::Sender<()>>,
    /// The command line the link logs name.
    pub command_line: Option<String>,
    /// The command that runs the bridge, for its stats, banner and metrics
    /// (`linkem host` is known from its attachment).
    pub front: FrontEnd,
    /// The named network namespace (`ip netns`) the pairs' interfaces are in
    /// (a lab's `lk-LAB`): a run of pairs binds its control sockets and
    /// metrics endpoint in the caller's namespace, then moves its thread
    /// into this one to open the interfaces and start its threads there.
    pub netns: Option<String>,
    /// What the web page draws (default: the bridge's interfaces, or host
    /// mode's "host" and "network").
    pub topology: Option<crate::control::web::Topology>,
    /// `--web`'s port, bound by the caller where it runs (`linkem shell`
    /// starts the bridge in another network namespace).
    pub web: Option<crate::control::web::Bound>,
}

/// Runs `linkem bridge` until SIGINT or SIGTERM (or `--duration`), then prints
/// the final counts. `--pair` given once is the bridge of IF_A IF_B WORDS;
/// given more often, the bridge of several pairs ([`pairs::run_group`]).
pub fn run(args: &BridgeArgs) -> Result<()> {
    if args.pairs.is_empty() {
        check_interface(&args.if_a, "the first interface (IF_A)", "")?;
        check_interface(&args.if_b, "the second interface (IF_B)", &args.if_a)?;
        return run_attached(args, Attach::Interfaces, Hooks::default());
    }
    if !args.if_a.is_empty() || !args.if_b.is_empty() || !args.words.is_empty() {
        bail!(
            "IF_A IF_B and --pair: give the interfaces either as IF_A IF_B [WORDS] (one pair) \
             or as --pair IF_A IF_B [WORDS] for each pair, not both"
        );
    }
    for (i, p) in args.pairs.iter().enumerate() {
        let n = i + 1;
        check_interface(
            &p[0],
            &format!("the first interface (IF_A) of --pair {n}"),
            "",
        )?;
        check_interface(
            &p[1],
            &format!("the second interface (IF_B) of --pair {n}"),
            &p[0],
        )?;
    }
    if let [one] = args.pairs.as_slice() {
        let mut single = args.clone();
        single.if_a = one[0].clone();
        single.if_b = one[1].clone();
        single.words = one[2..].to_vec();
        single.pair.clear();
        single.pairs.clear();
        return run_attached(&single, Attach::Interfaces, Hooks::default());
    }
    pairs::run_group(args)
}

/// Refuses an interface argument that is a link word and names no interface
/// of this network namespace, before the words are read: a forgotten IF_B
/// (`linkem bridge veth-a delay 10ms`) is then reported as what it is, not as
/// the word after it ('10ms') being unknown. Any other name is looked up
/// where the interfaces are opened, after the words and files are read, so
/// that a wrong file is refused before any interface is touched. `before`:
/// IF_A when `name` is IF_B.
fn check_interface(name: &str, role: &str, before: &str) -> Result<()> {
    if !linkem_core::config::is_link_word(name) || linkem_io::afpacket::index_of(name).is_ok() {
        return Ok(());
    }
    let first = if before.is_empty() { "IF_A" } else { before };
    bail!(
        "'{name}' was taken as {role}, but it is a link word and there is no interface of \
         that name: give both interfaces before the words, as in \
         'linkem bridge {first} IF_B {name} ...'"
    )
}

/// [`run`] with `hooks`.
pub fn run_with(args: &BridgeArgs, hooks: Hooks) -> Result<()> {
    run_attached(args, Attach::Interfaces, hooks)
}

/// Where the two sides' packets come from: two interfaces (`linkem bridge`,
/// `linkem shell`), or this host's own stack (`linkem host`, `crate::host`:
/// side a what it receives, side b what it sends). Everything else is one
/// code path.
pub enum Attach<'a> {
    /// IF_A and IF_B of the arguments.
    Interfaces,
    /// Netfilter queues fed by linkem's chains.
    Host(&'a crate::host::ports::HostSetup),
}

/// Runs the emulator on the packets `attach` gives, with either model.
pub fn run_attached(args: &BridgeArgs, attach: Attach<'_>, hooks: Hooks) -> Result<()> {
    // Port claims are pipes and rules of a rule set: `--claims` alone starts a
    // node with none of its own.
    let front = if args.rules.is_some()
        || args.config.as_deref().is_some_and(config_has_rules)
        || args.control.claims.claims
    {
        Front::Rules(rules::RulesFront::load(args)?)
    } else {
        Front::Link(link::LinkFront::load(args)?)
    };
    serve_front(args, front, attach, hooks)
}

/// The model a one-pair bridge runs, as read from its words or rule file.
enum Front {
    Link(link::LinkFront),
    Rules(rules::RulesFront),
}

/// What a model's bridge says of itself before any interface is touched;
/// the rest of the start-up is one code path.
struct Plan {
    /// The seed, and whether the user gave it.
    seed: u64,
    seed_given: bool,
    /// Files the bridge reads (for `--events` not to overwrite them).
    inputs: Vec<FileUse>,
    /// What the model starts from, as a recording keeps it, and the options
    /// that change its decisions.
    start: Start,
    options: serde_json::Map<String, serde_json::Value>,
    /// The files the start configuration read (tables, traces, schedules,
    /// profiles) by the name its words or rules gave each: what a recording
    /// copies, so that its replay reads these bytes and not what is there then.
    read: NamedFiles,
    /// Whether a link of the start configuration duplicates packets.
    duplicates: bool,
    /// What each direction's link log names as its link.
    link_words: [String; 2],
    /// Each direction's link at start, when the model is one link per
    /// direction (what a link log's `#` lines describe).
    links: [Option<LinkConfig>; 2],
    /// Why SIGHUP has nothing to re-read, if so.
    sighup_ignored: Option<&'static str>,
}

/// What a SIGHUP re-read gives.
enum Reloaded {
    Links(LinkSpec, LinkSpec),
    Rules(rules::Loaded),
}

impl Front {
    fn plan(&self, args: &BridgeArgs) -> Plan {
        match self {
            Front::Link(f) => f.plan(args),
            Front::Rules(f) => f.plan(args),
        }
    }

    /// Starts the stages on the opened ports; returns the control model.
    fn start(&mut self, launch: Launch<'_>) -> Result<Model> {
        match self {
            Front::Link(f) => f.start(launch),
            Front::Rules(f) => f.start(launch),
        }
    }

    /// Reads the sources again (on a thread of its own).
    fn reload(&self) -> Receiver<Result<Reloaded>> {
        match self {
            Front::Link(f) => f.reload(),
            Front::Rules(f) => f.reload(),
        }
    }
}

impl Reloaded {
    /// Hands a SIGHUP re-read to the running model.
    fn apply(self, model: &Model) {
        match self {
            Reloaded::Links(ab, ba) => link::apply_reload(model, ab, ba),
            Reloaded::Rules(loaded) => rules::apply_reload(model, loaded),
        }
    }
}

/// Host mode never coalesces: a netfilter verdict accepts or drops the one
/// packet it lent, so there is no super-frame to hand back in its place.
/// `linkem host` sets `--coalesce off`; anything that asks otherwise is
/// refused by name rather than silently sent frame by frame.
pub(crate) fn refuse_coalescing_in_host_mode(args: &BridgeArgs) -> Result<()> {
    if args.coalesce == OnOff::On {
        bail!(
            "--coalesce on is not available in host mode (the netfilter queue \
             gives each packet back by its own verdict, one wire frame at a time)"
        );
    }
    Ok(())
}

/// What the start-up hands a model to start its stages with.
struct Launch<'a> {
    args: &'a BridgeArgs,
    ports: Ports,
    timing: &'a Timing,
    /// Feeds `--events`, `--record` and the link logs, when any is written.
    tap: Option<Box<dyn Tap>>,
    /// The control socket's name, as `linkem ctl` and the metrics call the run.
    control_name: String,
}

/// What `attach` refuses of a plan, before anything is created.
fn check_attach(args: &BridgeArgs, attach: &Attach<'_>, plan: &Plan) -> Result<()> {
    if matches!(attach, Attach::Host(_)) {
        refuse_coalescing_in_host_mode(args)?;
        if plan.duplicates {
            bail!(
                "'duplicate' is not available {}",
                crate::host::ports::NO_COPIES
            );
        }
    }
    if args.if_a == args.if_b {
        bail!(
            "IF_A and IF_B are both '{}': a bridge needs two interfaces",
            args.if_a
        );
    }
    Ok(())
}

/// The start-up and serving loop of a one-pair bridge, whatever its model.
fn serve_front(
    args: &BridgeArgs,
    mut front: Front,
    attach: Attach<'_>,
    mut hooks: Hooks,
) -> Result<()> {
    let timing = timing(args)?;
    let plan = front.plan(args);
    check_attach(args, &attach, &plan)?;
    // Created before any interface is touched; the recording is removed
    // again if the bridge does not start.
    let mut sinks = outputs::Outputs::create(args, &plan, hooks.command_line.take())?;
    let realtime = args.run.realtime != Realtime::Off;
    // Held until the bridge ends: no second linkem on these interfaces (the
    // lock comes before the control socket, so it is the lock that refuses
    // it). A group of one, started as a group is ([`Interfaces`]), but a
    // signal does not stop it: the serving loop answers it.
    let claimed = match attach {
        Attach::Interfaces => Some(Interfaces::claim(
            args,
            vec![[args.if_a.as_str(), args.if_b.as_str()]],
            None,
        )?),
        Attach::Host(_) => {
            crate::host::ports::check_capabilities(realtime)?;
            None
        }
    };
    // SIGHUP: read the sources again and hand the stage the change (queued
    // packets keep their release times; nothing is lost). Installed before
    // the control socket is placed: a SIGINT during the start-up then ends
    // the run through the loop, which removes the socket, instead of killing
    // linkem with the socket left behind.
    let (stop, reload) = signal_flags()?;
    // control: opened while linkem may still create /run/linkem and chown the socket.
    let mut control = crate::control::server::prepare(&args.control, &args.if_a, &args.if_b)?;
    if let Some(web) = hooks.web.take() {
        control.set_web(web);
    }
    let topology = hooks.topology.take().unwrap_or_else(|| match attach {
        Attach::Host(_) => crate::control::web::Topology::pair(
            &control.name,
            [("host", "host"), ("network", "network")],
            [&args.if_a, &args.if_b],
        ),
        Attach::Interfaces => {
            crate::control::web::Topology::bridge(&control.name, &args.if_a, &args.if_b)
        }
    });
    // Read before the stages start, so that a bad --limits fails the start.
    let claims = args.control.claims.build()?;
    // Host mode: the chains go when this does (before the stages stop, so
    // that no new packet is queued to a stage that no longer reads).
    let (ports, chains) = attach_ports(&attach, claimed.as_ref())?;
    let tap = sinks.start_taps()?;
    let started_model = front
        .start(Launch {
            args,
            ports,
            timing: &timing,
            tap,
            control_name: control.name.clone(),
        })
        .and_then(|mut m| {
            m.front = match attach {
                Attach::Host(_) => FrontEnd::Host,
                Attach::Interfaces => hooks.front,
            };
            if let Some(c) = claims {
                m.enable_claims(c).map_err(|e| anyhow::anyhow!(e))?;
            }
            Ok(m)
        });
    let model = match started_model {
        Ok(model) => model,
        Err(e) => {
            sinks.discard();
            return Err(e);
        }
    };
    if !plan.seed_given {
        let seed = plan.seed;
        eprintln!("linkem: seed {seed} (add 'seed {seed}' to repeat the random draws)");
    }
    for line in control.announce() {
        eprintln!("{line}");
    }
    let model = Arc::new(model);
    let server = control.start(model.clone(), topology);
    let started = Instant::now();
    if let Some(tx) = hooks.started.take() {
        let _ = tx.send(());
    }
    let done = hooks.done.clone().unwrap_or_default();
    let run = serve::Run::One {
        front: &front,
        model: &model,
        seed: plan.seed,
        sighup_ignored: plan.sighup_ignored,
        sinks: sinks.watched(),
    };
    let served = serve::serve(args, run, started, [&stop, &done], &reload);
    drop(chains);
    // control: stop the control threads (removes the socket), then the stages.
    drop(server);
    let model = Arc::try_unwrap(model)
        .map_err(|_| anyhow::anyhow!("a control thread outlived its server"))?;
    let tap = finish(args, model, plan.seed, &sinks);
    // Dropping the tap ends the events channel and hands the recorder back.
    drop(tap);
    sinks.finish()?;
    served
}

/// Stops the stages of `model` and prints the final counts; returns the tap
/// given at start.
fn finish(
    args: &BridgeArgs,
    model: Model,
    seed: u64,
    sinks: &outputs::Outputs,
) -> Option<Box<dyn Tap>> {
    let started = model.started();
    let front = model.front;
    let mut running = model.into_running();
    let stats = running.stop();
    let tap = running.take_tap();
    let skipped = sinks.events_skipped();
    serve::print_counts(args, front, &running, &stats, started, seed, true, skipped);
    tap
}

/// The ports `attach` gives: the claimed interfaces opened, or host mode's
/// queues (and the chains that feed them, removed when dropped).
fn attach_ports(
    attach: &Attach<'_>,
    claimed: Option<&Interfaces<'_>>,
) -> Result<(Ports, Option<crate::host::ports::Chains>)> {
    match attach {
        Attach::Host(setup) => {
            let a = setup.attach()?;
            let used = ["nfqueue".to_string(), "nfqueue".to_string()];
            let ports = Ports {
                rx: a.rx,
                tx: a.tx,
                used,
            };
            Ok((ports, Some(a.chains)))
        }
        Attach::Interfaces => {
            let claimed = claimed.context("the interfaces are claimed")?;
            let ports = claimed.open(Rings::Full, None)?.into_iter().next();
            Ok((ports.context("the pair's interfaces are opened")?, None))
        }
    }
}

/// The stage's options from the command line, delay lines of `buffer_bytes`.
pub(crate) fn live_options(
    args: &BridgeArgs,
    timing: &Timing,
    buffer_bytes: [usize; 2],
    tap: Option<Box<dyn Tap>>,
) -> LiveOptions {
    let realtime = args.run.realtime != Realtime::Off;
    LiveOptions {
        names: ["a->b".into(), "b->a".into()],
        buffer_bytes,
        spin_ns: timing.spin_ns,
        spin_always: timing.spin_always,
        spin_budget_ppm: timing.spin_budget_ppm,
        max_lag_ns: timing.max_lag_ns,
        batch: args.run.batch.max(1),
        linger_ns: timing.linger_ns,
        realtime_priority: realtime.then_some(REALTIME_PRIORITY),
        realtime_input: args.run.realtime == Realtime::All,
        coalesce_window_ns: timing.coalesce_window_ns,
        realtime_timed_only: args.run.realtime == Realtime::Timed,
        tap,
    }
}

/// Starts a re-read of `load` on a thread of its own: a slow or failing read
/// never holds up the loop that answers SIGINT/SIGTERM.
fn reread<T: Send + 'static>(
    load: impl FnOnce() -> Result<T> + Send + 'static,
) -> Receiver<Result<T>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // The loop may have ended meanwhile; then nobody needs the answer.
        let _ = tx.send(load());
    });
    rx
}
