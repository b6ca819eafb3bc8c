//! # linkem-runtime: the live data plane
//!
//! The only crate that owns threads and reads the real clock. It runs the
//! model of `linkem-core` between two ports, one [`pipeline::Direction`] per
//! direction: an input thread that timestamps, decides and stores, and an
//! output thread that waits and sends. See [`pipeline`] for the diagram.

#![warn(missing_docs)]

pub mod clock;
pub mod delay_line;
pub mod mem;
pub mod pipeline;
pub mod port;
