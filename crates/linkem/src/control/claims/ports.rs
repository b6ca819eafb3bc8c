//! Which ports a user could bind itself: the unprivileged port start and
//! the sockets of the kernel's `/proc/net/{tcp,tcp6,udp,udp6}` tables of
//! linkem's network namespace ([`PortView`]), and the check of a claim's
//! ports against them ([`check_ports`]).

use super::{ports_text, PortAllow};
use crate::control::failure::Failure;
use anyhow::Result;
use linkem_ctl::Proto;
use std::collections::BTreeMap;

/// One socket of the kernel's tables, as [`check_ports`] needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortHolder {
    pub port: u16,
    pub uid: u32,
}

/// What the kernel says about who may bind what, in linkem's namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortView {
    /// `net.ipv4.ip_unprivileged_port_start` (it covers IPv6 too).
    pub unprivileged_start: u32,
    /// The sockets of `/proc/net/tcp` and `tcp6`.
    pub tcp: Vec<PortHolder>,
    /// The sockets of `/proc/net/udp` and `udp6`.
    pub udp: Vec<PortHolder>,
}

/// Bytes of one kernel table read at most: about 150 bytes a socket, so
/// some 400 000 sockets; a longer table is an error, not a partial view.
const MAX_TABLE_BYTES: u64 = 64 << 20;

impl PortView {
    /// Reads the sysctl and the four socket tables of this process's
    /// network namespace (a table that does not exist, e.g. IPv6 off, is
    /// empty).
    pub fn read() -> Result<PortView, String> {
        let read = |path: &str| -> Result<Option<String>, String> {
            use std::io::Read;
            let f = match std::fs::File::open(path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(format!("{path}: {e}")),
            };
            let mut text = String::new();
            f.take(MAX_TABLE_BYTES + 1)
                .read_to_string(&mut text)
                .map_err(|e| format!("{path}: {e}"))?;
            if text.len() as u64 > MAX_TABLE_BYTES {
                return Err(format!("{path}: longer than {MAX_TABLE_BYTES} bytes"));
            }
            Ok(Some(text))
        };
        let sysctl = "/proc/sys/net/ipv4/ip_unprivileged_port_start";
        let unprivileged_start = match read(sysctl)? {
            Some(t) => t
                .trim()
                .parse::<u32>()
                .map_err(|_| format!("{sysctl}: not a number"))?,
            // Kernels before 4.11 had no sysctl: 1024 was fixed.
            None => 1024,
        };
        let table = |paths: [&str; 2]| -> Result<Vec<PortHolder>, String> {
            let mut all = Vec::new();
            for path in paths {
                if let Some(text) = read(path)? {
                    all.extend(parse_socket_table(&text).map_err(|e| format!("{path}: {e}"))?);
                }
            }
            Ok(all)
        };
        Ok(PortView {
            unprivileged_start,
            tcp: table(["/proc/net/tcp", "/proc/net/tcp6"])?,
            udp: table(["/proc/net/udp", "/proc/net/udp6"])?,
        })
    }
}

/// The sockets of a `/proc/net/{tcp,udp}[6]` table: after the header, per
/// line `sl local_address rem_address st ... uid timeout inode ...`, the
/// local address `HEXIP:HEXPORT`. Entries without an inode (TIME_WAIT,
/// half-open connections) belong to no process and are left out.
pub fn parse_socket_table(text: &str) -> Result<Vec<PortHolder>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() {
            continue;
        }
        let bad = || format!("line {}: not a socket table line", i + 1);
        if f.len() < 10 {
            return Err(bad());
        }
        let port = f[1]
            .rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
            .ok_or_else(bad)?;
        let uid = f[7].parse::<u32>().map_err(|_| bad())?;
        let inode = f[9].parse::<u64>().map_err(|_| bad())?;
        if inode != 0 && port != 0 {
            out.push(PortHolder { port, uid });
        }
    }
    Ok(out)
}

/// Whether `uid` (not root, not the starter) may claim `proto ports`
/// under the rules of the module doc, port by port; the refusal names the
/// first port refused and the rule that refused it.
pub fn check_ports(
    uid: u32,
    proto: Proto,
    ports: (u16, u16),
    view: &PortView,
    allowed: &[PortAllow],
) -> Result<(), Failure> {
    let held = match proto {
        Proto::Tcp => &view.tcp,
        Proto::Udp => &view.udp,
    };
    // The first other uid holding each port of the range.
    let mut others: BTreeMap<u16, u32> = BTreeMap::new();
    for h in held {
        if h.uid != uid && (ports.0..=ports.1).contains(&h.port) {
            others.entry(h.port).or_insert(h.uid);
        }
    }
    let p = proto.word();
    let refuse = |why: String| {
        Err(Failure::Refused(format!(
            "{}: {why}; uid {uid} may claim only ports it could bind, or those root's --limits \
             allows it (allow={p}:PORT)",
            ports_text(proto, ports)
        )))
    };
    for port in ports.0..=ports.1 {
        if allowed.iter().any(|a| a.covers(proto, port)) {
            continue;
        }
        if u32::from(port) < view.unprivileged_start {
            return refuse(format!(
                "{p} port {port} is below ip_unprivileged_port_start ({})",
                view.unprivileged_start
            ));
        }
        if let Some(owner) = others.get(&port) {
            return refuse(format!(
                "{p} port {port} is held by a socket of uid {owner}"
            ));
        }
    }
    Ok(())
}
