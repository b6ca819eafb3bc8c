//! `linkem lab up FILE`: realises this machine's plan of the lab
//! (`super::plan`): its namespaces, bridges, veths and tunnels
//! ([`super::net`], each recorded in the lab's state before it is made),
//! runs each node's `exec` commands in its namespace, then runs one
//! emulator for every link in this process ([`crate::bridge::pairs::run_plans`]):
//! its control socket and metrics endpoint are bound in this machine's
//! namespace, its interfaces opened and its threads started in the lab's
//! namespace `lk-LAB`. It stays until SIGINT, SIGTERM or `linkem lab down`,
//! then removes everything; `--detach` starts the same in the background
//! and returns once every link forwards.
//!
//! Also the dispatch of every `linkem lab` command ([`command`]).

use super::net::Record;
use super::plan::MachinePlan;
use super::state::{LinkState, NodeState, Recorder, State};
use super::{admin, net, netem};
use crate::bridge::pairs::{run_plans, PairPlan};
use crate::bridge::Hooks;
use crate::cli::args::BridgeArgs;
use crate::cli::lab::{LabArgs, LabCommand, NetemCommand, UpArgs};
use crate::control::web::topology::{Link as TopologyLink, Node as TopologyNode, Topology};
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// How long `up --detach` waits for the lab to forward.
const DETACH_WAIT: Duration = Duration::from_secs(120);
/// How often a running lab looks for node namespaces that vanished.
const WATCH_PERIOD: Duration = Duration::from_millis(500);

/// Runs `linkem lab ...`; returns the exit code.
pub fn command(args: &LabArgs) -> Result<i32> {
    match &args.command {
        LabCommand::Up(up_args) => up(up_args),
        LabCommand::Down(a) => admin::down(a).map(|_| 0),
        LabCommand::List(a) => admin::list(a).map(|_| 0),
        LabCommand::Show(a) => admin::show(a).map(|_| 0),
        LabCommand::Exec(a) => admin::exec(a),
        LabCommand::Netem(n) => match &n.command {
            NetemCommand::Set(a) => netem::set(a).map(|_| 0),
            NetemCommand::Show(a) => netem::show(a).map(|_| 0),
        },
    }
}

/// `linkem lab up`.
pub fn up(args: &UpArgs) -> Result<i32> {
    if !linkem_io::netns::is_root() {
        bail!("linkem lab up makes network namespaces and veths: it needs root");
    }
    let lab = super::Lab::load(&args.file)?;
    for w in &lab.warnings {
        eprintln!("linkem: lab {}: {w}", lab.name);
    }
    refuse_images(&lab)?;
    let plan = super::plan::plan(&lab, args.host.as_deref())?;
    let run_name = run_name(&lab.name, args.host.as_deref());
    // Refused before anything is made.
    let bridge_args = bridge_args(args, &run_name)?;
    if args.detach {
        return detach(&run_name).map(|_| 0);
    }
    let stop = Arc::new(AtomicBool::new(false));
    // Which signal came, for the exit status (128 + N, as a shell reports it).
    let mut signals = Vec::new();
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let flag = Arc::new(AtomicBool::new(false));
        for f in [&stop, &flag] {
            signal_hook::flag::register(sig, Arc::clone(f))
                .context("cannot install the signal handler")?;
        }
        signals.push((sig, flag));
    }
    let mut rec = Recorder::take(first_state(args, &lab, &plan, &run_name))?;
    // The emulator's socket: a SIGKILL leaves it behind.
    let socket = super::state::Object::File {
        path: linkem_ctl::default_socket_path(&run_name),
    };
    let made = rec
        .record(socket)
        .and_then(|_| super::build::build(&plan, &mut rec, &stop))
        .and_then(|ends| {
            // While the kernel turns the ends' carriers on (its link watch
            // acts up to a second late), the nodes' commands run.
            super::build::run_exec(&plan, &stop)?;
            net::wait_until_up(&ends)
        });
    let result = match made {
        Ok(()) => emulate(&bridge_args, &plan, topology(&lab, &plan), &rec, &stop),
        Err(e) => Err(e),
    };
    rec.remove_everything();
    let signal = signals.iter().find(|(_, f)| f.load(Ordering::Relaxed));
    match (result, signal) {
        (Err(e), _) if e.downcast_ref::<crate::Interrupted>().is_none() => Err(e),
        (_, Some((sig, _))) => {
            eprintln!("linkem: lab {run_name}: stopped, everything removed");
            Ok(128 + sig)
        }
        _ => {
            eprintln!("linkem: lab {run_name}: everything removed");
            Ok(0)
        }
    }
}

