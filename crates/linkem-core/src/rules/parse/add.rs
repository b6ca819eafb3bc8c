//! A rule's body, the words after `add [N]`: `[prob P] ACTION [log] OPTIONS...`, each
//! option read into a condition or refused with its word.

use super::{Action, Cond, CondKind, Net, Rule, RulesError};
use crate::rulefile::{object_number, parse_number, rerr};
use crate::rules::flow::v4_mapped;
use crate::rules::Side;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Real ipfw rule words (actions and options) linkem does not model.
const UNSUPPORTED: &[&str] = &[
    "me",
    "me6",
    "table",
    "lookup",
    "keep-state",
    "record-state",
    "limit",
    "set-limit",
    "check-state",
    "established",
    "setup",
    "uid",
    "gid",
    "jail",
    "icmptypes",
    "icmp6types",
    "tcpoptions",
    "tcpseq",
    "tcpack",
    "tcpwin",
    "tcpdatalen",
    "tcpmss",
    "ipoptions",
    "ipid",
    "ipprecedence",
    "iptos",
    "ipversion",
    "layer2",
    "mac",
    "antispoof",
    "verrevpath",
    "versrcreach",
    "diverted",
    "diverted-loopback",
    "diverted-output",
    "tagged",
    "tag",
    "untag",
    "fib",
    "setfib",
    "sockarg",
    "bridged",
    "ext6hdr",
    "flow",
    "flow-id",
    "src-addr",
    "dst-addr",
    "reject",
    "unreach",
    "unreach6",
    "reset",
    "reset6",
    "divert",
    "tee",
    "fwd",
    "forward",
    "nat",
    "nat64lsn",
    "nat64stl",
    "nat64clat",
    "nptv6",
    "netgraph",
    "ngtee",
    "call",
    "return",
    "altq",
    "setdscp",
    "reass",
    "abort",
    "abort6",
    "eaction",
    "or",
    "{",
    "}",
    "logamount",
    "set",
    "src-mac",
    "dst-mac",
    "defer-action",
    "skip-action",
    "ipsec",
];

/// The words of one rule's body and the next one to read.
struct Cursor<'a> {
    words: &'a [&'a str],
    at: usize,
    line: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<&'a str> {
        self.words.get(self.at).copied()
    }
    fn next(&mut self) -> Option<&'a str> {
        let w = self.peek();
        self.at += 1;
        w
    }
    fn arg(&mut self, keyword: &str, what: &str) -> Result<&'a str, RulesError> {
        self.next()
            .ok_or_else(|| rerr(self.line, keyword, format!("'{keyword}' needs {what}")))
    }
    fn err(&self, word: &str, message: impl Into<String>) -> RulesError {
        rerr(self.line, word, message)
    }
}

/// Rule `number` from its body's words (`[prob P] ACTION [log] OPTIONS...`) and its
/// line; `sides` names the interfaces `recv`, `xmit` and `via` may name.
pub(super) fn parse_add(
    words: &[&str],
    number: u32,
    line: usize,
    text: &str,
    sides: [&str; 2],
) -> Result<Rule, RulesError> {
    let mut c = Cursor { words, at: 0, line };
    let mut prob = None;
    if c.peek() == Some("prob") {
        c.next();
        let w = c.arg("prob", "a probability such as 0.2")?;
        let p = crate::units::parse_probability(w).map_err(|e| c.err(w, e.0))?;
        prob = Some(p);
    }
    let action = parse_action(&mut c, number)?;
    let mut log = false;
    if c.peek() == Some("log") {
        c.next();
        log = true;
    }
    let mut conds = Vec::new();
    let mut not = false;
    while let Some(w) = c.next() {
        let kind = match w {
            "not" => {
                if not {
                    return Err(c.err(w, "'not not'"));
                }
                not = true;
                continue;
            }
            "ip" | "all" => {
                expect_no_not(&c, not, w)?;
                continue;
            }
            "from" | "to" => {
                parse_from_to(&mut c, w, not, &mut conds)?;
                not = false;
                continue;
            }
            // A word that matches every packet (`proto ip`, `via any`) adds nothing.
            w => match parse_option(&mut c, w, sides)? {
                Some(kind) => kind,
                None => continue,
            },
        };
        conds.push(Cond { not, kind });
        not = false;
    }
    if not {
        return Err(c.err("not", "'not' at the end of the rule"));
    }
    Ok(Rule {
        number,
        prob,
        action,
        log,
        conds,
        line,
        text: text.trim_start_matches("ipfw ").trim().to_string(),
    })
}

