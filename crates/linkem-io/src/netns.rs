//! Network namespaces and veth pairs for tests and demos.
//!
//! [`Topology::two_hosts`] builds two hosts that can reach each other only through an emulator
//! running in the root namespace:
//!
//! ```text
//!  ns {prefix}a                    root namespace                     ns {prefix}b
//!  {prefix}ha 10.77.X.1/24 <-veth-> {prefix}ea  ~emulator~  {prefix}eb <-veth-> {prefix}hb 10.77.X.2/24
//! ```
//!
//! Both hosts are on the same subnet: the emulator bridges layer 2 between `ea` and `eb`
//! (ARP included). The emulator-side ends have no addresses, no ARP and no IPv6, so the root
//! namespace's stack stays silent on them. On the hosts' ends checksum and segmentation
//! offloads are off (so frames on the wire are real, finished frames: with offload a veth
//! passes unfinished checksums and 64 KiB super-frames, which a raw socket would forward
//! broken) and GRO is on (a veth needs GRO or XDP on the receiving end for AF_XDP transmit
//! into it, docs/platform.md pitfall 3). GRO is left off on the emulator's ends so a raw socket
//! there sees frames as they were sent.
//!
//! Everything is done with iproute2's `ip` (and `ethtool` for offloads) through
//! [`std::process::Command`]; the caller must be root. Dropping the [`Topology`] deletes the
//! namespaces and the veth pairs, also while a panic unwinds; [`cleanup_stale`] and
//! [`cleanup_dead`] remove what a killed process left behind.

use std::fmt::Write as _;
use std::io;
use std::net::Ipv4Addr;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Longest interface name Linux accepts (IFNAMSIZ - 1).
pub const MAX_IFNAME: usize = 15;
/// Longest prefix [`Topology::two_hosts`] accepts (interface names append two characters).
pub const MAX_PREFIX: usize = MAX_IFNAME - 2;

/// Errors of the namespace harness.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// A needed program is not installed.
    #[error("`{program}` not found: install {package} (e.g. `apt-get install {package}`)")]
    MissingProgram {
        /// The program.
        program: &'static str,
        /// The Debian package providing it.
        package: &'static str,
    },
    /// Not running as root.
    #[error("network namespaces and veth need root (CAP_SYS_ADMIN and CAP_NET_ADMIN)")]
    NotRoot,
    /// The prefix would give interface names longer than 15 characters or odd characters.
    #[error("bad prefix '{prefix}': {why}")]
    BadPrefix {
        /// The prefix.
        prefix: String,
        /// What is wrong with it.
        why: String,
    },
    /// A command ran and failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A command could not be started, or a file could not be written.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

fn command_line(program: &str, args: &[&str]) -> String {
    let mut s = program.to_string();
    for a in args {
        let _ = write!(s, " {a}");
    }
    s
}

fn package_of(program: &'static str) -> &'static str {
    match program {
        "ip" => "iproute2",
        "ethtool" => "ethtool",
        "ping" => "iputils-ping",
        _ => program,
    }
}

/// Runs a program and returns its output whatever its exit status; fails only when it
/// cannot be started.
fn run_raw(program: &'static str, args: &[&str]) -> Result<Output, NetnsError> {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                NetnsError::MissingProgram {
                    program,
                    package: package_of(program),
                }
            } else {
                NetnsError::Io {
                    what: format!("starting `{}`", command_line(program, args)),
                    source: e,
                }
            }
        })
}

