//! The data path of `linkem host` (see `crate::host` for how and why): the
//! capabilities it needs, linkem's own chains, and the netfilter queues as the
//! live stage's receive and transmit ports. `crate::bridge` attaches it;
//! `crate::host` (the command) imports the bridge, never the other way round.

use crate::host::iptables::{ipt, ipt_checked, pass_to_iptables, TABLES};
pub use crate::host::iptables::{CHAIN_IN, CHAIN_OUT};
use crate::host::watchdog::Watchdog;
use anyhow::{anyhow, bail, Result};
use linkem_core::port::{HeldBound, RxPort, TxPort};
use linkem_io::caps::{self, Cap};
/// Why host mode cannot duplicate (the verdict half's [`TxPort::no_copies`]).
pub use linkem_io::nfqueue::port::NO_COPIES;
use linkem_io::nfqueue::{self, NfQueue, RawSender};
use std::process::Command;
use std::time::Duration;

/// The mark (SO_MARK) of the packets linkem sends itself, which its chain
/// `LINKEM-HOST-OUT` lets through ("LKEM").
pub const OWN_MARK: u32 = 0x4c4b_454d;
/// Packets each queue keeps waiting for linkem; past that the kernel accepts.
const QUEUE_MAX_LEN: u32 = 65536;
/// Packets one claim's pipe may keep waiting in the kernel's queue at once:
/// beyond, the packet is dropped at once and counted as backpressure, so that
/// a claim that holds packets long (`delay`, `slot`) leaves the queue to the
/// others (the built-in 16 claims of a user hold at most a quarter of it).
/// Root's own pipes are not bounded.
pub const MAX_HELD_PER_PIPE: u32 = QUEUE_MAX_LEN / 64;
/// What host mode needs, said before anything is changed.
pub const NEEDS: &str = "linkem host needs root, or CAP_NET_ADMIN and CAP_NET_RAW \
    (e.g. the package's file capabilities for group linkem) with iptables-nft: it binds \
    netfilter queues, sends from raw sockets, and runs iptables and ip6tables, to which it \
    passes CAP_NET_ADMIN as an ambient capability (iptables-legacy also needs root for \
    its lock file /run/xtables.lock)";

/// Refuses to start without CAP_NET_ADMIN (queues and chains) and CAP_NET_RAW
/// (raw sockets), and without CAP_SYS_NICE when `realtime`; passes
/// CAP_NET_ADMIN on to the `iptables` it runs (ambient: an ordinary user
/// holding it through file capabilities would otherwise get iptables' "you
/// must be root" once the queues are bound) and checks that iptables and
/// ip6tables answer. Host mode keeps its capabilities for its life:
/// removing the chains at exit needs CAP_NET_ADMIN again.
pub fn check_capabilities(realtime: bool) -> Result<()> {
    check_own_capabilities(realtime)?;
    // Root's iptables needs nothing passed: a refusal (a securebit that
    // forbids ambient capabilities) matters only if iptables then fails.
    let passed = pass_to_iptables().err();
    for tool in TABLES {
        let out = Command::new(tool)
            .args(["-w", "5", "-n", "-L", "OUTPUT"])
            .output()
            .map_err(|e| {
                anyhow!("cannot run {tool} ({e}): linkem host runs iptables and ip6tables (package iptables)")
            })?;
        if !out.status.success() {
            bail!(
                "{tool} -L OUTPUT failed ({}{}): {NEEDS}",
                String::from_utf8_lossy(&out.stderr).trim(),
                passed
                    .as_ref()
                    .map(|e| format!("; {e}"))
                    .unwrap_or_default()
            );
        }
    }
    Ok(())
}

