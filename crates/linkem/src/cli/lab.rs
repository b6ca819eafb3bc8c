//! `linkem lab`'s command line: a lab's life (`up`, `down`, `list`, `show`,
//! `exec`) and Containerlab's `tools netem` (`netem set`, `netem show`).

use crate::bridge::backend::BackendKind;
use crate::StatsFormat;
use std::path::PathBuf;

/// `linkem lab`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct LabArgs {
    #[command(subcommand)]
    pub command: LabCommand,
}

/// What `linkem lab` does.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum LabCommand {
    /// Build the lab of FILE (namespaces, bridges, veths; each node's `exec`
    /// commands) and run one emulator for all its links, until Ctrl-C,
    /// SIGTERM or `linkem lab down`; then remove everything.
    Up(UpArgs),
    /// Stop a running lab (by its name or its file) and remove what it made;
    /// also cleans what a lab killed with SIGKILL left.
    Down(DownArgs),
    /// The running labs: name, links, pid of the emulator, start time.
    List(ListArgs),
    /// A lab's nodes and links, each link's words and live counts.
    Show(ShowArgs),
    /// Run CMD in NODE's network namespace; exits with CMD's status.
    Exec(ExecArgs),
    /// Containerlab's `tools netem`: change or show the impairments of the
    /// links leaving a node's interfaces.
    Netem(NetemArgs),
}

/// `linkem lab up`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct UpArgs {
    /// The lab file (YAML, Containerlab's topology keys and linkem's link keys).
    pub file: PathBuf,
    /// Return once every link forwards, leaving the emulator running in the
    /// background (its log and pid in /run/linkem/labs/LAB/).
    #[arg(short = 'd', long)]
    pub detach: bool,
    /// This machine's part of a lab spread over several machines (nodes
    /// naming another host run there; links across run over VXLAN).
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
    /// Record every link of the lab to DIR (as `linkem bridge --record`).
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,
    /// Write every link's decisions to FILE, one JSON line each naming its
    /// link (as `linkem bridge --events` with several pairs).
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,
    /// Serve Prometheus metrics of every link at ADDR (PORT or IP:PORT), in
    /// this machine's namespace.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Serve a web page of the lab at http://ADDR/ (PORT or IP:PORT; 0 picks a
    /// port), in this machine's namespace: its topology, each link's charts, and
    /// a form to change a link (with the token in the address printed at start).
    #[arg(long, value_name = "ADDR")]
    pub web: Option<String>,
    /// Print the counts of every link when the lab stops.
    #[arg(long, value_enum, default_value = "none")]
    pub stats: StatsFormat,
    /// Packet I/O of the emulator (as `linkem bridge --backend`).
    #[arg(long, value_enum, default_value = "packet")]
    pub backend: BackendKind,
}

/// `linkem lab down`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct DownArgs {
    /// The lab's name, or its file.
    #[arg(value_name = "LAB|FILE")]
    pub lab: String,
}

/// `linkem lab list`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct ListArgs {
    /// One JSON object per lab.
    #[arg(long)]
    pub json: bool,
}

/// `linkem lab show`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct ShowArgs {
    /// The lab's name, or its file.
    #[arg(value_name = "LAB|FILE")]
    pub lab: String,
    /// JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `linkem lab exec`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct ExecArgs {
    /// The lab's name, or its file.
    #[arg(value_name = "LAB|FILE")]
    pub lab: String,
    /// The node whose namespace CMD runs in.
    pub node: String,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `linkem lab netem`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct NetemArgs {
    #[command(subcommand)]
    pub command: NetemCommand,
}

/// Containerlab's `tools netem set` and `show`.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum NetemCommand {
    /// Change what NODE sends out of IF: only the impairments given; the
    /// link's other words stay (Containerlab's resets what it is not given).
    Set(NetemSetArgs),
    /// The impairments of what NODE sends out of each of its interfaces.
    Show(NetemShowArgs),
}

/// `linkem lab netem set`'s arguments (Containerlab's flags and units).
#[derive(clap::Args, Debug, Clone)]
pub struct NetemSetArgs {
    /// The lab (default: the only running lab).
    #[arg(long, value_name = "LAB")]
    pub lab: Option<String>,
    /// The node.
    #[arg(short = 'n', long)]
    pub node: String,
    /// The node's interface.
    #[arg(short = 'i', long)]
    pub interface: String,
    /// Delay (a time with its unit: 100ms, 1s).
    #[arg(long, value_name = "TIME")]
    pub delay: Option<String>,
    /// Jitter (a time with its unit).
    #[arg(long, value_name = "TIME")]
    pub jitter: Option<String>,
    /// Packet loss in percent (0-100).
    #[arg(long, value_name = "PERCENT")]
    pub loss: Option<f64>,
    /// Rate in kbit/s.
    #[arg(long, value_name = "KBIT/S")]
    pub rate: Option<u64>,
    /// Corruption in percent (0-100).
    #[arg(long, value_name = "PERCENT")]
    pub corruption: Option<f64>,
}

/// `linkem lab netem show`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct NetemShowArgs {
    /// The lab (default: the only running lab).
    #[arg(long, value_name = "LAB")]
    pub lab: Option<String>,
    /// The node.
    #[arg(short = 'n', long)]
    pub node: String,
    /// table or json.
    #[arg(short = 'f', long, value_enum, default_value = "table")]
    pub format: NetemFormat,
}

/// `netem show`'s output formats (Containerlab's).
#[derive(Clone, Copy, clap::ValueEnum, PartialEq, Eq, Debug)]
pub enum NetemFormat {
    Table,
    Json,
}
