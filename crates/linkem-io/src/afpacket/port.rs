//! An AF_PACKET interface as the live stage's ports: a receiving socket for one
//! direction's input stage, a send-only socket (and the super-frame sender) for the
//! other direction's output stage, so the two threads share nothing. One of many
//! links (`Rings::Small`) sends without a TX ring, through `sendmmsg`
//! ([`super::batch_tx`] says why).

use super::batch_tx::BatchSender;
use super::{AfPacket, AfPacketConfig, GsoSender, IoError, ETH_HLEN, VLAN_HLEN};
use crate::kernel_path::{Gate, Kernel};
use crate::port::{Halves, Rings, UpDown};
use linkem_core::port::{KernelPath, PortHealth, RxFrame, RxPort, TxOutcome, TxPort, WaitFds};
use linkem_core::wire::Offload;
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// The RX ring's socket, whether its interface was last seen down, and its
/// kernel path (the socket's filter reads its gate).
struct PacketRx {
    sock: AfPacket,
    up_down: UpDown,
    kernel: Option<Kernel>,
}

/// The TX ring's socket, and the one that sends super-frames (if it opened).
struct PacketTx {
    ring: AfPacket,
    ifindex: u32,
    gso: Option<GsoSender>,
    /// When the interface's MTU was last read ([`MTU_CHECK_EVERY_NS`]).
    mtu_read_ns: u64,
}

/// How often the send half reads its interface's MTU again: frames longer
/// than a lowered MTU count as too-big at most this long after the change.
const MTU_CHECK_EVERY_NS: u64 = 250_000_000;

impl RxPort for PacketRx {
    fn rx_batch(&mut self, max: usize, f: &mut dyn FnMut(RxFrame<'_>)) -> io::Result<usize> {
        Ok(self.sock.rx_batch(max, f))
    }

    fn wait_rx(&mut self, timeout_ns: u64) -> io::Result<()> {
        self.sock
            .poll_rx(Some(Duration::from_nanos(timeout_ns)))
            .map(|_| ())
            .map_err(io::Error::other)
    }

    fn rx_kernel_drops(&mut self) -> u64 {
        self.sock.kernel_drops()
    }

    fn wait_fds(&mut self, fds: &mut Vec<RawFd>) -> io::Result<WaitFds> {
        if self.sock.rx_ready() {
            return Ok(WaitFds::Ready);
        }
        fds.push(self.sock.fd());
        Ok(WaitFds::Added)
    }

    fn health(&mut self) -> PortHealth {
        // The kernel sets ENETDOWN on the socket when the interface goes
        // down (deleting it takes it down first); reading it clears it, so
        // poll sleeps again.
        let _ = self.sock.take_error();
        if self.sock.interface_gone() {
            return UpDown::gone(self.sock.ifname());
        }
        let up = self.sock.is_up();
        self.up_down.seen(self.sock.ifname(), up)
    }

    fn kernel_path(&mut self) -> Option<&mut dyn KernelPath> {
        self.kernel.as_mut().map(|k| k as &mut dyn KernelPath)
    }
}

impl TxPort for PacketTx {
    fn tx_push(&mut self, frame: &[u8]) -> TxOutcome {
        // One clock read per frame (vDSO, ~20 ns): the first frame after an
        // idle spell is checked against the MTU as it is now.
        let now = super::now_realtime_ns();
        if now.wrapping_sub(self.mtu_read_ns) > MTU_CHECK_EVERY_NS {
            self.mtu_read_ns = now;
            self.ring.refresh_mtu();
        }
        self.ring.tx_push(frame)
    }

    fn tx_flush(&mut self) -> io::Result<()> {
        self.ring.tx_flush().map_err(io::Error::other)
    }

    fn tx_errors(&mut self) -> u64 {
        let stats = self.ring.stats();
        stats.tx_wrong_format + stats.tx_link_down
    }

    fn send_lead_ns(&self) -> u64 {
        self.ring.send_lead_ns()
    }

    fn max_frame_bytes(&self) -> usize {
        self.ring.max_frame_bytes()
    }

    fn egress_ifindex(&self) -> Option<u32> {
        Some(self.ifindex)
    }

    fn sends_super_frames(&self) -> bool {
        self.gso.is_some()
    }

