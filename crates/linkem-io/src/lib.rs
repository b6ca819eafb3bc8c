//! Everything linkem does with the outside world, kept out of the pure model
//! (linkem-core) and behind safe APIs, so that the `linkem` crate can forbid
//! `unsafe` code:
//!
//! - packet sockets: [`afpacket`] (AF_PACKET with memory-mapped TPACKET_V2
//!   rings) and [`afxdp`] (AF_XDP, one socket per receive queue), with
//!   [`bpf`] (the hand-assembled XDP program that stamps and redirects frames,
//!   its XSKMAP and BPF link); each with its live-stage ports beside it
//!   (`afpacket::port`, `afxdp::port`, `nfqueue::port`: `linkem_core::port`'s
//!   traits), opened with the sizes in [`port`];
//! - [`capture`]: pcap and pcapng in, nanosecond pcap out;
//! - the files linkem reads and writes: [`infile`] (regular files only, bounded
//!   reads) and [`outfile`] (atomic replacement of regular files; devices and
//!   FIFOs written in place; an output that is an input refused);
//! - [`nfqueue`]: a netfilter queue (`linkem host`: this host's own packets,
//!   held by id until their verdict);
//! - [`recording`]: what a live run fed its emulator core (frames, control changes,
//!   seed, start), written off the packet path and read back in order for replay;
//! - [`ifaces`] (interface facts, one linkem per interface, promiscuous mode),
//!   [`linkwatch`] (an interface's state changes, for a port whose socket hears
//!   nothing of them),
//!   [`caps`] (capabilities, checked and dropped), [`creds`] (a control
//!   socket's peer credentials, group lookup, who started the process) and
//!   [`sys`] (every system call wrapper the other crates share: socket options,
//!   clocks, receive timestamps, signals);
//! - [`netns`]: the network namespaces and veth pairs that the live tests,
//!   `linkem probe` and `linkem bench` build their topologies with; [`shellns`]:
//!   the unnamed namespaces of `linkem shell`.

#![warn(missing_docs)]

pub mod afpacket;
pub mod afxdp;
pub mod bpf;
pub mod caps;
pub mod capture;
pub mod creds;
pub mod ifaces;
pub mod infile;
pub mod kernel_path;
mod lead;
pub mod linkwatch;
pub mod netns;
pub mod nfqueue;
pub mod outfile;
pub mod port;
pub mod recording;
pub mod shellns;
pub mod sys;

/// Tests: runs `f` on a thread of its own moved into a new network namespace
/// (`unshare`), so that nothing else on the machine sees or collides with
/// what it makes; without CAP_SYS_ADMIN it says the test is skipped.
#[cfg(test)]
pub(crate) fn in_own_net_namespace(f: impl FnOnce() + Send + 'static) {
    std::thread::spawn(move || {
        // Safety: unshare with a flag and no pointers; it moves only this
        // thread, which ends with the test, into a new namespace.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            eprintln!(
                "skipped: unshare(CLONE_NEWNET): {}",
                std::io::Error::last_os_error()
            );
            return;
        }
        f()
    })
    .join()
    .unwrap();
}
