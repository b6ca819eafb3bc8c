//! `linkem shell [WORDS] [--a-to-b WORDS] [--b-to-a WORDS] [--rules FILE] --
//! CMD...`: runs CMD in a network namespace of its own whose only way out
//! crosses an emulated link, as mahimahi's shells do, through the bridge
//! command's own code ([`crate::bridge::run_with`]) and live stage.
//!
//! ```text
//!  CMD's namespace (new)      middle namespace (new)                  the caller's namespace
//!  eth0 IN4/30, IN6/64 <-veth-> lkaPID ~linkem bridge~ lkbPID <-veth-> lksPID HOST4/30, HOST6/64
//!  default via HOST4/HOST6                                             routes; NAT to the rest
//! ```
//!
//! Side a is CMD's: a-to-b is what CMD sends (mahimahi's uplink). Addresses
//! come from the pid P of linkem (so nested shells, each a process of its
//! own, differ): IPv4 100.64.0.0/10 (RFC 6598 shared space, as mahimahi
//! uses) split in /30s, subnet index P mod 2²⁰, HOST4 = .1, IN4 = .2; IPv6
//! fd6c:6b6d:P₁:P₀::/64 (P's upper and lower 16 bits), HOST6 = ::1, IN6 =
//! ::2. The caller's namespace reaches CMD's addresses directly (a server in
//! the shell is reachable from its parent: CMD gets `LINKEM_SHELL_ADDR`,
//! `LINKEM_SHELL_ADDR6`, and the parent's side as `LINKEM_SHELL_PARENT`,
//! `LINKEM_SHELL_PARENT6`, and mahimahi's `MAHIMAHI_BASE`, which a nested
//! shell leaves at the outermost parent's, as mahimahi does); CMD reaches
//! the rest through masquerading (iptables/ip6tables rules commented
//! `linkem-shell-P`) and forwarding, which the shell turns on in the
//! caller's namespace (`ip_forward`, `ipv6/conf/all/forwarding`) and puts
//! back as it found it when it ends (SIGINT and SIGTERM included; after a
//! SIGKILL it stays on, as no later start can know what it was before). DNS needs nothing more while the resolver in
//! /etc/resolv.conf is not a loopback address; a loopback one is relayed
//! from HOST4 (see [`crate::shell::dns`]).
//!
//! Clean-up: the middle namespace has no name and is held only by linkem
//! (its threads, sockets, a descriptor): when linkem ends, even by SIGKILL,
//! it goes, and its veths with their peers `eth0` and `lksP`; CMD gets
//! SIGKILL when linkem dies (`PR_SET_PDEATHSIG`). What may stay after a
//! SIGKILL are the iptables rules, which the next `linkem shell` removes
//! (their comment names a pid no longer alive). At a normal end, SIGINT or
//! SIGTERM, everything is removed before linkem exits; it exits with CMD's
//! status (128 + N for a signal N), or 128 + N when a signal N ended the
//! shell (CMD then gets SIGTERM, and SIGKILL 2 s later).
//!
//! An ordinary user: linkem starts itself again in a new user namespace
//! (root there, mapped to the user) with a network namespace that `pasta`
//! connects to the machine through ordinary sockets; that one is "the
//! caller's namespace" of the layout above (see [`run_unprivileged`]).
//!
//! Namespaces belong to threads here (see `linkem_io::shellns`): the main
//! thread moves between the three to configure each with `ip`, starts the
//! bridge on a thread while in the middle one and CMD while in CMD's.

pub mod dns;

use crate::bridge::Hooks;
use crate::cli::args::{BridgeArgs, Realtime, RunArgs};
pub use crate::cli::shell::ShellArgs;
use crate::control::ControlArgs;
use anyhow::{bail, Context, Result};
use linkem_io::shellns::{die_with_parent, process_alive, NetNs};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The names and addresses of the shell of linkem's process `pid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub pid: u32,
    /// The emulator's ends in the middle namespace (a: CMD's side).
    pub if_a: String,
    pub if_b: String,
    /// The caller's end.
    pub host_if: String,
    pub host4: Ipv4Addr,
    pub inner4: Ipv4Addr,
    pub host6: Ipv6Addr,
    pub inner6: Ipv6Addr,
    /// The rules' comment.
    pub tag: String,
}