fn check_own_capabilities(realtime: bool) -> Result<()> {
    let mut need = nfqueue::NEEDED_CAPS.to_vec();
    if realtime {
        need.push(Cap::SYS_NICE);
    }
    let lacking: Vec<String> = caps::lacking(&need)?
        .iter()
        .map(|c| c.to_string())
        .collect();
    if !lacking.is_empty() {
        bail!(
            "linkem host needs {} (run as root{})",
            lacking.join(", "),
            if realtime {
                "; --realtime off runs without CAP_SYS_NICE"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// Where `linkem host` takes packets from.
pub struct HostSetup {
    /// Interfaces to limit the chains to (empty: all).
    pub dev: Vec<String>,
    /// Queue of side a; side b uses the next.
    pub queue_num: u16,
    /// `--fail-open-after`: the watchdog's bound (`None`: no watchdog).
    pub fail_open_after: Option<Duration>,
}

/// The queues bound and the chains installed: the ports, and what removes
/// the chains when dropped.
pub struct Attached {
    /// Receive halves: side a, side b.
    pub rx: [Box<dyn RxPort>; 2],
    /// Verdict halves: direction a->b (side a's queue), b->a.
    pub tx: [Box<dyn TxPort>; 2],
    /// Removes the chains when dropped.
    pub chains: Chains,
}

impl HostSetup {
    /// Binds both queues, removes a stale pair of chains, installs ours.
    pub fn attach(&self) -> Result<Attached> {
        let open = |q: u16| -> Result<NfQueue> {
            NfQueue::open(q, QUEUE_MAX_LEN).map_err(|e| {
                if e.to_string().contains("busy") || e.raw_os_error() == Some(libc::EBUSY) {
                    anyhow!(
                        "netfilter queue {q} is bound by another process: another linkem host \
                         runs in this network namespace (or pick --queue-num)"
                    )
                } else {
                    anyhow!("{e} (linkem host needs CAP_NET_ADMIN)")
                }
            })
        };
        let queues = [open(self.queue_num)?, open(self.queue_num + 1)?];
        let mut chains = Chains::install(&self.dev, self.queue_num)?;
        if let Some(stall) = self.fail_open_after {
            chains.watchdog = Some(Watchdog::start(stall)?);
        }
        let raw = RawSender::open(OWN_MARK).map_err(|e| {
            anyhow!("cannot open raw IP sockets ({e}): linkem host needs CAP_NET_RAW")
        })?;
        let held = HeldBound {
            pipes: crate::control::claims::CLAIM_FIRST..=crate::control::claims::CLAIM_LAST,
            packets: MAX_HELD_PER_PIPE,
        };
        let ports = nfqueue::port::ports(queues, raw, held);
        Ok(Attached {
            rx: ports.rx,
            tx: ports.tx,
            chains,
        })
    }
}

/// linkem's chains in iptables and ip6tables, and the watchdog that fails
/// open if linkem stalls; removed when dropped (the watchdog first).
pub struct Chains {
    installed: bool,
    watchdog: Option<Watchdog>,
}

impl Chains {
    /// Removes every jump to linkem's chains and the chains themselves, in
    /// both tables; says whether there was anything to remove.
    pub fn remove_all() -> Result<bool> {
        let mut found = false;
        for tool in TABLES {
            for (hook, chain) in [("INPUT", CHAIN_IN), ("OUTPUT", CHAIN_OUT)] {
                // A killed run may have left more than one jump.
                while ipt(tool, &["-D", hook, "-j", chain])? {
                    found = true;
                }
                if ipt(tool, &["-F", chain])? {
                    found = true;
                    ipt(tool, &["-X", chain])?;
                }
            }
        }
        Ok(found)
    }

    fn install(dev: &[String], queue_num: u16) -> Result<Chains> {
        if Chains::remove_all()? {
            eprintln!(
                "linkem: removed the chains {CHAIN_IN}/{CHAIN_OUT} a previous linkem host left \
                 (it did not exit cleanly)"
            );
        }
        let mut chains = Chains {
            installed: true,
            watchdog: None,
        };
        let qa = queue_num.to_string();
        let qb = (queue_num + 1).to_string();
        let devs: Vec<Option<&str>> = if dev.is_empty() {
            vec![None]
        } else {
            dev.iter().map(|d| Some(d.as_str())).collect()
        };
        let result = (|| -> Result<()> {
            for tool in TABLES {
                ipt_checked(tool, &["-N", CHAIN_IN])?;
                ipt_checked(tool, &["-N", CHAIN_OUT])?;
                let mark = format!("{OWN_MARK:#x}");
                ipt_checked(
                    tool,
                    &[
                        "-A", CHAIN_OUT, "-m", "mark", "--mark", &mark, "-j", "RETURN",
                    ],
                )?;
                for d in &devs {
                    for (chain, flag, q) in [(CHAIN_IN, "-i", &qa), (CHAIN_OUT, "-o", &qb)] {
                        let mut a = vec!["-A", chain];
                        if let Some(d) = d {
                            a.extend([flag, d]);
                        }
                        a.extend(["-j", "NFQUEUE", "--queue-num", q, "--queue-bypass"]);
                        ipt_checked(tool, &a)?;
                    }
                }
                ipt_checked(tool, &["-I", "INPUT", "1", "-j", CHAIN_IN])?;
                ipt_checked(tool, &["-I", "OUTPUT", "1", "-j", CHAIN_OUT])?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            chains.remove();
            return Err(e);
        }
        Ok(chains)
    }

    fn remove(&mut self) {
        // The watchdog ends first, so that it puts back no jump meanwhile.
        drop(self.watchdog.take());
        if std::mem::take(&mut self.installed) {
            if let Err(e) = Chains::remove_all() {
                eprintln!("linkem: removing the chains {CHAIN_IN}/{CHAIN_OUT}: {e}");
            }
        }
    }
}

impl Drop for Chains {
    fn drop(&mut self) {
        self.remove();
    }
}