/// The name a machine's part of the lab runs under: its run folder
/// (`/run/linkem/labs/NAME/`) and control socket. `LAB` alone, or `LAB@M`
/// with `--host M`, so that two machines' parts on one host (namespaces
/// standing for machines) do not share them.
pub fn run_name(lab: &str, host: Option<&str>) -> String {
    match host {
        Some(m) => format!("{lab}@{m}"),
        None => lab.to_string(),
    }
}

/// Refuses the nodes that need a container runtime, naming them and what is missing.
fn refuse_images(lab: &super::Lab) -> Result<()> {
    let with_image: Vec<String> = lab
        .nodes
        .iter()
        .filter_map(|n| n.image.as_ref().map(|i| format!("{} (image {i})", n.name)))
        .collect();
    if with_image.is_empty() {
        return Ok(());
    }
    bail!(
        "lab {}: node{} {} need{} a container runtime, and linkem lab runs nodes without an \
         image only (each a network namespace): {}; remove `image:` to run a node as a \
         namespace with its `exec:` commands",
        lab.name,
        if with_image.len() == 1 { "" } else { "s" },
        with_image.join(", "),
        if with_image.len() == 1 { "s" } else { "" },
        container_runtime()
    )
}

/// What a container runtime lacks on this machine, as `docker info` or
/// `podman info` say.
fn container_runtime() -> String {
    let mut said = Vec::new();
    for program in ["docker", "podman"] {
        match std::process::Command::new(program)
            .arg("info")
            .stdin(std::process::Stdio::null())
            .output()
        {
            Err(_) => said.push(format!("{program} is not installed")),
            Ok(o) if o.status.success() => said.push(format!(
                "{program} answers but linkem does not start containers yet"
            )),
            Ok(o) => {
                let err = String::from_utf8_lossy(&o.stderr);
                let first = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
                said.push(format!("{program} does not work here ({})", first.trim()));
            }
        }
    }
    said.join("; ")
}

/// The emulator's options: the lab's own (`--name LAB`, the packet backend)
/// and what `up` passes through, read as `linkem bridge` reads its own.
fn bridge_args(args: &UpArgs, lab: &str) -> Result<BridgeArgs> {
    use clap::{CommandFactory, FromArgMatches};
    let mut line: Vec<String> = ["linkem", "bridge", "--pair", "-", "-"]
        .map(String::from)
        .to_vec();
    line.extend(["--name".into(), lab.into()]);
    let backend = clap::ValueEnum::to_possible_value(&args.backend)
        .map(|v| v.get_name().to_string())
        .unwrap_or_else(|| "packet".into());
    let stats = clap::ValueEnum::to_possible_value(&args.stats)
        .map(|v| v.get_name().to_string())
        .unwrap_or_else(|| "none".into());
    line.extend(["--backend".into(), backend, "--stats".into(), stats]);
    if let Some(dir) = &args.record {
        line.extend(["--record".into(), dir.display().to_string()]);
    }
    if let Some(file) = &args.events {
        line.extend(["--events".into(), file.display().to_string()]);
    }
    if let Some(addr) = &args.metrics {
        line.extend(["--metrics".into(), addr.clone()]);
    }
    if let Some(addr) = &args.web {
        line.extend(["--web".into(), addr.clone()]);
    }
    let matches = crate::cli::Cli::command()
        .try_get_matches_from(&line)
        .map_err(|e| anyhow::anyhow!("{}", e.to_string().trim()))?;
    let cli = crate::cli::Cli::from_arg_matches(&matches).map_err(|e| anyhow::anyhow!("{e}"))?;
    let crate::cli::Command::Bridge(mut bridge) = cli.command else {
        bail!("the emulator's options did not read as `linkem bridge`'s");
    };
    bridge.pair.clear();
    bridge.pairs.clear();
    Ok(*bridge)
}

/// What the web page draws: the lab's nodes and the links emulated here,
/// each between its endpoints' nodes and interfaces.
fn topology(lab: &super::Lab, plan: &MachinePlan) -> Topology {
    let nodes = lab
        .nodes
        .iter()
        .map(|n| TopologyNode {
            name: n.name.clone(),
            kind: n.kind.as_str().to_string(),
        })
        .collect();
    let links = plan
        .pairs
        .iter()
        .filter_map(|p| lab.links.iter().find(|l| l.name == p.link))
        .map(|l| {
            let [a, b] = &l.endpoints;
            TopologyLink {
                name: l.name.clone(),
                a: a.node.clone(),
                b: b.node.clone(),
                a_if: a.interface.clone(),
                b_if: b.interface.clone(),
            }
        })
        .collect();
    Topology {
        nodes,
        links,
        front: Some("lab"),
    }
}

