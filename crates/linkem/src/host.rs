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
//! (`NFQA_CFG_F_FAIL_OPEN`): linkem fails open. A loopback packet is both
//! sent and received by this host, so it passes side b and then side a.
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
//! Side b (sent): each packet gets NF_DROP as soon as it is read (linkem
//! keeps the copy), and a delivered one is sent at its release time through a
//! raw IP socket carrying [`OWN_MARK`], which `LINKEM-HOST-OUT` returns on
//! (so it is not queued again; a loopback copy is still received through
//! side a). Why: a TCP segment held at `OUTPUT` still counts against its
//! socket (TSQ: about 1 ms of the pacing rate, at least two segments), which
//! the tc-netem manual warns of; measured here, TCP through `delay 20ms rate
//! 100mbit` on the sender fell to 2.3 Mbit/s with held packets, 86 Mbit/s
//! with stolen ones (95 on the receiver; docs/numbers.md). IPv6 link-local
//! destinations cannot be sent this way (no scope): counted as tx-error.
//!
//! `duplicate` is refused: a received packet has one id, one verdict.

use crate::args::{BridgeArgs, Realtime};
use crate::backend::BackendKind;
use crate::control::ControlArgs;
use crate::StatsFormat;
use anyhow::{anyhow, bail, Context, Result};
use linkem_core::rules::SocketOwner;
use linkem_io::caps::{self, Cap};
use linkem_io::nfqueue::{self, NfQueue, RawSender, Verdict, Verdicts};
use linkem_runtime::port::{RxFrame, RxPort, TxOutcome, TxPort, WaitFds};
use std::io;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::process::Command;

/// Chain for what this host receives (side a).
pub const CHAIN_IN: &str = "LINKEM-HOST-IN";
/// Chain for what this host sends (side b).
pub const CHAIN_OUT: &str = "LINKEM-HOST-OUT";
/// The mark (SO_MARK) of the packets linkem sends itself, which its chain
/// `LINKEM-HOST-OUT` lets through ("LKEM").
pub const OWN_MARK: u32 = 0x4c4b_454d;
/// Length of the header linkem puts before each IP packet.
pub const HEADER_BYTES: usize = 14;
/// Packets each queue keeps waiting for linkem; past that the kernel accepts.
const QUEUE_MAX_LEN: u32 = 65536;
/// Verdict bytes gathered before a send (well within a netlink socket's
/// default send buffer).
const VERDICT_BATCH_BYTES: usize = 128 << 10;

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
    /// Statistics format.
    #[arg(long, value_enum, default_value = "text")]
    pub stats: StatsFormat,
    /// Print statistics every this many seconds.
    #[arg(long, value_name = "SECONDS", value_parser = linkem_core::units::parse_seconds)]
    pub stats_interval: Option<f64>,
    /// As `linkem bridge --series`: the time series with `--stats json`.
    #[arg(long, requires = "stats_interval")]
    pub series: bool,
    /// As `linkem bridge --spin-threshold`.
    #[arg(long, value_name = "TIME")]
    pub spin_threshold: Option<String>,
    /// As `linkem bridge --max-lag` (`off`: never drop a packet as late).
    #[arg(long, value_name = "TIME")]
    pub max_lag: Option<String>,
    /// Delay-line size per side.
    #[arg(long, value_name = "SIZE")]
    pub buffer: Option<String>,
    /// Packets taken per receive batch.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// As `linkem bridge --realtime`.
    #[arg(long, value_enum, default_value = "out")]
    pub realtime: Realtime,
    /// Stop after this many seconds.
    #[arg(long, value_name = "SECONDS", value_parser = linkem_core::units::parse_seconds)]
    pub duration: Option<f64>,
    /// As `linkem bridge --max-flows`.
    #[arg(long, value_name = "N", default_value_t = linkem_core::pipe::DEFAULT_MAX_FLOWS)]
    pub max_flows: usize,
    /// As `linkem bridge --max-flow-memory`.
    #[arg(long, value_name = "SIZE", default_value = "512MiB",
          value_parser = crate::args::parse_flow_memory)]
    pub max_flow_memory: usize,
    /// Write every decision to this file (as `linkem bridge --events`).
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,
    /// Record what the model was fed (as `linkem bridge --record`).
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,
    /// Largest recording.
    #[arg(long, value_name = "SIZE", default_value = "1GiB", requires = "record",
          value_parser = crate::args::parse_record_limit)]
    pub record_limit: u64,
    /// A link log of what this host receives, in mahimahi's format (as `linkem
    /// bridge --log-a-to-b`).
    #[arg(long = "log-a-to-b", value_name = "FILE")]
    pub log_a_to_b: Option<PathBuf>,
    /// The same for what it sends.
    #[arg(long = "log-b-to-a", value_name = "FILE")]
    pub log_b_to_a: Option<PathBuf>,
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
            a_to_b: self.a_to_b.clone(),
            b_to_a: self.b_to_a.clone(),
            config: None,
            backend: BackendKind::Auto,
            stats: self.stats,
            stats_interval: self.stats_interval,
            series: self.series,
            spin_threshold: self.spin_threshold.clone(),
            max_lag: self.max_lag.clone(),
            buffer: self.buffer.clone(),
            batch: self.batch,
            realtime: self.realtime,
            duration: self.duration,
            rules: self.rules.clone(),
            max_flows: self.max_flows,
            max_flow_memory: self.max_flow_memory,
            forward_only: false,
            events: self.events.clone(),
            record: self.record.clone(),
            record_limit: self.record_limit,
            log_a_to_b: self.log_a_to_b.clone(),
            log_b_to_a: self.log_b_to_a.clone(),
            control,
        }
    }
}

