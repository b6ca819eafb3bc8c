//! `linkem-operator`: `crd` prints the CustomResourceDefinition.

use clap::{Parser, Subcommand};
use kube::CustomResourceExt;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "linkem-operator", version, about = "LinkChaos on Kubernetes")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Prints the LinkChaos CustomResourceDefinition (YAML), as deploy/crd.yaml holds it.
    Crd,
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Crd => crd_yaml().map(|y| print!("{y}")),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("linkem-operator: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The CRD as YAML.
pub fn crd_yaml() -> anyhow::Result<String> {
    Ok(serde_yaml::to_string(&crate::chaos::LinkChaos::crd())?)
}