/// The state file's first content: the lab, its nodes and links, no object yet.
fn first_state(args: &UpArgs, lab: &super::Lab, plan: &MachinePlan, run_name: &str) -> State {
    let file = args
        .file
        .canonicalize()
        .unwrap_or_else(|_| args.file.clone());
    let started_unix_s = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    State {
        name: run_name.to_string(),
        file,
        host: args.host.clone(),
        pid: std::process::id(),
        started_unix_s,
        ready: false,
        control: Some(linkem_ctl::default_socket_path(run_name)),
        nodes: plan_nodes(lab, plan),
        links: plan
            .pairs
            .iter()
            .map(|p| LinkState {
                name: p.link.clone(),
                a_to_b: p.specs[0].link.to_string(),
                b_to_a: p.specs[1].link.to_string(),
            })
            .collect(),
        objects: Vec::new(),
    }
}

/// This machine's nodes as the state file keeps them: those with a
/// namespace or a bridge here, and `host` nodes.
fn plan_nodes(lab: &super::Lab, plan: &MachinePlan) -> Vec<NodeState> {
    lab.nodes
        .iter()
        .filter_map(|n| {
            let ns = plan.namespaces.iter().find(|p| p.node == n.name);
            let bridge = plan.bridges.iter().find(|b| b.owner == n.name);
            if ns.is_none() && bridge.is_none() && n.kind != super::NodeKind::Host {
                return None;
            }
            Some(NodeState {
                name: n.name.clone(),
                kind: n.kind.as_str().to_string(),
                netns: ns.map(|p| p.name.clone()),
            })
        })
        .collect()
}

/// Runs the emulator of every link until a signal or `down`; marks the lab
/// ready once it forwards and, while it runs, reports node namespaces that vanish.
fn emulate(
    args: &BridgeArgs,
    plan: &MachinePlan,
    topology: Topology,
    rec: &Recorder,
    stop: &AtomicBool,
) -> Result<()> {
    if stop.load(Ordering::Relaxed) {
        bail!(crate::Interrupted {
            signal: libc::SIGTERM
        });
    }
    let pairs = pair_plans(plan, rec.dir())?;
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let finished = Arc::new(AtomicBool::new(false));
    let hooks = Hooks {
        done: None,
        started: Some(started_tx),
        command_line: Some(std::env::args().collect::<Vec<_>>().join(" ")),
        front: crate::control::FrontEnd::Bridge,
        netns: Some(plan.emulator_namespace.clone()),
        topology: Some(topology),
        web: None,
    };
    let watcher = {
        let (dir, mut state) = (rec.dir().to_path_buf(), rec.state.clone());
        let finished = finished.clone();
        std::thread::Builder::new()
            .name("linkem-lab-watch".into())
            .spawn(move || {
                if started_rx.recv().is_err() {
                    return;
                }
                state.ready = true;
                if let Err(e) = super::state::write_state(&dir, &state) {
                    eprintln!("linkem: lab {}: {e:#}", state.name);
                }
                eprintln!(
                    "linkem: lab {} is up: {} links, {} nodes; `linkem lab down {}` ends it",
                    state.name,
                    state.links.len(),
                    state.nodes.len(),
                    state.name
                );
                watch_nodes(&state, &finished);
            })
            .context("cannot start the lab's watcher thread")?
    };
    // On a thread of its own: it moves into the lab's namespace and gives up
    // the capabilities it no longer needs, where this one keeps both to
    // remove the lab afterwards.
    let served = if pairs.is_empty() {
        hold(hooks, stop)
    } else {
        let args = args.clone();
        std::thread::Builder::new()
            .name("linkem-lab".into())
            .spawn(move || run_plans(&args, pairs, hooks))
            .context("cannot start the emulator's thread")?
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the emulator's thread panicked")))
    };
    finished.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    served
}

/// A part of a lab that emulates no link here (its links across machines
/// are emulated at their other ends): it holds the lab until a signal.
fn hold(mut hooks: Hooks, stop: &AtomicBool) -> Result<()> {
    eprintln!("linkem: no link of this lab is emulated on this machine: no emulator here");
    if let Some(tx) = hooks.started.take() {
        let _ = tx.send(());
    }
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// The emulator's pairs: one per link of this machine, named as the link.
/// A link's `rules:` given as text are written into the lab's run folder
/// (`dir`), so that the pair reads them as a rule file.
fn pair_plans(plan: &MachinePlan, dir: &Path) -> Result<Vec<PairPlan>> {
    plan.pairs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let rules = match &p.rules {
                None => None,
                Some(r) => Some(rules_file(p, r, dir, i)?),
            };
            Ok(PairPlan {
                if_a: p.if_a.clone(),
                if_b: p.if_b.clone(),
                name: p.link.clone(),
                specs: p.specs.clone(),
                seed: p.seed,
                rules,
                files: p.files.clone(),
            })
        })
        .collect()
}

