//! An AF_XDP interface as the live stage's ports. AF_XDP frames come without offload
//! metadata, so each received frame whose TCP/UDP checksum a host left for offload is
//! finished here, in place in the UMEM, with `complete_partial_checksum` (see the
//! module doc of [`crate::afxdp`] for why).

use super::{AfXdp, AfXdpConfig, XdpRx, XdpTx, PROGRAM_NAME};
use crate::afpacket::IoError;
use crate::ifaces;
use crate::linkwatch::{LinkState, LinkWatch};
use crate::port::{Halves, Rings, UpDown};
use linkem_core::port::{KernelPath, PortHealth, RxFrame, RxPort, TxOutcome, TxPort, WaitFds};
use linkem_core::wire::complete_partial_checksum;
use std::io;
use std::os::fd::RawFd;

struct XskRx {
    rx: XdpRx,
    /// Promiscuous mode while the receiving half lives.
    _promisc: ifaces::Promiscuous,
    /// What the socket does not hear: the interface set down, up, or gone.
    watch: LinkWatch,
    up_down: UpDown,
}

struct XskTx {
    tx: XdpTx,
    warned_too_big: bool,
    /// The last kick said the interface is down (ENETDOWN): frames are
    /// dropped (counted in `dropped_down`, reported as tx errors) until a
    /// kick goes through again; descriptors already on the ring leave then.
    down: bool,
    dropped_down: u64,
}

impl RxPort for XskRx {
    fn rx_batch(&mut self, max: usize, f: &mut dyn FnMut(RxFrame<'_>)) -> io::Result<usize> {
        self.rx.rx_batch(max, |data, len, ts_ns| {
            // Finishes a checksum left for offload; anything else untouched.
            complete_partial_checksum(data);
            f(RxFrame {
                data,
                orig_len: len,
                ts_ns,
                offload: Default::default(),
                owner: None,
            })
        })
    }

    fn wait_rx(&mut self, timeout_ns: u64) -> io::Result<()> {
        self.rx.wait_rx(timeout_ns)
    }

    fn rx_kernel_drops(&mut self) -> u64 {
        self.rx.kernel_drops()
    }

    fn kernel_path(&mut self) -> Option<&mut dyn KernelPath> {
        self.rx.kernel_path().map(|k| k as &mut dyn KernelPath)
    }

    fn wait_fds(&mut self, fds: &mut Vec<RawFd>) -> io::Result<WaitFds> {
        Ok(if self.rx.prepare_wait(fds) {
            WaitFds::Ready
        } else {
            WaitFds::Added
        })
    }

    fn health_fd(&self) -> Option<RawFd> {
        Some(self.watch.fd())
    }

    fn health(&mut self) -> PortHealth {
        let ifname = &self.rx.info().ifname;
        match self.watch.state() {
            LinkState::Gone => UpDown::gone(ifname),
            state => self.up_down.seen(ifname, state == LinkState::Up),
        }
    }
}

impl XskTx {
    /// Says once what frames too big for this interface mean and how to
    /// avoid them.
    fn warn_too_big(&mut self, len: usize) {
        if self.warned_too_big {
            return;
        }
        self.warned_too_big = true;
        let info = self.tx.info();
        eprintln!(
            "linkem: warning: a {len}-byte frame is larger than '{}' carries ({} bytes: MTU {} + \
             Ethernet header and tag); such frames are dropped and counted as too-big \
             (give both interfaces and hosts the same MTU)",
            info.ifname,
            self.tx.max_frame_bytes(),
            info.mtu
        );
    }
}

impl TxPort for XskTx {
    fn tx_push(&mut self, frame: &[u8]) -> TxOutcome {
        if self.down {
            // One kick per frame while down: it tells when the interface is up.
            let _ = self.tx_flush();
            if self.down {
                self.dropped_down += 1;
                return TxOutcome::Queued;
            }
        }
        let pushed = self.tx.tx_push(frame);
        if pushed == TxOutcome::TooBig {
            self.warn_too_big(frame.len());
        }
        pushed
    }

    fn tx_flush(&mut self) -> io::Result<()> {
        match self.tx.tx_flush() {
            // Set down: the frames wait on the ring, new ones are dropped
            // (tx_push) until it is up. Gone (ENXIO) stays an error: the
            // pair stops, naming the interface.
            Err(e) if e.kind() == io::ErrorKind::NetworkDown => {
                self.down = true;
                Ok(())
            }
            r => {
                if r.is_ok() {
                    self.down = false;
                }
                r
            }
        }
    }

    fn tx_errors(&mut self) -> u64 {
        self.tx.tx_errors() + self.dropped_down
    }

    fn send_lead_ns(&self) -> u64 {
        self.tx.send_lead_ns()
    }

    fn max_frame_bytes(&self) -> usize {
        self.tx.max_frame_bytes()
    }

    fn egress_ifindex(&self) -> Option<u32> {
        Some(self.tx.info().ifindex)
    }
}

/// Opens `ifname` (MTU `mtu`) as a receive half and a send half with a UMEM of the size
/// given, promiscuous while open, and says what was opened and set.
pub fn open(ifname: &str, mtu: u32, rings: Rings, kernel_path: bool) -> Result<Halves, IoError> {
    // 4096-byte UMEM frames above MTU 1500: fewer parts per jumbo frame.
    let frame_size = if super::frame_size_for_mtu(mtu) <= 2048 {
        2048
    } else {
        4096
    };
    let (rx, tx) = AfXdp::open(
        ifname,
        AfXdpConfig {
            frame_size,
            frame_count: match rings {
                Rings::Full => AfXdpConfig::default().frame_count,
                Rings::Small => 256,
            },
            kernel_path,
            ..AfXdpConfig::default()
        },
    )?;
    // A NIC filters by MAC address unless promiscuous; the membership goes
    // with its socket, so nothing is left set after linkem ends.
    let iface = ifaces::lookup(ifname)?;
    let promisc = ifaces::Promiscuous::on(&iface)?;
    let watch = LinkWatch::open(&iface).map_err(|e| IoError::Sys {
        call: "socket(AF_NETLINK, RTMGRP_LINK)",
        ifname: ifname.to_string(),
        source: e,
    })?;
    let kernel_note = if rx.has_kernel_path() {
        crate::kernel_path::OPENED_NOTE
    } else {
        ""
    };
    let info = format!(
        "{}, XDP program {} (detached when linkem exits, even if killed), promiscuous while \
         open{kernel_note}",
        rx.info(),
        PROGRAM_NAME
    );
    Ok((
        Box::new(XskRx {
            rx,
            _promisc: promisc,
            watch,
            up_down: UpDown::default(),
        }),
        Box::new(XskTx {
            tx,
            warned_too_big: false,
            down: false,
            dropped_down: 0,
        }),
        info,
    ))
}
