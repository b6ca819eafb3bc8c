//! The words of `pipe N config`: a [`PipeDef`], its `mask` ([`parse_mask`]) and
//! Dummynet's sizes.

use super::{FileReader, FlowMask, Profile};
use crate::config::{Dialect, LinkConfig, LinkSpec};

use crate::rulefile::{parse_number, rerr, RulesError};
use std::sync::Arc;

/// One `pipe N config` line, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct PipeDef {
    /// The pipe number N (1..65535) that `pipe N` rules name.
    pub number: u32,
    /// The link every instance of the pipe runs: queue, rate, delay and
    /// impairments (the rate taken from the profile's `bw` when the pipe
    /// gives none).
    pub link: LinkConfig,
    /// Dummynet's `burst`, bytes (0: none): after the link has been idle, up
    /// to this many bytes cross at line speed; credit = min(burst·8, rate ·
    /// idle time) bits ([`crate::link::Link::set_burst`]). Needs a rate.
    pub burst_bytes: u64,
    /// The MAC airtime profile (`profile FILE`), shared by the instances; each
    /// instance draws from it with its own random stream.
    pub profile: Option<Arc<Profile>>,
    /// `mask ...`: one instance per masked flow; `None`: the pipe is one
    /// instance that every packet shares.
    pub mask: Option<FlowMask>,
    /// Dummynet's `buckets N` (1..1048576, default 64), the size of its flow
    /// hash table: kept for `--stats`; the instance index here grows as needed,
    /// so it limits nothing.
    pub buckets: u32,
    /// Line of the `pipe N config` in the rule file (1-based).
    pub line: usize,
    /// The words as written, for `--stats`.
    pub words: String,
}

/// Pipe words of Dummynet that the rules layer would handle and does not yet.
const UNSUPPORTED_PIPE: &[&str] = &[
    "type",
    "sched",
    "link",
    "flowset",
    "sched_mask",
    "flow_mask",
];

