//! deploy/ without an API server: the committed CRD is what the Rust types
//! generate, and every example is a LinkChaos the types read.

use linkem_operator::chaos::LinkChaos;
use std::path::{Path, PathBuf};

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

#[test]
fn crd_yaml_is_the_generated_crd() {
    let path = deploy_dir().join("crd.yaml");
    let committed = std::fs::read_to_string(&path).expect("deploy/crd.yaml is readable");
    let generated = linkem_operator::cli::crd_yaml().expect("the CRD serializes");
    assert!(
        committed == generated,
        "deploy/crd.yaml differs from the types' CRD; regenerate it: \
         cargo run -p linkem-operator -- crd > deploy/crd.yaml"
    );
}

#[test]
fn every_example_is_a_linkchaos() {
    let mut count = 0;
    for entry in std::fs::read_dir(deploy_dir().join("examples")).expect("deploy/examples") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable");
        let lc: LinkChaos = serde_yaml::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: not a LinkChaos: {e}", path.display()));
        assert!(
            lc.metadata.name.is_some(),
            "{}: an example needs a name",
            path.display()
        );
        count += 1;
    }
    assert!(
        count >= 4,
        "deploy/examples holds {count} manifests, want the 4 examples"
    );
}

/// The agent's init container, its command exactly as deploy/agent.yaml has
/// it, run twice on a node's directories (temporary ones at the mounts'
/// places): linkem and linkem-cni come from beside the binary, as in the
/// image; the chain is added once.
#[test]
fn the_init_containers_command_installs_and_chains_once() {
    let text = std::fs::read_to_string(deploy_dir().join("agent.yaml")).expect("agent.yaml");
    let ds: serde_json::Value = serde_yaml::from_str(&text).expect("agent.yaml is YAML");
    let init = &ds["spec"]["template"]["spec"]["initContainers"][0];
    let command: Vec<String> = serde_json::from_value(init["command"].clone()).expect("a command");
    assert_eq!(command[..2], ["linkem-operator", "install-cni"]);

    let image = tempfile::tempdir().unwrap();
    let host = tempfile::tempdir().unwrap();
    let exe = image.path().join("linkem-operator");
    std::fs::copy(env!("CARGO_BIN_EXE_linkem-operator"), &exe).unwrap();
    for name in ["linkem", "linkem-cni"] {
        std::fs::write(image.path().join(name), format!("#!/bin/sh\n# {name}\n")).unwrap();
    }
    // The mounts of agent.yaml: /host/... is the node's directory.
    let on_host = |arg: &str| match arg.strip_prefix("/host/") {
        Some(rest) => host.path().join(rest).display().to_string(),
        None => arg.to_string(),
    };
    let net_d = host.path().join("etc/cni/net.d");
    std::fs::create_dir_all(&net_d).unwrap();
    std::fs::create_dir_all(host.path().join("opt/cni/bin")).unwrap();
    let conflist = net_d.join("10-kindnet.conflist");
    std::fs::write(
        &conflist,
        r#"{"cniVersion":"1.0.0","name":"kindnet","plugins":[{"type":"ptp"},{"type":"portmap"}]}"#,
    )
    .unwrap();
    for run in 0..2 {
        let out = std::process::Command::new(&exe)
            .args(command[1..].iter().map(|a| on_host(a)))
            .output()
            .expect("linkem-operator runs");
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "run {run}: {said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&conflist).unwrap()).unwrap();
        let types: Vec<&str> = v["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["type"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(types, ["ptp", "portmap", "linkem-cni"], "run {run}: {said}");
    }
    for name in ["linkem", "linkem-cni"] {
        let installed =
            std::fs::read_to_string(host.path().join("opt/cni/bin").join(name)).unwrap();
        assert_eq!(installed, format!("#!/bin/sh\n# {name}\n"));
    }
}
