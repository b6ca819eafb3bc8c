//! # linkem-runtime: the live data plane
//!
//! The only crate that owns threads and reads the real clock. It runs the
//! model of `linkem-core` between two ports, one [`pipeline::Direction`] per
//! direction: an input thread that timestamps, decides and stores, and an
//! output thread that waits and sends. See [`pipeline`] for the diagram.

#![warn(missing_docs)]

pub mod clock;
// Pending: `write_header`'s body needs its own `unsafe` block and `unsafe impl
// Sync for Region` its own Safety comment; then this allow goes.
#[allow(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
pub mod delay_line;
pub mod pipeline;
pub mod port;