/// The action of rule `number`, the first word after its probability.
fn parse_action(c: &mut Cursor<'_>, number: u32) -> Result<Action, RulesError> {
    let line = c.line;
    let aw = c.arg("add", "an action (pipe N, allow, deny, count, skipto N)")?;
    Ok(match aw {
        "pipe" => {
            let w = c.arg("pipe", "a pipe number")?;
            Action::Pipe(object_number(line, w, "pipe")?)
        }
        "queue" => {
            let w = c.arg("queue", "a queue number")?;
            Action::Queue(object_number(line, w, "queue")?)
        }
        "allow" | "accept" | "pass" | "permit" => Action::Allow,
        "deny" | "drop" => Action::Deny,
        "count" => Action::Count,
        "skipto" => {
            let w = c.arg("skipto", "a rule number")?;
            let n = object_number(line, w, "rule")?;
            if n <= number {
                return Err(c.err(
                    w,
                    format!("skipto must jump forward (rule {number} to {n})"),
                ));
            }
            Action::Skipto(n)
        }
        w if UNSUPPORTED.contains(&w) => return Err(c.err(w, "not supported")),
        w => {
            return Err(c.err(
                w,
                "unknown action (pipe N, queue N, allow, deny, count, skipto N)",
            ))
        }
    })
}

/// `from|to [not] ADDRS [PORTS]` (`w` is `from` or `to`): the address condition,
/// negated by `not` before the word or after it, and the ports that may follow.
fn parse_from_to(
    c: &mut Cursor<'_>,
    w: &str,
    not: bool,
    conds: &mut Vec<Cond>,
) -> Result<(), RulesError> {
    let mut neg = not;
    let mut a = c.arg(w, "an address (any, 10.0.0.0/8, 2001:db8::/32, {a,b})")?;
    if a == "not" {
        neg = !neg;
        a = c.arg(w, "an address")?;
    }
    let nets = parse_addrs(c, a)?;
    if let Some(nets) = nets {
        conds.push(Cond {
            not: neg,
            kind: if w == "from" {
                CondKind::SrcIp(nets)
            } else {
                CondKind::DstIp(nets)
            },
        });
    } else if neg {
        return Err(c.err(a, "'not any' matches nothing"));
    }
    if let Some(p) = c.peek().filter(|p| looks_like_ports(p)) {
        c.next();
        let ranges = parse_ranges(c, p, 65535, service_port)?;
        conds.push(Cond {
            not: false,
            kind: if w == "from" {
                CondKind::SrcPort(ranges)
            } else {
                CondKind::DstPort(ranges)
            },
        });
    }
    Ok(())
}

