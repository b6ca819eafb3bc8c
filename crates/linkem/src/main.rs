//! The `linkem` command: offline replay of captures through an emulated link,
//! and live emulation between two interfaces.
//!
//! The model lives in `linkem-core` (pure, deterministic); capture files in
//! `linkem-io`. This binary wires them to the command line.

#![forbid(unsafe_code)]

use anyhow::Result;
use clap::{CommandFactory, FromArgMatches};
use linkem::cli::{Cli, Command};
use linkem::replay;
use linkem::tools::synth;

fn main() {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let result: Result<()> = match cli.command {
        Command::Replay(args) => replay::run(&args),
        Command::Bridge(mut args) => {
            if let Some(m) = matches.subcommand_matches("bridge") {
                args.group_pairs(m);
            }
            linkem::bridge::run(&args)
        }
        Command::Shell(args) => match linkem::shell::run(&args) {
            Ok(code) => std::process::exit(code),
            Err(e) => Err(e),
        },
        Command::Host(args) => linkem::host::run(&args),
        Command::Lab(args) => match linkem::lab::run::command(&args) {
            Ok(code) => std::process::exit(code),
            Err(e) => Err(e),
        },
        Command::Ctl(args) => linkem::control::client::run(&args),
        Command::Probe(args) => linkem::tools::probe::run_cli(&args),
        Command::Bench(args) => linkem::tools::bench::run(&args),
        Command::Synth(args) => synth::run(&args),
        Command::Plot(args) => linkem::tools::plot::run(&args),
        Command::Generate(args) => linkem::tools::generate::run(Cli::command(), &args),
        Command::HostWatchdog(args) => linkem::host::watchdog::run(&args),
    };
    if let Err(e) = result {
        eprintln!("linkem: {e:#}");
        let code = e
            .downcast_ref::<linkem::Interrupted>()
            .map_or(1, linkem::Interrupted::exit_code);
        std::process::exit(code);
    }
}
