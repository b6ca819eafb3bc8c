//! Labs: a whole network from one YAML file (`linkem lab up FILE`). The file
//! is Containerlab's topology file (nodes, links, kinds, defaults, groups)
//! with linkem's per-link impairments; `file` validates it into a [`Lab`]
//! without touching the system, and `plan` turns a lab into what one machine
//! creates: namespaces, bridges, veths, the emulator's pairs, VXLAN tunnels
//! for links across machines, and the nodes' commands. The guide's page is
//! docs/guide/labs.md.

pub mod file;
mod keys;
pub mod links;
mod nodes;
pub mod plan;
mod read;
pub mod vxlan;

pub use file::{Endpoint, Lab, Link, Machine, Node, NodeKind, Rules, VxlanSettings};
pub use plan::{plan, EmulatorPair, MachinePlan};

#[cfg(test)]
mod file_tests;
#[cfg(test)]
mod plan_tests;
