//! Everything a run writes beside its output: the events file (`events`), a
//! recording (`record`), mahimahi's link logs (`mmlog`) and per-interval time
//! series (`series`). Replay and the live bridge both write through these;
//! a new kind of file a run writes is a new module here.

pub mod events;
pub mod group;
pub mod mmlog;
pub mod record;
pub mod series;
