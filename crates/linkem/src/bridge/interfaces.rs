//! The interfaces of a run of 1..n pairs, made ready in one place: the
//! backend chosen, the capabilities checked, every pair's interfaces claimed
//! and then opened, the capabilities given up ([`Interfaces`]). A one-pair
//! run is a group of one: what differs is only how a signal during the
//! start-up is answered ([`Interfaces::claim`]) and the rings' size.

use crate::bridge::backend::{
    check_capabilities, claim_interfaces, drop_capabilities, open_interface_with, resolve_auto,
    BackendKind, Claimed, Rings,
};
use crate::cli::args::{BridgeArgs, OnOff, Realtime};
use anyhow::{bail, Result};
use linkem_runtime::port::{close_all, RxPort, TxPort};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// One pair's interfaces opened: receive and send halves, and the backend used.
pub(crate) struct Ports {
    pub rx: [Box<dyn RxPort>; 2],
    pub tx: [Box<dyn TxPort>; 2],
    pub used: [String; 2],
}

/// Every pair's interfaces, checked and held for this process (no second
/// linkem on them) until dropped, with the backend they open with.
pub(crate) struct Interfaces<'a> {
    pairs: Vec<[&'a str; 2]>,
    /// How many threads claim and open them: one for one pair.
    openers: usize,
    backend: BackendKind,
    realtime: bool,
    /// `--kernel-path on`: each port opens a kernel path where it can.
    kernel_path: bool,
    claimed: ClaimedAll,
}

impl<'a> Interfaces<'a> {
    /// Chooses the backend, checks the capabilities it needs and claims the
    /// interfaces of every pair (IF_A, IF_B). `stop`: the flag of SIGINT and
    /// SIGTERM when a signal stops the start-up where it is (several pairs:
    /// hundreds take seconds to start; the error says how far it came), or
    /// `None` when it does not (one pair: the start-up goes on into the
    /// serving loop, which answers the signal and removes the control socket).
    pub fn claim(
        args: &BridgeArgs,
        pairs: Vec<[&'a str; 2]>,
        stop: Option<&AtomicBool>,
    ) -> Result<Self> {
        let realtime = args.run.realtime != Realtime::Off;
        let backend = check_capabilities(
            resolve_auto(args.backend, args.coalesce == OnOff::On),
            realtime,
        )?;
        let openers = if pairs.len() == 1 { 1 } else { OPENERS };
        let claimed = in_parallel(&pairs, openers, stop, "pairs checked", |[a, b]| {
            claim_interfaces(a, b)
        })?;
        Ok(Interfaces {
            pairs,
            openers,
            backend,
            realtime,
            kernel_path: args.kernel_path == OnOff::On,
            claimed: ClaimedAll(claimed),
        })
    }

    /// Opens every pair's interfaces (IF_A and IF_B of each, in parallel
    /// when there are several pairs, see [`in_parallel`]), then gives up the
    /// capabilities no longer needed. `stop` as for [`Interfaces::claim`].
    pub fn open(&self, rings: Rings, stop: Option<&AtomicBool>) -> Result<Vec<Ports>> {
        // IF_A and IF_B of pair k at 2k and 2k + 1.
        let jobs: Vec<(&str, u32)> = self
            .pairs
            .iter()
            .zip(&self.claimed.0)
            .flat_map(|([a, b], c)| [(*a, c.a.mtu), (*b, c.b.mtu)])
            .collect();
        let backend = self.backend;
        let kernel_path = self.kernel_path;
        let mut opened = in_parallel(
            &jobs,
            self.openers,
            stop,
            "interfaces opened",
            |&(ifname, mtu)| open_interface_with(backend, ifname, mtu, rings, kernel_path),
        )?
        .into_iter();
        let mut ports = Vec::new();
        for [a, b] in &self.pairs {
            let (Some((rx_a, tx_a, used_a)), Some((rx_b, tx_b, used_b))) =
                (opened.next(), opened.next())
            else {
                bail!("pair {a}-{b}: its interfaces were not opened");
            };
            // Each interface gives a receive half (to one direction) and a
            // send half (to the other).
            ports.push(Ports {
                rx: [rx_a, rx_b],
                tx: [tx_b, tx_a],
                used: [used_a, used_b],
            });
        }
        drop_capabilities(self.realtime)?;
        Ok(ports)
    }
}

/// Every pair's interface locks, released all at once on drop (each is a
/// packet socket, whose close waits for the kernel, see [`in_parallel`]),
/// however the bridge ends.
struct ClaimedAll(Vec<Claimed>);

impl Drop for ClaimedAll {
    fn drop(&mut self) {
        close_all(std::mem::take(&mut self.0));
    }
}

/// Threads that check and open the pairs' interfaces at once ([`in_parallel`]).
const OPENERS: usize = 16;

/// `f` of every job, `openers` (at most [`OPENERS`]) at a time, results in the jobs' order. Why
/// at once: binding or setting up the rings of an AF_PACKET socket (the
/// interface lock of [`claim_interfaces`], each ring of
/// [`open_interface_with`]) waits for an RCU grace period in the kernel
/// (`synchronize_net`, tens of ms on a busy machine, about ten per pair),
/// and the waits of several threads overlap, where one after the other they
/// made 200 pairs take 90 s. One opener (one pair) runs the jobs one after
/// the other on the caller's thread, so that what they say comes in order.
/// Stops at the first error, or once `stop` is set (a signal: the error
/// says how many of `what` were done); what was made is closed at once
/// ([`close_all`]).
fn in_parallel<J: Sync, R: Send>(
    jobs: &[J],
    openers: usize,
    stop: Option<&AtomicBool>,
    what: &str,
    f: impl Fn(&J) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    let never = AtomicBool::new(false);
    let stop = stop.unwrap_or(&never);
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let work = || {
        let mut mine = Vec::new();
        while !stop.load(Ordering::Relaxed) && !failed.load(Ordering::Relaxed) {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(job) = jobs.get(i) else {
                break;
            };
            let r = f(job);
            if r.is_err() {
                failed.store(true, Ordering::Relaxed);
            }
            mine.push((i, r));
        }
        mine
    };
    let results: Vec<Vec<(usize, Result<R>)>> = if openers <= 1 {
        vec![work()]
    } else {
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..openers.min(jobs.len()))
                .map(|_| s.spawn(work))
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().unwrap_or_default())
                .collect()
        })
    };
    let mut slots: Vec<Option<R>> = Vec::new();
    slots.resize_with(jobs.len(), || None);
    let mut first_error: Option<(usize, anyhow::Error)> = None;
    for (i, r) in results.into_iter().flatten() {
        match r {
            Ok(made) => slots[i] = Some(made),
            Err(e) => {
                if first_error.as_ref().is_none_or(|(j, _)| i < *j) {
                    first_error = Some((i, e));
                }
            }
        }
    }
    if let Some((_, e)) = first_error {
        close_all(slots);
        return Err(e);
    }
    if slots.iter().any(Option::is_none) {
        let done = slots.iter().filter(|h| h.is_some()).count();
        close_all(slots);
        bail!(
            "stopped by a signal while starting: {done} of {} {what}",
            jobs.len()
        );
    }
    Ok(slots.into_iter().flatten().collect())
}