/// Runs `linkem host` until SIGINT or SIGTERM (or `--duration`).
pub fn run(args: &HostArgs) -> Result<()> {
    for w in args.words.iter().chain(&args.a_to_b).chain(&args.b_to_a) {
        if w == "duplicate" {
            bail!(
                "'duplicate' is not available in host mode: the kernel holds one packet per \
                 queued id, so linkem has no second copy to give back"
            );
        }
    }
    if let Some(path) = &args.rules {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("--rules {}", path.display()))?;
        if text.split_whitespace().any(|w| w == "duplicate") {
            bail!(
                "--rules {}: 'duplicate' is not available in host mode: the kernel holds one \
                 packet per queued id, so linkem has no second copy to give back",
                path.display()
            );
        }
    }
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
    };
    crate::bridge::run_attached(
        &args.bridge_args(),
        crate::bridge::Attach::Host(&setup),
        crate::bridge::Hooks::default(),
    )
}

/// Refuses to start without CAP_NET_ADMIN (queues and chains), and without
/// CAP_SYS_NICE when `realtime`. Host mode keeps its capabilities for its
/// life: removing the chains at exit needs CAP_NET_ADMIN again.
pub fn check_capabilities(realtime: bool) -> Result<()> {
    let have = caps::current()
        .map_err(|e| anyhow!("cannot read this process's capabilities: {e}"))?
        .effective;
    let mut need = vec![Cap::NET_ADMIN, Cap::NET_RAW];
    if realtime {
        need.push(Cap::SYS_NICE);
    }
    let lacking: Vec<String> = need
        .iter()
        .filter(|c| !have.has(**c))
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
        let mut queues = Vec::new();
        for q in [self.queue_num, self.queue_num + 1] {
            let queue = NfQueue::open(q, QUEUE_MAX_LEN).map_err(|e| {
                if e.to_string().contains("busy") || e.raw_os_error() == Some(libc::EBUSY) {
                    anyhow!(
                        "netfilter queue {q} is bound by another process: another linkem host \
                         runs in this network namespace (or pick --queue-num)"
                    )
                } else {
                    anyhow!("{e} (linkem host needs CAP_NET_ADMIN)")
                }
            })?;
            queues.push(queue);
        }
        let chains = Chains::install(&self.dev, self.queue_num)?;
        let raw = RawSender::open(OWN_MARK).map_err(|e| {
            anyhow!("cannot open raw IP sockets ({e}): linkem host needs CAP_NET_RAW")
        })?;
        let rx: [Box<dyn RxPort>; 2] = [
            Box::new(HostRx::new(queues[0].clone(), false)),
            Box::new(HostRx::new(queues[1].clone(), true)),
        ];
        let tx: [Box<dyn TxPort>; 2] = [
            Box::new(HostTx::new(queues[0].clone(), None)),
            Box::new(HostTx::new(queues[1].clone(), Some(raw))),
        ];
        Ok(Attached { rx, tx, chains })
    }
}

