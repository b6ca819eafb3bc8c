//! `linkem-cni`: a CNI plugin, chained after a network's own plugins, that
//! puts an emulated link on a container's interface.
//!
//! ADD bumps the interface (see [`bump`]) and starts `linkem bridge` in the
//! container's namespace (see [`daemon`]); it outputs the previous result
//! unchanged (the container keeps its interface's name, MAC and addresses).
//! DEL stops the emulator and undoes the bump; a missing piece is no error,
//! and neither is a configuration DEL cannot parse (bad JSON, an unknown
//! field, a wrong type): DEL needs nothing from it (the container id and
//! interface name name the link, the state file under `RUN/cni/` keeps the
//! MAC address to give back; only `runDir` is read, when it can be), and a
//! DEL that fails for ever would
//! leak the interface and the previous plugins' leases (the spec: DEL cleans
//! up what it can). ADD refuses a `CNI_NETNS` that is the host's network
//! namespace (pid 1's, or the plugin's own), touching nothing: the bump
//! would re-plumb a host interface.
//! CHECK fails with code 100 (an interface is missing) or 101 (the emulator
//! is not running). GC stops the network's links of attachments not in
//! `cni.dev/valid-attachments`. Each link is named `cni-ID-IFNAME` (ID the
//! container id, shortened with a hash when long): `linkem ctl --name` that.
//! The state file `RUN/cni/NAME.json` ([`state`]) records the pod, the
//! socket and the base link for the node agent of `linkem-operator`.

pub mod bump;
pub mod config;
pub mod daemon;
pub mod error;
pub mod state;

use config::{LinkSpec, NetConf};
use error::{CniError, INVALID_ENV};
use serde_json::{json, Value};
use std::collections::HashMap;

/// The most the plugin reads of its configuration on stdin (1 MiB): a network
/// configuration with its prevResult is a few KiB; a runtime that sends more
/// gets an error, not a plugin that holds it all.
pub const MAX_STDIN_BYTES: u64 = 1 << 20;

/// FNV-1a, 64 bits: short stable names from long ones.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The emulator's name for a container's interface: `cni-ID-IFNAME`, within
/// linkem's 64 bytes of `A-Z a-z 0-9 - _ .`.
pub fn emulator_name(container_id: &str, ifname: &str) -> Result<String, CniError> {
    let ok = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    if !ok(container_id) {
        return Err(CniError::new(
            INVALID_ENV,
            format!("CNI_CONTAINERID '{container_id}': use A-Z a-z 0-9 - _ ."),
        ));
    }
    if !ok(ifname) || ifname.len() > 15 {
        return Err(CniError::new(
            INVALID_ENV,
            format!("CNI_IFNAME '{ifname}': an interface name of 1 to 15 of A-Z a-z 0-9 - _ ."),
        ));
    }
    let id = if container_id.len() <= 32 {
        container_id.to_string()
    } else {
        format!(
            "{}-{:08x}",
            &container_id[..23],
            fnv1a(container_id.as_bytes()) as u32
        )
    };
    Ok(format!("cni-{id}-{ifname}"))
}

/// The namespace a path names: nsfs device and inode (None: no such file).
fn netns_id(path: &str) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// What the runtime passes in the environment.
#[derive(Debug, Clone)]
pub struct Env {
    pub command: String,
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    pub args: String,
}

impl Env {
    pub fn from_map(vars: &HashMap<String, String>) -> Env {
        let get = |k: &str| vars.get(k).cloned().unwrap_or_default();
        Env {
            command: get("CNI_COMMAND"),
            container_id: get("CNI_CONTAINERID"),
            netns: get("CNI_NETNS"),
            ifname: get("CNI_IFNAME"),
            args: get("CNI_ARGS"),
        }
    }