/// The rule file a link's pair runs: its own file, or its inline text
/// written to `dir/rules-I.rules`. A pair of rules has no link words of its
/// own (its links are the file's `pipe N config` lines).
fn rules_file(
    p: &super::EmulatorPair,
    r: &super::Rules,
    dir: &Path,
    i: usize,
) -> Result<std::path::PathBuf> {
    if p.words.iter().any(|w| !w.is_empty()) {
        bail!(
            "link {}: `rules:` ({}) and link words together: a link of rules takes its \
             delays, rates and losses from the rules' `pipe N config` lines; move the words there",
            p.link,
            r.name
        );
    }
    if let Some(path) = &r.path {
        return Ok(path.clone());
    }
    let file = dir.join(format!("rules-{i}.rules"));
    std::fs::write(&file, &r.text).with_context(|| {
        format!(
            "link {}: cannot write its rules to {}",
            p.link,
            file.display()
        )
    })?;
    Ok(file)
}

/// Says once of each node whose namespace vanishes while the lab runs
/// which links stopped with it (the emulator keeps the others).
fn watch_nodes(state: &State, finished: &AtomicBool) {
    let mut gone = std::collections::HashSet::new();
    while !finished.load(Ordering::Relaxed) {
        for n in &state.nodes {
            let Some(ns) = &n.netns else { continue };
            if gone.contains(&n.name) || net::namespace_exists(ns) {
                continue;
            }
            gone.insert(n.name.clone());
            let prefix = format!("{}:", n.name);
            let links: Vec<&str> = state
                .links
                .iter()
                .filter(|l| l.name.starts_with(&prefix) || l.name.contains(&format!("--{prefix}")))
                .map(|l| l.name.as_str())
                .collect();
            eprintln!(
                "linkem: lab {}: node {}'s namespace {ns} is gone (deleted while the lab ran): \
                 its links stopped ({}); the others go on",
                state.name,
                n.name,
                links.join(", ")
            );
        }
        std::thread::sleep(WATCH_PERIOD);
    }
}

/// `up --detach`: starts `linkem lab up` (without --detach) in the
/// background, its output to the lab's log, and waits until the lab forwards.
fn detach(lab: &str) -> Result<()> {
    use std::os::unix::process::CommandExt;
    if super::state::running(lab) {
        let pid = super::state::read(lab).ok().flatten().map_or(0, |s| s.pid);
        bail!("lab '{lab}' is running already (emulator pid {pid}): `linkem lab down {lab}` first");
    }
    let dir = super::state::lab_dir(lab);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let log_path = dir.join("up.log");
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    // Read through this descriptor: a lab that fails removes its directory.
    let mut said = std::fs::File::open(&log_path)
        .with_context(|| format!("cannot read {}", log_path.display()))?;
    let exe = std::env::current_exe().context("cannot find linkem's own executable")?;
    let rest: Vec<std::ffi::OsString> = std::env::args_os()
        .skip(1)
        .filter(|a| a != "-d" && a != "--detach")
        .collect();
    let mut child = std::process::Command::new(exe)
        .args(rest)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Not in the caller's process group: its Ctrl-C is not the lab's.
        .process_group(0)
        .spawn()
        .context("cannot start the lab's emulator in the background")?;
    let until = Instant::now() + DETACH_WAIT;
    loop {
        if let Some(status) = child.try_wait()? {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut said, &mut text);
            eprint!("{text}");
            bail!("lab {lab} did not start ({status})");
        }
        let state = super::state::read(lab).ok().flatten();
        if let Some(s) = state.filter(|s| s.pid == child.id() && s.ready) {
            println!(
                "lab {lab} is up: {} links, {} nodes; emulator pid {} in the background, \
                 log {}; `linkem lab down {lab}` ends it",
                s.links.len(),
                s.nodes.len(),
                s.pid,
                log_path.display()
            );
            // Where to reach it (written to the log before the lab is ready).
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut said, &mut text);
            for line in text.lines().filter(|l| {
                l.starts_with("linkem: web page on ") || l.starts_with("linkem: metrics on ")
            }) {
                println!("{line}");
            }
            return Ok(());
        }
        if Instant::now() > until {
            bail!(
                "lab {lab} is not forwarding after {} s (emulator pid {} goes on; see {})",
                DETACH_WAIT.as_secs(),
                child.id(),
                log_path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
