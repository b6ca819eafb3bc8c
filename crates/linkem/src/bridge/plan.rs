//! One pair of a group as planned before anything is touched
//! ([`PairPlan`]): by `--pair` ([`super::pairs::plan`]) or by a front end
//! that plans its own pairs (a lab), then run by
//! [`super::pairs::run_plans`].

use linkem_core::LinkSpec;
use std::path::PathBuf;

/// One pair as given: its interfaces, its links and its seed.
#[derive(Debug, Clone, Default)]
pub(crate) struct PairPlan {
    pub if_a: String,
    pub if_b: String,
    /// IF_A-IF_B: the pair's name in the stats and its control socket's.
    pub name: String,
    pub specs: [LinkSpec; 2],
    pub seed: u64,
    /// A Dummynet rule file (as `--rules` of a one-pair bridge): the pair
    /// runs a node of these rules, its `specs` unused but for the seed (a
    /// `seed N` line of the file wins); None: the pair is its `specs`' link.
    pub rules: Option<PathBuf>,
    /// Texts of the files the words name, by name, where they are not on
    /// disk (a lab's schedules, written in its file): what a recording
    /// copies. A name not here is read from disk.
    pub files: linkem_io::recording::NamedFiles,
}
