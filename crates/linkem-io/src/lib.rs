pub mod afpacket;
pub mod afxdp;
pub mod bpf;
pub mod capture;
pub mod infile;
pub mod netns;
pub mod outfile;
pub mod sys;
