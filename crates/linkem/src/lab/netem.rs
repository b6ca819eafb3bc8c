//! `linkem lab netem set|show`: Containerlab's `tools netem` flags, field
//! names and units (delay and jitter as times, loss and corruption in
//! percent, rate in kbit/s), on a lab's links. `set` changes only the words
//! it is given of the direction leaving NODE:IF (a-to-b when NODE:IF is the
//! link's first endpoint) and keeps the rest, through the lab's control
//! socket (`link NAME DIRECTION WORDS`); Containerlab's replaces the whole
//! netem qdisc, so what it is not given goes back to nothing.

use super::admin::{live_link, resolve, state_of};
use super::state::{self, State};
use crate::cli::lab::{NetemFormat, NetemSetArgs, NetemShowArgs};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::time::Duration;

/// The lab a netem command works on: `--lab`, the lab of a node named as
/// its namespace (`lk-LAB-NODE`), or the only lab that runs. Returns the lab
/// and the node's name in it.
fn pick(lab: Option<&str>, node: &str) -> Result<(State, String)> {
    if let Some(lab) = lab {
        return Ok((state_of(&resolve(lab)?)?, node.to_string()));
    }
    let running: Vec<String> = state::names()
        .into_iter()
        .filter(|n| state::running(n))
        .collect();
    for name in &running {
        if let Some(rest) = node.strip_prefix(&format!("lk-{name}-")) {
            return Ok((state_of(name)?, rest.to_string()));
        }
    }
    match running.as_slice() {
        [one] => Ok((state_of(one)?, node.to_string())),
        [] => bail!("no lab runs (`linkem lab up FILE` starts one)"),
        many => bail!(
            "several labs run ({}): say which with --lab LAB",
            many.join(", ")
        ),
    }
}

/// The link with endpoint NODE:IF, and the direction that NODE:IF sends
/// into (a-to-b when it is the first endpoint).
fn link_of<'a>(s: &'a State, node: &str, iface: &str) -> Result<(&'a str, usize)> {
    let end = format!("{node}:{iface}");
    for l in &s.links {
        let ends: Vec<&str> = l.name.split("--").collect();
        if let Some(i) = ends.iter().position(|e| *e == end) {
            return Ok((&l.name, i));
        }
    }
    if !s.nodes.iter().any(|n| n.name == node) {
        bail!("lab {} has no node '{node}'", s.name);
    }
    bail!(
        "node {node} of lab {} has no link on interface '{iface}'",
        s.name
    )
}

/// The link words of `set`'s flags.
fn set_words(args: &NetemSetArgs) -> Result<Vec<String>> {
    let mut words = Vec::new();
    match (&args.delay, &args.jitter) {
        (Some(d), Some(j)) => words.extend(["delay".into(), d.clone(), j.clone()]),
        (Some(d), None) => words.extend(["delay".into(), d.clone()]),
        (None, Some(j)) => words.extend(["jitter".into(), j.clone()]),
        (None, None) => {}
    }
    for (flag, value, word) in [
        ("--loss", args.loss, "loss"),
        ("--corruption", args.corruption, "corrupt"),
    ] {
        if let Some(p) = value {
            if !(0.0..=100.0).contains(&p) {
                bail!("{flag} {p}: a percentage from 0 to 100");
            }
            words.extend([word.to_string(), format!("{p}%")]);
        }
    }
    match args.rate {
        // Containerlab's 0: no limit.
        Some(0) => words.extend(["rate".into(), "unlimited".into()]),
        Some(kbit) => words.extend(["rate".into(), format!("{kbit}kbit")]),
        None => {}
    }
    if words.is_empty() {
        bail!("nothing to set: give --delay, --jitter, --loss, --rate or --corruption");
    }
    Ok(words)
}

/// `linkem lab netem set`.
pub fn set(args: &NetemSetArgs) -> Result<()> {
    let words = set_words(args)?;
    let (s, node) = pick(args.lab.as_deref(), &args.node)?;
    let (link, side) = link_of(&s, &node, &args.interface)?;
    let dir = ["a-to-b", "b-to-a"][side];
    let path = s
        .control
        .as_ref()
        .with_context(|| format!("lab {} has no control socket", s.name))?;
    let mut client =
        linkem_ctl::Client::connect(path, Duration::from_secs(5)).with_context(|| {
            format!(
                "cannot reach lab {}'s emulator at {}",
                s.name,
                path.display()
            )
        })?;
    let line = format!("link {link} {dir} {}", words.join(" "));
    let reply = client
        .request_json(&line)
        .with_context(|| format!("lab {}: no answer to '{line}'", s.name))?;
    if reply["ok"] != true {
        bail!(
            "lab {}: '{line}' refused: {}",
            s.name,
            reply["error"].as_str().unwrap_or("no reason given")
        );
    }
    let now = live_link(&s, link)
        .and_then(|v| v["links"][side]["link"].as_str().map(str::to_string))
        .unwrap_or_else(|| words.join(" "));
    println!("{node}:{} ({link} {dir}): {now}", args.interface);
    Ok(())
}