impl PipeDef {
    /// Parses the words after `pipe N config`: `burst`, `profile`, `mask` and
    /// `buckets` here, every other word by [`LinkSpec::parse_layers`] in the
    /// Dummynet dialect (bare delays in ms, bare `bw` in bit/s, 50-slot default
    /// queue, a thing set twice is an error naming both).
    pub fn parse(
        number: u32,
        words: &[&str],
        line: usize,
        files: &mut FileReader<'_>,
    ) -> Result<PipeDef, RulesError> {
        let mut link_words: Vec<&str> = Vec::new();
        let mut burst_bytes = 0u64;
        let mut profile = None;
        let mut mask = None;
        let mut buckets = 64;
        let mut seen: Vec<&str> = Vec::new();
        let mut i = 0;
        while i < words.len() {
            let w = words[i];
            i += 1;
            // `policer R burst SIZE`: there `burst` belongs to the policer.
            let policer_burst =
                w == "burst" && i >= 3 && matches!(words[i - 3], "policer" | "police");
            if policer_burst {
                link_words.push(w);
                continue;
            }
            if matches!(w, "burst" | "profile" | "mask" | "buckets") {
                if seen.contains(&w) {
                    return Err(rerr(line, w, format!("'{w}' given twice in this pipe")));
                }
                seen.push(w);
            }
            let next = words.get(i).copied();
            let need =
                |what: &str| next.ok_or_else(|| rerr(line, w, format!("'{w}' needs {what}")));
            match w {
                "burst" => {
                    let v = need("a size in bytes such as 64k or 100000")?;
                    i += 1;
                    burst_bytes = dummynet_size(v).map_err(|m| rerr(line, v, m))?;
                }
                "profile" => {
                    let v = need("a file name")?;
                    i += 1;
                    let text = files(v).map_err(|e| rerr(line, v, format!("profile {e}")))?;
                    let p = Profile::parse(&text).map_err(|e| {
                        let e = crate::filetext::hide_content(&e.to_string(), v, &text);
                        rerr(line, v, format!("in the profile, {e}"))
                    })?;
                    profile = Some(Arc::new(p));
                }
                "buckets" => {
                    let v = need("a number")?;
                    i += 1;
                    buckets = parse_number(v)
                        .filter(|&n| n > 0 && n <= 1 << 20)
                        .ok_or_else(|| rerr(line, v, "buckets is 1..1048576"))?
                        as u32;
                }
                "mask" => {
                    let (m, used) = parse_mask(&words[i..], line, w)?;
                    i += used;
                    mask = Some(m);
                }
                w if UNSUPPORTED_PIPE.contains(&w) => return Err(rerr(line, w, "not supported")),
                _ => link_words.push(w),
            }
        }
        let spec =
            LinkSpec::parse_layers(&[&link_words], Dialect::Dummynet, files).map_err(|e| {
                match link_words.get(e.position.wrapping_sub(1)) {
                    // The word itself, so that the error knows where it lies.
                    Some(w) if *w == e.word => rerr(line, w, e.message),
                    _ => rerr(line, &e.word, e.message),
                }
            })?;
        if spec.seed.is_some() {
            return Err(rerr(
                line,
                "seed",
                "a pipe takes no seed: the node's seed (replay's 'seed N') seeds every pipe",
            ));
        }
        let mut link = spec.link;
        if let Some(p) = &profile {
            match (p.rate_bps, link.rate_bps) {
                (Some(_), Some(_)) => {
                    let at = link_words
                        .iter()
                        .find(|w| matches!(**w, "bw" | "bandwidth" | "rate"))
                        .copied()
                        .unwrap_or("bw");
                    return Err(rerr(
                        line,
                        at,
                        "the profile sets the bandwidth too; give it once",
                    ));
                }
                (Some(r), None) => link.rate_bps = Some(r),
                _ => {}
            }
            if link.rate_bps.is_none() {
                return Err(rerr(
                    line,
                    "profile",
                    "a profile's airtime needs a bandwidth (bw on the pipe or in the file)",
                ));
            }
        }
        if burst_bytes > 0 && link.rate_bps.is_none() {
            return Err(rerr(line, "burst", "burst needs a bandwidth (bw)"));
        }
        Ok(PipeDef {
            number,
            link,
            burst_bytes,
            profile,
            mask,
            buckets,
            line,
            words: words.join(" "),
        })
    }
}

/// ipfw's `burst` (expand_number: k, m, g are powers of 1024, optional B).
fn dummynet_size(v: &str) -> Result<u64, String> {
    let digits = v.bytes().take_while(|b| b.is_ascii_digit()).count();
    let (num, unit) = v.split_at(digits);
    let n: u64 = num.parse().map_err(|_| format!("'{v}' is not a size"))?;
    let unit = unit.trim_end_matches(['B', 'b']);
    let scale: u64 = match unit {
        "" => 1,
        "k" | "K" => 1 << 10,
        "m" | "M" => 1 << 20,
        "g" | "G" => 1 << 30,
        _ => return crate::units::parse_size_bytes(v).map_err(|e| e.0),
    };
    n.checked_mul(scale)
        .filter(|&b| b < 1 << 48)
        .ok_or_else(|| "burst is below 2^48 bytes".to_string())
}

