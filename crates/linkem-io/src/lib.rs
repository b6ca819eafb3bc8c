pub mod afpacket;
pub mod afxdp;
pub mod bpf;
pub mod caps;
pub mod capture;
pub mod ifaces;
pub mod netns;
