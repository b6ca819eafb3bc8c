//! DNS for `linkem shell` when the host's resolver is on loopback (such as
//! systemd-resolved's 127.0.0.53): inside the shell, a loopback address is
//! CMD's own loopback, where nothing answers. The shell then gives CMD a
//! resolv.conf of its own (bound over /etc/resolv.conf in a mount namespace
//! of CMD's, see [`linkem_io::shellns::with_file_over`]) that names the
//! shell's gateway (the parent's address, HOST4) instead, and a relay in
//! linkem's process, in the caller's namespace, passes what arrives at
//! HOST4 port 53 (UDP, and TCP as root) on to the host's resolver. The
//! queries and answers cross the emulated link as the rest of CMD's traffic
//! does: a query costs one round trip of the link.
//!
//! The host's resolv.conf is /etc/resolv.conf, or the file named by
//! `LINKEM_RESOLV_CONF` (for tests; CMD still reads /etc/resolv.conf). In
//! CMD's copy, every loopback `nameserver` line becomes one line naming
//! HOST4 where the first stood; the other lines stay. The relay asks the
//! first loopback resolver.
//!
//! An ordinary user's shell (pasta): the caller's namespace is pasta's, whose
//! loopback is not the host's either. The outer linkem, on the host, relays
//! too: from 127.0.0.1:P (P a free port, UDP and TCP) to the resolver, and
//! pasta forwards P from its namespace's loopback to the host's (`-U P -T
//! P`); the shell's relay asks 127.0.0.1:P in pasta's namespace (P reaches
//! it as `LINKEM_SHELL_DNS_PORT`). pasta's own `--dns-forward` is not used:
//! the passt of Debian 12 (2023-03) forwards nothing to a loopback resolver
//! with `--no-map-gw`, which the shell needs.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The variable naming the host's resolv.conf instead of /etc/resolv.conf.
pub const RESOLV_CONF_ENV: &str = "LINKEM_RESOLV_CONF";

/// The file CMD's resolver reads.
pub const CMD_RESOLV_CONF: &str = "/etc/resolv.conf";

/// Set for the shell's linkem in an ordinary user's namespace: the port of
/// the outer linkem's relay on the host's 127.0.0.1, which pasta forwards.
pub const PORT_ENV: &str = "LINKEM_SHELL_DNS_PORT";
/// Set with [`PORT_ENV`] when that relay serves TCP too.
pub const TCP_ENV: &str = "LINKEM_SHELL_DNS_TCP";

/// How long the relay waits for the resolver's answer to one UDP query, or
/// for a TCP connection's next bytes (a resolver's own retries take seconds).
const ANSWER_WAIT: Duration = Duration::from_secs(10);

/// Queries relayed at once at the most: beyond, a query is dropped (its
/// asker retries) rather than a thread made for it.
const MAX_IN_FLIGHT: usize = 256;

/// The most a resolv.conf may hold (64 KiB): glibc reads a few lines of it
/// (3 nameservers, 6 search domains), and a larger file is not one.
pub const MAX_RESOLV_CONF_BYTES: u64 = 64 << 10;

/// The host's resolv.conf: its path and text (empty when it cannot be read;
/// unless it is missing, the shell says why, naming the file).
pub fn host_conf() -> (PathBuf, String) {
    let path = std::env::var_os(RESOLV_CONF_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(CMD_RESOLV_CONF));
    let text = read_conf(&path).unwrap_or_else(|e| {
        eprintln!("linkem: shell: {e}; its resolvers are not relayed");
        String::new()
    });
    (path, text)
}

/// `path`'s text as a resolv.conf is read: a regular file of at most
/// [`MAX_RESOLV_CONF_BYTES`], opened without blocking (`linkem_io::infile`),
/// so `/dev/zero` or a FIFO named by `LINKEM_RESOLV_CONF` is an error at once
/// rather than gigabytes or a wait no signal ends. A missing file reads as
/// empty (a host without one).
pub fn read_conf(path: &std::path::Path) -> Result<String, String> {
    match linkem_io::infile::read_text(path, MAX_RESOLV_CONF_BYTES) {
        Ok(text) => Ok(text),
        Err(e) if e.is_not_found() => Ok(String::new()),
        Err(e) => Err(e.to_string()),
    }
}

/// Says that the loopback `resolver` named by the host's resolv.conf at
/// `path` is not relayed, and `why`: names will not resolve inside.
pub fn say_unrelayed(path: &std::path::Path, resolver: IpAddr, why: &str) {
    eprintln!(
        "linkem: shell: {} names {resolver}, a loopback resolver, which CMD cannot reach \
         ({why}): names will not resolve inside",
        path.display()
    );
}

