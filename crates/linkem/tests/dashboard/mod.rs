//! What the Grafana dashboard test reads: the selectors and groupings of a
//! PromQL expression, by a small tokenizer (the dashboard's queries use
//! selectors, `rate`, aggregations `by (...)`, `histogram_quantile` and
//! comparisons; nothing here evaluates them), and the series of a
//! Prometheus text exposition. Grafana's variables are put in first: every
//! `$name` as its "All" value, `.*`, and `$__rate_interval` as `1m`.
//!
//! Matching follows PromQL: a label a series lacks has the value "", so
//! `link=~".*"` matches the series of a single link, which have no `link`
//! label. Regular expressions are only those the dashboard writes: `.*`,
//! `.+` and alternatives of literals (`a|b`).

#![allow(dead_code)]

pub mod prometheus;

use std::collections::BTreeMap;

/// A series: its labels.
pub type Labels = BTreeMap<String, String>;

/// Every series of a scrape, by metric name (as exposed: `_total`,
/// `_bucket`, `_sum`, `_count` included).
pub fn parse_scrape(text: &str) -> Result<BTreeMap<String, Vec<Labels>>, String> {
    let mut out: BTreeMap<String, Vec<Labels>> = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, rest) = match line.find(['{', ' ']) {
            Some(i) => line.split_at(i),
            None => return Err(format!("a sample without a value: {line}")),
        };
        let mut labels = Labels::new();
        if let Some(inner) = rest.strip_prefix('{') {
            let end = inner
                .rfind('}')
                .ok_or_else(|| format!("unclosed labels: {line}"))?;
            let toks = tokenize(&inner[..end])?;
            let mut i = 0;
            while i < toks.len() {
                match (&toks[i], toks.get(i + 1), toks.get(i + 2)) {
                    (Tok::Ident(k), Some(Tok::Op(op)), Some(Tok::Str(v))) if op == "=" => {
                        labels.insert(k.clone(), v.clone());
                        i += 3;
                    }
                    (Tok::Punct(','), _, _) => i += 1,
                    _ => return Err(format!("bad labels: {line}")),
                }
            }
        }
        out.entry(name.to_string()).or_default().push(labels);
    }
    Ok(out)
}

#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    Ident(String),
    Str(String),
    Num(String),
    /// A range `[...]`, its text.
    Range(String),
    Punct(char),
    Op(String),
}

/// One label matcher of a selector.
#[derive(Clone, Debug)]
pub struct Matcher {
    pub label: String,
    pub op: String,
    pub value: String,
}

impl Matcher {
    /// Whether a series with `labels` passes (a missing label is "").
    pub fn matches(&self, labels: &Labels) -> bool {
        let have = labels.get(&self.label).map(String::as_str).unwrap_or("");
        match self.op.as_str() {
            "=" => have == self.value,
            "!=" => have != self.value,
            "=~" => regex_matches(&self.value, have),
            "!~" => !regex_matches(&self.value, have),
            _ => false,
        }
    }
}

/// The regular expressions the dashboard writes, anchored as PromQL
/// anchors them: `.*`, `.+`, literal alternatives.
fn regex_matches(re: &str, text: &str) -> bool {
    match re {
        ".*" => true,
        ".+" => !text.is_empty(),
        _ => re.split('|').any(|alt| alt.replace('\\', "") == text),
    }
}

/// A metric selector: `name{matchers}`.
#[derive(Clone, Debug)]
pub struct Selector {
    pub metric: String,
    pub matchers: Vec<Matcher>,
}

/// What an expression reads: its selectors, the labels of its `by (...)`
/// (and `without`, `on`, `ignoring`) clauses, the functions it calls.
#[derive(Clone, Debug, Default)]
pub struct Parsed {
    pub selectors: Vec<Selector>,
    pub grouping: Vec<String>,
    pub functions: Vec<String>,
}

/// Functions and aggregations a dashboard query may call.
pub const FUNCTIONS: [&str; 16] = [
    "sum",
    "avg",
    "max",
    "min",
    "count",
    "topk",
    "bottomk",
    "rate",
    "irate",
    "increase",
    "delta",
    "histogram_quantile",
    "clamp_min",
    "abs",
    "label_values",
    "vector",
];

const GROUPING: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
const KEYWORDS: [&str; 5] = ["and", "or", "unless", "bool", "offset"];

pub fn tokenize(text: &str) -> Result<Vec<Tok>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            out.push(Tok::Ident(chars[start..i].iter().collect()));
        } else if c.is_ascii_digit() || c == '.' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            out.push(Tok::Num(chars[start..i].iter().collect()));
        } else if c == '"' || c == '\'' {
            let mut s = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err(format!("unclosed string in {text}")),
                    Some(&q) if q == c => break,
                    Some('\\') => {
                        let e = chars.get(i + 1).copied().unwrap_or('\\');
                        s.push(if e == 'n' { '\n' } else { e });
                        i += 2;
                    }
                    Some(&x) => {
                        s.push(x);
                        i += 1;
                    }
                }
            }
            i += 1;
            out.push(Tok::Str(s));
        } else if c == '[' {
            let end = chars[i..]
                .iter()
                .position(|&x| x == ']')
                .ok_or_else(|| format!("unclosed range in {text}"))?;
            out.push(Tok::Range(chars[i + 1..i + end].iter().collect()));
            i += end + 1;
        } else if "{}(),".contains(c) {
            out.push(Tok::Punct(c));
            i += 1;
        } else {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            let op = match two.as_str() {
                "=~" | "!=" | "!~" | "==" | ">=" | "<=" => two,
                _ if "=<>+-*/^%".contains(c) => c.to_string(),
                _ => return Err(format!("unexpected '{c}' in {text}")),
            };
            i += op.len();
            out.push(Tok::Op(op));
        }
    }
    Ok(out)
}

