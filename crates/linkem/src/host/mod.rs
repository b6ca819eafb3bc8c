//! `linkem host`: the emulator on this host's own traffic, the third front
//! end beside `replay` and `bridge` (Dummynet in the stack, seed 004). The
//! model, the live stage, `--events`, `--record`, `--stats`, the control
//! socket, metrics and audit are the bridge's (`crate::bridge::serve_front`
//! with [`Attach::Host`]); what this module adds is where packets come from
//! and go back to.
//!
//! # Data path
//! Two netfilter queues (`linkem_io::nfqueue`), one per side, fed by linkem's
//! own chains, for iptables and ip6tables alike:
//! - side a (`a-to-b`, ipfw `in`): what this host RECEIVES, chain
//!   `LINKEM-HOST-IN` jumped to from `INPUT` (so forwarded traffic, which is
//!   not this host's own, is never taken; `INPUT` rather than `PREROUTING`
//!   also lets the kernel's early demultiplexing name the receiving socket,
//!   hence its uid/gid);
//! - side b (`b-to-a`, ipfw `out`): what this host SENDS, chain
//!   `LINKEM-HOST-OUT` jumped to from `OUTPUT`.
//!
//! Each queue rule is `NFQUEUE --queue-num N --queue-bypass` (`-i IF` / `-o IF`
//! per `--dev`): while no process has the queue bound (linkem killed, even by
//! SIGKILL) the kernel passes packets unimpaired, and a full queue accepts too
//! (`NFQA_CFG_F_FAIL_OPEN`): linkem fails open. A linkem that stops answering
//! without dying (SIGSTOP, a stall) keeps its queues bound: a watchdog process
//! (`crate::host::watchdog`) then removes the jumps to the chains after
//! `--fail-open-after` (default 1 s) without a heartbeat, and puts them back
//! when linkem answers again. A loopback packet is both sent and received by
//! this host, so it passes side b and then side a.
//!
//! The chains are linkem's only change to the rule set: made at start (a
//! stale pair left by a killed run is removed first), removed on exit (SIGINT,
//! SIGTERM, `--duration`, an error). The queues are bound before anything is
//! removed: a bound queue means another `linkem host` runs in this network
//! namespace, and linkem refuses to start rather than take its chains.
//!
//! # What the model sees
//! Each queued IP packet reaches the model behind a 14-byte Ethernet header
//! linkem makes (so the link words' framing counts those 14 bytes, as on the
//! bridge, plus the `overhead` words): its address bytes carry the queue's
//! packet id three times, which the verdict reads back by a per-byte majority
//! (a corrupted bit of the made-up header cannot name another packet), and its
//! type is IPv4 or IPv6. The packet is stamped when linkem reads it (kernel
//! stamps on locally sent packets are departure times of another clock). The
//! owner of the local socket (NFQA_UID/NFQA_GID) fills the key's `uid`/`gid`.
//!
//! # Verdicts
//! Side a (received): at its release time a delivered packet gets NF_ACCEPT
//! with its bytes as the model left them (a CE mark, corrupted bits: the
//! kernel replaces the packet with them); verdicts need not follow arrival
//! order. A packet the model drops, one not stored (backpressure), one late
//! past `--max-lag` or of a flushed pipe gets NF_DROP. The kernel holds a
//! packet until its verdict, so every path out of linkem gives one; packets
//! still held at exit are dropped by the kernel when the queue goes.
//!
//! The kernel's queue holds 65 536 packets for everyone; full, it accepts
//! every packet unasked (other users' claims and root's rules then no longer
//! apply). Two bounds keep one claim from filling it: a claim's pipe keeps at
//! most `ports::MAX_HELD_PER_PIPE` (1024) packets in the delay line (the
//! port asks the stage for it, `TxPort::max_held_per_pipe`; a packet beyond
//! is dropped at once as backpressure; root's own pipes are not bounded),
//! and a deleted pipe's packets (a
//! claim released or expired, a rule set changed) get their NF_DROP at once,
//! counted as flushed, not at their release time (the output stage looks for
//! them within 10 ms of the change). With claims' `delay` limit bounding the
//! largest delay, a packet is held at most that long.
//!
//! Side b (sent): each packet gets NF_DROP as soon as it is read (linkem
//! keeps the copy), and a delivered one is sent at its release time through a
//! raw IP socket carrying [`OWN_MARK`], which `LINKEM-HOST-OUT` returns on
//! (so it is not queued again; a loopback copy is still received through
//! side a). Why: a TCP segment held at `OUTPUT` still counts against its
//! socket (TSQ: about 1 ms of the pacing rate, at least two segments), which
//! the tc-netem manual warns of; measured here, TCP through `delay 20ms rate
//! 100mbit` on the sender fell to 2.3 Mbit/s with held packets, 86 Mbit/s
//! with stolen ones (95 on the receiver; docs/numbers.md).
//!
//! Three kinds of sent packet are held instead, as on side a (NF_ACCEPT at
//! release time, `ports::must_hold`), because the raw socket would change
//! or refuse them: one with a firewall mark (the re-send would carry
//! [`OWN_MARK`] and mark-based routing, `ip rule fwmark`, `wg-quick`,
//! `ping -m`, would take another path), one larger than its interface's MTU
//! (`OUTPUT` sees a datagram before the kernel fragments it, and a raw socket
//! refuses one beyond the MTU; an accepted one is fragmented as usual), and
//! one to an IPv6 link-local or multicast address (a raw socket's
//! destination has no scope). A held TCP segment still counts against its
//! socket (TSQ), so marked TCP is paced by the kernel as described above.
//!
//! `duplicate` is refused: a received packet has one id, one verdict.

