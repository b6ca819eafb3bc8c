//! `linkem lab down`, `list`, `show` and `exec`: what works on a lab from
//! outside its emulator, by its state file (`super::state`) and its control
//! socket.

use super::state::{self, State};
use crate::cli::lab::{DownArgs, ExecArgs, ListArgs, ShowArgs};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// How long `down` waits for the emulator to clean up after SIGTERM before
/// it kills it and cleans up itself.
const DOWN_WAIT: Duration = Duration::from_secs(10);

/// The lab `arg` names: a lab's name, or the file a running (or stale) lab
/// was started from, or a lab file (its `name`).
pub fn resolve(arg: &str) -> Result<String> {
    if state::lab_dir(arg).is_dir() && !arg.contains('/') {
        return Ok(arg.to_string());
    }
    let path = Path::new(arg);
    if path.is_file() {
        let file = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        for name in state::names() {
            if state::read(&name)
                .ok()
                .flatten()
                .is_some_and(|s| s.file == file)
            {
                return Ok(name);
            }
        }
        return Ok(super::Lab::load(path)?.name);
    }
    let known = state::names();
    bail!(
        "no lab named '{arg}' and no such file{}",
        if known.is_empty() {
            " (no lab runs)".to_string()
        } else {
            format!(" (labs: {})", known.join(", "))
        }
    )
}

/// The state of running (or stale) lab `name`, or an error saying there is none.
pub fn state_of(name: &str) -> Result<State> {
    state::read(name)?.with_context(|| {
        format!("lab '{name}' does not run (`linkem lab list` shows the running labs)")
    })
}

