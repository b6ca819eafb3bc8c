//! `linkem-operator`: `crd` prints the CustomResourceDefinition; `controller`
//! runs the controller; `install-cni` puts linkem-cni on a node (the agent's
//! init container).

use clap::{Parser, Subcommand};
use kube::CustomResourceExt;
use std::path::{Path, PathBuf};
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
        kubeconfig: Option<PathBuf>,
    },
    /// Copies linkem and linkem-cni into the node's CNI plugin directory and
    /// chains linkem-cni at the end of its network configuration (the first
    /// *.conflist); running it again changes nothing.
    InstallCni {
        /// The node's CNI plugin directory (mounted from /opt/cni/bin).
        #[arg(long, value_name = "DIR")]
        bin_dir: PathBuf,
        /// The node's CNI configuration directory (mounted from /etc/cni/net.d).
        #[arg(long, value_name = "DIR")]
        conf_dir: PathBuf,
        /// Where linkem and linkem-cni are (default: this binary's directory).
        #[arg(long, value_name = "DIR")]
        source_dir: Option<PathBuf>,
    },
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Crd => crd_yaml().map(|y| print!("{y}")),
        Cmd::Controller { kubeconfig } => run_controller(kubeconfig.as_deref()),
        Cmd::InstallCni {
            bin_dir,
            conf_dir,
            source_dir,
        } => install_cni(&bin_dir, &conf_dir, source_dir),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("linkem-operator: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_controller(kubeconfig: Option<&Path>) -> anyhow::Result<()> {
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

fn install_cni(bin_dir: &Path, conf_dir: &Path, source_dir: Option<PathBuf>) -> anyhow::Result<()> {
    let source_dir = match source_dir {
        Some(d) => d,
        None => crate::install_cni::default_source_dir()?,
    };
    for line in crate::install_cni::install(bin_dir, conf_dir, &source_dir)? {
        println!("linkem-operator: {line}");
    }
    Ok(())
}

/// The CRD as YAML.
pub fn crd_yaml() -> anyhow::Result<String> {
    Ok(serde_yaml::to_string(&crate::chaos::LinkChaos::crd())?)
}