    /// Refuses a `CNI_NETNS` that is the host's network namespace: the
    /// same namespace (device and inode of nsfs) as pid 1's or this
    /// plugin's own, whatever path names it (`/proc/1/ns/net`, a bind mount
    /// under /run/netns).
    fn refuse_host_netns(&self) -> Result<(), CniError> {
        let id = netns_id;
        let Some(given) = id(&self.netns) else {
            return Ok(());
        };
        for (path, whose) in [
            ("/proc/1/ns/net", "the host's (pid 1's)"),
            ("/proc/self/ns/net", "linkem-cni's own"),
        ] {
            if id(path) == Some(given) {
                return Err(CniError::new(
                    INVALID_ENV,
                    format!(
                        "CNI_NETNS {} is {whose} network namespace, not a container's: \
                         linkem-cni would re-plumb a host interface ({}); nothing was changed",
                        self.netns, self.ifname
                    ),
                ));
            }
        }
        Ok(())
    }

    fn require(&self, key: &str, value: &str) -> Result<(), CniError> {
        if value.is_empty() {
            return Err(CniError::new(
                INVALID_ENV,
                format!("{key} is not set (CNI_COMMAND {})", self.command),
            ));
        }
        if key == "CNI_NETNS" {
            netns_file(value)?;
        }
        Ok(())
    }
}

/// Checks that `path` can be a network namespace file before `nsenter` opens
/// it: a namespace (`/proc/PID/ns/net`, or one bound at `/run/netns/NAME`)
/// stats as an empty regular file, while a FIFO there would block `nsenter`'s
/// open for ever and a device or directory is no namespace at all.
fn netns_file(path: &str) -> Result<(), CniError> {
    let refuse = |why: &str| {
        Err(CniError::new(
            INVALID_ENV,
            format!("CNI_NETNS {path}: {why}"),
        ))
    };
    let Ok(m) = std::fs::metadata(path) else {
        return refuse("no such network namespace");
    };
    if !m.file_type().is_file() || m.len() != 0 {
        return refuse("not a network namespace (a FIFO, device, directory or file with content)");
    }
    Ok(())
}

/// The VERSION answer.
pub fn version_result() -> Value {
    json!({"cniVersion": "1.1.0", "supportedVersions": config::SUPPORTED_VERSIONS})
}

/// Runs one CNI command: what to print on success (nothing for DEL, CHECK,
/// GC and STATUS), or the error. `stdin` is the configuration (unread by
/// VERSION); the version to answer errors in is `conf_version`'s.
pub fn run(env: &Env, stdin: &[u8]) -> Result<Option<Value>, CniError> {
    match env.command.as_str() {
        "VERSION" => Ok(Some(version_result())),
        "ADD" => add(env, &config::parse(stdin)?).map(Some),
        // DEL needs nothing from the configuration (module doc).
        "DEL" => {
            del(env, &config::run_dir_lenient(stdin))?;
            if let Err(e) = config::parse(stdin) {
                // Said, not failed: the link is gone, which is what DEL is for.
                eprintln!("linkem-cni: DEL cleaned up, though its configuration is wrong: {e}");
            }
            Ok(None)
        }
        "CHECK" => check(env, &config::parse(stdin)?).map(|_| None),
        "GC" => gc(&config::parse(stdin)?).map(|_| None),
        "STATUS" => config::parse(stdin).map(|_| None),
        "" => Err(CniError::new(
            INVALID_ENV,
            "CNI_COMMAND is not set: a container runtime runs this plugin (linkem-cni --help)",
        )),
        c => Err(CniError::new(
            INVALID_ENV,
            format!("CNI_COMMAND '{c}' is not one of ADD, DEL, CHECK, GC, STATUS, VERSION"),
        )),
    }
}

/// The words for this container: the network's, CNI_ARGS', the runtime config's.
fn effective_spec(env: &Env, conf: &NetConf) -> Result<LinkSpec, CniError> {
    let from_args = config::from_cni_args(&env.args)?;
    Ok(conf
        .spec
        .clone()
        .overlay(from_args)
        .overlay(conf.runtime.clone()))
}