/// `mask` and its fields, as ipfw reads them; returns the mask and the words used.
pub(crate) fn parse_mask(
    words: &[&str],
    line: usize,
    kw: &str,
) -> Result<(FlowMask, usize), RulesError> {
    let mut m = FlowMask::default();
    let mut i = 0;
    // Fields given so far, by their canonical name: a field given twice (or
    // with `all`, which sets every field) is refused rather than the later
    // value silently winning.
    let mut given: Vec<&str> = Vec::new();
    while let Some(&field) = words.get(i) {
        let canon = match field {
            "src-ipv6" => "src-ip6",
            "dst-ipv6" => "dst-ip6",
            f => f,
        };
        if given.contains(&"all") || (canon == "all" && !given.is_empty()) {
            if matches!(
                canon,
                "all"
                    | "src-ip"
                    | "dst-ip"
                    | "src-ip6"
                    | "dst-ip6"
                    | "src-port"
                    | "dst-port"
                    | "proto"
                    | "flow-id"
            ) {
                return Err(rerr(
                    line,
                    field,
                    "given twice in this mask ('all' sets every field)",
                ));
            }
        } else if given.contains(&canon) {
            return Err(rerr(line, field, "given twice in this mask"));
        }
        let kind = match field {
            "all" => {
                given.push("all");
                m = FlowMask::ALL;
                i += 1;
                continue;
            }
            "src-ip" | "dst-ip" | "src-ip6" | "src-ipv6" | "dst-ip6" | "dst-ipv6" | "src-port"
            | "dst-port" | "proto" | "flow-id" => {
                given.push(canon);
                field
            }
            "queue" => return Err(rerr(line, field, "not supported (mask queue)")),
            _ => break,
        };
        let Some(&v) = words.get(i + 1) else {
            return Err(rerr(line, field, "mask: value missing"));
        };
        i += 2;
        let v6 = kind.contains("ip6") || kind.contains("ipv6");
        let bad = |msg: &str| rerr(line, v, msg.to_string());
        let n = mask_value(v, v6, &bad)?;
        match kind {
            "src-ip" | "dst-ip" => {
                let x = u32::try_from(n).map_err(|_| bad("an IPv4 mask is 32 bits"))?;
                if kind == "src-ip" {
                    m.src_ip4 = x
                } else {
                    m.dst_ip4 = x
                }
            }
            "src-port" | "dst-port" => {
                let x = u16::try_from(n).map_err(|_| bad("port mask must be 16 bit"))?;
                if kind == "src-port" {
                    m.src_port = x
                } else {
                    m.dst_port = x
                }
            }
            "proto" => m.proto = u8::try_from(n).map_err(|_| bad("proto mask must be 8 bit"))?,
            "flow-id" => {
                if n > 0xf_ffff {
                    return Err(bad("flow_id mask must be 20 bit"));
                }
                m.flow_label = n as u32;
            }
            _ if kind.starts_with("src") => m.src_ip6 = n,
            _ => m.dst_ip6 = n,
        }
    }
    if i == 0 {
        return Err(rerr(line, words.first().copied().unwrap_or(kw), "mask needs fields (src-ip, dst-ip, src-port, dst-port, proto, src-ip6, dst-ip6, flow-id, all)"));
    }
    Ok((m, i))
}

/// A mask field's value `v` (`v6`: an IPv6 address field). `/N` is the N low bits for
/// IPv4, ports, proto and flow-id and an N-bit prefix for IPv6 (ipfw's reading, kept
/// so a pasted line means the same); a bare IPv6 value is a prefix length too, any
/// other a number such as 0xffffff00.
fn mask_value(v: &str, v6: bool, bad: &dyn Fn(&str) -> RulesError) -> Result<u128, RulesError> {
    let prefix = |len: u32| {
        if len == 0 {
            0
        } else {
            u128::MAX << (128 - len)
        }
    };
    Ok(if let Some(len) = v.strip_prefix('/') {
        let len: u32 = len.parse().map_err(|_| bad("a mask length is /0../128"))?;
        if v6 {
            if len > 128 {
                return Err(bad("an IPv6 mask length is /0../128"));
            }
            prefix(len)
        } else {
            if len > 32 {
                return Err(bad("a mask length is /0../32"));
            }
            if len == 32 {
                u32::MAX as u128
            } else {
                (1u128 << len) - 1
            }
        }
    } else if v6 {
        let len: u32 = v
            .parse()
            .map_err(|_| bad("an IPv6 mask is a prefix length (64 or /64)"))?;
        if len > 128 {
            return Err(bad("an IPv6 mask length is 0..128"));
        }
        prefix(len)
    } else {
        parse_number(v).ok_or_else(|| bad("a mask is a number such as 0xffffff00"))? as u128
    })
}
