//! The emulators of this node's pods: linkem-cni's state files
//! `RUN/cni/*.json` that name a pod (`CNI_ARGS` `K8S_POD_NAMESPACE` and
//! `K8S_POD_NAME`) and a running emulator (a `pid`, written once it serves).
//! A file of another kind, half written or of a newer format is skipped: the
//! next scan, 200 ms later, reads it again.

use linkem_cni::config::LinkSpec as CniLinkSpec;
use linkem_cni::state::{State, EGRESS};
use std::fmt;
use std::path::{Path, PathBuf};

/// A pod by namespace and name, `NAMESPACE/NAME` as in `status.pods`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One running emulator on one interface of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emulator {
    /// `cni-SANDBOX-IFNAME`.
    pub name: String,
    pub pod: PodKey,
    pub pod_uid: Option<String>,
    pub ifname: String,
    pub socket: PathBuf,
    /// The words the emulator started with.
    pub base: CniLinkSpec,
    pub pid: u32,
}

impl Emulator {
    /// This run of the emulator: a new sandbox is a new name, an emulator
    /// restarted under the same name a new pid.
    pub fn instance(&self) -> String {
        format!("{}@{}", self.name, self.pid)
    }

    /// The base words of the pod's egress (`egress` true) or ingress, as
    /// layers in linkem's order: the words of both directions, then the
    /// direction's own (`linkem bridge WORDS --a-to-b WORDS`).
    pub fn base_layers(&self, egress: bool) -> Vec<Vec<String>> {
        let split = |w: &Option<String>| -> Vec<String> {
            w.as_deref()
                .unwrap_or("")
                .split_whitespace()
                .map(str::to_string)
                .collect()
        };
        // linkem-cni's side a is the pod (EGRESS is "a-to-b").
        let own = if egress == (EGRESS == "a-to-b") {
            &self.base.a_to_b
        } else {
            &self.base.b_to_a
        };
        vec![split(&self.base.link), split(own)]
    }

    pub fn from_state(s: State) -> Option<Emulator> {
        let (Some(namespace), Some(name), Some(pid)) = (s.pod.namespace, s.pod.name, s.pid) else {
            return None;
        };
        Some(Emulator {
            name: s.emulator,
            pod: PodKey { namespace, name },
            pod_uid: s.pod.uid,
            ifname: s.ifname,
            socket: s.socket,
            base: s.base,
            pid,
        })
    }
}

/// The pods' running emulators under `run_dir`, by name.
pub fn scan(run_dir: &Path) -> Vec<Emulator> {
    let Ok(dir) = std::fs::read_dir(run_dir.join("cni")) else {
        return vec![];
    };
    let mut out: Vec<Emulator> = dir
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .filter_map(|p| State::read(&p).ok())
        .filter_map(Emulator::from_state)
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use linkem_cni::config::PodArgs;

    fn state(pod: Option<&str>, pid: Option<u32>) -> State {
        State {
            container_id: "c1".into(),
            ifname: "eth0".into(),
            netns: "/proc/1/ns/net".into(),
            netns_id: None,
            mac: String::new(),
            network: "n".into(),
            emulator: "cni-c1-eth0".into(),
            socket: "/r/cni-c1-eth0.sock".into(),
            pod: PodArgs {
                namespace: pod.map(|_| "ns".into()),
                name: pod.map(str::to_string),
                uid: None,
            },
            base: CniLinkSpec {
                link: Some("delay 1ms".into()),
                b_to_a: Some("rate 10mbit".into()),
                ..CniLinkSpec::default()
            },
            pid,
        }
    }

    #[test]
    fn only_started_emulators_of_pods_are_found() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("cni")).unwrap();
        let write = |name: &str, s: &State| {
            let p = dir.path().join("cni").join(name);
            std::fs::write(p, s.to_json().to_string()).unwrap();
        };
        write("a.json", &state(Some("web-0"), Some(7)));
        write("b.json", &state(None, Some(8)));
        write("c.json", &state(Some("web-1"), None));
        std::fs::write(dir.path().join("cni/d.json"), "{half").unwrap();
        std::fs::write(dir.path().join("cni/a.pid"), "7").unwrap();
        let found = scan(dir.path());
        assert_eq!(found.len(), 1, "{found:?}");
        let e = &found[0];
        assert_eq!(e.pod.to_string(), "ns/web-0");
        assert_eq!(e.instance(), "cni-c1-eth0@7");
        assert_eq!(e.base_layers(true), vec![vec!["delay", "1ms"], vec![]]);
        assert_eq!(
            e.base_layers(false),
            vec![vec!["delay", "1ms"], vec!["rate", "10mbit"]]
        );
    }
}