pub mod iptables;
pub mod ports;
pub mod watchdog;

use crate::bridge::backend::BackendKind;
use crate::cli::args::{BridgeArgs, RunArgs};
use crate::control::ControlArgs;
use crate::host::ports::HostSetup;
#[cfg(doc)]
use crate::host::ports::OWN_MARK;
use anyhow::{bail, Result};
use std::path::PathBuf;

/// `linkem host`: emulate this host's own traffic.
#[derive(clap::Args, Debug, Clone)]
pub struct HostArgs {
    /// Link words for both sides (as `linkem bridge`), e.g. `delay 20ms rate 100mbit`.
    pub words: Vec<String>,
    /// Words for what this host receives (side a, ipfw `in`).
    #[arg(long = "a-to-b", num_args = 1.., value_name = "WORDS")]
    pub a_to_b: Vec<String>,
    /// Words for what this host sends (side b, ipfw `out`).
    #[arg(long = "b-to-a", num_args = 1.., value_name = "WORDS")]
    pub b_to_a: Vec<String>,
    /// ipfw rules and Dummynet pipes (`in` = received, `out` = sent; `uid N`,
    /// `gid N` match the local socket's owner).
    #[arg(long = "rules", value_name = "FILE")]
    pub rules: Option<PathBuf>,
    /// Only packets received or sent on this interface (repeatable); default all.
    #[arg(long = "dev", value_name = "IF")]
    pub dev: Vec<String>,
    /// First of the two netfilter queue numbers used (side a; side b the next).
    #[arg(long, value_name = "N", default_value_t = 4242)]
    pub queue_num: u16,
    /// Fail open when linkem stops answering (SIGSTOP, a stall), not only when
    /// it dies: a watchdog process removes the jumps to linkem's chains after
    /// this long without a heartbeat (new packets then pass unimpaired) and
    /// puts them back when linkem answers again. `off`: no watchdog.
    #[arg(long, value_name = "DURATION|off", default_value = "1s")]
    pub fail_open_after: String,
    /// As `linkem bridge` (side a -> b is what this host receives).
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub control: ControlArgs,
}

impl HostArgs {
    /// The bridge's arguments for the shared start-up and serving loop: the
    /// two "interfaces" are the sides, `received` (a) and `sent` (b).
    fn bridge_args(&self) -> BridgeArgs {
        // One host-mode emulator per network namespace: its socket is
        // /run/linkem/host.sock unless named.
        let mut control = self.control.clone();
        control.name.get_or_insert_with(|| "host".into());
        BridgeArgs {
            if_a: "received".into(),
            if_b: "sent".into(),
            words: self.words.clone(),
            pair: Vec::new(),
            pairs: Vec::new(),
            a_to_b: self.a_to_b.clone(),
            b_to_a: self.b_to_a.clone(),
            config: None,
            backend: BackendKind::Auto,
            // The netfilter queue hands over packets one by one.
            coalesce: crate::cli::args::OnOff::Off,
            coalesce_window: None,
            // Packets lent by the netfilter queue must each get a verdict.
            kernel_path: crate::cli::args::OnOff::Off,
            run: self.run.clone(),
            rules: self.rules.clone(),
            forward_only: false,
            control,
        }
    }
}

/// Runs `linkem host` until SIGINT or SIGTERM (or `--duration`).
pub fn run(args: &HostArgs) -> Result<()> {
    for dev in &args.dev {
        if dev.is_empty() || dev.len() > 15 || dev.contains(['/', ' ', '!']) {
            bail!("--dev '{dev}': not an interface name");
        }
    }
    if args.queue_num == u16::MAX {
        bail!(
            "--queue-num {}: two queues are needed (N and N+1)",
            args.queue_num
        );
    }
    let setup = HostSetup {
        dev: args.dev.clone(),
        queue_num: args.queue_num,
        fail_open_after: crate::host::watchdog::parse_stall(&args.fail_open_after)?,
    };
    crate::bridge::run_attached(
        &args.bridge_args(),
        crate::bridge::Attach::Host(&setup),
        crate::bridge::Hooks::default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        host: HostArgs,
    }

    /// Host mode hands the stage coalescing off, and the stage's start
    /// refuses by name a bridge's arguments that ask for it there.
    #[test]
    fn host_mode_coalesces_never_and_refuses_to_be_asked() {
        let cli = Cli::try_parse_from(["host", "delay", "1ms"]).unwrap();
        let mut args = cli.host.bridge_args();
        assert!(crate::bridge::refuse_coalescing_in_host_mode(&args).is_ok());
        args.coalesce = crate::cli::args::OnOff::On;
        let e = crate::bridge::refuse_coalescing_in_host_mode(&args).unwrap_err();
        assert!(
            e.to_string()
                .contains("--coalesce on is not available in host mode"),
            "{e}"
        );
    }
}
