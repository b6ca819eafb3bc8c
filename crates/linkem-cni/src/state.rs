//! The state file of one link, `RUN/cni/NAME.json`: what DEL needs to undo
//! ADD (the MAC address, the namespace) and what the node agent of
//! `linkem-operator` needs to drive the emulator (the pod, the control
//! socket, the base link and which direction is the pod's egress).
//!
//! Format (version 2; one JSON object):
//!
//! ```text
//! {"version": 2, "containerID": ID, "ifname": IF, "netns": PATH, "netns_id": [DEV, INO],
//!  "mac": MAC, "network": NAME, "emulator": "cni-ID-IF", "socket": "RUN/cni-ID-IF.sock",
//!  "pod": {"namespace": NS, "name": NAME, "uid": UID},       (only what CNI_ARGS gave)
//!  "base": {"link": W, "a-to-b": W, "b-to-a": W, "rules": TEXT},  (only what was given)
//!  "egress": "a-to-b", "pid": PID}                            (pid once it serves)
//! ```
//!
//! Version 1 files (no `version`) have only the first six keys; they read
//! with the emulator's name from the container id and ifname, the socket
//! beside the `cni/` folder they are in, no pod and no base.

use crate::config::{LinkSpec, PodArgs};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

/// The version [`State::to_json`] writes.
pub const STATE_VERSION: u64 = 2;

/// The emulator's direction that carries what the pod sends: side a is the
/// container (`linkem bridge lke-IF lkc-IF`: frames the pod sends arrive on
/// `lke-IF`, IF_A, and leave `lkc-IF`, IF_B, toward the network).
pub const EGRESS: &str = "a-to-b";

/// One link's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    pub container_id: String,
    pub ifname: String,
    pub netns: String,
    /// nsfs device and inode of `netns` at ADD.
    pub netns_id: Option<(u64, u64)>,
    pub mac: String,
    pub network: String,
    pub emulator: String,
    pub socket: PathBuf,
    pub pod: PodArgs,
    /// The link the emulator started with.
    pub base: LinkSpec,
    /// The emulator's pid, once it serves.
    pub pid: Option<u32>,
}

impl State {
    pub fn to_json(&self) -> Value {
        let mut pod = Map::new();
        for (k, v) in [
            ("namespace", &self.pod.namespace),
            ("name", &self.pod.name),
            ("uid", &self.pod.uid),
        ] {
            if let Some(v) = v {
                pod.insert(k.into(), v.as_str().into());
            }
        }
        let mut base = Map::new();
        for (k, v) in [
            ("link", &self.base.link),
            ("a-to-b", &self.base.a_to_b),
            ("b-to-a", &self.base.b_to_a),
            ("rules", &self.base.rules),
        ] {
            if let Some(v) = v {
                base.insert(k.into(), v.as_str().into());
            }
        }
        let mut v = json!({
            "version": STATE_VERSION,
            "containerID": self.container_id, "ifname": self.ifname,
            "netns": self.netns, "netns_id": self.netns_id, "mac": self.mac,
            "network": self.network, "emulator": self.emulator,
            "socket": self.socket.display().to_string(),
            "base": base, "egress": EGRESS,
        });
        if !pod.is_empty() {
            v["pod"] = Value::Object(pod);
        }
        if let Some(pid) = self.pid {
            v["pid"] = pid.into();
        }
        v
    }

