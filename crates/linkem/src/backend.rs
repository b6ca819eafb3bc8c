//! Opening an interface for the bridge: a receive half for the direction that
//! starts there and a send half for the direction that ends there, each
//! owned by one pipeline thread.

use anyhow::{anyhow, Result};
use linkem_io::afpacket::{self, AfPacket, AfPacketConfig};
use linkem_io::afxdp::{self, AfXdp, AfXdpConfig, XdpRx, XdpTx};
use linkem_runtime::port::{RxFrame, RxPort, TxOutcome, TxPort};
use std::io;
use std::time::Duration;

/// Which packet I/O the bridge uses.
#[derive(Clone, Copy, clap::ValueEnum, PartialEq, Eq, Debug)]
pub enum BackendKind {
    /// AF_XDP: an XDP program redirects every frame to a socket (copy or
    /// zero-copy, whichever the driver offers).
    Xdp,
    /// AF_PACKET with TPACKET_V2 mmap rings.
    Packet,
    /// AF_XDP where it works without changes to the peer, else AF_PACKET
    /// (the reason is printed).
    Auto,
}

struct PacketRx(AfPacket);
struct PacketTx(AfPacket);

impl RxPort for PacketRx {
    fn rx_batch(&mut self, max: usize, f: &mut dyn FnMut(RxFrame<'_>)) -> io::Result<usize> {
        Ok(self.0.rx_batch(max, |fr| {
            f(RxFrame {
                data: fr.data,
                orig_len: fr.orig_len,
                ts_ns: fr.ts_ns,
                offload: fr.offload,
            })
        }))
    }

    fn wait_rx(&mut self, timeout_ns: u64) -> io::Result<()> {
        self.0
            .poll_rx(Some(Duration::from_nanos(timeout_ns)))
            .map(|_| ())
            .map_err(io::Error::other)
    }

    fn rx_kernel_drops(&mut self) -> u64 {
        self.0.kernel_drops()
    }
}

impl TxPort for PacketTx {
    fn tx_push(&mut self, frame: &[u8]) -> TxOutcome {
        match self.0.tx_push(frame) {
            afpacket::TxPush::Queued => TxOutcome::Queued,
            afpacket::TxPush::NoRoom => TxOutcome::NoRoom,
            afpacket::TxPush::TooBig => TxOutcome::TooBig,
        }
    }

    fn tx_flush(&mut self) -> io::Result<()> {
        self.0.tx_flush().map_err(io::Error::other)
    }

    fn tx_errors(&mut self) -> u64 {
        self.0.stats().tx_wrong_format
    }

    fn max_frame_bytes(&self) -> usize {
        self.0.max_frame_bytes()
    }
}

struct XskRx(XdpRx);
/// The send half and the largest frame it may send (MTU + Ethernet header + one tag).
struct XskTx(XdpTx, usize);

impl RxPort for XskRx {
    fn rx_batch(&mut self, max: usize, f: &mut dyn FnMut(RxFrame<'_>)) -> io::Result<usize> {
        self.0.rx_batch(max, |data, len, ts_ns| {
            f(RxFrame {
                data,
                orig_len: len,
                ts_ns,
                offload: Default::default(),
            })
        })
    }

    fn wait_rx(&mut self, timeout_ns: u64) -> io::Result<()> {
        self.0.wait_rx(timeout_ns)
    }
}

impl TxPort for XskTx {
    fn tx_push(&mut self, frame: &[u8]) -> TxOutcome {
        if frame.len() > self.1 {
            return TxOutcome::TooBig;
        }
        if self.0.tx_push(frame) {
            TxOutcome::Queued
        } else {
            TxOutcome::NoRoom
        }
    }

    fn tx_flush(&mut self) -> io::Result<()> {
        self.0.tx_flush()
    }

