//! Everything linkem does with the outside world, kept out of the pure model
//! (linkem-core): packet sockets (AF_PACKET with a TPACKET_V2 ring, AF_XDP with
//! its XDP program), capture files (pcap, pcapng), the files linkem reads and
//! writes (bounded reads, atomic replacement that never harms a device or the
//! input), interfaces, capabilities and credentials, and the network-namespace
//! harness the live tests and benchmarks build their topologies with.

#![warn(missing_docs)]

pub mod afpacket;
pub mod afxdp;
pub mod bpf;
pub mod caps;
pub mod capture;
pub mod creds;
pub mod ifaces;
pub mod infile;
pub mod netns;
pub mod outfile;
pub mod sys;
