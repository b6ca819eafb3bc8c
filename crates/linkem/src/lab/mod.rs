//! Labs: a whole network from one YAML file (`linkem lab up FILE`). The file
//! is Containerlab's topology file with linkem's per-link impairments;
//! `file` validates it into a [`Lab`] without touching the system, and
//! `plan` turns a lab into what one machine creates: namespaces, bridges,
//! veths, the emulator's pairs, VXLAN tunnels, the nodes' commands. The
//! runtime: `net` makes and removes kernel objects, `build` makes a plan's
//! in batches, `state` keeps what a lab made (for `down` after a SIGKILL),
//! `run` brings a lab up and runs its one emulator, `admin` is `down`,
//! `list`, `show`, `exec`, and `netem` is Containerlab's `tools netem`.
//! The guide's page is docs/guide/labs.md.

pub mod admin;
mod build;
pub mod file;
mod keys;
pub mod links;
pub mod net;
pub mod netem;
mod nodes;
pub mod plan;
mod read;
pub mod run;
pub mod state;
pub mod vxlan;

pub use file::{Endpoint, Lab, Link, Machine, Node, NodeKind, Rules, VxlanSettings};
pub use plan::{plan, EmulatorPair, MachinePlan};

#[cfg(test)]
mod file_tests;
#[cfg(test)]
mod plan_tests;
