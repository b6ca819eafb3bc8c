//! What `linkem --version` says: the crate version and the commit the binary
//! was built from (`build.rs`: a short hash, `-dirty` when the sources differed
//! from it, or `unknown` outside a git checkout without `LINKEM_COMMIT`).

/// The commit, as `build.rs` found it.
pub const COMMIT: &str = env!("LINKEM_BUILD_COMMIT");

/// `0.1.0 (1a2b3c4)`: the version clap prints after the command's name.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("LINKEM_BUILD_COMMIT"),
    ")"
);