    fn tx_send_super(&mut self, frame: &[u8], offload: Offload) -> io::Result<bool> {
        let Some(gso) = self.gso.as_mut() else {
            return Err(io::Error::from(io::ErrorKind::Unsupported));
        };
        // What the ring holds was due first: it reaches the device first.
        self.ring.tx_flush().map_err(io::Error::other)?;
        let hdr_len = linkem_core::wire::locate(frame)
            .map(|h| h.payload_offset as u16)
            .unwrap_or(0);
        gso.send(&offload.to_virtio_net_hdr(hdr_len), frame)
            .map_err(io::Error::other)
    }
}

/// Slots of the ring a socket does not use: the least the kernel takes, one
/// block (two 2 KiB slots in a 4 KiB page at MTU 1500).
const UNUSED_RING_FRAMES: u32 = 1;

/// The send half of one of many links: frames go out with `sendmmsg`, super-frames
/// through the same socket.
struct PacketTxBatch {
    batch: BatchSender,
    ifindex: u32,
    mtu: u32,
    /// When the interface's MTU was last read ([`MTU_CHECK_EVERY_NS`]).
    mtu_read_ns: u64,
}

impl TxPort for PacketTxBatch {
    fn tx_push(&mut self, frame: &[u8]) -> TxOutcome {
        let now = super::now_realtime_ns();
        if now.wrapping_sub(self.mtu_read_ns) > MTU_CHECK_EVERY_NS {
            self.mtu_read_ns = now;
            self.mtu = self.batch.read_mtu().unwrap_or(self.mtu);
        }
        // As the kernel checks (`packet_extra_vlan_len_allowed`): 4 bytes
        // more for a frame tagged 802.1Q.
        let tagged = frame.len() >= ETH_HLEN && frame[12..14] == [0x81, 0x00];
        let limit = self.mtu as usize + ETH_HLEN + if tagged { VLAN_HLEN } else { 0 };
        if frame.len() > limit {
            return TxOutcome::TooBig;
        }
        if self.batch.push(frame) {
            TxOutcome::Queued
        } else {
            TxOutcome::NoRoom
        }
    }

    fn tx_flush(&mut self) -> io::Result<()> {
        self.batch.flush().map_err(io::Error::other)
    }

    fn tx_errors(&mut self) -> u64 {
        self.batch.link_down
    }

    fn max_frame_bytes(&self) -> usize {
        self.mtu as usize + ETH_HLEN + VLAN_HLEN
    }

    fn egress_ifindex(&self) -> Option<u32> {
        Some(self.ifindex)
    }

    fn sends_super_frames(&self) -> bool {
        true
    }

    fn tx_send_super(&mut self, frame: &[u8], offload: Offload) -> io::Result<bool> {
        // What is queued was due first: it reaches the device first.
        self.batch.flush().map_err(io::Error::other)?;
        if self.batch.queued() > 0 {
            return Ok(false);
        }
        let hdr_len = linkem_core::wire::locate(frame)
            .map(|h| h.payload_offset as u16)
            .unwrap_or(0);
        self.batch
            .gso()
            .send(&offload.to_virtio_net_hdr(hdr_len), frame)
            .map_err(io::Error::other)
    }
}

/// Opens `ifname` (MTU `mtu`) as a receive half and a send half with rings of the size
/// given, with a kernel path when `kernel_path` and the machine allows one
/// ([`crate::kernel_path`]), and says what was opened and set.
pub fn open(ifname: &str, mtu: u32, rings: Rings, kernel_path: bool) -> Result<Halves, IoError> {
    let ifindex = crate::ifaces::lookup(ifname)?.index;
    let frame_size = super::frame_size_for_mtu(mtu).max(2048);
    let rx_frames = match rings {
        Rings::Full => 4096,
        Rings::Small => 256,
    };
    // Two sockets: the receiving one belongs to the input stage of one
    // direction, the send-only one to the output stage of the other, so the
    // two threads share nothing. Each ring socket gets the smallest ring of
    // the kind it does not use (the kernel wants both): one block.
    let rx = AfPacket::open(
        ifname,
        AfPacketConfig {
            frame_size,
            rx_frames,
            tx_frames: UNUSED_RING_FRAMES,
            ..AfPacketConfig::default()
        },
    )?;
    let kernel = if kernel_path {
        Kernel::open_or_say(ifname, Gate::PacketSocket).and_then(|mut k| {
            match k.attach_socket_filter(rx.fd()) {
                Ok(()) => Some(k),
                Err(e) => {
                    eprintln!("linkem: {ifname}: no kernel path for pass-through links ({e})");
                    None
                }
            }
        })
    } else {
        None
    };
    let kernel_note = if kernel.is_some() {
        crate::kernel_path::OPENED_NOTE
    } else {
        ""
    };
    let rx: Box<dyn RxPort> = Box::new(PacketRx {
        sock: rx,
        up_down: UpDown::default(),
        kernel,
    });
    if rings == Rings::Small {
        let batch = BatchSender::new(GsoSender::open(ifname, true)?);
        let tx = Box::new(PacketTxBatch {
            ifindex,
            mtu: batch.read_mtu().unwrap_or(mtu),
            batch,
            mtu_read_ns: super::now_realtime_ns(),
        });
        let info = format!(
            "AF_PACKET TPACKET_V2 receive ring, sendmmsg to send, promiscuous while open{kernel_note}"
        );
        return Ok((rx, tx, info));
    }
    let tx = AfPacket::open(
        ifname,
        AfPacketConfig {
            frame_size,
            rx_frames: UNUSED_RING_FRAMES,
            tx_frames: 2048,
            receive: false,
            ..AfPacketConfig::default()
        },
    )?;
    // Cheap to hold; used only while coalescing is on. Without it the output
    // stage sends every wire frame through the ring.
    let gso = match GsoSender::open(ifname, true) {
        Ok(g) => Some(g),
        Err(e) => {
            eprintln!("linkem: {ifname}: super-frames cannot be sent ({e}); sending wire frames");
            None
        }
    };
    Ok((
        rx,
        Box::new(PacketTx {
            ring: tx,
            ifindex,
            gso,
            mtu_read_ns: super::now_realtime_ns(),
        }),
        format!("AF_PACKET TPACKET_V2 rings, promiscuous while open{kernel_note}"),
    ))
}
