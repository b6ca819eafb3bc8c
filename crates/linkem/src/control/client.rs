//! `linkem ctl`: sends one request (or a batch) to a running emulator and
//! prints the reply, as text or (`--json`) as the raw JSON lines.

use anyhow::{anyhow, bail, Context, Result};
use linkem_ctl::{default_socket_path, Client, MAX_BATCH_BYTES, MAX_BATCH_LINES, SOCKET_DIR};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, clap::Args)]
#[command(after_help = linkem_ctl::HELP)]
pub struct CtlArgs {
    /// The emulator's name (its socket is /run/linkem/NAME.sock).
    #[arg(long, value_name = "NAME", conflicts_with = "socket")]
    pub name: Option<String>,
    /// The emulator's control socket.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Print the replies as JSON lines, as the emulator sent them.
    #[arg(long)]
    pub json: bool,
    /// Apply the requests of FILE (one per line, '#' comments; '-' for stdin)
    /// as one batch: all at one instant, or none. Read to its end, at most
    /// 4 MiB; a batch holds at most 10000 requests and 1 MiB of them.
    #[arg(
        short = 'f',
        long = "file",
        value_name = "FILE",
        conflicts_with = "command"
    )]
    pub file: Option<PathBuf>,
    /// The request, e.g. `link both delay 20ms`, `show`, `watch 1s`, or
    /// `list-emulators`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<String>,
}

const TIMEOUT: Duration = Duration::from_secs(10);

/// Sockets under /run/linkem/ whose emulator answers, with their names.
pub fn list_emulators() -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(SOCKET_DIR) else {
        return out;
    };
    let mut paths: Vec<PathBuf> = dir
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sock"))
        .collect();
    paths.sort();
    for p in paths {
        if let Ok(c) = Client::connect(&p, Duration::from_millis(500)) {
            let name = c.banner["name"].as_str().unwrap_or("?").to_string();
            out.push((p, name));
        }
    }
    out
}

fn socket_path(args: &CtlArgs) -> Result<PathBuf> {
    if let Some(s) = &args.socket {
        return Ok(s.clone());
    }
    if let Some(n) = &args.name {
        return Ok(default_socket_path(n));
    }
    let found = list_emulators();
    match found.len() {
        1 => Ok(found.into_iter().next().expect("one").0),
        0 => bail!("no running emulator answers under {SOCKET_DIR}/ (give --name or --socket)"),
        _ => bail!(
            "several emulators run ({}): choose one with --name",
            found
                .iter()
                .map(|f| f.1.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn connect(path: &Path) -> Result<Client> {
    Client::connect(path, TIMEOUT).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => anyhow!(
            "{}: permission denied (the socket is root-only unless the emulator runs with --control-group)",
            path.display()
        ),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
            anyhow!("{}: no emulator listens there ({e})", path.display())
        }
        _ => anyhow!("{}: {e}", path.display()),
    })
}

pub fn run(args: &CtlArgs) -> Result<()> {
    if args.command.len() == 1 && args.command[0] == "list-emulators" {
        for (path, name) in list_emulators() {
            if args.json {
                println!("{}", serde_json::json!({"name": name, "socket": path}));
            } else {
                println!("{name}\t{}", path.display());
            }
        }
        return Ok(());
    }
    if let Some(file) = &args.file {
        return run_batch(args, file);
    }
    if args.command.is_empty() {
        bail!("give a request (e.g. 'show', 'link both delay 20ms'; 'linkem ctl --help' lists them) or -f FILE");
    }
    let line = args.command.join(" ");
    // `show --json` (ipfw's spelling) asks for JSON output too.
    let json = args.json || args.command.iter().any(|w| w == "--json");
    let mut client = connect(&socket_path(args)?)?;
    let reply = client.request(&line).context("no reply")?;
    let v: serde_json::Value =
        serde_json::from_str(&reply).map_err(|e| anyhow!("bad reply '{reply}': {e}"))?;
    print_reply(json, &line, &reply, &v);
    let watching = v["ok"] == true && v.get("watch").is_some();
    if watching {
        // Lines stream until the emulator ends or we are interrupted.
        loop {
            let reply = match client.recv() {
                Ok(r) => r,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    continue
                }
                Err(_) => return Ok(()),
            };
            let v: serde_json::Value = serde_json::from_str(&reply).unwrap_or_default();
            print_reply(json, &line, &reply, &v);
        }
    }
    if v["ok"] != true {
        std::process::exit(1);
    }
    Ok(())
}