/// `linkem lab down LAB|FILE`.
pub fn down(args: &DownArgs) -> Result<()> {
    let name = resolve(&args.lab)?;
    if !state::lab_dir(&name).exists() {
        bail!("lab '{name}' does not run: nothing to take down");
    }
    let old = state::read(&name)?;
    let pid = old.as_ref().map(|s| s.pid).unwrap_or(0);
    // The emulator removes its lock with its directory, before it exits.
    let alive = || state::running(&name) || linkem_io::shellns::process_alive(pid);
    if state::running(&name) {
        signal(pid, "TERM");
        let until = Instant::now() + DOWN_WAIT;
        while alive() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        if alive() {
            eprintln!(
                "linkem: lab {name}: the emulator (pid {pid}) did not end within {} s of \
                 SIGTERM: killing it",
                DOWN_WAIT.as_secs()
            );
            signal(pid, "KILL");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // What the emulator did not remove (it was killed, or failed while
    // removing): what its state file lists.
    if state::lab_dir(&name).exists() {
        let pid = old.as_ref().map_or("unknown".into(), |s| s.pid.to_string());
        eprintln!(
            "linkem: lab {name}: its emulator (pid {pid}) is gone without cleaning up: \
             removing what it left"
        );
    }
    state::clean_stale(&name)?;
    eprintln!("linkem: lab {name} is down");
    Ok(())
}

/// Sends SIGsig to `pid` (the holder of a lab's lock, so a live emulator).
fn signal(pid: u32, sig: &str) {
    if pid > 1 {
        let _ = Command::new("kill")
            .args([&format!("-{sig}"), &pid.to_string()])
            .status();
    }
}

/// `linkem lab list`.
pub fn list(args: &ListArgs) -> Result<()> {
    let mut rows = Vec::new();
    for name in state::names() {
        let Ok(Some(s)) = state::read(&name) else {
            continue;
        };
        let status = if !state::running(&name) {
            "stale (emulator gone: `linkem lab down` cleans it)"
        } else if s.ready {
            "running"
        } else {
            "starting"
        };
        rows.push((s, status));
    }
    if args.json {
        for (s, status) in &rows {
            let v = json!({
                "name": s.name, "links": s.links.len(), "nodes": s.nodes.len(), "pid": s.pid,
                "started_unix_s": s.started_unix_s, "file": s.file, "host": s.host,
                "status": status,
            });
            println!("{v}");
        }
        return Ok(());
    }
    if rows.is_empty() {
        println!("no lab runs");
        return Ok(());
    }
    println!(
        "{:<20} {:>5} {:>8} {:<20} status",
        "LAB", "LINKS", "PID", "STARTED (UTC)"
    );
    for (s, status) in rows {
        println!(
            "{:<20} {:>5} {:>8} {:<20} {status}",
            s.name,
            s.links.len(),
            s.pid,
            utc(s.started_unix_s)
        );
    }
    Ok(())
}

/// `YYYY-MM-DD HH:MM:SS` of seconds since the epoch, in UTC.
pub fn utc(unix_s: u64) -> String {
    let days = (unix_s / 86_400) as i64;
    let secs = unix_s % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// `linkem lab show LAB [--json]`.
pub fn show(args: &ShowArgs) -> Result<()> {
    let name = resolve(&args.lab)?;
    let s = state_of(&name)?;
    let running = state::running(&name);
    let mut links = Vec::new();
    for l in &s.links {
        let live = if running {
            live_link(&s, &l.name)
        } else {
            None
        };
        links.push(json!({
            "name": l.name, "a-to-b": l.a_to_b, "b-to-a": l.b_to_a, "live": live,
        }));
    }
    if args.json {
        let v = json!({
            "name": s.name, "file": s.file, "pid": s.pid, "running": running,
            "started_unix_s": s.started_unix_s, "host": s.host,
            "nodes": s.nodes, "links": links,
        });
        println!("{v}");
        return Ok(());
    }
    println!(
        "lab {} ({}), emulator pid {}, started {} UTC, from {}",
        s.name,
        if running { "running" } else { "stale" },
        s.pid,
        utc(s.started_unix_s),
        s.file.display()
    );
    println!("nodes:");
    for n in &s.nodes {
        let ns = n.netns.as_deref().unwrap_or("-");
        println!("  {:<16} {:<8} {ns}", n.name, n.kind);
    }
    println!("links:");
    for l in &links {
        print_link(l);
    }
    Ok(())
}

/// One link of `show`'s text: its words (live when the emulator answered)
/// and its counts.
fn print_link(l: &Value) {
    println!("  {}", l["name"].as_str().unwrap_or("?"));
    let live = &l["live"];
    for (i, dir) in ["a-to-b", "b-to-a"].into_iter().enumerate() {
        let words = live["links"][i]["link"]
            .as_str()
            .or(l[dir].as_str())
            .unwrap_or("");
        let stats = &live["stats"]["directions"][i];
        let counts = if stats.is_object() {
            let fates = stats["fates"]
                .as_object()
                .map(|f| {
                    f.iter()
                        .filter(|(_, v)| v.as_u64().unwrap_or(0) > 0)
                        .map(|(k, v)| format!(" {k} {v}"))
                        .collect::<String>()
                })
                .unwrap_or_default();
            format!("  [received {}{fates}]", stats["received"])
        } else {
            String::new()
        };
        println!("    {dir:<7}{words}{counts}");
    }
    if let Some(why) = live["stats"]["stopped"].as_str() {
        println!("    stopped: {why}");
    }
}

/// The emulator's `show` of link `link` (its words and counts), when its
/// control socket answers: `show NAME`, or plain `show` from a socket that
/// serves this one link only.
pub fn live_link(s: &State, link: &str) -> Option<Value> {
    let path = s.control.as_ref()?;
    let mut client = linkem_ctl::Client::connect(path, Duration::from_secs(2)).ok()?;
    let named = client.request_json(&format!("show {link}")).ok();
    if let Some(v) = named.filter(|v| v["ok"] == true) {
        return Some(v);
    }
    if s.links.len() == 1 {
        return client.request_json("show").ok().filter(|v| v["ok"] == true);
    }
    None
}

/// `linkem lab exec LAB NODE -- CMD...`: CMD's exit status.
pub fn exec(args: &ExecArgs) -> Result<i32> {
    use std::os::unix::process::ExitStatusExt;
    let name = resolve(&args.lab)?;
    let s = state_of(&name)?;
    let node = s
        .nodes
        .iter()
        .find(|n| n.name == args.node)
        .with_context(|| {
            let names: Vec<&str> = s.nodes.iter().map(|n| n.name.as_str()).collect();
            format!(
                "lab {name} has no node '{}' (nodes: {})",
                args.node,
                names.join(", ")
            )
        })?;
    let Some(ns) = &node.netns else {
        bail!(
            "node {} of lab {name} is a {} and has no namespace of its own to run a command in",
            node.name,
            node.kind
        );
    };
    if !super::net::namespace_exists(ns) {
        bail!(
            "node {} of lab {name}: its namespace {ns} is gone (was it deleted while the lab ran?)",
            node.name
        );
    }
    let status = linkem_io::netns::command_in(ns, &[])
        .args(&args.command)
        .status()
        .context("cannot run `ip netns exec` (iproute2)")?;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_in_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_798_329_599), "2026-12-26 23:59:59");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00");
    }
}
