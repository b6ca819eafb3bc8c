//! The data path of `linkem host` (see `host.rs` for how and why): the
//! capabilities it needs, linkem's own chains, and the netfilter queues as the
//! live stage's receive and transmit ports. `bridge.rs` attaches it; `host.rs`
//! (the command) imports the bridge, never the other way round.

use anyhow::{anyhow, bail, Context, Result};
use linkem_core::rules::SocketOwner;
use linkem_io::caps::{self, Cap};
use linkem_io::nfqueue::{self, NfQueue, RawSender, Verdict, Verdicts};
use linkem_runtime::port::{RxFrame, RxPort, TxOutcome, TxPort, WaitFds};
use std::io;
use std::os::fd::RawFd;
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

/// Why host mode cannot duplicate: what `'duplicate' is not available`
/// goes on with, at start-up and for a change asked while running.
pub const NO_COPIES: &str = "in host mode: the kernel holds each queued packet \
    under one id and takes one verdict for it, so linkem has no second copy to give back";

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

    fn no_copies(&self) -> Option<&'static str> {
        Some(NO_COPIES)
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
