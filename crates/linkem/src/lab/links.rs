//! `topology.links`: Containerlab's short form (`endpoints: ["r1:eth1",
//! "r2:eth1"]`) and its extended `veth` form, plus linkem's per-link keys:
//! `impair` (words for both directions), `a-to-b`/`b-to-a` (words over
//! `impair`, per direction), `rules` (Dummynet rules: a file or inline
//! text), `trace` (a file, or one per direction), `schedule` (a list of
//! `at`/`words`, or one per direction) and `seed`. Each direction's words are
//! parsed here, with linkem's link-word parser, so that a bad word fails the
//! file, naming the link and the key.
//!
//! Layers of a direction's words, each over the one before: `linkem.defaults`,
//! `impair`, `a-to-b` or `b-to-a`, then `trace FILE` and `schedule FILE`.

use super::file::{Endpoint, Link, Node, NodeKind, Rules, IFNAME_MAX_BYTES};
use super::keys::{self, Keys};
use anyhow::{bail, Result};
use linkem_core::{Dialect, LinkSpec};
use serde_yaml::{Mapping, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// What every link's words need from the file.
pub(super) struct LinkContext<'a> {
    /// Where relative paths start; None: no file is read (each is refused).
    pub dir: Option<&'a Path>,
    pub default_words: &'a [String],
}

/// The linkem keys of a link, and Containerlab's that linkem reads.
const LINK: Keys = Keys {
    known: &[
        "endpoints",
        "type",
        "mtu",
        "labels",
        "vars",
        "ipv4",
        "ipv6",
        "impair",
        "a-to-b",
        "b-to-a",
        "rules",
        "trace",
        "schedule",
        "seed",
    ],
    ignored: &[],
};
const ENDPOINT: Keys = Keys {
    known: &["node", "interface", "mac", "ipv4", "ipv6", "vars"],
    ignored: &[],
};
const DIRECTIONS: Keys = Keys {
    known: &["a-to-b", "b-to-a"],
    ignored: &[],
};
const STEP: Keys = Keys {
    known: &["at", "words", "loop"],
    ignored: &[],
};
/// The directions' names, a-to-b first.
pub const DIRECTION_NAMES: [&str; 2] = ["a-to-b", "b-to-a"];

pub(super) fn parse_links(
    value: &Value,
    nodes: &mut Vec<Node>,
    ctx: &LinkContext<'_>,
    warnings: &mut Vec<String>,
) -> Result<Vec<Link>> {
    let items = match value {
        Value::Null => return Ok(Vec::new()),
        Value::Sequence(items) => items,
        other => bail!(
            "topology.links: must be a list, not {}",
            keys::scalar_text(other)
        ),
    };
    let mut used: HashMap<(String, String), String> = HashMap::new();
    let mut out = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let Value::Mapping(map) = item else {
            bail!("topology.links[{index}]: must be a mapping with 'endpoints'");
        };
        let endpoints = endpoints(map, index, nodes)?;
        let name = format!("{}--{}", endpoints[0].label(), endpoints[1].label());
        let what = format!("link {name}");
        LINK.check(map, &what, warnings)?;
        match keys::string(map, "type", &what)?.as_deref() {
            None | Some("veth") => {}
            Some(other) => bail!(
                "{what}: type '{other}' is not one linkem makes (veth; a link across machines \
                 is carried over VXLAN by linkem.machines)"
            ),
        }
        for e in &endpoints {
            let key = (e.node.clone(), e.interface.clone());
            if let Some(other) = used.insert(key, name.clone()) {
                bail!(
                    "{what}: endpoint {} is also link {other}'s (an interface belongs to one link)",
                    e.label()
                );
            }
        }
        out.push(parse_link(map, name, index, endpoints, ctx)?);
    }
    Ok(out)
}

