//! The plugin reads a bounded configuration: an endless stdin (`/dev/zero`)
//! is an error within seconds, not a plugin that reads for ever.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn an_endless_configuration_is_refused_at_the_bound() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_linkem-cni"))
        .env_clear()
        .env("CNI_COMMAND", "ADD")
        .env("CNI_CONTAINERID", "lkc-stdin")
        .env("CNI_NETNS", "/proc/self/ns/net")
        .env("CNI_IFNAME", "eth0")
        .stdin(Stdio::from(std::fs::File::open("/dev/zero").unwrap()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("linkem-cni still reads stdin after 20 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("longer than 1048576 bytes") && stdout.contains("\"code\":6"),
        "{stdout}"
    );
}