/// The condition option `w` and its arguments say, or `None` for one that matches
/// every packet.
fn parse_option(
    c: &mut Cursor<'_>,
    w: &str,
    sides: [&str; 2],
) -> Result<Option<CondKind>, RulesError> {
    Ok(Some(match w {
        "ip4" | "ipv4" => CondKind::Version(1 << 4),
        "ip6" | "ipv6" => CondKind::Version(1 << 6),
        "tcp" | "udp" | "icmp" | "icmp6" | "ipv6-icmp" | "sctp" => {
            CondKind::Proto(vec![proto_number(w).expect("listed")])
        }
        "proto" => {
            let a = c.arg(w, "a protocol")?;
            match a {
                "ip" | "all" => return Ok(None),
                "ip4" | "ipv4" => CondKind::Version(1 << 4),
                "ip6" | "ipv6" => CondKind::Version(1 << 6),
                _ => CondKind::Proto(vec![
                    proto_number(a).ok_or_else(|| c.err(a, "unknown protocol"))?
                ]),
            }
        }
        w if w.bytes().all(|b| b.is_ascii_digit()) => {
            let n: u8 = w
                .parse()
                .map_err(|_| c.err(w, "a protocol number is 0..255"))?;
            CondKind::Proto(vec![n])
        }
        "src-ip" | "dst-ip" | "src-ip6" | "dst-ip6" => parse_ip_option(c, w)?,
        "src-port" | "dst-port" => {
            let a = c.arg(w, "ports such as 80,443 or 1000-2000")?;
            let r = parse_ranges(c, a, 65535, service_port)?;
            if w == "src-port" {
                CondKind::SrcPort(r)
            } else {
                CondKind::DstPort(r)
            }
        }
        "iplen" => {
            let a = c.arg(w, "lengths")?;
            CondKind::IpLen(parse_ranges(c, a, 65535, |_| None)?)
        }
        "uid" | "gid" => {
            let a = c.arg(w, "a numeric id")?;
            let id = parse_number(a)
                .filter(|&n| n <= u64::from(u32::MAX))
                .ok_or_else(|| c.err(a, format!("{w} takes a number 0..4294967295 (no names)")))?
                as u32;
            if w == "uid" {
                CondKind::Uid(id)
            } else {
                CondKind::Gid(id)
            }
        }
        "ipttl" => {
            let a = c.arg(w, "TTLs")?;
            CondKind::IpTtl(parse_ranges(c, a, 255, |_| None)?)
        }
        "dscp" => parse_dscp(c, w)?,
        "tcpflags" | "tcpflag" => parse_tcp_flags(c, w)?,
        "mac-type" => {
            let a = c.arg(w, "EtherTypes such as ip,ipv6,arp or 0x0800")?;
            CondKind::MacType(parse_ranges(c, a, 65535, ether_type)?)
        }
        "frag" => {
            if let Some(p) = c.peek().filter(|p| {
                p.split(',')
                    .all(|x| matches!(x.trim_start_matches('!'), "mf" | "df" | "rf" | "offset"))
            }) {
                return Err(c.err(p, "not supported (frag takes no flags in linkem)"));
            }
            CondKind::Frag
        }
        "in" | "a-to-b" => CondKind::Recv(Side::A),
        "out" | "b-to-a" => CondKind::Recv(Side::B),
        "recv" | "xmit" | "via" => return parse_interface(c, w, sides),
        "log" => return Err(c.err(w, "'log' goes right after the action")),
        "prob" => return Err(c.err(w, "'prob P' goes before the action")),
        w if UNSUPPORTED.contains(&w) => return Err(c.err(w, "not supported")),
        w if w.parse::<Ipv4Addr>().is_ok() || w.contains('/') || w == "any" => {
            return Err(c.err(
                w,
                "an address goes after 'from', 'to', 'src-ip' or 'dst-ip'",
            ))
        }
        w => return Err(c.err(w, "unknown word")),
    }))
}

/// `src-ip|dst-ip|src-ip6|dst-ip6 ADDRS`; `any` is every address of the family
/// the option names.
fn parse_ip_option(c: &mut Cursor<'_>, w: &str) -> Result<CondKind, RulesError> {
    let a = c.arg(w, "an address list")?;
    let nets = parse_addrs(c, a)?.unwrap_or_else(|| {
        vec![
            Net {
                lo: v4_mapped(0),
                hi: v4_mapped(u32::MAX),
                v6: false,
            },
            Net {
                lo: 0,
                hi: u128::MAX,
                v6: true,
            },
        ]
    });
    if w.ends_with('6') && nets.iter().any(|n| !n.v6) {
        return Err(c.err(a, format!("{w} takes IPv6 addresses")));
    }
    Ok(if w.starts_with("src") {
        CondKind::SrcIp(nets)
    } else {
        CondKind::DstIp(nets)
    })
}

/// `dscp CODES`: the code points as a bit set.
fn parse_dscp(c: &mut Cursor<'_>, w: &str) -> Result<CondKind, RulesError> {
    let a = c.arg(w, "DSCP code points (46, ef, af11, cs1, ...)")?;
    let mut bits = 0u64;
    for part in a.split(',') {
        let v = dscp_value(part).ok_or_else(|| {
            c.err(
                part,
                "not a DSCP value (0..63 or ef, af11..af43, cs0..cs7, be)",
            )
        })?;
        bits |= 1 << v;
    }
    Ok(CondKind::Dscp(bits))
}