fn parse_link(
    map: &Mapping,
    name: String,
    index: usize,
    endpoints: [Endpoint; 2],
    ctx: &LinkContext<'_>,
) -> Result<Link> {
    let what = format!("link {name}");
    let mtu = match map.get("mtu") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .filter(|m| (68..=65535).contains(m))
                .ok_or_else(|| {
                    anyhow::anyhow!("{what}: 'mtu' is 68 to 65535, not {}", keys::scalar_text(v))
                })? as u32,
        ),
    };
    let labels = match map.get("labels") {
        Some(v) => keys::string_map(v, &format!("{what}: 'labels'"))?,
        None => BTreeMap::new(),
    };
    let seed = match map.get("seed") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            anyhow::anyhow!(
                "{what}: 'seed' is a whole number, not {}",
                keys::scalar_text(v)
            )
        })?),
    };
    let get_words = |key: &str| match map.get(key) {
        Some(v) => keys::words(v, &format!("{what}: '{key}'")),
        None => Ok(Vec::new()),
    };
    let impair = get_words("impair")?;
    let own = [get_words("a-to-b")?, get_words("b-to-a")?];
    let traces = per_direction(map.get("trace"), &format!("{what}: 'trace'"), |v, w| {
        keys::scalar(v)
            .map(|f| resolve(ctx.dir, &f).display().to_string())
            .ok_or_else(|| anyhow::anyhow!("{w}: a file name, not {}", keys::scalar_text(v)))
    })?;
    let schedules = per_direction(
        map.get("schedule"),
        &format!("{what}: 'schedule'"),
        schedule_text,
    )?;
    let rules = match map.get("rules") {
        None | Some(Value::Null) => None,
        Some(v) => Some(read_rules(v, &name, ctx.dir)?),
    };
    if rules.is_some() {
        let words_given = !impair.is_empty() || own.iter().any(|w| !w.is_empty());
        if words_given || traces.iter().chain(&schedules).any(Option::is_some) {
            bail!(
                "{what}: 'rules' is a link of Dummynet's rules; 'impair', 'a-to-b', 'b-to-a', \
                 'trace' and 'schedule' are link words: give one or the other"
            );
        }
    }
    let mut words: [Vec<String>; 2] = Default::default();
    let mut specs: [LinkSpec; 2] = Default::default();
    let mut files = BTreeMap::new();
    for d in 0..2 {
        let dir_name = DIRECTION_NAMES[d];
        let mut extra = Vec::new();
        if let Some(t) = &traces[d] {
            extra.extend(["trace".to_string(), t.clone()]);
        }
        let sched_name = format!("{name}.{dir_name}.sched");
        if schedules[d].is_some() {
            extra.extend(["schedule".to_string(), sched_name.clone()]);
        }
        let layers: [&[String]; 4] = [ctx.default_words, &impair, &own[d], &extra];
        let mut loader = |file: &str| -> Result<String, String> {
            let text = match (&schedules[d], file == sched_name) {
                (Some(text), true) => text.clone(),
                _ => read_words_file(ctx.dir, file)?,
            };
            files.insert(file.to_string(), text.clone());
            Ok(text)
        };
        specs[d] = LinkSpec::parse_layers(&layers, Dialect::Linkem, &mut loader).map_err(|e| {
            anyhow::anyhow!("{what} {dir_name}: link words ({}): {e}", layer_keys(d))
        })?;
        words[d] = layers.concat();
    }
    let word_seed = specs[0].seed.or(specs[1].seed);
    if let (Some(s), Some(w)) = (seed, word_seed) {
        if s != w {
            bail!("{what}: 'seed: {s}' and the words' 'seed {w}' differ (give one)");
        }
    }
    Ok(Link {
        name,
        index,
        endpoints,
        mtu,
        words,
        specs,
        schedules,
        files,
        rules,
        seed: seed.or(word_seed),
        labels,
    })
}

fn layer_keys(d: usize) -> &'static str {
    if d == 0 {
        "linkem.defaults, impair, a-to-b, trace, schedule"
    } else {
        "linkem.defaults, impair, b-to-a, trace, schedule"
    }
}

/// A value for both directions, or `{a-to-b: V, b-to-a: V}` (either may be absent).
fn per_direction<T>(
    value: Option<&Value>,
    what: &str,
    mut read: impl FnMut(&Value, &str) -> Result<T>,
) -> Result<[Option<T>; 2]> {
    match value {
        None | Some(Value::Null) => Ok([None, None]),
        Some(Value::Mapping(m))
            if m.keys().any(|k| {
                k.as_str()
                    .is_some_and(|k| DIRECTIONS.known.iter().any(|d| keys::looks_like(k, d)))
            }) =>
        {
            DIRECTIONS.check(m, what, &mut Vec::new())?;
            let mut out = [None, None];
            for (d, slot) in out.iter_mut().enumerate() {
                if let Some(v) = m.get(DIRECTION_NAMES[d]).filter(|v| !v.is_null()) {
                    *slot = Some(read(v, &format!("{what} {}", DIRECTION_NAMES[d]))?);
                }
            }
            Ok(out)
        }
        Some(v) => {
            let one = read(v, what)?;
            let two = read(v, what)?;
            Ok([Some(one), Some(two)])
        }
    }
}

