//! `linkem-operator`: `crd` prints the CustomResourceDefinition; `controller`
//! runs the controller.

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
    /// Runs the controller: picks each LinkChaos's pods, writes its phase and expiry.
    Controller {
        /// A kubeconfig file; without one, in-cluster or $KUBECONFIG or ~/.kube/config.
        #[arg(long, value_name = "PATH")]
        kubeconfig: Option<std::path::PathBuf>,
    },
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Crd => crd_yaml().map(|y| print!("{y}")),
        Cmd::Controller { kubeconfig } => run_controller(kubeconfig.as_deref()),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("linkem-operator: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_controller(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let client = crate::controller::client(kubeconfig).await?;
        tokio::select! {
            r = crate::controller::run(client) => r,
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })
}

/// The CRD as YAML.
pub fn crd_yaml() -> anyhow::Result<String> {
    Ok(serde_yaml::to_string(&crate::chaos::LinkChaos::crd())?)
}