fn add(env: &Env, conf: &NetConf) -> Result<Value, CniError> {
    for (k, v) in [
        ("CNI_CONTAINERID", &env.container_id),
        ("CNI_NETNS", &env.netns),
        ("CNI_IFNAME", &env.ifname),
    ] {
        env.require(k, v)?;
    }
    let Some(prev) = &conf.prev_result else {
        return Err(CniError::config(
            "no prevResult: linkem-cni is chained after the plugin that makes the interface \
             (e.g. bridge), never first in a network list",
        ));
    };
    env.refuse_host_netns()?;
    let name = emulator_name(&env.container_id, &env.ifname)?;
    let spec = effective_spec(env, conf)?;
    let ifaces = bump::Ifaces::new(&env.ifname);
    let run_dir = conf.run_dir.as_path();
    // Leftovers of an ADD whose DEL never came (a crashed runtime) go first.
    daemon::stop(run_dir, &name)?;
    let mac = bump::add(&env.netns, &ifaces)?;
    let files = daemon::Files::new(run_dir, &name);
    let started = start_emulator(env, conf, &spec, &name, &mac, &ifaces);
    if let Err(e) = started {
        let _ = daemon::stop(run_dir, &name);
        let _ = bump::del(&env.netns, &ifaces, Some(&mac));
        files.remove();
        return Err(e);
    }
    let mut out = prev.clone();
    out["cniVersion"] = Value::String(conf.cni_version.clone());
    Ok(out)
}

/// Writes the link's state (before the start, so that DEL finds the MAC
/// address whatever happens next; again with the pid once it serves) and
/// starts the emulator.
fn start_emulator(
    env: &Env,
    conf: &NetConf,
    spec: &LinkSpec,
    name: &str,
    mac: &str,
    ifaces: &bump::Ifaces,
) -> Result<(), CniError> {
    let files = daemon::Files::new(&conf.run_dir, name);
    let write = |path: &std::path::Path, text: &str| {
        std::fs::create_dir_all(&files.dir)
            .and_then(|_| std::fs::write(path, text))
            .map_err(|e| {
                CniError::new(
                    error::EMULATOR_START,
                    format!("cannot write {}: {e}", path.display()),
                )
            })
    };
    let mut st = state::State {
        container_id: env.container_id.clone(),
        ifname: env.ifname.clone(),
        netns: env.netns.clone(),
        netns_id: netns_id(&env.netns),
        mac: mac.to_string(),
        network: conf.network.clone(),
        emulator: name.to_string(),
        socket: files.socket.clone(),
        pod: config::pod_args(&env.args),
        base: spec.clone(),
        pid: None,
    };
    write(&files.state, &st.to_json().to_string())?;
    let rules = match &spec.rules {
        Some(text) => {
            write(&files.rules, text)?;
            Some(files.rules.to_string_lossy().into_owned())
        }
        None => None,
    };
    files.make_control_files().map_err(|e| {
        CniError::new(
            error::EMULATOR_START,
            format!("cannot make {}: {e}", files.control_files.display()),
        )
    })?;
    let args = config::bridge_args(
        spec,
        &conf.options,
        name,
        &files.socket,
        &files.control_files,
        rules.as_deref(),
    );
    let pid = daemon::start(
        &conf.run_dir,
        &env.netns,
        name,
        &ifaces.inner,
        &ifaces.aside,
        &args,
    )?;
    st.pid = Some(pid);
    write(&files.state, &st.to_json().to_string())
}

fn del(env: &Env, run_dir: &std::path::Path) -> Result<(), CniError> {
    env.require("CNI_CONTAINERID", &env.container_id)?;
    env.require("CNI_IFNAME", &env.ifname)?;
    let name = emulator_name(&env.container_id, &env.ifname)?;
    // The state goes with the emulator's files: read what DEL needs first
    // (the MAC address to give back; the namespace ADD bumped, for a DEL
    // that comes without CNI_NETNS).
    let state = std::fs::read(daemon::Files::new(run_dir, &name).state)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .unwrap_or_default();
    let mac = state["mac"].as_str().map(str::to_string);
    daemon::stop(run_dir, &name)?;
    let netns = match (env.netns.as_str(), state["netns"].as_str()) {
        // Only while the path still names the namespace ADD bumped (a
        // /proc/PID path may name another process's by now).
        ("", Some(n)) if netns_id(n).is_some() && json!(netns_id(n)) == state["netns_id"] => n,
        (n, _) => n,
    };
    let target = Env {
        netns: netns.to_string(),
        ..env.clone()
    };
    // The namespace may be gone already (the spec allows DEL without one);
    // the host's was never bumped (ADD refuses it), so nothing there is ours.
    if !netns.is_empty()
        && std::path::Path::new(netns).exists()
        && target.refuse_host_netns().is_ok()
    {
        bump::del(netns, &bump::Ifaces::new(&env.ifname), mac.as_deref())?;
    }
    Ok(())
}