/// Longest batch file `-f` reads: the emulator keeps at most
/// [`MAX_BATCH_BYTES`] of requests per batch; this leaves room for comments
/// and blank lines beside them.
pub const MAX_BATCH_FILE_BYTES: u64 = 4 * MAX_BATCH_BYTES as u64;

/// A batch file (or stdin for `-`), read to its end like `cat` (a FIFO waits
/// for its writer), but never more than [`MAX_BATCH_FILE_BYTES`]: a larger
/// input, `/dev/zero` say, is refused once that much has come.
fn read_batch(file: &Path) -> Result<String> {
    let name = if file == Path::new("-") {
        "stdin".to_string()
    } else {
        file.display().to_string()
    };
    let reader: Box<dyn Read> = if file == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::fs::File::open(file).with_context(|| format!("cannot read {name}"))?)
    };
    let mut bytes = Vec::new();
    reader
        .take(MAX_BATCH_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {name}"))?;
    if bytes.len() as u64 > MAX_BATCH_FILE_BYTES {
        bail!(
            "{name}: larger than {} MiB: a batch holds at most {MAX_BATCH_LINES} requests \
             and {} MiB of them (split it into several files)",
            MAX_BATCH_FILE_BYTES >> 20,
            MAX_BATCH_BYTES >> 20
        );
    }
    String::from_utf8(bytes).map_err(|e| {
        anyhow!(
            "{name}: not UTF-8 text (byte {})",
            e.utf8_error().valid_up_to()
        )
    })
}

fn run_batch(args: &CtlArgs, file: &Path) -> Result<()> {
    let text = read_batch(file)?;
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split('#').next().unwrap_or("").trim()))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    if lines.is_empty() {
        bail!("{}: no requests", file.display());
    }
    let bytes: usize = lines.iter().map(|(_, l)| l.len()).sum();
    if lines.len() > MAX_BATCH_LINES || bytes > MAX_BATCH_BYTES {
        bail!(
            "{}: {} requests, {bytes} bytes: a batch holds at most {MAX_BATCH_LINES} requests \
             and {MAX_BATCH_BYTES} bytes of them (split it into several files)",
            file.display(),
            lines.len()
        );
    }
    let mut client = connect(&socket_path(args)?)?;
    let begin: serde_json::Value = client.request_json("begin")?;
    if begin["ok"] != true {
        bail!("begin: {}", begin["error"]);
    }
    let mut first_error: Option<String> = None;
    for (n, l) in &lines {
        let reply = client.request(l)?;
        if args.json {
            println!("{reply}");
        }
        let v: serde_json::Value = serde_json::from_str(&reply).unwrap_or_default();
        if v["ok"] != true && first_error.is_none() {
            let at = match (v["position"].as_u64(), v["word"].as_str()) {
                (Some(p), Some(w)) => format!(" (word {p} '{w}')"),
                _ => String::new(),
            };
            first_error = Some(format!(
                "{}:{n}: {}{at}",
                file.display(),
                v["error"].as_str().unwrap_or("refused")
            ));
        }
    }
    let cmd = if first_error.is_some() {
        "abort"
    } else {
        "commit"
    };
    let reply = client.request(cmd)?;
    if args.json {
        println!("{reply}");
    }
    let v: serde_json::Value = serde_json::from_str(&reply).unwrap_or_default();
    if let Some(e) = first_error {
        bail!("{e}; nothing applied");
    }
    if v["ok"] != true {
        bail!(
            "{}; nothing applied",
            v["error"].as_str().unwrap_or("commit refused")
        );
    }
    if !args.json {
        println!("applied {} requests at {}", lines.len(), v["at_ns"]);
    }
    Ok(())
}

