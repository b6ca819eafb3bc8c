//! # linkem-runtime: the live data plane
//!
//! The only crate that owns threads and reads the real clock. It runs a
//! model of `linkem-core` between two ports ([`pipeline::LiveBridge`]): one
//! thread that timestamps, decides and stores for both directions, and an
//! output thread per direction that waits and sends. See [`pipeline`] for the
//! diagram.

#![warn(missing_docs)]

pub mod clock;
pub mod delay_line;
pub mod mem;
pub mod pipeline;
pub mod port;