fn check(env: &Env, conf: &NetConf) -> Result<(), CniError> {
    for (k, v) in [
        ("CNI_CONTAINERID", &env.container_id),
        ("CNI_NETNS", &env.netns),
        ("CNI_IFNAME", &env.ifname),
    ] {
        env.require(k, v)?;
    }
    if conf.prev_result.is_none() {
        return Err(CniError::config("CHECK without prevResult"));
    }
    let name = emulator_name(&env.container_id, &env.ifname)?;
    bump::check(&env.netns, &bump::Ifaces::new(&env.ifname))?;
    daemon::check(&conf.run_dir, &name)
}

/// GC: this network's links whose attachment the runtime no longer knows go
/// (emulator stopped, bump undone if the namespace is still there).
fn gc(conf: &NetConf) -> Result<(), CniError> {
    let Some(valid) = &conf.valid_attachments else {
        return Ok(());
    };
    let Ok(dir) = std::fs::read_dir(conf.run_dir.join("cni")) else {
        return Ok(());
    };
    for entry in dir.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let Ok(state) = std::fs::read(&path)
            .map_err(|_| ())
            .and_then(|b| serde_json::from_slice::<Value>(&b).map_err(|_| ()))
        else {
            continue;
        };
        let (Some(id), Some(ifname), netns) = (
            state["containerID"].as_str(),
            state["ifname"].as_str(),
            state["netns"].as_str().unwrap_or(""),
        ) else {
            continue;
        };
        // The list is this network's: another network's links are not ours to judge.
        if state["network"].as_str() != Some(conf.network.as_str())
            || valid.iter().any(|(v, i)| v == id && i == ifname)
        {
            continue;
        }
        del(
            &Env {
                command: "GC".into(),
                container_id: id.into(),
                netns: netns.into(),
                ifname: ifname.into(),
                args: String::new(),
            },
            &conf.run_dir,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulator_names_are_valid_linkem_names() {
        assert_eq!(
            emulator_name("cnitool-0123", "eth0").unwrap(),
            "cni-cnitool-0123-eth0"
        );
        let long = "f".repeat(64);
        let n = emulator_name(&long, "net1").unwrap();
        assert!(n.len() <= 64 && n.ends_with("-net1"), "{n}");
        assert_ne!(n, emulator_name(&"e".repeat(64), "net1").unwrap());
        assert!(emulator_name("a/b", "eth0")
            .unwrap_err()
            .msg
            .contains("CNI_CONTAINERID"));
        assert!(emulator_name("a", "x".repeat(16).as_str())
            .unwrap_err()
            .msg
            .contains("CNI_IFNAME"));
    }

    #[test]
    fn version_lists_the_supported_versions() {
        let env = Env::from_map(&HashMap::from([("CNI_COMMAND".into(), "VERSION".into())]));
        let v = run(&env, b"").unwrap().unwrap();
        assert_eq!(v["supportedVersions"], json!(["0.4.0", "1.0.0", "1.1.0"]));
    }

    fn env_of(command: &str, netns: &str) -> Env {
        Env::from_map(&HashMap::from([
            ("CNI_COMMAND".into(), command.into()),
            ("CNI_CONTAINERID".into(), "lka-unit".into()),
            ("CNI_NETNS".into(), netns.into()),
            // No interface of the host has this name: were the refusal ever
            // to fail, the bump would find nothing to take.
            ("CNI_IFNAME".into(), "lkanone0".into()),
        ]))
    }

    /// The host's namespace by any of its names is refused before anything
    /// is touched (no emulator stopped, no state written).
    #[test]
    fn add_into_the_host_namespace_is_refused_touching_nothing() {
        let conf = br#"{"cniVersion":"1.0.0","name":"n","type":"linkem-cni","link":"delay 1ms",
                        "prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"lkanone0"}]}}"#;
        let state = daemon::Files::new(
            std::path::Path::new(daemon::DEFAULT_RUN_DIR),
            &emulator_name("lka-unit", "lkanone0").unwrap(),
        )
        .state;
        // Tests run in the host's namespace or a container's: either way
        // these name the plugin's own (and the host's, then pid 1's first).
        let at_host = std::fs::read_link("/proc/1/ns/net").ok()
            == std::fs::read_link("/proc/self/ns/net").ok();
        let whose = if at_host {
            "the host's (pid 1's)"
        } else {
            "linkem-cni's own"
        };
        for netns in ["/proc/self/ns/net", "/proc/thread-self/ns/net"] {
            let e = run(&env_of("ADD", netns), conf).unwrap_err();
            assert_eq!(e.code, INVALID_ENV, "{e}");
            assert!(
                e.msg.starts_with(&format!("CNI_NETNS {netns} is "))
                    && e.msg.contains("network namespace, not a container's")
                    && e.msg.contains("nothing was changed"),
                "{e}"
            );
            assert!(e.msg.contains(whose), "{e}");
        }
        assert!(!state.exists(), "{} written", state.display());
    }

    /// A configuration DEL cannot read still lets it clean up (here there is
    /// nothing to clean: no emulator, no namespace) and succeed.
    #[test]
    fn del_with_a_configuration_it_cannot_parse_succeeds() {
        for conf in [
            &b"{not json"[..],
            br#"{"cniVersion":"1.0.0","type":"linkem-cni","speed":"1"}"#,
            br#"{"cniVersion":"1.0.0","type":"linkem-cni","link":5}"#,
            br#"{"cniVersion":"9.9.9","type":"linkem-cni"}"#,
            b"",
        ] {
            let r = run(&env_of("DEL", ""), conf);
            assert_eq!(r, Ok(None), "{}", String::from_utf8_lossy(conf));
        }
        // What DEL needs from the environment is still required.
        let mut env = env_of("DEL", "");
        env.container_id.clear();
        let e = run(&env, b"{}").unwrap_err();
        assert!(e.msg.contains("CNI_CONTAINERID"), "{e}");
    }

    #[test]
    fn a_namespace_path_that_is_a_fifo_or_device_is_refused_before_use() {
        let dir = std::env::temp_dir().join(format!("lkc-cni-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()));
        let file = dir.join("file");
        std::fs::write(&file, "x").unwrap();
        let env = |netns: &std::path::Path| Env {
            command: "ADD".into(),
            container_id: "c1".into(),
            netns: netns.display().to_string(),
            ifname: "eth0".into(),
            args: String::new(),
        };
        for path in [
            fifo.as_path(),
            "/dev/zero".as_ref(),
            dir.as_path(),
            file.as_path(),
        ] {
            let e = env(path).require("CNI_NETNS", &path.display().to_string());
            let e = e.expect_err("refused");
            assert!(e.msg.contains("not a network namespace"), "{e}");
        }
        let ok = "/proc/self/ns/net";
        assert!(env(ok.as_ref()).require("CNI_NETNS", ok).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn add_without_a_namespace_or_prev_result_is_refused() {
        let env = Env::from_map(&HashMap::from([
            ("CNI_COMMAND".into(), "ADD".into()),
            ("CNI_CONTAINERID".into(), "c1".into()),
            ("CNI_NETNS".into(), "/var/run/netns/none".into()),
            ("CNI_IFNAME".into(), "eth0".into()),
        ]));
        let conf = br#"{"cniVersion":"1.0.0","type":"linkem-cni","link":"delay 1ms"}"#;
        let e = run(&env, conf).unwrap_err();
        assert!(e.msg.contains("CNI_NETNS"), "{e}");
        let env = Env {
            netns: "/proc/self/ns/net".into(),
            ..env
        };
        let e = run(&env, conf).unwrap_err();
        assert!(e.msg.contains("prevResult"), "{e}");
    }
}