fn print_reply(json: bool, line: &str, raw: &str, v: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    if json {
        let _ = writeln!(out, "{raw}");
        return;
    }
    if v["ok"] != true {
        let at = match (v["position"].as_u64(), v["word"].as_str()) {
            (Some(p), Some(w)) => format!(" (word {p} '{w}')"),
            _ => String::new(),
        };
        eprintln!("linkem ctl: {}{at}", v["error"].as_str().unwrap_or(raw));
        return;
    }
    if let Some(h) = v["help"].as_str() {
        let _ = writeln!(out, "{h}");
    } else if let Some(claim) = v["claim"].as_str() {
        let event = v["event"].as_str().unwrap_or("ok");
        let pipes = &v["pipes"];
        let left_s = v["expires_ns"]
            .as_u64()
            .map(|e| e.saturating_sub(linkem_runtime::clock::now_ns()) as f64 / 1e9);
        match (event, left_s) {
            ("released", _) | (_, None) => {
                let _ = writeln!(out, "{event} {claim}");
            }
            (_, Some(s)) => {
                let _ = writeln!(
                    out,
                    "{event} {claim}: pipe {} (a-to-b, in), pipe {} (b-to-a, out); expires in {s:.0}s \
                     unless claimed again",
                    pipes[0], pipes[1]
                );
            }
        }
    } else if v.get("claims").is_some() && v["claims"].as_array().is_some_and(Vec::is_empty) {
        let _ = writeln!(out, "no claims");
    } else if let Some(t) = v["text"].as_str() {
        // A rule set's list or pipe show, in ipfw's layout.
        let _ = write!(out, "{t}");
        if v.get("stats").is_some() {
            print_stats(&mut out, &v["stats"]);
        }
    } else if let Some(each) = named_links(v) {
        // A socket of several links: each link as its own socket shows it.
        for l in each {
            let _ = writeln!(out, "link {}", l["link"].as_str().unwrap_or("?"));
            print_body(&mut out, l);
        }
    } else if print_body(&mut out, v) {
    } else if let Some(at) = v["at_ns"].as_u64() {
        let _ = writeln!(out, "ok: '{line}' in effect from {at} ns");
    } else {
        let _ = writeln!(out, "{raw}");
    }
}

/// The links of a reply of a socket of several (`{"links":[{"link":NAME,
/// ...}]}`), each object named.
fn named_links(v: &serde_json::Value) -> Option<&Vec<serde_json::Value>> {
    let each = v["links"].as_array()?;
    let named = |l: &serde_json::Value| {
        l["link"].is_string() && (l.get("links").is_some() || l.get("directions").is_some())
    };
    (!each.is_empty() && each.iter().all(named)).then_some(each)
}

/// A link's links and counts as text; false when `v` has neither.
fn print_body(out: &mut impl Write, v: &serde_json::Value) -> bool {
    if v.get("directions").is_some() {
        print_stats(out, v);
    } else if v.get("stats").is_some() {
        print_links(out, &v["links"]);
        print_stats(out, &v["stats"]);
    } else if v.get("links").is_some() {
        print_links(out, &v["links"]);
    } else {
        return false;
    }
    true
}

fn print_links(out: &mut impl Write, links: &serde_json::Value) {
    for l in links.as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "{:<6}{}  (owner uid {}, {} changes)",
            l["direction"].as_str().unwrap_or("?"),
            l["link"].as_str().unwrap_or("?"),
            l["owner_uid"],
            l["changes"]
        );
    }
}

fn print_stats(out: &mut impl Write, v: &serde_json::Value) {
    if let Some(why) = v["stopped"].as_str() {
        let _ = writeln!(out, "stopped: {why}");
    }
    let _ = writeln!(
        out,
        "{:<6}{:>10}{:>10}{:>8}{:>11}{:>8}{:>13}{:>6}{:>10}  lateness p99 / max",
        "dir",
        "received",
        "delivered",
        "k-drops",
        "queue-full",
        "loss",
        "backpressure",
        "late",
        "in-flight"
    );
    // serde_json's Display ignores widths: format the numbers as strings first.
    let n = |v: &serde_json::Value| v.to_string();
    for d in v["directions"].as_array().into_iter().flatten() {
        let f = &d["fates"];
        let _ = writeln!(
            out,
            "{:<6}{:>10}{:>10}{:>8}{:>11}{:>8}{:>13}{:>6}{:>10}  {} / {} ns",
            d["direction"].as_str().unwrap_or("?"),
            n(&d["received"]),
            n(&f["delivered"]),
            n(&d["rx_kernel_drops"]),
            n(&f["queue-full"]),
            n(&f["loss"]),
            n(&f["backpressure"]),
            n(&f["late"]),
            n(&d["in_flight"]),
            n(&d["lateness_ns"]["p99"]),
            n(&d["lateness_ns"]["max"])
        );
    }
}
