//! # linkem-core: the link model
//!
//! Everything linkem does rests on one computation: for each packet, its fate
//! (delivered, or dropped and why) and its release time. This crate is that
//! computation and nothing else. It contains no networking code, reads no
//! clocks, starts no threads and makes no system calls:
//!
//! - **time comes in**: every call takes the current time in integer
//!   nanoseconds; the replay tool passes capture timestamps, the live data plane
//!   passes receive timestamps;
//! - **randomness comes in**: one user seed, split into independent streams per
//!   direction and per impairment ([`rng`]), so the same seed and the same input
//!   give the same output, bit for bit, on any machine;
//! - **decisions go out** as values ([`Verdict`], [`Fate`]) that the caller acts
//!   upon: store the packet until its release time, or count the drop.
//!
//! The layers around it (`linkem-io` for captures and sockets, the binary for
//! replay and the live pipeline) feed it and act on its answers.
//!
//! The per-packet semantics are written out in [`link`]; the words users type in
//! [`config`]; the loss models in [`loss`]; delay distributions in [`dist`].
//!
//! ```
//! use linkem_core::{Link, LinkSpec, PacketMeta, Fate};
//! let spec = LinkSpec::parse("rate 100kbit delay 5ms").unwrap();
//! let mut link = Link::new(spec.link, 1, 0);
//! let v = link.on_arrival(0, PacketMeta { len_bytes: 20 });
//! assert_eq!((v.fate, v.release_ns), (Fate::Delivered, 6_600_000));
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod aqm;
mod change;
pub mod config;
pub mod dist;
pub mod driver;
pub mod fate;
pub mod filetext;
pub mod link;
pub mod loss;
pub mod model;
pub mod node;
pub mod order;
pub mod pipe;
pub mod port;
pub mod queue;
pub mod rng;
mod rulefile;
pub mod rules;
pub mod sched;
pub mod trace;
pub mod units;
pub mod wire;

pub use config::{ConfigError, Dialect, LinkConfig, LinkSpec, LossAt, TomlWords};
pub use dist::Distribution;
pub use fate::{Fate, FateCounts};
pub use link::{Link, LinkExtra, PacketMeta, Verdict};
pub use loss::LossConfig;
pub use model::{Change, ChangeError, LinkModel, Model};