    fn max_frame_bytes(&self) -> usize {
        self.1
    }
}

pub type Halves = (Box<dyn RxPort>, Box<dyn TxPort>, String);

fn open_packet(ifname: &str, mtu: u32) -> Result<Halves> {
    let frame_size = afpacket::frame_size_for_mtu(mtu).max(2048);
    // Two sockets: the receiving one belongs to the input stage of one
    // direction, the send-only one to the output stage of the other, so the
    // two threads share nothing.
    let rx = AfPacket::open(
        ifname,
        AfPacketConfig {
            frame_size,
            ..AfPacketConfig::default()
        },
    )?;
    let tx = AfPacket::open(
        ifname,
        AfPacketConfig {
            frame_size,
            rx_frames: 16,
            tx_frames: 2048,
            receive: false,
            ..AfPacketConfig::default()
        },
    )?;
    Ok((
        Box::new(PacketRx(rx)),
        Box::new(PacketTx(tx)),
        "AF_PACKET TPACKET_V2 rings".to_string(),
    ))
}

fn open_xdp(ifname: &str, mtu: u32) -> Result<Halves> {
    let needed = afxdp::frame_size_for_mtu(mtu);
    let frame_size = if needed <= 2048 {
        2048
    } else if needed <= 4096 {
        4096
    } else {
        return Err(anyhow!(
            "MTU {mtu} of '{ifname}' does not fit an AF_XDP frame (at most 4096 bytes with headroom); \
             lower the MTU or use --backend packet"
        ));
    };
    let (rx, tx) = AfXdp::open(
        ifname,
        AfXdpConfig {
            frame_size,
            ..AfXdpConfig::default()
        },
    )?;
    let info = rx.info().to_string();
    let max_frame = (mtu as usize + 18).min(frame_size as usize);
    Ok((Box::new(XskRx(rx)), Box::new(XskTx(tx, max_frame)), info))
}

/// The kernel driver behind an interface (ETHTOOL_GDRVINFO), if it says.
fn driver_name(ifname: &str) -> Option<String> {
    #[repr(C)]
    struct DrvInfo {
        cmd: u32,
        driver: [u8; 32],
        rest: [u8; 32 * 4 + 12 + 20],
    }
    let mut info = DrvInfo {
        cmd: 0x3, /* ETHTOOL_GDRVINFO */
        driver: [0; 32],
        rest: [0; 32 * 4 + 12 + 20],
    };
    // Safety: ifreq is plain old data; zero is valid.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    if ifname.len() >= ifr.ifr_name.len() {
        return None;
    }
    for (d, s) in ifr.ifr_name.iter_mut().zip(ifname.bytes()) {
        *d = s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = (&mut info as *mut DrvInfo).cast();
    // Safety: a datagram socket only to carry the ioctl; closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    // Safety: SIOCETHTOOL reads the name and writes `info`, which outlives the call.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCETHTOOL, &mut ifr) };
    // Safety: fd is ours.
    unsafe { libc::close(fd) };
    if rc < 0 {
        return None;
    }
    let end = info.driver.iter().position(|&b| b == 0).unwrap_or(32);
    Some(String::from_utf8_lossy(&info.driver[..end]).into_owned())
}

/// Opens `ifname` with the chosen backend. Returns the receive half, the send
/// half and a description of what was opened.
pub fn open_interface(kind: BackendKind, ifname: &str, mtu: u32) -> Result<Halves> {
    match kind {
        BackendKind::Packet => open_packet(ifname, mtu),
        BackendKind::Xdp => open_xdp(ifname, mtu),
        BackendKind::Auto => {
            // AF_XDP transmit into a veth fails unless its peer has XDP or GRO
            // on, which linkem cannot see from here (the peer usually lives in
            // another namespace); AF_PACKET always works there.
            if driver_name(ifname).as_deref() == Some("veth") {
                eprintln!(
                    "linkem: {ifname}: veth, using AF_PACKET (AF_XDP needs GRO or XDP on the veth peer: \
                     run `ethtool -K PEER gro on` on it and pass --backend xdp)"
                );
                return open_packet(ifname, mtu);
            }
            match open_xdp(ifname, mtu) {
                Ok(h) => Ok(h),
                Err(e) => {
                    eprintln!("linkem: {ifname}: AF_XDP unavailable ({e:#}); using AF_PACKET");
                    open_packet(ifname, mtu)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_driver_is_not_veth() {
        assert_ne!(driver_name("lo").as_deref(), Some("veth"));
        assert_eq!(driver_name("no-such-if-x"), None);
    }
}
