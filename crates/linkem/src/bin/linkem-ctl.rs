//! `linkem-ctl`: `linkem ctl` as a program of its own, for every local user.
//!
//! The package makes `linkem` root:linkem 0750 with file capabilities (they go
//! to whoever may execute the file), so a user outside group linkem cannot run
//! `linkem ctl` at all, though the control protocol lets any uid claim its
//! own ports (`claim`, `release`, `claims`). A client needs no privilege: it
//! only connects to the emulator's socket, whose server checks the peer's uid.
//! So this binary is installed 0755 without capabilities.

#![forbid(unsafe_code)]

use clap::Parser;

/// Change or watch a running linkem emulator through its control socket
/// (`linkem ctl` for users outside group linkem).
#[derive(Parser)]
#[command(name = "linkem-ctl", version = linkem::build_info::VERSION)]
struct Cli {
    #[command(flatten)]
    ctl: linkem::control::client::CtlArgs,
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = linkem::control::client::run(&cli.ctl) {
        eprintln!("linkem-ctl: {e:#}");
        std::process::exit(1);
    }
}