/// Schedule-file text (`TIME WORDS` lines, docs/guide/schedules.md) from a
/// list of `{at: TIME, words: WORDS}` (or `{at: TIME, loop: true}`, or a line as it is).
fn schedule_text(value: &Value, what: &str) -> Result<String> {
    let Value::Sequence(steps) = value else {
        bail!(
            "{what}: a list of '- at: TIME' + 'words: WORDS' (or {{a-to-b: LIST, b-to-a: LIST}})"
        );
    };
    let mut text = String::new();
    for (i, step) in steps.iter().enumerate() {
        let at_what = format!("{what} step {}", i + 1);
        let line = match step {
            Value::String(line) => line.clone(),
            Value::Mapping(m) => {
                STEP.check(m, &at_what, &mut Vec::new())?;
                let at = match m.get("at") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Number(n)) => {
                        bail!("{at_what}: 'at: {n}' needs a unit (as '{n}s')")
                    }
                    Some(v) => bail!(
                        "{at_what}: 'at' is a time such as 5s, not {}",
                        keys::scalar_text(v)
                    ),
                    None => bail!("{at_what}: 'at' (a time such as 5s) is missing"),
                };
                let looped = m.get("loop").is_some_and(|v| v.as_bool() == Some(true));
                let words = match m.get("words") {
                    Some(v) => keys::words(v, &at_what)?.join(" "),
                    None if looped => "loop".to_string(),
                    None => bail!("{at_what}: 'words' (the link words from then on) is missing"),
                };
                if looped && m.contains_key("words") {
                    bail!("{at_what}: 'loop' takes no 'words'");
                }
                format!("{at} {words}")
            }
            other => bail!(
                "{at_what}: a mapping with 'at' and 'words', not {}",
                keys::scalar_text(other)
            ),
        };
        if line.contains('\n') {
            bail!("{at_what}: one line per step");
        }
        text.push_str(&line);
        text.push('\n');
    }
    Ok(text)
}

/// A file a link's words name (trace, schedule, distribution table): relative
/// to the lab file's folder, else where the command line would look.
pub(super) fn read_words_file(dir: Option<&Path>, file: &str) -> Result<String, String> {
    if dir.is_none() {
        return Err(format!("'{file}': this lab is read without its files"));
    }
    let path = resolve(dir, file);
    if path.exists() {
        return linkem_io::infile::read_text(&path, linkem_io::infile::MAX_TEXT_BYTES)
            .map_err(|e| e.to_string());
    }
    crate::files::load_distribution(file)
}

pub(super) fn resolve(dir: Option<&Path>, file: &str) -> PathBuf {
    let p = Path::new(file);
    match dir {
        Some(dir) if p.is_relative() => dir.join(p),
        _ => p.to_path_buf(),
    }
}

/// `rules:`: a path (one word) read relative to the lab file, or the rules'
/// text (anything with a space or a line break), checked by the rule parser
/// with the link's sides named `a` and `b`.
fn read_rules(value: &Value, link: &str, dir: Option<&Path>) -> Result<Rules> {
    let what = format!("link {link}: 'rules'");
    let Some(given) = keys::scalar(value) else {
        bail!(
            "{what}: a file or the rules' text, not {}",
            keys::scalar_text(value)
        );
    };
    let (name, path, text) = if given.trim().contains(char::is_whitespace) {
        (format!("{link} rules"), None, given)
    } else {
        if dir.is_none() {
            bail!(
                "{what}: '{}': this lab is read without its files",
                given.trim()
            );
        }
        let path = resolve(dir, given.trim());
        let text = linkem_io::infile::read_text(&path, linkem_io::infile::MAX_TEXT_BYTES)
            .map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
        (path.display().to_string(), Some(path), text)
    };
    let mut files = |f: &str| read_words_file(dir, f);
    linkem_core::rules::parse::parse_rules(&text, ["a", "b"], &mut files)
        .map_err(|e| anyhow::anyhow!("{what} ({name}): {e}"))?;
    Ok(Rules { name, path, text })
}

/// The two endpoints, short or extended, each naming a node of the lab (the
/// implicit `host` is added when named and not defined).
fn endpoints(map: &Mapping, index: usize, nodes: &mut Vec<Node>) -> Result<[Endpoint; 2]> {
    let what = format!("topology.links[{index}]");
    let Some(Value::Sequence(items)) = map.get("endpoints") else {
        if map.contains_key("endpoint") {
            bail!("{what}: 'endpoint' (one end) is a link type linkem does not make; a link has 'endpoints', two");
        }
        bail!("{what}: 'endpoints' (a list of two, \"NODE:IF\") is missing");
    };
    if items.len() != 2 {
        bail!(
            "{what}: 'endpoints' has {} items; a link has two",
            items.len()
        );
    }
    let brief_addrs = |key: &str| -> Result<[Option<String>; 2]> {
        let list = match map.get(key) {
            None | Some(Value::Null) => return Ok([None, None]),
            Some(v) => keys::strings(v, &format!("{what}: '{key}'"))?,
        };
        if list.len() > 2 {
            bail!(
                "{what}: '{key}' has {} addresses for two endpoints",
                list.len()
            );
        }
        let at = |i: usize| list.get(i).filter(|s| !s.is_empty()).cloned();
        Ok([at(0), at(1)])
    };
    let (v4, v6) = (brief_addrs("ipv4")?, brief_addrs("ipv6")?);
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let mut e = endpoint(item, &what)?;
        e.ipv4 = e.ipv4.or(v4[i].clone());
        e.ipv6 = e.ipv6.or(v6[i].clone());
        check_endpoint(&e, &what, nodes)?;
        out.push(e);
    }
    let [a, b]: [Endpoint; 2] = out.try_into().expect("two endpoints");
    Ok([a, b])
}