/// The /30 of 100.64.0.0/10 and the /64 of fd6c:6b6d::/32 that `pid` gets.
pub fn plan(pid: u32) -> Plan {
    let base = u32::from(Ipv4Addr::new(100, 64, 0, 0)) + ((pid & 0xF_FFFF) << 2);
    let net6 = |host: u16| {
        Ipv6Addr::new(
            0xfd6c,
            0x6b6d,
            (pid >> 16) as u16,
            pid as u16,
            0,
            0,
            0,
            host,
        )
    };
    Plan {
        pid,
        if_a: format!("lka{pid}"),
        if_b: format!("lkb{pid}"),
        host_if: format!("lks{pid}"),
        host4: Ipv4Addr::from(base + 1),
        inner4: Ipv4Addr::from(base + 2),
        host6: net6(1),
        inner6: net6(2),
        tag: format!("linkem-shell-{pid}"),
    }
}

/// Runs a program to completion; an error names the command and its stderr.
fn run_cmd(program: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run `{program}` (is it installed?)"))?;
    if !out.status.success() {
        bail!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn ip(args: &[&str]) -> Result<()> {
    run_cmd("ip", args)
}

/// `ip ARGS` in namespace `ns` (while the calling thread is elsewhere).
fn ip_in(ns: &NetNs, args: &[&str]) -> Result<()> {
    let net = format!("--net={}", ns.path());
    let mut all = vec![net.as_str(), "ip"];
    all.extend_from_slice(args);
    run_cmd("nsenter", &all)
}

/// Set in the environment of the linkem that an ordinary user's shell
/// starts in its user namespace.
const USERNS_ENV: &str = "LINKEM_SHELL_USERNS";

/// Runs `linkem shell`; returns the exit code (CMD's status).
pub fn run(args: &ShellArgs) -> Result<i32> {
    let in_userns = std::env::var_os(USERNS_ENV).is_some();
    if !linkem_io::netns::is_root() {
        return run_unprivileged();
    }
    if in_userns {
        wait_for_pasta()?;
    }
    let plan = plan(std::process::id());
    remove_stale();
    let host = NetNs::current().context("cannot open this thread's network namespace")?;
    let mut host_side = HostSide {
        plan: plan.clone(),
        rules: Vec::new(),
        sysctls: Vec::new(),
    };
    let built = build(&plan, &host, &mut host_side);
    // Whatever happened, the main thread works in the caller's namespace from here.
    host.enter()
        .context("cannot return to the caller's network namespace")?;
    let (mid, inner) = built?;
    wait_until_up(&plan, &host, &mid, &inner)?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut signals = Vec::new();
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let flag = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(sig, flag.clone())
            .context("cannot install the signal handler")?;
        signals.push((sig, flag));
    }
    // The bridge starts on a thread made while in the middle namespace (its
    // threads and sockets stay there).
    let mut bridge_args = bridge_args(args, &plan);
    if in_userns {
        // A user namespace's root has no real-time priority and no /run/linkem.
        bridge_args.run.realtime = Realtime::Off;
        if args.control.is_none() {
            bridge_args.control.control = Some("none".into());
        }
    }
    // Bound here, in the caller's namespace: the bridge runs in the middle one.
    let web = match &args.web {
        Some(a) => Some(crate::control::web::Bound::bind(a)?),
        None => None,
    };
    let topology = crate::control::web::Topology::pair(
        &format!("shell-{}", plan.pid),
        [("shell", "shell"), ("host", "host")],
        [&bridge_args.if_a, &bridge_args.if_b],
    );
    let done = Arc::new(AtomicBool::new(false));
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let hooks = Hooks {
        done: Some(done.clone()),
        started: Some(started_tx),
        command_line: Some(std::env::args().collect::<Vec<_>>().join(" ")),
        front: crate::control::FrontEnd::Shell,
        netns: None,
        topology: Some(topology),
        web,
    };
    mid.enter().context("cannot enter the middle namespace")?;
    let bridge = std::thread::Builder::new()
        .name("linkem-shell-bridge".into())
        .spawn(move || crate::bridge::run_with(&bridge_args, hooks));
    host.enter()?;
    let bridge = bridge.context("cannot start the emulator's thread")?;
    if started_rx.recv().is_err() {
        // The bridge ended before it started: its error says why.
        let e = match bridge.join() {
            Ok(Err(e)) => e,
            _ => anyhow::anyhow!("the emulator did not start"),
        };
        return Err(e.context("linkem shell: the emulator did not start"));
    }
    drop(stop);
    let how = if in_userns {
        "veths in a user namespace; pasta (passt) for the way out"
    } else {
        "veths, as root"
    };
    eprintln!(
        "linkem: shell {}: CMD at {} and {} (eth0), its parent at {} and {} ({}), through the \
         emulated link ({how})",
        plan.pid, plan.inner4, plan.inner6, plan.host4, plan.host6, plan.host_if
    );
    // Bound and started here, in the caller's namespace.
    let resolv_conf = relay_dns(&plan, in_userns);
    inner.enter().context("cannot enter CMD's namespace")?;
    let child = spawn_command(args, &plan, resolv_conf.as_ref().map(|f| f.path()));
    host.enter()?;
    // CMD's mount holds its resolv.conf now: no file stays behind.
    drop(resolv_conf);
    let code = match child {
        Ok(child) => wait_command(child, &signals, &bridge),
        Err(e) => match not_run_status(&e) {
            Some(code) => {
                eprintln!("linkem: shell: {e:#}");
                Ok(code)
            }
            None => Err(e),
        },
    };
    done.store(true, Ordering::Relaxed);
    let served = bridge
        .join()
        .map_err(|_| anyhow::anyhow!("the emulator's thread panicked"))?;
    drop(inner);
    drop(mid);
    drop(host_side);
    let code = code?;
    if let Err(e) = served {
        // A signal ended the bridge (the shell then reports it), or an error did.
        if e.downcast_ref::<crate::Interrupted>().is_none() {
            return Err(e);
        }
    }
    Ok(code)
}

/// An ordinary user's shell: linkem again, as root of a new user namespace
/// with a network namespace of its own (no setuid program), which `pasta`
/// (passt's user-space network stack) connects to this machine's network
/// through ordinary sockets; that linkem builds the shell as root does,
/// with its "caller's namespace" the one pasta serves. This linkem waits
/// for it and exits with its status.
fn run_unprivileged() -> Result<i32> {
    use std::os::unix::process::ExitStatusExt;
    if Command::new("pasta").arg("--version").output().is_err() {
        bail!(
            "linkem shell as an ordinary user needs pasta for the way out: install passt \
             (e.g. `apt-get install passt`), or run linkem shell as root"
        );
    }
    // pasta opens the TUN device from inside the namespace, as this user.
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
    {
        bail!(
            "linkem shell as an ordinary user needs /dev/net/tun for pasta, and this user \
             cannot open it ({e}; Debian makes it mode 0666), or run linkem shell as root"
        );
    }
    eprintln!("linkem: shell: not root: using a user namespace, and pasta (passt) for the way out");
    // SIGINT reaches the whole process group; the inner linkem handles it.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .context("cannot install the signal handler")?;
    }
    let exe = std::env::current_exe().context("cannot find linkem's own executable")?;
    let mut inner = Command::new(exe);
    inner.args(std::env::args_os().skip(1)).env(USERNS_ENV, "1");
    let relay = dns_relay_outside();
    if let Some((port, tcp)) = relay {
        inner.env(dns::PORT_ENV, port.to_string());
        if tcp {
            inner.env(dns::TCP_ENV, "1");
        }
    }
    linkem_io::shellns::in_user_namespace(&mut inner);
    die_with_parent(&mut inner, libc::SIGTERM);
    let mut inner = inner.spawn().context(
        "cannot make a user namespace (is kernel.unprivileged_userns_clone or \
         user.max_user_namespaces 0 here?)",
    )?;
    let pid = inner.id().to_string();
    let mut pasta_args = vec!["--config-net", "--quiet", "--foreground", "--no-map-gw"];
    // The relay's port, from pasta's namespace's loopback to the host's.
    let port = relay.map(|(p, _)| p.to_string()).unwrap_or_default();
    if let Some((_, tcp)) = relay {
        pasta_args.extend(["-U", &port]);
        if tcp {
            pasta_args.extend(["-T", &port]);
        }
    }
    pasta_args.push(&pid);
    let pasta = Command::new("pasta")
        .args(&pasta_args)
        .stdin(Stdio::null())
        .spawn();
    let mut pasta = match pasta {
        Ok(p) => p,
        Err(e) => {
            let _ = inner.kill();
            let _ = inner.wait();
            return Err(anyhow::anyhow!("cannot start pasta: {e}"));
        }
    };
    let status = inner.wait()?;
    let _ = pasta.kill();
    let _ = pasta.wait();
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// An ordinary user's shell, on the host: when the host's resolver is on
/// loopback, relays to it from 127.0.0.1:P (see [`crate::shell::dns`]);
/// returns P and whether TCP is relayed too.
fn dns_relay_outside() -> Option<(u16, bool)> {
    let (path, conf) = dns::host_conf();
    let resolver = dns::first_loopback(&conf)?;
    let listen = std::net::SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    match dns::start_relay(listen, (resolver, 53).into(), true) {
        Ok(relay) => Some(relay),
        Err(e) => {
            dns::say_unrelayed(&path, resolver, &format!("no relay to it could start: {e}"));
            None
        }
    }
}

/// In an ordinary user's shell: waits (up to 5 s) until pasta has given
/// this namespace its way out (a default route).
fn wait_for_pasta() -> Result<()> {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let out = Command::new("ip")
            .args(["route", "show", "default"])
            .output()?;
        if !out.stdout.is_empty() {
            return Ok(());
        }
        if Instant::now() > until {
            bail!("pasta gave the user namespace no network within 5 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The bridge's arguments for the shell's two ends.
fn bridge_args(args: &ShellArgs, plan: &Plan) -> BridgeArgs {
    BridgeArgs {
        if_a: plan.if_a.clone(),
        if_b: plan.if_b.clone(),
        words: args.words.clone(),
        pair: Vec::new(),
        pairs: Vec::new(),
        a_to_b: args.a_to_b.clone(),
        b_to_a: args.b_to_a.clone(),
        config: args.config.clone(),
        backend: args.backend,
        coalesce: crate::cli::args::OnOff::On,
        coalesce_window: None,
        kernel_path: args.kernel_path,
        run: RunArgs {
            stats: args.stats,
            stats_interval: args.stats_interval,
            series: args.series,
            spin_threshold: None,
            spin_budget: args.spin_budget,
            max_lag: Some(args.max_lag.clone()),
            buffer: None,
            batch: 32,
            linger: None,
            realtime: Realtime::Out,
            duration: None,
            max_flows: linkem_core::pipe::DEFAULT_MAX_FLOWS,
            max_flow_memory: 512 << 20,
            events: args.events.clone(),
            record: None,
            record_limit: 1 << 30,
            logs: args.logs.clone(),
        },
        rules: args.rules.clone(),
        forward_only: false,
        control: ControlArgs {
            name: Some(format!("shell-{}", plan.pid)),
            control: args.control.clone(),
            ..ControlArgs::default()
        },
    }
}

/// Makes the two namespaces and the veths, and configures all three
/// namespaces; leaves the calling thread anywhere (the caller returns).
fn build(plan: &Plan, host: &NetNs, host_side: &mut HostSide) -> Result<(NetNs, NetNs)> {
    let pid = plan.pid.to_string();
    let mid = NetNs::unshare().context("cannot make a network namespace (needs CAP_SYS_ADMIN)")?;
    let inner = NetNs::unshare().context("cannot make a network namespace")?;
    // In CMD's namespace: its end, then the emulator's end moved to the middle.
    ip(&["link", "set", "lo", "up"])?;
    ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", &plan.if_a,
    ])?;
    mid.enter()?;
    ip_in(&inner, &["link", "set", &plan.if_a, "netns", &pid])?;
    ip(&[
        "link",
        "add",
        &plan.if_b,
        "type",
        "veth",
        "peer",
        "name",
        &plan.host_if,
    ])?;
    for end in [&plan.if_a, &plan.if_b] {
        // Silent ends: no addresses, no IPv6 link-local, no ARP from the middle.
        ip(&["link", "set", end, "addrgenmode", "none"])?;
        ip(&["link", "set", end, "arp", "off", "up"])?;
    }
    ip(&["link", "set", "lo", "up"])?;
    host.enter()?;
    ip_in(&mid, &["link", "set", &plan.host_if, "netns", &pid])?;
    let (h4, h6) = (format!("{}/30", plan.host4), format!("{}/64", plan.host6));
    ip(&["addr", "add", &h4, "dev", &plan.host_if])?;
    ip(&["-6", "addr", "add", &h6, "dev", &plan.host_if, "nodad"])?;
    ip(&["link", "set", &plan.host_if, "up"])?;
    host_side.route_out()?;
    inner.enter()?;
    let (i4, i6) = (format!("{}/30", plan.inner4), format!("{}/64", plan.inner6));
    ip(&["addr", "add", &i4, "dev", "eth0"])?;
    ip(&["-6", "addr", "add", &i6, "dev", "eth0", "nodad"])?;
    ip(&["link", "set", "eth0", "up"])?;
    ip(&["route", "add", "default", "via", &plan.host4.to_string()])?;
    ip(&[
        "-6",
        "route",
        "add",
        "default",
        "via",
        &plan.host6.to_string(),
    ])?;
    Ok((mid, inner))
}

/// Waits (up to 3 s) until every veth end is up with its carrier: the
/// kernel turns a veth's transmit on a moment after `ip link set up`
/// (its link watch, up to a second later), and frames sent before are lost
/// (CMD's first ARP request would wait a second for its retry).
fn wait_until_up(plan: &Plan, host: &NetNs, mid: &NetNs, inner: &NetNs) -> Result<()> {
    let ends = [
        (host, plan.host_if.as_str()),
        (mid, plan.if_a.as_str()),
        (mid, plan.if_b.as_str()),
        (inner, "eth0"),
    ];
    let until = Instant::now() + Duration::from_secs(3);
    for (ns, dev) in ends {
        loop {
            let net = format!("--net={}", ns.path());
            let out = Command::new("nsenter")
                .args([net.as_str(), "ip", "-o", "link", "show", "dev", dev])
                .output()
                .context("cannot run `nsenter` (util-linux)")?;
            let line = String::from_utf8_lossy(&out.stdout);
            if line.contains("state UP") && !line.contains("NO-CARRIER") {
                break;
            }
            if Instant::now() > until {
                bail!("{dev} did not come up within 3 s: {}", line.trim());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Ok(())
}

/// What the shell added to the caller's namespace; removed on drop (the
/// calling thread must be in that namespace then).
struct HostSide {
    plan: Plan,
    /// (program, table, rule spec after the chain) installed.
    rules: Vec<(&'static str, &'static str, Vec<String>)>,
    /// (path, value before) of each sysctl the shell changed.
    sysctls: Vec<(&'static str, String)>,
}

impl HostSide {
    /// Forwarding on, masquerading and FORWARD acceptance for the shell's subnets.
    fn route_out(&mut self) -> Result<()> {
        for (path, what) in [
            ("/proc/sys/net/ipv4/ip_forward", "IPv4"),
            ("/proc/sys/net/ipv6/conf/all/forwarding", "IPv6"),
        ] {
            let now = std::fs::read_to_string(path).unwrap_or_default();
            if now.trim() != "1" {
                std::fs::write(path, "1")
                    .with_context(|| format!("cannot turn {what} forwarding on ({path})"))?;
                // Put back as it was when the shell ends (normally or on
                // SIGINT/SIGTERM; after SIGKILL it stays on: docs/guide/shell.md says so).
                self.sysctls.push((path, now.trim().to_string()));
                eprintln!(
                    "linkem: shell: turned {what} forwarding on ({path}) for the way out, \
                     until the shell ends"
                );
            }
        }
        let p = &self.plan;
        let sub4 = format!("{}/30", Ipv4Addr::from(u32::from(p.host4) - 1));
        let sub6 = format!("{}/64", {
            let s = p.host6.segments();
            Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0)
        });
        for (program, sub) in [("iptables", sub4), ("ip6tables", sub6)] {
            let hif = p.host_if.clone();
            let tag = p.tag.clone();
            let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
            let specs = [
                (
                    "nat",
                    "POSTROUTING",
                    s(&["-s", &sub, "!", "-o", &hif, "-j", "MASQUERADE"]),
                ),
                ("filter", "FORWARD", s(&["-i", &hif, "-j", "ACCEPT"])),
                ("filter", "FORWARD", s(&["-o", &hif, "-j", "ACCEPT"])),
            ];
            for (table, chain, mut spec) in specs {
                spec.extend(s(&["-m", "comment", "--comment", &tag]));
                let mut argv = s(&["-w", "-t", table, "-I", chain]);
                argv.extend(spec.iter().cloned());
                let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
                if let Err(e) = run_cmd(program, &argv) {
                    eprintln!(
                        "linkem: shell: {e}: CMD reaches its parent's namespace only, not beyond"
                    );
                    continue;
                }
                let mut kept = vec![chain.to_string()];
                kept.extend(spec);
                self.rules.push((program, table, kept));
            }
        }
        Ok(())
    }
}

impl Drop for HostSide {
    fn drop(&mut self) {
        for (program, table, spec) in self.rules.drain(..).rev() {
            let mut argv = vec!["-w", "-t", table, "-D"];
            argv.extend(spec.iter().map(String::as_str));
            if let Err(e) = run_cmd(program, &argv) {
                eprintln!("linkem: shell: removing a rule: {e}");
            }
        }
        // The link goes with the middle namespace; removing it here makes the
        // end synchronous for whoever looks next.
        let _ = run_cmd("ip", &["link", "del", &self.plan.host_if]);
        // After the link: turning IPv6 forwarding off resets the interfaces'
        // settings, and the shell's own is gone by then.
        for (path, before) in self.sysctls.drain(..).rev() {
            if let Err(e) = std::fs::write(path, &before) {
                eprintln!("linkem: shell: cannot put {path} back to {before}: {e}");
            }
        }
    }
}

/// Removes what shells killed with SIGKILL left in this namespace: rules
/// whose comment names a pid no longer alive, and their links.
fn remove_stale() {
    for program in ["iptables", "ip6tables"] {
        for table in ["nat", "filter"] {
            let Ok(out) = Command::new(program)
                .args(["-w", "-t", table, "-S"])
                .output()
            else {
                continue;
            };
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let Some(pid) = stale_pid(line) else { continue };
                let Some(spec) = line.strip_prefix("-A ") else {
                    continue;
                };
                let mut argv = vec!["-w", "-t", table, "-D"];
                argv.extend(spec.split_whitespace());
                if run_cmd(program, &argv).is_ok() {
                    eprintln!("linkem: shell: removed a rule left by shell {pid}: {line}");
                }
                let _ = run_cmd("ip", &["link", "del", &format!("lks{pid}")]);
            }
        }
    }
}

/// The pid of a `linkem-shell-PID` rule whose process is gone.
fn stale_pid(line: &str) -> Option<u32> {
    let at = line.find("linkem-shell-")? + "linkem-shell-".len();
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let pid: u32 = digits.parse().ok()?;
    (!process_alive(pid) || !is_linkem(pid)).then_some(pid)
}

fn is_linkem(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "linkem")
}

/// When the host's resolver is on loopback (see [`crate::shell::dns`]):
/// starts the relay from the gateway's port 53 and returns CMD's resolv.conf
/// (to bind over /etc/resolv.conf). `None`: CMD reads the host's, and the
/// shell has said why where names will not resolve. The calling thread is in
/// the caller's namespace.
fn relay_dns(plan: &Plan, in_userns: bool) -> Option<tempfile::NamedTempFile> {
    use crate::shell::dns::{self, CMD_RESOLV_CONF};
    let (path, conf) = dns::host_conf();
    let resolver = dns::first_loopback(&conf)?;
    let cannot = |why: String| dns::say_unrelayed(&path, resolver, &why);
    // An ordinary user's: the outer linkem's relay, which pasta forwards.
    let outer = std::env::var(dns::PORT_ENV).ok();
    let (upstream, tcp) = match (in_userns, outer.and_then(|p| p.parse::<u16>().ok())) {
        (false, _) => (std::net::SocketAddr::from((resolver, 53)), true),
        (true, Some(port)) => (
            (Ipv4Addr::LOCALHOST, port).into(),
            std::env::var_os(dns::TCP_ENV).is_some(),
        ),
        (true, None) => {
            cannot("the relay outside the user namespace did not start".into());
            return None;
        }
    };
    if !std::path::Path::new(CMD_RESOLV_CONF).exists() {
        cannot(format!("there is no {CMD_RESOLV_CONF} to give CMD another"));
        return None;
    }
    if let Err(e) = dns::start_relay((plan.host4, 53).into(), upstream, tcp) {
        cannot(format!("cannot relay from {}:53: {e}", plan.host4));
        return None;
    }
    let file = tempfile::Builder::new()
        .prefix(&format!("linkem-shell-{}-resolv.", plan.pid))
        .tempfile()
        .and_then(|mut f| {
            use std::io::Write;
            use std::os::unix::fs::PermissionsExt;
            f.write_all(dns::shell_conf(&conf, plan.host4).as_bytes())?;
            // A command that gives up root inside still reads it.
            f.as_file()
                .set_permissions(std::fs::Permissions::from_mode(0o644))?;
            Ok(f)
        });
    match file {
        Ok(file) => {
            eprintln!(
                "linkem: shell: {} names {resolver}, a loopback resolver: CMD's \
                 {CMD_RESOLV_CONF} names {} instead, relayed to it through the emulated link",
                path.display(),
                plan.host4
            );
            Some(file)
        }
        Err(e) => {
            cannot(format!("cannot write CMD's resolv.conf: {e}"));
            None
        }
    }
}

/// Starts CMD (the calling thread is in CMD's namespace), with
/// `resolv_conf` over its /etc/resolv.conf if given.
fn spawn_command(
    args: &ShellArgs,
    plan: &Plan,
    resolv_conf: Option<&std::path::Path>,
) -> Result<Child> {
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .env("LINKEM_SHELL_ADDR", plan.inner4.to_string())
        .env("LINKEM_SHELL_ADDR6", plan.inner6.to_string())
        .env("LINKEM_SHELL_PARENT", plan.host4.to_string())
        .env("LINKEM_SHELL_PARENT6", plan.host6.to_string());
    // As mahimahi's shells: the outermost shell's parent stays the base, so
    // that a client talking to it crosses every nested link, not the innermost alone.
    if std::env::var_os("MAHIMAHI_BASE").is_none() {
        cmd.env("MAHIMAHI_BASE", plan.host4.to_string());
    }
    die_with_parent(&mut cmd, libc::SIGKILL);
    let mut how = String::new();
    if let Some(conf) = resolv_conf {
        let target = std::path::Path::new(dns::CMD_RESOLV_CONF);
        linkem_io::shellns::with_file_over(&mut cmd, conf, target)
            .context("cannot give CMD its resolv.conf")?;
        how = format!(" (with {} bound over {})", conf.display(), target.display());
    }
    cmd.spawn().map_err(|e| {
        let why = match e.raw_os_error() {
            Some(libc::ENOENT) if !args.command[0].contains('/') => {
                "command not found in PATH".to_string()
            }
            Some(libc::ENOENT) => "no such file".to_string(),
            Some(libc::EACCES) => "permission denied (not executable?)".to_string(),
            _ => e.to_string(),
        };
        anyhow::Error::new(e).context(format!("cannot run '{}'{how}: {why}", args.command[0]))
    })
}

/// The status a shell gives a command it could not run: 127 when there is
/// no such file (or no such command in PATH), 126 when it is there but cannot
/// be executed (no permission, a directory, not an executable format), so
/// that scripts tell "CMD failed" from "CMD never ran" as they do with sh.
/// `None`: some other failure (linkem's own), reported as an error.
fn not_run_status(e: &anyhow::Error) -> Option<i32> {
    let io = e.chain().find_map(|c| c.downcast_ref::<std::io::Error>())?;
    match io.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => Some(127),
        Some(libc::EACCES) | Some(libc::ENOEXEC) | Some(libc::EISDIR) | Some(libc::EPERM) => {
            Some(126)
        }
        _ => None,
    }
}

/// Waits for CMD; a SIGINT/SIGTERM to linkem, or the bridge ending, ends
/// it (SIGTERM, then SIGKILL after 2 s). Returns the exit code.
fn wait_command(
    mut child: Child,
    signals: &[(i32, Arc<AtomicBool>)],
    bridge: &std::thread::JoinHandle<Result<()>>,
) -> Result<i32> {
    use std::os::unix::process::ExitStatusExt;
    let mut ending: Option<(i32, Instant)> = None;
    loop {
        if let Some(status) = child.try_wait()? {
            if let Some((sig, _)) = ending {
                return Ok(128 + sig);
            }
            return Ok(status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)));
        }
        if ending.is_none() {
            let sig = signals
                .iter()
                .find(|(_, f)| f.load(Ordering::Relaxed))
                .map(|(s, _)| *s)
                .or(bridge.is_finished().then_some(libc::SIGTERM));
            if let Some(sig) = sig {
                let _ = linkem_io::sys::signal_child(&child, libc::SIGTERM);
                ending = Some((sig, Instant::now()));
            }
        } else if let Some((_, at)) = ending {
            if at.elapsed() > Duration::from_secs(2) {
                let _ = child.kill();
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pid_gets_its_own_names_and_subnets() {
        let p = plan(1234567);
        assert_eq!(p.if_a, "lka1234567");
        assert!(p.host_if.len() <= 15);
        let q = plan(1234568);
        assert_ne!(p.host4, q.host4);
        assert_eq!(u32::from(p.inner4), u32::from(p.host4) + 1);
        assert!(p.host4.octets()[0] == 100 && (64..128).contains(&p.host4.octets()[1]));
        assert_eq!(p.host6.segments()[..4], [0xfd6c, 0x6b6d, 0x12, 0xd687]);
        assert_eq!(plan(4_194_303).host_if, "lks4194303");
    }

    #[test]
    fn a_rule_of_a_dead_shell_is_stale() {
        let line = "-A POSTROUTING -s 100.64.0.4/30 ! -o lks1 -m comment --comment linkem-shell-999999999 -j MASQUERADE";
        assert_eq!(stale_pid(line), Some(999_999_999));
        let mine = format!(
            "-A FORWARD -m comment --comment linkem-shell-{} -j ACCEPT",
            std::process::id()
        );
        // This test process is alive but is not linkem: a pid reused by
        // another program leaves the rule stale too.
        assert_eq!(stale_pid(&mine), Some(std::process::id()));
        assert_eq!(stale_pid("-A FORWARD -j ACCEPT"), None);
    }
}
