//! `--control-files DIR` on a live `linkem bridge`: a control request reads a
//! trace from DIR by its bare name, and refuses a path out of DIR, an
//! absolute path and a symlink planted in DIR (even one pointing at a valid
//! trace), changing nothing. Needs root and prints "skipped" otherwise.

use serde_json::Value;
use std::os::unix::fs::PermissionsExt;

mod common;

use common::ctl::CtlBridge;
use common::{serial, skip};

/// The words each direction runs, as `list` gives them.
fn words(c: &mut linkem_ctl::Client) -> Vec<String> {
    let v: Value = c.request_json("list").unwrap();
    v["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["words"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn a_request_reads_a_trace_from_the_control_files_directory_only() {
    if skip() {
        return;
    }
    let _g = serial();
    let topo = common::topology("lkcf");
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir(&files).unwrap();
    std::fs::set_permissions(&files, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(files.join("up.trace"), "1\n2\n").unwrap();
    let elsewhere = dir.path().join("elsewhere.trace");
    std::fs::write(&elsewhere, "1\n2\n").unwrap();
    std::os::unix::fs::symlink(&elsewhere, files.join("planted.trace")).unwrap();
    let bridge = CtlBridge::start(
        &topo,
        &["delay", "1ms", "--control-files", files.to_str().unwrap()],
    );
    let mut c = bridge.client();

    let v = c
        .request_json("replace a-to-b trace up.trace delay 5ms")
        .unwrap();
    assert_eq!(v["ok"], true, "{v}");
    let show = c.request_json("show --json").unwrap();
    assert!(show.to_string().contains("trace up.trace"), "{show}");
    let running = words(&mut c);

    for (name, says) in [
        ("../elsewhere.trace", "bare name"),
        ("/etc/passwd", "bare name"),
        ("planted.trace", "symlink"),
        ("..", "bare name"),
    ] {
        let v = c
            .request_json(&format!("replace a-to-b trace {name}"))
            .unwrap();
        assert_eq!(v["ok"], false, "{name}: {v}");
        let error = v["error"].as_str().unwrap_or("");
        assert!(error.contains(says), "{name}: {v}");
        assert_eq!(v["word"], name, "{v}");
        assert_eq!(v["position"], 4, "{v}");
    }
    assert_eq!(words(&mut c), running, "a refused request changed the link");
    let (_, stderr, _) = bridge.finish();
    assert!(!stderr.contains("panicked"), "{stderr}");
}