/// Grafana's variables as their "All" values, and the rate interval.
pub fn substitute(expr: &str) -> String {
    let mut out = String::new();
    let mut rest = expr;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let (name, tail) = variable_at(&rest[i..]);
        out.push_str(if name.starts_with("__") { "1m" } else { ".*" });
        rest = tail;
    }
    out.push_str(rest);
    out
}

/// The name of the variable `$name` or `${name}` at the start of `text`, and what follows it.
fn variable_at(text: &str) -> (&str, &str) {
    let body = &text[1..];
    if let Some(inner) = body.strip_prefix('{') {
        let end = inner.find('}').unwrap_or(inner.len());
        return (&inner[..end], inner.get(end + 1..).unwrap_or(""));
    }
    let end = body
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(body.len());
    (&body[..end], &body[end..])
}

/// Every variable an expression uses (`$name`, `${name}`).
pub fn variables(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find('$') {
        let (name, tail) = variable_at(&rest[i..]);
        out.push(name.to_string());
        rest = tail;
    }
    out
}

/// The selectors, groupings and functions of `expr` (variables put in).
pub fn parse(expr: &str) -> Result<Parsed, String> {
    let toks = tokenize(&substitute(expr))?;
    let mut p = Parsed::default();
    let mut i = 0;
    while i < toks.len() {
        let next_paren = toks.get(i + 1) == Some(&Tok::Punct('('));
        // `sum by (l) (x)`: an aggregation's grouping may come first.
        let next_grouping =
            matches!(toks.get(i + 1), Some(Tok::Ident(w)) if GROUPING[..2].contains(&w.as_str()));
        match &toks[i] {
            Tok::Ident(w) if GROUPING.contains(&w.as_str()) => {
                if !next_paren {
                    return Err(format!("'{w}' without a label list in {expr}"));
                }
                i += 2;
                while let Some(t) = toks.get(i) {
                    i += 1;
                    match t {
                        Tok::Punct(')') => break,
                        Tok::Punct(',') => {}
                        Tok::Ident(l) => p.grouping.push(l.clone()),
                        t => return Err(format!("{t:?} in a label list of {expr}")),
                    }
                }
            }
            Tok::Ident(w) if next_paren || next_grouping => {
                if !FUNCTIONS.contains(&w.as_str()) {
                    return Err(format!("unknown function '{w}' in {expr}"));
                }
                p.functions.push(w.clone());
                i += if next_paren { 2 } else { 1 };
            }
            Tok::Ident(w) if KEYWORDS.contains(&w.as_str()) => i += 1,
            Tok::Ident(w) => {
                let (matchers, used) = matchers(&toks[i + 1..], expr)?;
                p.selectors.push(Selector {
                    metric: w.clone(),
                    matchers,
                });
                i += 1 + used;
            }
            Tok::Punct('{') => return Err(format!("a selector without a metric name in {expr}")),
            _ => i += 1,
        }
    }
    Ok(p)
}

/// The matchers of a selector's `{...}` at the start of `toks` (none if it
/// has none), and how many tokens they took.
fn matchers(toks: &[Tok], expr: &str) -> Result<(Vec<Matcher>, usize), String> {
    if toks.first() != Some(&Tok::Punct('{')) {
        return Ok((Vec::new(), 0));
    }
    let mut out = Vec::new();
    let mut i = 1;
    loop {
        match (toks.get(i), toks.get(i + 1), toks.get(i + 2)) {
            (Some(Tok::Punct('}')), _, _) => return Ok((out, i + 1)),
            (Some(Tok::Punct(',')), _, _) => i += 1,
            (Some(Tok::Ident(l)), Some(Tok::Op(op)), Some(Tok::Str(v)))
                if ["=", "!=", "=~", "!~"].contains(&op.as_str()) =>
            {
                out.push(Matcher {
                    label: l.clone(),
                    op: op.clone(),
                    value: v.clone(),
                });
                i += 3;
            }
            _ => return Err(format!("a bad label matcher in {expr}")),
        }
    }
}

#[test]
fn the_tokenizer_reads_the_dashboards_shapes() {
    let p = parse(
        r#"histogram_quantile(0.99, sum by (link, le) (rate(x_bucket{link=~"$link", fate!="delivered"}[$__rate_interval]))) > 0"#,
    )
    .unwrap();
    assert_eq!(p.selectors.len(), 1);
    assert_eq!(p.selectors[0].metric, "x_bucket");
    assert_eq!(p.grouping, ["link", "le"]);
    assert_eq!(p.functions, ["histogram_quantile", "sum", "rate"]);
    let m = &p.selectors[0].matchers;
    assert_eq!((m[0].label.as_str(), m[0].value.as_str()), ("link", ".*"));
    // A missing label is "": `.*` matches it, `.+` does not.
    assert!(m[0].matches(&Labels::new()));
    assert!(m[1].matches(&Labels::new()));
    let plus = Matcher {
        label: "link".into(),
        op: "=~".into(),
        value: ".+".into(),
    };
    assert!(!plus.matches(&Labels::new()));
    assert!(parse("nosuchfn(x)").is_err());
    assert!(parse(r#"{link="a"}"#).is_err());
    assert_eq!(
        variables("a{b=~\"$link\"}[${__rate_interval}]"),
        ["link", "__rate_interval"]
    );
    let s = parse_scrape("# HELP x y\nx_total{link=\"a\",direction=\"a->b\"} 3\ny 1\n").unwrap();
    assert_eq!(s["x_total"][0]["direction"], "a->b");
    assert!(s["y"][0].is_empty());
}
