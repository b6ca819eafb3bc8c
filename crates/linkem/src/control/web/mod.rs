//! `--web`: a page of the running emulator or lab in the browser. Its data
//! comes from [`history`]: a sampler thread that reads the model's counts
//! every half second and keeps the last minutes of them per link and
//! direction, with the marks of what changed, and hands each new sample to
//! whoever listens.

pub mod history;