/// One row of `show`: Containerlab's fields of the direction leaving an
/// interface, from the link's words as the emulator shows them.
fn fields(iface: &str, link: &str, words: &str) -> Value {
    let tokens: Vec<&str> = words.split_whitespace().collect();
    let after = |word: &str| tokens.iter().position(|t| *t == word).map(|i| i + 1);
    let is_time = |t: &str| linkem_core::units::parse_seconds(t).is_ok() && !t.ends_with('%');
    let mut delay = "0s".to_string();
    let mut jitter = "0s".to_string();
    if let Some(i) = after("delay") {
        if let Some(d) = tokens.get(i) {
            delay = d.to_string();
        }
        if let Some(j) = tokens.get(i + 1).filter(|t| is_time(t)) {
            jitter = j.to_string();
        }
    }
    if let Some(j) = after("jitter").and_then(|i| tokens.get(i)) {
        jitter = j.to_string();
    }
    let percent = |word: &str| -> f64 {
        let Some(mut i) = after(word) else { return 0.0 };
        if tokens.get(i) == Some(&"random") {
            i += 1;
        }
        tokens
            .get(i)
            .and_then(|t| t.strip_suffix('%'))
            .and_then(|p| p.parse().ok())
            .unwrap_or(0.0)
    };
    let rate_kbit = after("rate")
        .and_then(|i| tokens.get(i))
        .and_then(|r| linkem_core::units::parse_rate_bps(r).ok())
        .map_or(0, |bps| bps / 1000);
    let round2 = |v: f64| (v * 100.0).round() / 100.0;
    json!({
        "interface": iface,
        "delay": delay,
        "jitter": jitter,
        "packet_loss": round2(percent("loss")),
        "rate": rate_kbit,
        "corruption": round2(percent("corrupt")),
        "link": link,
        "words": words,
    })
}

/// `linkem lab netem show`.
pub fn show(args: &NetemShowArgs) -> Result<()> {
    let (s, node) = pick(args.lab.as_deref(), &args.node)?;
    if !s.nodes.iter().any(|n| n.name == node) {
        bail!("lab {} has no node '{node}'", s.name);
    }
    let mut rows = Vec::new();
    for l in &s.links {
        let ends: Vec<&str> = l.name.split("--").collect();
        for (side, end) in ends.iter().enumerate().take(2) {
            let Some((n, iface)) = end.split_once(':') else {
                continue;
            };
            if n != node {
                continue;
            }
            let live = live_link(&s, &l.name);
            let start = if side == 0 { &l.a_to_b } else { &l.b_to_a };
            let words = live
                .as_ref()
                .and_then(|v| v["links"][side]["link"].as_str().map(str::to_string))
                .unwrap_or_else(|| start.clone());
            rows.push(fields(iface, &l.name, &words));
        }
    }
    if args.format == NetemFormat::Json {
        println!("{}", json!({ node: rows }));
        return Ok(());
    }
    println!(
        "{:<12} {:<10} {:<10} {:>11} {:>11} {:>10}",
        "Interface", "Delay", "Jitter", "Packet Loss", "Rate (kbit)", "Corruption"
    );
    for r in rows {
        println!(
            "{:<12} {:<10} {:<10} {:>11.2} {:>11} {:>10.2}",
            r["interface"].as_str().unwrap_or(""),
            r["delay"].as_str().unwrap_or(""),
            r["jitter"].as_str().unwrap_or(""),
            r["packet_loss"].as_f64().unwrap_or(0.0),
            r["rate"].as_u64().unwrap_or(0),
            r["corruption"].as_f64().unwrap_or(0.0),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_args(line: &str) -> NetemSetArgs {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            set: NetemSetArgs,
        }
        Cli::try_parse_from(std::iter::once("set").chain(line.split_whitespace()))
            .unwrap()
            .set
    }

    #[test]
    fn flags_become_the_words_of_only_what_they_name() {
        let w = set_words(&set_args("-n r1 -i eth1 --delay 30ms")).unwrap();
        assert_eq!(w, ["delay", "30ms"]);
        let w = set_words(&set_args(
            "-n r1 -i eth1 --delay 30ms --jitter 2ms --loss 1.5 --rate 500 --corruption 0.1",
        ))
        .unwrap();
        assert_eq!(
            w.join(" "),
            "delay 30ms 2ms loss 1.5% corrupt 0.1% rate 500kbit"
        );
        let e = set_words(&set_args("-n r1 -i eth1")).unwrap_err();
        assert!(e.to_string().contains("nothing to set"), "{e}");
        let e = set_words(&set_args("-n r1 -i eth1 --loss 120")).unwrap_err();
        assert!(e.to_string().contains("--loss 120"), "{e}");
    }

    #[test]
    fn show_reads_containerlabs_fields_from_the_words() {
        let r = fields(
            "eth1",
            "r1:eth1--r2:eth1",
            "rate 10mbit delay 15ms 2ms loss 1%",
        );
        assert_eq!(r["delay"], "15ms");
        assert_eq!(r["jitter"], "2ms");
        assert_eq!(r["packet_loss"], 1.0);
        assert_eq!(r["rate"], 10_000);
        assert_eq!(r["corruption"], 0.0);
        let r = fields("eth1", "x", "queue 1000 loss 0%");
        assert_eq!(
            (r["delay"].as_str(), r["rate"].as_u64()),
            (Some("0s"), Some(0))
        );
    }

    #[test]
    fn a_link_is_found_by_either_endpoint_with_its_direction() {
        let s = State {
            name: "t".into(),
            links: vec![super::super::state::LinkState {
                name: "r1:eth1--r2:eth2".into(),
                a_to_b: String::new(),
                b_to_a: String::new(),
            }],
            ..State::default()
        };
        assert_eq!(link_of(&s, "r1", "eth1").unwrap(), ("r1:eth1--r2:eth2", 0));
        assert_eq!(link_of(&s, "r2", "eth2").unwrap(), ("r1:eth1--r2:eth2", 1));
        assert!(link_of(&s, "r1", "eth9").is_err());
    }
}
