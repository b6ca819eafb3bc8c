//! What every packet port of this crate opens with: how large its rings are, and the
//! two halves it hands the live stage (`linkem_core::port`'s traits, implemented beside
//! each socket: [`crate::afpacket::port`], [`crate::afxdp::port`],
//! [`crate::nfqueue::port`]).

use linkem_core::port::{RxPort, TxPort};

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
    /// One of many links (`--pair`): 1024 and 512 slots (2 and 1 MiB),
    /// AF_XDP 1024 frames; bursts beyond them are the kernel's drops
    /// (`rx_kernel_drops`) or wait for room.
    Small,
}