fn endpoint(item: &Value, what: &str) -> Result<Endpoint> {
    match item {
        Value::String(s) => {
            let Some((node, interface)) = s.split_once(':') else {
                bail!("{what}: endpoint '{s}' is not NODE:INTERFACE");
            };
            Ok(Endpoint {
                node: node.to_string(),
                interface: interface.to_string(),
                mac: None,
                ipv4: None,
                ipv6: None,
            })
        }
        Value::Mapping(m) => {
            ENDPOINT.check(m, &format!("{what} endpoint"), &mut Vec::new())?;
            let get = |k: &str| keys::string(m, k, &format!("{what} endpoint"));
            Ok(Endpoint {
                node: get("node")?
                    .ok_or_else(|| anyhow::anyhow!("{what}: an endpoint has no 'node'"))?,
                interface: get("interface")?
                    .ok_or_else(|| anyhow::anyhow!("{what}: an endpoint has no 'interface'"))?,
                mac: get("mac")?,
                ipv4: get("ipv4")?,
                ipv6: get("ipv6")?,
            })
        }
        other => bail!(
            "{what}: an endpoint is \"NODE:IF\" or {{node, interface}}, not {}",
            keys::scalar_text(other)
        ),
    }
}

fn check_endpoint(e: &Endpoint, what: &str, nodes: &mut Vec<Node>) -> Result<()> {
    let label = e.label();
    match e.node.as_str() {
        "mgmt-net" | "macvlan" | "ovs-bridge" if !nodes.iter().any(|n| n.name == e.node) => {
            bail!(
                "{what}: endpoint {label}: '{}' links are not made by linkem",
                e.node
            )
        }
        _ => {}
    }
    if !nodes.iter().any(|n| n.name == e.node) {
        if e.node != "host" {
            bail!(
                "{what}: endpoint {label}: no node '{}' in topology.nodes",
                e.node
            );
        }
        nodes.push(implicit_host());
    }
    check_ifname(&e.interface, &format!("{what}: endpoint {label}"))?;
    if let Some(mac) = &e.mac {
        let ok = mac.split(':').count() == 6
            && mac
                .split(':')
                .all(|b| b.len() == 2 && b.chars().all(|c| c.is_ascii_hexdigit()));
        if !ok {
            bail!("{what}: endpoint {label}: mac '{mac}' is not six hex bytes (aa:bb:cc:dd:ee:ff)");
        }
    }
    for addr in e.ipv4.iter().chain(&e.ipv6) {
        let ok = addr.split_once('/').is_some_and(|(ip, len)| {
            ip.parse::<std::net::IpAddr>().is_ok() && len.parse::<u8>().is_ok_and(|l| l <= 128)
        });
        if !ok {
            bail!("{what}: endpoint {label}: address '{addr}' is not ADDRESS/LENGTH");
        }
    }
    Ok(())
}

fn implicit_host() -> Node {
    Node {
        name: "host".to_string(),
        kind: NodeKind::Host,
        image: None,
        exec: Vec::new(),
        env: BTreeMap::new(),
        cmd: None,
        binds: Vec::new(),
        labels: BTreeMap::new(),
        machine: None,
        bridge_in_host: false,
        implicit: true,
    }
}

/// An interface name Linux takes: 1 to 15 bytes, no '/', ':' or white space.
pub(super) fn check_ifname(name: &str, what: &str) -> Result<()> {
    if name.is_empty() || name.len() > IFNAME_MAX_BYTES {
        bail!(
            "{what}: interface name '{name}' has {} bytes (Linux takes 1 to {IFNAME_MAX_BYTES})",
            name.len()
        );
    }
    if name == "."
        || name == ".."
        || name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace())
    {
        bail!("{what}: '{name}' is not an interface name Linux takes (no '/', ':' or spaces)");
    }
    Ok(())
}