/// `tcpflags FLAGS`: the flags that must be set and those (`!flag`) that must be clear.
fn parse_tcp_flags(c: &mut Cursor<'_>, w: &str) -> Result<CondKind, RulesError> {
    let a = c.arg(w, "flags such as syn,!ack")?;
    let (mut set, mut clear) = (0u8, 0u8);
    for part in a.split(',') {
        let (neg, name) = match part.strip_prefix('!') {
            Some(n) => (true, n),
            None => (false, part),
        };
        let bit = match name {
            "fin" => 0x01,
            "syn" => 0x02,
            "rst" => 0x04,
            "push" | "psh" => 0x08,
            "ack" => 0x10,
            "urg" => 0x20,
            "ece" => 0x40,
            "cwr" => 0x80,
            _ => {
                return Err(c.err(
                    part,
                    "not a TCP flag (fin, syn, rst, push, ack, urg, ece, cwr)",
                ))
            }
        };
        if neg {
            clear |= bit;
        } else {
            set |= bit;
        }
    }
    Ok(CondKind::TcpFlags { set, clear })
}

/// `recv|xmit|via IF`: the side the interface name (or `a`, `b`) names; `any`
/// matches every packet.
fn parse_interface(
    c: &mut Cursor<'_>,
    w: &str,
    sides: [&str; 2],
) -> Result<Option<CondKind>, RulesError> {
    let a = c.arg(w, "an interface name")?;
    let side = if a == "a" || a == sides[0] {
        Side::A
    } else if a == "b" || a == sides[1] {
        Side::B
    } else if a == "any" {
        return Ok(None);
    } else {
        return Err(c.err(
            a,
            format!(
                "no interface '{a}' here (this node has '{}' (a) and '{}' (b))",
                sides[0], sides[1]
            ),
        ));
    };
    Ok(Some(match w {
        "recv" => CondKind::Recv(side),
        "xmit" => CondKind::Xmit(side),
        _ => CondKind::Via(side),
    }))
}

fn expect_no_not(c: &Cursor<'_>, not: bool, w: &str) -> Result<(), RulesError> {
    if not {
        Err(c.err(w, format!("'not {w}' matches nothing")))
    } else {
        Ok(())
    }
}

fn proto_number(w: &str) -> Option<u8> {
    Some(match w {
        "icmp" => 1,
        "igmp" => 2,
        "tcp" => 6,
        "udp" => 17,
        "gre" => 47,
        "esp" => 50,
        "ah" => 51,
        "icmp6" | "ipv6-icmp" => 58,
        "sctp" => 132,
        "udplite" => 136,
        _ => return w.parse().ok(),
    })
}

fn service_port(w: &str) -> Option<u16> {
    Some(match w {
        "ftp" => 21,
        "ssh" => 22,
        "telnet" => 23,
        "smtp" => 25,
        "domain" => 53,
        "http" => 80,
        "ntp" => 123,
        "https" => 443,
        _ => return None,
    })
}

fn ether_type(w: &str) -> Option<u16> {
    Some(match w {
        "ip" | "ipv4" => 0x0800,
        "arp" => 0x0806,
        "rarp" => 0x8035,
        "vlan" => 0x8100,
        "ipv6" => 0x86dd,
        _ => return None,
    })
}

fn dscp_value(w: &str) -> Option<u8> {
    if let Ok(n) = w.parse::<u8>() {
        return (n < 64).then_some(n);
    }
    Some(match w {
        "be" => 0,
        "ef" => 46,
        "va" => 44,
        _ => {
            if let Some(n) = w.strip_prefix("cs") {
                let n: u8 = n.parse().ok().filter(|n| *n < 8)?;
                n << 3
            } else if let Some(n) = w.strip_prefix("af") {
                let b = n.as_bytes();
                if b.len() != 2 || !(b'1'..=b'4').contains(&b[0]) || !(b'1'..=b'3').contains(&b[1])
                {
                    return None;
                }
                ((b[0] - b'0') << 3) | ((b[1] - b'0') << 1)
            } else {
                return None;
            }
        }
    })
}