    /// Reads a state file's JSON (version 1 or 2); `run_dir` is the
    /// directory whose `cni/` holds it (a version 1 file's socket is there).
    pub fn from_json(v: &Value, run_dir: &Path) -> Result<State, String> {
        let text = |k: &str| v[k].as_str().map(str::to_string);
        let (Some(container_id), Some(ifname)) = (text("containerID"), text("ifname")) else {
            return Err("no containerID or ifname: not a linkem-cni state".into());
        };
        if let Some(version) = v["version"].as_u64().filter(|n| *n > STATE_VERSION) {
            return Err(format!(
                "state version {version}: this build reads up to {STATE_VERSION}"
            ));
        }
        if v.get("egress").is_some() && v["egress"] != EGRESS {
            return Err(format!("egress {}: only {EGRESS} is known", v["egress"]));
        }
        let emulator = match text("emulator") {
            Some(e) => e,
            None => crate::emulator_name(&container_id, &ifname).map_err(|e| e.msg)?,
        };
        let socket = text("socket")
            .map(PathBuf::from)
            .unwrap_or_else(|| run_dir.join(format!("{emulator}.sock")));
        let netns_id = match v["netns_id"].as_array().map(Vec::as_slice) {
            Some([dev, ino]) => dev.as_u64().zip(ino.as_u64()),
            _ => None,
        };
        let field = |o: &Value, k: &str| o[k].as_str().map(str::to_string);
        let (pod, base) = (&v["pod"], &v["base"]);
        Ok(State {
            netns: text("netns").unwrap_or_default(),
            netns_id,
            mac: text("mac").unwrap_or_default(),
            network: text("network").unwrap_or_default(),
            emulator,
            socket,
            pod: PodArgs {
                namespace: field(pod, "namespace"),
                name: field(pod, "name"),
                uid: field(pod, "uid"),
            },
            base: LinkSpec {
                link: field(base, "link"),
                a_to_b: field(base, "a-to-b"),
                b_to_a: field(base, "b-to-a"),
                rules: field(base, "rules"),
            },
            pid: v["pid"].as_u64().and_then(|p| u32::try_from(p).ok()),
            container_id,
            ifname,
        })
    }

    /// Reads `path` (`RUN/cni/NAME.json`).
    pub fn read(path: &Path) -> Result<State, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let v: Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{}: not JSON ({e})", path.display()))?;
        let run_dir = path
            .parent()
            .and_then(Path::parent)
            .unwrap_or(Path::new(crate::daemon::DEFAULT_RUN_DIR));
        State::from_json(&v, run_dir).map_err(|e| format!("{}: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> State {
        State {
            container_id: "c0ffee".into(),
            ifname: "eth0".into(),
            netns: "/var/run/netns/x".into(),
            netns_id: Some((4, 4026532000)),
            mac: "02:00:00:00:00:01".into(),
            network: "k8s".into(),
            emulator: "cni-c0ffee-eth0".into(),
            socket: "/tmp/run/cni-c0ffee-eth0.sock".into(),
            pod: PodArgs {
                namespace: Some("default".into()),
                name: Some("web-0".into()),
                uid: Some("1234".into()),
            },
            base: LinkSpec {
                link: Some("delay 1ms".into()),
                b_to_a: Some("rate 10mbit".into()),
                ..LinkSpec::default()
            },
            pid: Some(42),
        }
    }

    #[test]
    fn a_state_reads_back_as_written() {
        let s = sample();
        let v = s.to_json();
        assert_eq!(v["egress"], "a-to-b");
        assert_eq!(v["pod"]["name"], "web-0");
        assert_eq!(
            v["base"],
            json!({"link": "delay 1ms", "b-to-a": "rate 10mbit"})
        );
        assert_eq!(State::from_json(&v, Path::new("/elsewhere")), Ok(s));
    }

    #[test]
    fn a_version_1_state_reads_with_defaults() {
        let v = json!({"containerID": "c1", "ifname": "eth0", "netns": "/proc/9/ns/net",
                       "netns_id": [4, 77], "mac": "02:00:00:00:00:02", "network": "n"});
        let s = State::from_json(&v, Path::new("/run/linkem")).unwrap();
        assert_eq!(s.emulator, "cni-c1-eth0");
        assert_eq!(s.socket, Path::new("/run/linkem/cni-c1-eth0.sock"));
        assert_eq!((s.netns_id, s.pid), (Some((4, 77)), None));
        assert_eq!((s.pod, s.base), (PodArgs::default(), LinkSpec::default()));
    }

    #[test]
    fn a_state_from_elsewhere_is_refused_with_a_reason() {
        let e = State::from_json(&json!({"mac": "x"}), Path::new("/r")).unwrap_err();
        assert!(e.contains("containerID"), "{e}");
        let mut v = sample().to_json();
        v["version"] = 3.into();
        let e = State::from_json(&v, Path::new("/r")).unwrap_err();
        assert!(e.contains("version 3"), "{e}");
        v["version"] = 2.into();
        v["egress"] = "b-to-a".into();
        assert!(State::from_json(&v, Path::new("/r")).is_err());
    }
}
