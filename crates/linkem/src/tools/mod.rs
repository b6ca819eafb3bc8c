//! Commands that measure or make data rather than emulate: `linkem bench`
//! (scenarios against a device under test), `linkem probe` (latency and gaps
//! through a path), `linkem synth` (synthetic captures), `linkem plot` (link
//! logs drawn as figures) and `linkem generate` (man pages, completions).

pub mod bench;
pub mod generate;
pub mod plot;
pub mod probe;
pub mod synth;
