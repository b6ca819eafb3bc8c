//! `linkem-operator`: `crd` prints the CustomResourceDefinition; `agent`
//! runs the node agent.

use clap::{Parser, Subcommand};
use kube::CustomResourceExt;
use std::path::PathBuf;
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

/// The CRD as YAML.
pub fn crd_yaml() -> anyhow::Result<String> {
    Ok(serde_yaml::to_string(&crate::chaos::LinkChaos::crd())?)
}
