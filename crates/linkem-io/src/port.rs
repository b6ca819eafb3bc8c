//! What every packet port of this crate opens with: how large its rings are, and the
//! two halves it hands the live stage (`linkem_core::port`'s traits, implemented beside
//! each socket: [`crate::afpacket::port`], [`crate::afxdp::port`],
//! [`crate::nfqueue::port`]).

use linkem_core::port::{PortHealth, RxPort, TxPort};

/// An opened interface: the receive half for the direction that starts there, the send
/// half for the direction that ends there (each owned by one pipeline thread), and a
/// description of what was opened and set.
pub type Halves = (Box<dyn RxPort>, Box<dyn TxPort>, String);

/// How large an interface's rings are: the kernel allocates them whole at
/// open, and they stay resident (AF_PACKET: 2 KiB a slot at MTU 1500).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Rings {
    /// One link per process: a receive ring of 4096 slots (8 MiB), a
    /// transmit ring of 2048 (4 MiB); AF_XDP a UMEM of 4096 frames.
    Full,
    /// One of many links (`--pair`, a lab): AF_PACKET a receive ring of 256
    /// slots (512 KiB) and no transmit ring (`sendmmsg` instead, see
    /// `afpacket::batch_tx`), AF_XDP a UMEM of 256 frames (512 KiB, half of
    /// them receive); a burst beyond them is the kernel's drop
    /// (`rx_kernel_drops`) or waits for room. Why so few: most links of a lab
    /// are idle, and these rings are resident from the open on, so they are
    /// most of what an idle link costs (a lab of 100 links within 2 MiB a
    /// link, docs/numbers.md "Many links"). 256 receive slots hold a quarter
    /// of a millisecond at a million frames a second, longer than the live
    /// stage takes to come back to a busy pair (1024 forwarded no more).
    Small,
}

/// Whether a port's interface was last seen down, said once at each change:
/// both packet backends' `RxPort::health`.
#[derive(Debug, Default)]
pub(crate) struct UpDown {
    down: bool,
}

impl UpDown {
    /// The health of `ifname`, seen `up` or down now.
    pub(crate) fn seen(&mut self, ifname: &str, up: bool) -> PortHealth {
        if up == self.down {
            self.down = !up;
            if up {
                eprintln!("linkem: {ifname}: up again; frames flow");
            } else {
                eprintln!(
                    "linkem: {ifname}: interface down; frames sent to it are dropped (tx-error) \
                     until it is up again"
                );
            }
        }
        if up {
            PortHealth::Running
        } else {
            PortHealth::Down
        }
    }

    /// `ifname` is gone for good.
    pub(crate) fn gone(ifname: &str) -> PortHealth {
        PortHealth::Gone(format!(
            "interface '{ifname}' is gone (deleted, moved to another namespace, or its veth peer \
             or namespace deleted)"
        ))
    }
}
