//! Everything linkem prints about a run, in one place so that the drivers
//! (`--stats` after or during a replay or a bridge), the control socket
//! (`linkem ctl show`, `stats`, `pipe N show`) and the metrics endpoint show
//! the same names and numbers: the layouts of ipfw and dnctl (`ipfw pipe
//! show`, `ipfw -a list`, `ipfw sched show`), their JSON, the per-direction
//! and per-object counts. Renderers read state and return or print text;
//! they import nothing from a driver or from `control`. `figures` draws the
//! probe's and the bench's plots (PNG and SVG, font built in).

pub mod bridge_stats;
pub mod figures;
pub mod node;
pub mod replay_stats;
pub mod sched;
