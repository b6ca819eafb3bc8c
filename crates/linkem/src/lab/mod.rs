//! Labs: a whole network from one YAML file (`linkem lab up FILE`): a
//! network namespace per node, bridges, veths, and one emulator for every
//! link. The runtime: `net` makes and removes the kernel objects, `state`
//! keeps what a lab made (for `down` after a SIGKILL), `run` brings a lab up
//! and runs it, `admin` is `down`, `list`, `show`, `exec`, and `netem` is
//! Containerlab's `tools netem`. The guide's page is docs/guide/labs.md.

pub mod admin;
pub mod net;
pub mod netem;

pub mod state;
