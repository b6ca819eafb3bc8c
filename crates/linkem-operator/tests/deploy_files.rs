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
