//! linkem on Kubernetes: the `LinkChaos` resource ([`chaos`]), the
//! controller that picks the pods each resource selects, and the node agent
//! that applies each pod's link through the control socket of the emulator
//! `linkem-cni` runs on the pod's interface.

pub mod agent;
pub mod chaos;
pub mod cli;
pub mod controller;
pub mod install_cni;
