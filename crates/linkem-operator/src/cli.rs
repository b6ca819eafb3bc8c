//! `linkem-operator`: `crd` prints the CustomResourceDefinition;
//! `controller` runs the controller; `agent` runs the node agent;
//! `install-cni` puts linkem-cni on a node (the agent's init container).

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
    /// The node agent (one per node, a DaemonSet): applies each LinkChaos to
    /// the emulators linkem-cni runs on this node's pods.
    Agent {
        /// This node's name (the Pods' spec.nodeName).
        #[arg(long)]
        node: String,
        /// linkem-cni's runDir on this node: state files in DIR/cni, sockets in DIR.
        #[arg(long, default_value = "/run/linkem")]
        run_dir: PathBuf,
        /// A kubeconfig file (default: in-cluster, or KUBECONFIG).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Serve Prometheus metrics at http://ADDR/metrics (e.g. 0.0.0.0:9178).
        #[arg(long, value_name = "ADDR")]
        metrics: Option<String>,
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
        Cmd::Agent {
            node,
            run_dir,
            kubeconfig,
            metrics,
        } => agent(crate::agent::AgentArgs {
            node,
            run_dir,
            kubeconfig,
            metrics,
        }),
        Cmd::InstallCni {
            bin_dir,
            conf_dir,
            source_dir,
        } => install_cni(&bin_dir, &conf_dir, source_dir),
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

fn agent(args: crate::agent::AgentArgs) -> anyhow::Result<()> {
    // Blocking socket work runs on the blocking pool; the loop needs one thread.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(crate::agent::run(args))
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