/// linkem's chains in iptables and ip6tables; removed when dropped.
pub struct Chains {
    installed: bool,
}

const TABLES: [&str; 2] = ["iptables", "ip6tables"];

fn ipt(tool: &str, args: &[&str]) -> Result<bool> {
    let out = Command::new(tool)
        .args(["-w", "5"])
        .args(args)
        .output()
        .with_context(|| format!("cannot run {tool} (linkem host needs iptables)"))?;
    Ok(out.status.success())
}

fn ipt_checked(tool: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(tool)
        .args(["-w", "5"])
        .args(args)
        .output()
        .with_context(|| format!("cannot run {tool} (linkem host needs iptables)"))?;
    if !out.status.success() {
        bail!(
            "{tool} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
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
        let mut chains = Chains { installed: true };
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

/// The made-up Ethernet header before a queued packet: the id three times,
/// then the EtherType.
fn header(id: u32, hw_protocol: u16, payload: &[u8]) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    for i in 0..3 {
        h[i * 4..i * 4 + 4].copy_from_slice(&id.to_be_bytes());
    }
    let ether_type = match (hw_protocol, payload.first().map(|b| b >> 4)) {
        (0x0800 | 0x86dd, _) => hw_protocol,
        (_, Some(6)) => 0x86dd,
        _ => 0x0800,
    };
    h[12..].copy_from_slice(&ether_type.to_be_bytes());
    h
}

/// The packet id a frame's header carries, by a majority of its three
/// copies byte by byte; `None` when a byte has no majority.
pub fn frame_id(frame: &[u8]) -> Option<u32> {
    let h = frame.get(..12)?;
    let mut id = [0u8; 4];
    for (i, b) in id.iter_mut().enumerate() {
        let (x, y, z) = (h[i], h[4 + i], h[8 + i]);
        *b = if x == y || x == z {
            x
        } else if y == z {
            y
        } else {
            return None;
        };
    }
    Some(u32::from_be_bytes(id))
}

/// A queue's receive half: packets as frames (made-up header + IP packet).
///
/// `steal` (side b, what this host sends): each packet gets NF_DROP as soon
/// as it is read, so the kernel frees it and it stops counting against its
/// socket (TCP small queues, a socket's send buffer); at its release time
/// linkem sends its copy through a raw socket ([`HostTx`]).
struct HostRx {
    queue: NfQueue,
    buf: Vec<u8>,
    frame: Vec<u8>,
    drops: Verdicts,
    steal: bool,
}

impl HostRx {
    fn new(queue: NfQueue, steal: bool) -> Self {
        HostRx {
            drops: Verdicts::new(queue.clone()),
            steal,
            queue,
            buf: vec![0u8; nfqueue::RECV_BUFFER_BYTES],
            frame: Vec::with_capacity(HEADER_BYTES + nfqueue::MAX_PACKET_BYTES),
        }
    }

    fn flush_drops(&mut self) -> io::Result<()> {
        self.drops.flush()
    }
}

impl RxPort for HostRx {
    fn rx_batch(&mut self, max: usize, f: &mut dyn FnMut(RxFrame<'_>)) -> io::Result<usize> {
        self.flush_drops()?;
        let mut n = 0;
        while n < max {
            let len = self.queue.recv(&mut self.buf, true)?;
            if len == 0 {
                break;
            }
            let frame = &mut self.frame;
            let (steal, drops) = (self.steal, &mut self.drops);
            let got = nfqueue::parse_packets(&self.buf[..len], &mut |p| {
                if steal {
                    drops.push(p.id, Verdict::Drop, None);
                }
                frame.clear();
                frame.extend_from_slice(&header(p.id, p.hw_protocol, p.payload));
                frame.extend_from_slice(p.payload);
                let owner = p.uid.map(|uid| SocketOwner {
                    uid,
                    gid: p.gid.unwrap_or(u32::MAX),
                });
                f(RxFrame {
                    data: frame,
                    orig_len: frame.len() as u32,
                    ts_ns: 0,
                    offload: Default::default(),
                    owner,
                });
            });
            match got {
                Ok(k) => n += k,
                // A refused verdict (an id no longer queued) is answered on
                // this socket; it costs that packet, not the run.
                Err(nfqueue::NfqError::Refused(_)) => {}
                Err(e) => return Err(io::Error::other(e.to_string())),
            }
        }
        Ok(n)
    }

    fn wait_rx(&mut self, timeout_ns: u64) -> io::Result<()> {
        self.flush_drops()?;
        self.queue.wait(timeout_ns)
    }

    fn wait_fds(&mut self, fds: &mut Vec<RawFd>) -> io::Result<WaitFds> {
        self.flush_drops()?;
        fds.push(self.queue.raw_fd());
        Ok(WaitFds::Added)
    }

    fn wants_discards(&self) -> bool {
        true
    }

    fn discard(&mut self, frame: &[u8]) {
        if self.steal {
            return; // dropped in the kernel when read
        }
        if let Some(id) = frame_id(frame) {
            self.drops.push(id, Verdict::Drop, None);
        }
    }
}

/// A queue's verdict half: a released frame's id gets NF_ACCEPT with the
/// packet as the model left it; with `raw` (side b, stolen packets) the
/// packet is sent through the raw socket instead.
struct HostTx {
    verdicts: Verdicts,
    raw: Option<RawSender>,
    errors: u64,
}

impl HostTx {
    fn new(queue: NfQueue, raw: Option<RawSender>) -> Self {
        HostTx {
            verdicts: Verdicts::new(queue),
            raw,
            errors: 0,
        }
    }
}

impl TxPort for HostTx {
    fn tx_push(&mut self, frame: &[u8]) -> TxOutcome {
        if let Some(raw) = &self.raw {
            let sent = frame.get(HEADER_BYTES..).map(|p| raw.send(p));
            if !matches!(sent, Some(Ok(()))) {
                self.errors += 1;
            }
            return TxOutcome::Queued;
        }
        if self.verdicts.pending() > 0
            && self.verdicts.pending_bytes() + frame.len() > VERDICT_BATCH_BYTES
        {
            return TxOutcome::NoRoom;
        }
        match frame_id(frame) {
            Some(id) => self
                .verdicts
                .push(id, Verdict::Accept, frame.get(HEADER_BYTES..)),
            None => self.errors += 1,
        }
        TxOutcome::Queued
    }

    fn tx_flush(&mut self) -> io::Result<()> {
        self.verdicts.flush()
    }

    fn tx_errors(&mut self) -> u64 {
        self.errors
    }

    fn max_frame_bytes(&self) -> usize {
        HEADER_BYTES + nfqueue::MAX_PACKET_BYTES
    }

    fn tx_discard(&mut self, frame: &[u8]) {
        if self.raw.is_some() {
            return; // dropped in the kernel when read
        }
        if let Some(id) = frame_id(frame) {
            self.verdicts.push(id, Verdict::Drop, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_survives_one_corrupted_copy_and_a_split_is_refused() {
        let h = header(0x0102_0304, 0x0800, b"\x45");
        assert_eq!(frame_id(&h), Some(0x0102_0304));
        for bit in 0..96 {
            let mut c = h;
            c[bit / 8] ^= 0x80 >> (bit % 8);
            assert_eq!(frame_id(&c), Some(0x0102_0304), "bit {bit}");
        }
        let mut c = h;
        c[0] ^= 1;
        c[4] ^= 2;
        assert_eq!(frame_id(&c), None);
        assert_eq!(&header(1, 0, b"\x60")[12..], &[0x86, 0xdd]);
    }
}