/// Runs a program and fails unless it exits with status 0.
fn run(program: &'static str, args: &[&str]) -> Result<Output, NetnsError> {
    let out = run_raw(program, args)?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(NetnsError::Command {
            command: command_line(program, args),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Runs `ip ARGS...`; a non-zero exit is an error carrying its stderr.
pub fn ip(args: &[&str]) -> Result<Output, NetnsError> {
    run("ip", args)
}

/// Moves the calling thread (only) into network namespace `ns` (`ip netns` name).
pub fn enter(ns: &str) -> Result<(), NetnsError> {
    let path = format!("/run/netns/{ns}");
    let file = std::fs::File::open(&path).map_err(|source| NetnsError::Io {
        what: format!("network namespace '{ns}' ({path})"),
        source,
    })?;
    // Safety: setns on this thread with a namespace file we hold open for the call.
    if unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET) } != 0 {
        return Err(NetnsError::Io {
            what: format!("cannot enter network namespace '{ns}' (needs root)"),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// True when the process runs as root (effective uid 0).
pub fn is_root() -> bool {
    // Safety: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Checks that the harness can run here: root, `ip` and `ethtool` installed.
pub fn check_prerequisites() -> Result<(), NetnsError> {
    if !is_root() {
        return Err(NetnsError::NotRoot);
    }
    run_raw("ip", &["-V"])?;
    run_raw("ethtool", &["--version"])?;
    Ok(())
}

static PREFIX_COUNTER: AtomicU32 = AtomicU32::new(0);
/// Width of the process id in a prefix (base 36; 36^5 > the kernel's largest pid_max).
const PID_DIGITS: usize = 5;
/// Width of the per-process counter in a prefix (base 36).
const COUNTER_DIGITS: usize = 3;
/// Longest tag [`unique_prefix`] keeps.
pub const MAX_TAG: usize = MAX_PREFIX - PID_DIGITS - COUNTER_DIGITS;

fn base36(mut v: u64, width: usize) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = vec![b'0'; width];
    for slot in out.iter_mut().rev() {
        *slot = DIGITS[(v % 36) as usize];
        v /= 36;
    }
    String::from_utf8(out).expect("ASCII digits")
}

/// A prefix unique to this process and call: `tag` (cut to [`MAX_TAG`] characters), the
/// process id in 5 base-36 digits, and a per-process counter in 3 base-36 digits, e.g.
/// `lkt002s1000a`. Interface names built from it stay within 15 characters.
pub fn unique_prefix(tag: &str) -> String {
    let tag = unique_prefix_tag(tag);
    let n = PREFIX_COUNTER.fetch_add(1, Ordering::Relaxed) as u64;
    format!(
        "{tag}{}{}",
        base36(std::process::id() as u64, PID_DIGITS),
        base36(n % 36u64.pow(COUNTER_DIGITS as u32), COUNTER_DIGITS)
    )
}

fn check_prefix(prefix: &str) -> Result<(), NetnsError> {
    let bad = |why: String| NetnsError::BadPrefix {
        prefix: prefix.to_string(),
        why,
    };
    if prefix.is_empty() {
        return Err(bad("empty".into()));
    }
    if prefix.len() > MAX_PREFIX {
        return Err(bad(format!(
            "longer than {MAX_PREFIX} characters, so interface names would exceed {MAX_IFNAME}"
        )));
    }
    if !prefix
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(bad("only letters, digits, '-' and '_' are allowed".into()));
    }
    Ok(())
}

/// The third octet of the topology's 10.77.X.0/24 subnet, derived from the prefix.
fn subnet_octet(prefix: &str) -> u8 {
    // FNV-1a; any spread will do, the namespaces are isolated from each other anyway.
    let mut h: u32 = 0x811c_9dc5;
    for b in prefix.bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    (h % 250) as u8 + 1
}

/// A command that runs `args` inside namespace `ns` (`ip netns exec NS ARGS...`).
pub fn command_in(ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).args(args);
    c
}

/// Runs `args` inside namespace `ns` and returns its output, whatever its exit status.
pub fn exec_in(ns: &str, args: &[&str]) -> Result<Output, NetnsError> {
    command_in(ns, args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| start_error(ns, args, e))
}

/// Starts `args` inside namespace `ns` with stdout and stderr piped and stdin null.
/// Processes still running in a [`Topology`]'s namespaces are killed when it is dropped.
pub fn spawn_in(ns: &str, args: &[&str]) -> Result<Child, NetnsError> {
    command_in(ns, args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| start_error(ns, args, e))
}

fn start_error(ns: &str, args: &[&str], e: io::Error) -> NetnsError {
    if e.kind() == io::ErrorKind::NotFound {
        NetnsError::MissingProgram {
            program: "ip",
            package: "iproute2",
        }
    } else {
        NetnsError::Io {
            what: format!("starting `ip netns exec {ns}{}`", command_line("", args)),
            source: e,
        }
    }
}

/// Names of the existing network namespaces (`ip netns list`).
pub fn list_namespaces() -> Result<Vec<String>, NetnsError> {
    let out = ip(&["netns", "list"])?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// Names of the interfaces in the root namespace (`ip -o link show`).
pub fn list_links() -> Result<Vec<String>, NetnsError> {
    let out = ip(&["-o", "link", "show"])?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(|n| n.trim().split('@').next().unwrap_or("").to_string())
        .filter(|n| !n.is_empty())
        .collect())
}

/// Shell-style match supporting `*` (any run of characters) and `?` (one character).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    fn m(p: &[u8], n: &[u8]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some(b'*'), _) => m(&p[1..], n) || (!n.is_empty() && m(p, &n[1..])),
            (Some(b'?'), Some(_)) => m(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => m(&p[1..], &n[1..]),
            _ => false,
        }
    }
    m(pattern.as_bytes(), name.as_bytes())
}

/// Kills every process inside namespace `ns` (they keep it alive after `ip netns del`).
fn kill_processes_in(ns: &str) {
    let Ok(out) = run_raw("ip", &["netns", "pids", ns]) else {
        return;
    };
    for pid in String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse::<libc::pid_t>().ok())
    {
        if pid > 1 && pid != std::process::id() as libc::pid_t {
            // Safety: kill has no memory-safety preconditions; the pid was listed by the
            // kernel as living in a namespace this harness created.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// Deletes namespace `ns` (`ip netns` name) after killing the processes in it, which
/// would keep it alive; an absent namespace is no error.
pub fn delete_namespace(ns: &str) {
    kill_processes_in(ns);
    let _ = run_raw("ip", &["netns", "del", ns]);
}

fn delete_link(name: &str) {
    let _ = run_raw("ip", &["link", "del", name]);
}

/// Deletes the namespaces and root-namespace interfaces whose names match `prefix_glob`
/// (`*` and `?` wildcards; a glob without wildcards matches names starting with it), with the
/// processes inside those namespaces. Returns how many objects were deleted. Careful: this
/// also removes the topologies of other processes that match; see [`cleanup_dead`].
pub fn cleanup_stale(prefix_glob: &str) -> Result<usize, NetnsError> {
    let pattern = if prefix_glob.contains(['*', '?']) {
        prefix_glob.to_string()
    } else {
        format!("{prefix_glob}*")
    };
    cleanup_matching(|name| glob_match(&pattern, name))
}

/// Deletes the leftovers of [`unique_prefix`]`(tag)` topologies whose creating process has
/// exited (killed tests, for example), leaving those of live processes alone.
pub fn cleanup_dead(tag: &str) -> Result<usize, NetnsError> {
    let tag = unique_prefix_tag(tag);
    cleanup_matching(|name| {
        let Some(rest) = name.strip_prefix(tag.as_str()) else {
            return false;
        };
        if rest.len() < PID_DIGITS + COUNTER_DIGITS {
            return false;
        }
        let Ok(pid) = u32::from_str_radix(&rest[..PID_DIGITS], 36) else {
            return false;
        };
        pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists()
    })
}

fn unique_prefix_tag(tag: &str) -> String {
    tag.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(MAX_TAG)
        .collect::<String>()
        .to_ascii_lowercase()
}

fn cleanup_matching(matches: impl Fn(&str) -> bool) -> Result<usize, NetnsError> {
    let mut n = 0;
    for ns in list_namespaces()? {
        if matches(&ns) {
            delete_namespace(&ns);
            n += 1;
        }
    }
    for link in list_links()? {
        if matches(&link) {
            delete_link(&link);
            n += 1;
        }
    }
    Ok(n)
}

/// Two hosts in their own namespaces, each linked by a veth pair to an interface in the root
/// namespace for the emulator to bridge. See the module docs for the picture.
#[derive(Debug)]
pub struct Topology {
    /// The prefix all names start with.
    pub prefix: String,
    /// Namespace of host A (`{prefix}a`).
    pub ns_a: String,
    /// Namespace of host B (`{prefix}b`).
    pub ns_b: String,
    /// Host A's interface, inside `ns_a` (`{prefix}ha`).
    pub host_a: String,
    /// Host B's interface, inside `ns_b` (`{prefix}hb`).
    pub host_b: String,
    /// The emulator's interface towards A, in the root namespace (`{prefix}ea`).
    pub emu_a: String,
    /// The emulator's interface towards B, in the root namespace (`{prefix}eb`).
    pub emu_b: String,
    /// Host A's address (10.77.X.1).
    pub addr_a: Ipv4Addr,
    /// Host B's address (10.77.X.2).
    pub addr_b: Ipv4Addr,
    /// The subnet's prefix length (24).
    pub prefix_len: u8,
}

impl Topology {
    /// Builds `nsA <-veth-> (root: ea, eb) <-veth-> nsB` named after `prefix` (at most
    /// [`MAX_PREFIX`] characters; use [`unique_prefix`]). On failure, whatever was created is
    /// removed again.
    pub fn two_hosts(prefix: &str) -> Result<Topology, NetnsError> {
        Self::two_hosts_with(prefix, true)
    }

    /// Like [`Topology::two_hosts`], but the hosts' interfaces keep the kernel's defaults
    /// (checksum offload, TSO/GSO on), as containers get them: the emulator then receives
    /// unfinished checksums and super-frames, and must make wire frames of them.
    pub fn two_hosts_stock(prefix: &str) -> Result<Topology, NetnsError> {
        Self::two_hosts_with(prefix, false)
    }

    fn two_hosts_with(prefix: &str, offloads_off: bool) -> Result<Topology, NetnsError> {
        check_prefix(prefix)?;
        if !is_root() {
            return Err(NetnsError::NotRoot);
        }
        run_raw("ip", &["-V"])?;
        run_raw("ethtool", &["--version"])?;
        let x = subnet_octet(prefix);
        let topo = Topology {
            prefix: prefix.to_string(),
            ns_a: format!("{prefix}a"),
            ns_b: format!("{prefix}b"),
            host_a: format!("{prefix}ha"),
            host_b: format!("{prefix}hb"),
            emu_a: format!("{prefix}ea"),
            emu_b: format!("{prefix}eb"),
            addr_a: Ipv4Addr::new(10, 77, x, 1),
            addr_b: Ipv4Addr::new(10, 77, x, 2),
            prefix_len: 24,
        };
        // From here on a failure drops `topo`, which deletes whatever exists.
        topo.build(offloads_off)?;
        Ok(topo)
    }

    fn build(&self, offloads_off: bool) -> Result<(), NetnsError> {
        for (ns, host, emu, addr) in [
            (&self.ns_a, &self.host_a, &self.emu_a, self.addr_a),
            (&self.ns_b, &self.host_b, &self.emu_b, self.addr_b),
        ] {
            ip(&["netns", "add", ns])?;
            ip(&["link", "add", host, "type", "veth", "peer", "name", emu])?;
            // The emulator's end: no IPv6 (no router solicitations, DAD or MLD), no ARP, no
            // address, GRO off.
            disable_ipv6(emu)?;
            ip(&["link", "set", emu, "arp", "off"])?;
            run("ethtool", &["-K", emu, "gro", "off"])?;
            ip(&["link", "set", host, "netns", ns])?;
            let cidr = format!("{addr}/{}", self.prefix_len);
            ip(&["-n", ns, "addr", "add", &cidr, "dev", host])?;
            // The host's end: finished checksums and wire-sized frames; GRO on.
            let out = if !offloads_off {
                ip(&["-n", ns, "link", "set", "lo", "up"])?;
                ip(&["-n", ns, "link", "set", host, "up"])?;
                ip(&["link", "set", emu, "up"])?;
                continue;
            } else {
                exec_in(
                    ns,
                    &[
                        "ethtool", "-K", host, "tx", "off", "tso", "off", "gso", "off", "gro", "on",
                    ],
                )?
            };
            if !out.status.success() {
                return Err(NetnsError::Command {
                    command: format!(
                        "ip netns exec {ns} ethtool -K {host} tx off tso off gso off gro on"
                    ),
                    status: out.status.to_string(),
                    stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
                });
            }
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", ns, "link", "set", host, "up"])?;
            ip(&["link", "set", emu, "up"])?;
        }
        Ok(())
    }

    /// The subnet in CIDR notation, e.g. `10.77.12.0/24`.
    pub fn subnet(&self) -> String {
        let o = self.addr_a.octets();
        format!("{}.{}.{}.0/{}", o[0], o[1], o[2], self.prefix_len)
    }

    /// Makes each host's neighbour entry for the other permanent, so that a lost ARP
    /// request (a test that drops frames drops ARP too) never looks like a lost packet.
    pub fn pin_neighbours(&self) -> Result<(), NetnsError> {
        let mac = |ns: &str, dev: &str| -> Result<String, NetnsError> {
            let o = exec_in(ns, &["cat", &format!("/sys/class/net/{dev}/address")])?;
            Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
        };
        let (mac_a, mac_b) = (
            mac(&self.ns_a, &self.host_a)?,
            mac(&self.ns_b, &self.host_b)?,
        );
        for (ns, dev, addr, lladdr) in [
            (&self.ns_a, &self.host_a, self.addr_b, &mac_b),
            (&self.ns_b, &self.host_b, self.addr_a, &mac_a),
        ] {
            let a = addr.to_string();
            let args = [
                "ip",
                "neigh",
                "replace",
                &a,
                "lladdr",
                lladdr,
                "dev",
                dev,
                "nud",
                "permanent",
            ];
            let o = exec_in(ns, &args)?;
            if !o.status.success() {
                return Err(NetnsError::Command {
                    command: format!("ip netns exec {ns} {}", args.join(" ")),
                    status: o.status.to_string(),
                    stderr: String::from_utf8_lossy(&o.stderr).trim().to_string(),
                });
            }
        }
        Ok(())
    }

    /// Runs `args` in host A's namespace.
    pub fn exec_in_a(&self, args: &[&str]) -> Result<Output, NetnsError> {
        exec_in(&self.ns_a, args)
    }

    /// Runs `args` in host B's namespace.
    pub fn exec_in_b(&self, args: &[&str]) -> Result<Output, NetnsError> {
        exec_in(&self.ns_b, args)
    }

    /// Starts `args` in host A's namespace (see [`spawn_in`]).
    pub fn spawn_in_a(&self, args: &[&str]) -> Result<Child, NetnsError> {
        spawn_in(&self.ns_a, args)
    }

    /// Starts `args` in host B's namespace (see [`spawn_in`]).
    pub fn spawn_in_b(&self, args: &[&str]) -> Result<Child, NetnsError> {
        spawn_in(&self.ns_b, args)
    }

    /// Deletes everything now (also done by Drop).
    pub fn teardown(&self) {
        // Deleting one end of a veth deletes the pair, wherever the other end is. Delete the
        // links explicitly: a namespace kept alive by a process would keep its veth too.
        delete_link(&self.emu_a);
        delete_link(&self.emu_b);
        delete_namespace(&self.ns_a);
        delete_namespace(&self.ns_b);
        // Before the move into a namespace, the host end lived in the root namespace.
        delete_link(&self.host_a);
        delete_link(&self.host_b);
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// Sets `net.ipv6.conf.IF.disable_ipv6 = 1` for a root-namespace interface. Does nothing
/// when the kernel has no IPv6.
fn disable_ipv6(ifname: &str) -> Result<(), NetnsError> {
    if !std::path::Path::new("/proc/sys/net/ipv6").exists() {
        return Ok(());
    }
    let path = format!("/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6");
    std::fs::write(&path, "1").map_err(|e| NetnsError::Io {
        what: format!("writing 1 to {path}"),
        source: e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_prefixes_fit_and_differ() {
        let a = unique_prefix("linkem-test");
        let b = unique_prefix("linkem-test");
        assert_ne!(a, b);
        assert!(a.len() <= MAX_PREFIX, "{a}");
        assert!(a.starts_with("link"));
        check_prefix(&a).unwrap();
        assert!(format!("{a}ha").len() <= MAX_IFNAME);
        let pid = u32::from_str_radix(&a[MAX_TAG..MAX_TAG + PID_DIGITS], 36).unwrap();
        assert_eq!(pid, std::process::id());
    }

    #[test]
    fn prefix_checks() {
        assert!(check_prefix("").is_err());
        assert!(check_prefix("abcdefghijklmn").is_err());
        assert!(check_prefix("abcdefghijklm").is_ok());
        assert!(check_prefix("a b").is_err());
        let e = check_prefix("a/b").unwrap_err().to_string();
        assert!(e.starts_with("bad prefix 'a/b'"), "{e}");
    }

    #[test]
    fn base36_is_fixed_width() {
        assert_eq!(base36(0, 3), "000");
        assert_eq!(base36(35, 3), "00z");
        assert_eq!(base36(36, 3), "010");
        assert_eq!(base36(4_194_304, 5), "2hwcg");
    }

    #[test]
    fn globs() {
        assert!(glob_match("lkt*", "lktabc"));
        assert!(glob_match("lkt*a", "lktxyza"));
        assert!(!glob_match("lkt*a", "lktxyzb"));
        assert!(glob_match("l?t", "lkt"));
        assert!(!glob_match("lkt", "lkta"));
    }

    #[test]
    fn subnet_octet_in_range() {
        for p in ["a", "b", "lkt0000000000", "zz"] {
            let x = subnet_octet(p);
            assert!((1..=250).contains(&x));
        }
    }

    #[test]
    fn missing_program_message() {
        let e = NetnsError::MissingProgram {
            program: "ip",
            package: "iproute2",
        };
        assert_eq!(
            e.to_string(),
            "`ip` not found: install iproute2 (e.g. `apt-get install iproute2`)"
        );
    }
}