/// The address of a `nameserver ADDR` line.
fn nameserver(line: &str) -> Option<IpAddr> {
    let mut w = line.split_whitespace();
    (w.next() == Some("nameserver"))
        .then(|| w.next()?.parse().ok())
        .flatten()
}

/// The first loopback resolver of a resolv.conf, if any.
pub fn first_loopback(conf: &str) -> Option<IpAddr> {
    conf.lines()
        .filter_map(nameserver)
        .find(IpAddr::is_loopback)
}

/// CMD's resolv.conf: `conf` with its loopback resolvers replaced by one
/// `nameserver GATEWAY` where the first stood.
pub fn shell_conf(conf: &str, gateway: Ipv4Addr) -> String {
    let mut out = String::new();
    let mut named = false;
    for line in conf.lines() {
        match nameserver(line) {
            Some(addr) if addr.is_loopback() => {
                if !named {
                    out.push_str(&format!(
                        "nameserver {gateway} # linkem shell: relayed to {addr} on the host\n"
                    ));
                    named = true;
                }
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// Starts relaying DNS that arrives at `listen` (port 0: a free one) to
/// `upstream` (UDP, and TCP if `tcp`), on threads of this process that live
/// as long as it does. The sockets are bound now, in the calling thread's
/// network namespace, and the threads start in it too. Returns the port and
/// whether TCP is served (with port 0, only if the UDP port was free for
/// TCP too).
pub fn start_relay(
    listen: SocketAddr,
    upstream: SocketAddr,
    tcp: bool,
) -> std::io::Result<(u16, bool)> {
    let udp = UdpSocket::bind(listen)?;
    let port = udp.local_addr()?.port();
    let listener = match (tcp, listen.port()) {
        (false, _) => None,
        (true, 0) => TcpListener::bind((listen.ip(), port)).ok(),
        (true, _) => Some(TcpListener::bind(listen)?),
    };
    let tcp = listener.is_some();
    let in_flight = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("linkem-shell-dns".into())
        .spawn(move || relay_udp(udp, upstream, in_flight))?;
    if let Some(listener) = listener {
        std::thread::Builder::new()
            .name("linkem-shell-dns-tcp".into())
            .spawn(move || relay_tcp(listener, upstream))?;
    }
    Ok((port, tcp))
}

/// Each query gets a socket of its own towards the resolver, so that its
/// answer goes back to its asker without a table of DNS ids.
fn relay_udp(sock: UdpSocket, upstream: SocketAddr, in_flight: Arc<AtomicUsize>) {
    let mut buf = vec![0u8; 65_535];
    loop {
        let (n, asker) = match sock.recv_from(&mut buf) {
            Ok(got) => got,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                eprintln!("linkem: shell: the DNS relay stopped: {e}");
                return;
            }
        };
        let (Ok(back), query) = (sock.try_clone(), buf[..n].to_vec()) else {
            continue;
        };
        spawn_limited(&in_flight, MAX_IN_FLIGHT, "linkem-shell-dns-q", move || {
            if let Some(answer) = ask_udp(&query, upstream) {
                let _ = back.send_to(&answer, asker);
            }
        });
    }
}

/// Runs `work` on a thread of its own, unless `limit` such threads run
/// already or none can be made: then the query is dropped, and its asker
/// retries.
fn spawn_limited(
    in_flight: &Arc<AtomicUsize>,
    limit: usize,
    name: &str,
    work: impl FnOnce() + Send + 'static,
) {
    if in_flight.load(Ordering::Relaxed) >= limit {
        return;
    }
    in_flight.fetch_add(1, Ordering::Relaxed);
    let count = in_flight.clone();
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            work();
            count.fetch_sub(1, Ordering::Relaxed);
        });
    if spawned.is_err() {
        in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

fn ask_udp(query: &[u8], upstream: SocketAddr) -> Option<Vec<u8>> {
    let any: SocketAddr = match upstream {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let up = UdpSocket::bind(any).ok()?;
    up.connect(upstream).ok()?;
    up.set_read_timeout(Some(ANSWER_WAIT)).ok()?;
    up.send(query).ok()?;
    let mut buf = vec![0u8; 65_535];
    let n = up.recv(&mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}

fn relay_tcp(listener: TcpListener, upstream: SocketAddr) {
    let in_flight = Arc::new(AtomicUsize::new(0));
    for asker in listener.incoming() {
        let Ok(asker) = asker else { continue };
        // Two threads a connection (one a direction).
        spawn_limited(
            &in_flight,
            MAX_IN_FLIGHT / 2,
            "linkem-shell-dns-c",
            move || {
                let _ = splice_tcp(asker, upstream);
            },
        );
    }
}

/// Copies a connection both ways until either side ends or is idle for
/// [`ANSWER_WAIT`].
fn splice_tcp(asker: TcpStream, upstream: SocketAddr) -> std::io::Result<()> {
    let up = TcpStream::connect_timeout(&upstream, ANSWER_WAIT)?;
    for s in [&asker, &up] {
        s.set_read_timeout(Some(ANSWER_WAIT))?;
    }
    let (asker2, up2) = (asker.try_clone()?, up.try_clone()?);
    let there = std::thread::Builder::new()
        .name("linkem-shell-dns-c".into())
        .spawn(move || copy_until_end(asker2, up2))?;
    copy_until_end(up, asker);
    let _ = there.join();
    Ok(())
}

fn copy_until_end(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    // The other direction's reader sees the end too.
    let _ = to.shutdown(std::net::Shutdown::Write);
    let _ = from.shutdown(std::net::Shutdown::Read);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resolv_conf_that_is_not_a_small_regular_file_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        crate::test_mkfifo(&fifo);
        let big = dir.path().join("big");
        // Sparse: no disk used.
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_RESOLV_CONF_BYTES + 1)
            .unwrap();
        for (path, why) in [
            (PathBuf::from("/dev/zero"), "character device"),
            (fifo, "FIFO"),
            (big, "limit"),
        ] {
            let shown = path.display().to_string();
            let e = crate::within(Duration::from_secs(10), &shown, move || read_conf(&path))
                .unwrap_err();
            assert!(e.contains(&shown) && e.contains(why), "{e}");
        }
        let conf = dir.path().join("resolv.conf");
        assert_eq!(
            read_conf(&conf).unwrap(),
            "",
            "a missing file reads as empty"
        );
        std::fs::write(&conf, "nameserver 127.0.0.53\n").unwrap();
        assert_eq!(read_conf(&conf).unwrap(), "nameserver 127.0.0.53\n");
    }

    #[test]
    fn loopback_resolvers_become_the_gateway_once() {
        let conf = "# by resolved\nnameserver 127.0.0.53\nnameserver ::1\noptions edns0 trust-ad\nsearch lan\n";
        assert_eq!(first_loopback(conf), Some("127.0.0.53".parse().unwrap()));
        let gw = Ipv4Addr::new(100, 64, 0, 5);
        let out = shell_conf(conf, gw);
        let servers: Vec<IpAddr> = out.lines().filter_map(nameserver).collect();
        assert_eq!(servers, [IpAddr::V4(gw)]);
        assert!(
            out.contains("options edns0 trust-ad\nsearch lan\n"),
            "{out}"
        );
        assert!(
            out.starts_with("# by resolved\nnameserver 100.64.0.5"),
            "{out}"
        );
        let remote = "nameserver 10.0.0.1\nnameserver 127.0.0.1\n";
        assert_eq!(first_loopback(remote), Some("127.0.0.1".parse().unwrap()));
        assert_eq!(
            shell_conf(remote, gw)
                .lines()
                .filter_map(nameserver)
                .collect::<Vec<_>>(),
            ["10.0.0.1".parse::<IpAddr>().unwrap(), IpAddr::V4(gw)]
        );
        assert_eq!(first_loopback("nameserver 10.0.0.1\n"), None);
        assert_eq!(first_loopback("nameserver not-an-address\n"), None);
    }

    /// A query to the relay reaches the resolver and its answer the asker,
    /// over UDP and over TCP (on this namespace's loopback).
    #[test]
    fn the_relay_carries_a_query_and_its_answer() {
        let resolver = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tcp_resolver = TcpListener::bind(resolver.local_addr().unwrap()).unwrap();
        let upstream = resolver.local_addr().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            let (n, from) = resolver.recv_from(&mut buf).unwrap();
            let mut answer = buf[..n].to_vec();
            answer.extend_from_slice(b"-answered");
            resolver.send_to(&answer, from).unwrap();
        });
        std::thread::spawn(move || {
            let (mut c, _) = tcp_resolver.accept().unwrap();
            let mut buf = [0u8; 5];
            c.read_exact(&mut buf).unwrap();
            c.write_all(&buf).unwrap();
            c.write_all(b"-answered").unwrap();
        });
        // Port 53 needs a free loopback address here (and root); elsewhere skip.
        let listen = Ipv4Addr::new(127, 83, 53, 1);
        if let Err(e) = start_relay((listen, 53).into(), upstream, true) {
            eprintln!("skipped: cannot bind {listen}:53: {e}");
            return;
        }
        let asker = UdpSocket::bind("127.0.0.1:0").unwrap();
        asker
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        asker.send_to(b"query", (listen, 53)).unwrap();
        let mut buf = [0u8; 512];
        let n = asker.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"query-answered");
        let mut c = TcpStream::connect((listen, 53)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(b"tcp-q").unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"tcp-q-answered");
    }
}