fn looks_like_ports(w: &str) -> bool {
    w.bytes().next().is_some_and(|b| b.is_ascii_digit()) && !w.contains('.') && !w.contains(':')
        || service_port(w.split(',').next().unwrap_or("")).is_some()
}

/// `a,b,c-d` lists of numbers (any base, or names through `name`).
fn parse_ranges(
    c: &Cursor<'_>,
    text: &str,
    max: u64,
    name: impl Fn(&str) -> Option<u16>,
) -> Result<Vec<(u16, u16)>, RulesError> {
    let one = |w: &str| -> Result<u16, RulesError> {
        if let Some(v) = name(w) {
            return Ok(v);
        }
        parse_number(w)
            .filter(|&n| n <= max)
            .map(|n| n as u16)
            .ok_or_else(|| c.err(w, format!("expected a number 0..{max}")))
    };
    let mut out = Vec::new();
    for part in text.split(',') {
        if part.is_empty() {
            return Err(c.err(text, "empty item in a list"));
        }
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (one(a)?, one(b)?),
            None => {
                let v = one(part)?;
                (v, v)
            }
        };
        if lo > hi {
            return Err(c.err(part, "a range goes from low to high"));
        }
        out.push((lo, hi));
    }
    Ok(out)
}

/// An address list; `None` for `any`.
fn parse_addrs(c: &Cursor<'_>, text: &str) -> Result<Option<Vec<Net>>, RulesError> {
    if text == "any" {
        return Ok(None);
    }
    if UNSUPPORTED.contains(&text) || text.starts_with("table(") {
        return Err(c.err(text, "not supported"));
    }
    let inner = match text.strip_prefix('{') {
        Some(rest) => rest
            .strip_suffix('}')
            .ok_or_else(|| c.err(text, "a list is written {a,b,c} without spaces"))?,
        None => text,
    };
    let mut out = Vec::new();
    for part in inner.split(',') {
        out.push(parse_net(c, part)?);
    }
    Ok(Some(out))
}

fn parse_net(c: &Cursor<'_>, text: &str) -> Result<Net, RulesError> {
    let (addr, len) = match text.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (text, None),
    };
    if let Ok(v4) = addr.parse::<Ipv4Addr>() {
        let bits = match len {
            None => 32,
            Some(l) => l
                .parse::<u32>()
                .ok()
                .filter(|&n| n <= 32)
                .ok_or_else(|| c.err(text, "an IPv4 prefix length is 0..32"))?,
        };
        let a = u32::from(v4);
        let mask = if bits == 0 {
            0
        } else {
            u32::MAX << (32 - bits)
        };
        return Ok(Net {
            lo: v4_mapped(a & mask),
            hi: v4_mapped(a | !mask),
            v6: false,
        });
    }
    if let Ok(v6) = addr.parse::<Ipv6Addr>() {
        let bits = match len {
            None => 128,
            Some(l) => l
                .parse::<u32>()
                .ok()
                .filter(|&n| n <= 128)
                .ok_or_else(|| c.err(text, "an IPv6 prefix length is 0..128"))?,
        };
        let a = u128::from(v6);
        let mask = if bits == 0 {
            0
        } else {
            u128::MAX << (128 - bits)
        };
        return Ok(Net {
            lo: a & mask,
            hi: a | !mask,
            v6: true,
        });
    }
    if addr.contains(':')
        && addr.split(':').count() == 2
        && addr
            .split(':')
            .next()
            .is_some_and(|a| a.parse::<Ipv4Addr>().is_ok())
    {
        return Err(c.err(text, "not supported (addr:mask; write addr/len)"));
    }
    if addr.bytes().any(|b| b.is_ascii_alphabetic()) && !addr.contains(':') {
        return Err(c.err(
            text,
            "not supported: host names (write an address; linkem does no name lookups)",
        ));
    }
    Err(c.err(
        text,
        "not an address (10.0.0.1, 10.0.0.0/8, 2001:db8::/32, any)",
    ))
}
