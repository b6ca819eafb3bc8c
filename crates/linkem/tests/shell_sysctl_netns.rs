//! Live test (root only; skipped otherwise): `linkem shell` puts back the
//! forwarding sysctls it turned on in the caller's namespace, at a normal
//! end and on SIGINT, and leaves alone those that were on already. The
//! shell runs in a namespace of its own standing for the caller's, so the
//! machine's own sysctls are never touched.

mod common;

use common::{serial, skip};
use linkem_io::netns::{self, command_in, exec_in};
use std::process::Stdio;
use std::time::{Duration, Instant};

const LINKEM: &str = env!("CARGO_BIN_EXE_linkem");
const SYSCTLS: [&str; 2] = [
    "/proc/sys/net/ipv4/ip_forward",
    "/proc/sys/net/ipv6/conf/all/forwarding",
];

/// A namespace removed on drop.
struct Ns(String);

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = netns::ip(&["netns", "del", &self.0]);
    }
}

fn new_ns(tag: &str) -> Ns {
    let ns = Ns(format!("{}n", netns::unique_prefix(tag)));
    netns::ip(&["netns", "add", &ns.0]).unwrap();
    netns::ip(&["-n", &ns.0, "link", "set", "lo", "up"]).unwrap();
    ns
}

/// The forwarding sysctls as the namespace sees them.
fn sysctls(ns: &Ns) -> Vec<String> {
    SYSCTLS
        .iter()
        .map(|p| {
            let o = exec_in(&ns.0, &["cat", p]).unwrap();
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        })
        .collect()
}

fn set(ns: &Ns, values: [&str; 2]) {
    for (p, v) in SYSCTLS.iter().zip(values) {
        let o = exec_in(&ns.0, &["sh", "-c", &format!("echo {v} > {p}")]).unwrap();
        assert!(o.status.success(), "{p} := {v}");
    }
}

#[test]
fn a_shell_puts_forwarding_back_as_it_was() {
    if skip() {
        return;
    }
    let _g = serial();
    // A normal end, forwarding off before.
    let ns = new_ns("tsys");
    set(&ns, ["0", "0"]);
    let o = exec_in(&ns.0, &[LINKEM, "shell", "delay", "1ms", "--", "true"]).unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{err}");
    assert!(err.contains("turned IPv6 forwarding on"), "{err}");
    assert_eq!(sysctls(&ns), ["0", "0"], "after a normal end: {err}");
    // On already: left on, not announced.
    set(&ns, ["1", "1"]);
    let o = exec_in(&ns.0, &[LINKEM, "shell", "delay", "1ms", "--", "true"]).unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success() && !err.contains("turned"), "{err}");
    assert_eq!(sysctls(&ns), ["1", "1"], "{err}");
    // SIGINT while CMD runs.
    set(&ns, ["0", "0"]);
    let mut sh = command_in(
        &ns.0,
        &[LINKEM, "shell", "delay", "1ms", "--", "sleep", "30"],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let until = Instant::now() + Duration::from_secs(15);
    while sysctls(&ns) != ["1", "1"] {
        assert!(
            Instant::now() < until,
            "the shell never turned forwarding on"
        );
        assert!(sh.try_wait().unwrap().is_none(), "the shell ended early");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    // `ip netns exec` execs linkem: the child's pid is linkem's.
    let k = std::process::Command::new("kill")
        .args(["-s", "INT", &sh.id().to_string()])
        .output()
        .unwrap();
    assert!(k.status.success());
    let until = Instant::now() + Duration::from_secs(10);
    while sh.try_wait().unwrap().is_none() {
        assert!(Instant::now() < until, "SIGINT did not end the shell");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut err = String::new();
    std::io::Read::read_to_string(&mut sh.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(sysctls(&ns), ["0", "0"], "after SIGINT: {err}");
}
