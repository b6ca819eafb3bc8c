//! `linkem-operator install-cni`: what the agent's init container does on each
//! node. It copies `linkem` and `linkem-cni` into the node's CNI plugin
//! directory and chains `linkem-cni` at the end of the plugins of the network
//! configuration the container runtime uses, so that every pod created after
//! gets an emulator on its interface. Running it again changes nothing.
//!
//! The configuration the runtime uses is the first file of the directory, in
//! lexical order, named `*.conf`, `*.conflist` or `*.json` (libcni's
//! `ConfFiles`, which containerd, CRI-O and the kubelet use). A `.conflist` (or
//! a `.json` with `plugins`) gets `{"type":"linkem-cni","capabilities":{"linkem":true}}`
//! appended to its `plugins`; every other key stays (serde_json writes object
//! keys in alphabetical order), and so does the file's mode. A single plugin's
//! `.conf` is refused, naming the file: turning it into a list would leave the
//! network plugin's own file to be rewritten under it at its next start, so the
//! operator converts it by hand (the plugin as the only entry of `plugins`).
//!
//! Every write is a temporary file in the same directory renamed over the
//! target, so a runtime reading the directory sees the old file or the new
//! one, never half of one; the temporary name ends in `.tmp`, which no runtime
//! reads as a configuration.

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The binaries the plugin needs on the node (linkem-cni starts the `linkem`
/// beside it).
pub const BINARIES: [&str; 2] = ["linkem", "linkem-cni"];
/// The plugin's `type`, as the chained entry names it.
pub const PLUGIN_TYPE: &str = "linkem-cni";

/// What `chain` found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chained {
    /// The plugin was appended to this file's `plugins`.
    Added(PathBuf),
    /// This file already had the plugin; it was not written.
    AlreadyThere(PathBuf),
}

/// Copies the binaries from `source_dir` into `bin_dir`, then chains the
/// plugin into `conf_dir`'s network configuration. Returns one line per
/// change or non-change, for the init container's log.
pub fn install(bin_dir: &Path, conf_dir: &Path, source_dir: &Path) -> Result<Vec<String>> {
    let mut said = Vec::new();
    for name in BINARIES {
        let copied = install_binary(&source_dir.join(name), &bin_dir.join(name))?;
        let what = if copied {
            "installed"
        } else {
            "already current"
        };
        said.push(format!("{what}: {}", bin_dir.join(name).display()));
    }
    said.push(match chain(conf_dir)? {
        Chained::Added(p) => format!("chained {PLUGIN_TYPE} into {}", p.display()),
        Chained::AlreadyThere(p) => format!("{PLUGIN_TYPE} already chained in {}", p.display()),
    });
    Ok(said)
}

/// The directory of the running binary: where the image keeps `linkem` and
/// `linkem-cni` beside `linkem-operator`.
pub fn default_source_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("finding the running binary")?;
    let exe = fs::canonicalize(&exe).unwrap_or(exe);
    exe.parent()
        .map(Path::to_path_buf)
        .context("the running binary has no directory")
}

/// Copies `from` to `to` (mode 0755) through a temporary file and a rename,
/// unless `to` already has the same bytes. Returns whether it copied.
pub fn install_binary(from: &Path, to: &Path) -> Result<bool> {
    let bytes = fs::read(from).with_context(|| {
        format!(
            "reading {} (give the directory holding linkem and linkem-cni with --source-dir)",
            from.display()
        )
    })?;
    if fs::read(to).is_ok_and(|old| old == bytes) {
        return Ok(false);
    }
    write_atomically(to, &bytes, 0o755)?;
    Ok(true)
}

/// The configuration file the runtime uses: the first `*.conf`, `*.conflist`
/// or `*.json` of `conf_dir` in lexical order.
pub fn network_config(conf_dir: &Path) -> Result<PathBuf> {
    let entries = fs::read_dir(conf_dir).with_context(|| {
        format!(
            "reading the CNI configuration directory {}",
            conf_dir.display()
        )
    })?;
    let mut files = Vec::new();
    for e in entries {
        let path = e?.path();
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        if matches!(ext, "conf" | "conflist" | "json") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    files.into_iter().next().with_context(|| {
        format!(
            "no CNI network configuration (*.conflist) in {}: install the cluster's network \
             plugin first; linkem-cni chains after it",
            conf_dir.display()
        )
    })
}

/// Appends the plugin to the `plugins` of `conf_dir`'s network configuration,
/// unless it is there already (then the file is not written). A malformed
/// file is left as it is, and the error names it.
pub fn chain(conf_dir: &Path) -> Result<Chained> {
    let path = network_config(conf_dir)?;
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut conf: Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON; left as it is", path.display()))?;
    let Some(obj) = conf.as_object_mut() else {
        bail!("{} is not a JSON object; left as it is", path.display());
    };
    let Some(plugins) = obj.get_mut("plugins") else {
        bail!(
            "{} is a single plugin's configuration (no \"plugins\" list); linkem-cni chains \
             only into a list: rewrite it as a .conflist with its plugin as the only entry \
             of \"plugins\" (keeping \"cniVersion\" and \"name\" at the top), then run again",
            path.display()
        );
    };
    let Some(plugins) = plugins.as_array_mut() else {
        bail!(
            "{}: \"plugins\" is not a list; left as it is",
            path.display()
        );
    };
    if plugins.iter().any(|p| p["type"] == PLUGIN_TYPE) {
        return Ok(Chained::AlreadyThere(path));
    }
    plugins.push(json!({"type": PLUGIN_TYPE, "capabilities": {"linkem": true}}));
    let mode = fs::metadata(&path)?.permissions().mode() & 0o7777;
    let mut out = serde_json::to_string_pretty(&conf)?;
    out.push('\n');
    write_atomically(&path, out.as_bytes(), mode)?;
    Ok(Chained::Added(path))
}

/// Writes `bytes` to `path` through `.NAME.PID.tmp` beside it: synced, given
/// `mode`, then renamed over `path`.
fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let dir = path.parent().context("a path without a directory")?;
    let name = path
        .file_name()
        .context("a path without a file name")?
        .to_string_lossy();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| -> std::io::Result<()> {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing {}", path.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLANNEL: &str = r#"{
  "name": "cbr0",
  "cniVersion": "1.0.0",
  "plugins": [
    {"type": "flannel", "delegate": {"hairpinMode": true, "isDefaultGateway": true}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
"#;

    fn write(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
        let p = dir.join(name);
        fs::write(&p, text).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn chains_at_the_end_keeping_keys_and_mode_then_changes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), "10-flannel.conflist", FLANNEL, 0o600);
        write(d.path(), "20-other.conflist", FLANNEL, 0o644);
        assert_eq!(chain(d.path()).unwrap(), Chained::Added(p.clone()));
        let v: Value = serde_json::from_str(&fs::read_to_string(&p).unwrap()).unwrap();
        let before: Value = serde_json::from_str(FLANNEL).unwrap();
        assert_eq!(v["name"], "cbr0");
        assert_eq!(v["cniVersion"], "1.0.0");
        let plugins = v["plugins"].as_array().unwrap();
        assert_eq!(plugins.len(), 3);
        assert_eq!(plugins[..2], before["plugins"].as_array().unwrap()[..]);
        assert_eq!(
            plugins[2],
            json!({"type": "linkem-cni", "capabilities": {"linkem": true}})
        );
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // The later file is not the runtime's: untouched.
        assert_eq!(
            fs::read_to_string(d.path().join("20-other.conflist")).unwrap(),
            FLANNEL
        );

        let written = fs::read(&p).unwrap();
        let mtime = fs::metadata(&p).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(chain(d.path()).unwrap(), Chained::AlreadyThere(p.clone()));
        assert_eq!(fs::read(&p).unwrap(), written);
        assert_eq!(fs::metadata(&p).unwrap().modified().unwrap(), mtime);
        let leftovers: Vec<_> = fs::read_dir(d.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    }

    #[test]
    fn a_malformed_conflist_is_named_and_left_untouched() {
        let d = tempfile::tempdir().unwrap();
        let broken = "{\"name\": \"cbr0\", \"plugins\": [\n";
        let p = write(d.path(), "10-flannel.conflist", broken, 0o644);
        let e = format!("{:#}", chain(d.path()).unwrap_err());
        assert!(e.contains(&p.display().to_string()), "{e}");
        assert!(e.contains("not valid JSON"), "{e}");
        assert_eq!(fs::read_to_string(&p).unwrap(), broken);

        let p = write(d.path(), "10-flannel.conflist", r#"{"plugins": {}}"#, 0o644);
        let e = format!("{:#}", chain(d.path()).unwrap_err());
        assert!(e.contains("\"plugins\" is not a list"), "{e}");
        assert_eq!(fs::read_to_string(&p).unwrap(), r#"{"plugins": {}}"#);
    }

    #[test]
    fn no_configuration_is_a_clear_error() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "README", "not a config", 0o644);
        let e = format!("{:#}", chain(d.path()).unwrap_err());
        assert!(e.contains("no CNI network configuration"), "{e}");
        assert!(e.contains(&d.path().display().to_string()), "{e}");
        let e = format!("{:#}", chain(&d.path().join("absent")).unwrap_err());
        assert!(e.contains("absent"), "{e}");
    }

    #[test]
    fn a_single_plugin_conf_first_in_order_is_refused_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let single = r#"{"cniVersion": "1.0.0", "name": "br", "type": "bridge"}"#;
        let p = write(d.path(), "05-bridge.conf", single, 0o644);
        write(d.path(), "10-flannel.conflist", FLANNEL, 0o644);
        let e = format!("{:#}", chain(d.path()).unwrap_err());
        assert!(e.contains(&p.display().to_string()), "{e}");
        assert!(e.contains("single plugin"), "{e}");
        assert_eq!(fs::read_to_string(&p).unwrap(), single);
        assert_eq!(
            fs::read_to_string(d.path().join("10-flannel.conflist")).unwrap(),
            FLANNEL
        );
    }

    #[test]
    fn binaries_are_copied_executable_and_only_when_changed() {
        let src = tempfile::tempdir().unwrap();
        let bin = tempfile::tempdir().unwrap();
        let conf = tempfile::tempdir().unwrap();
        write(conf.path(), "10-flannel.conflist", FLANNEL, 0o644);
        for name in BINARIES {
            write(
                src.path(),
                name,
                &format!("#!/bin/sh\necho {name}\n"),
                0o755,
            );
        }
        let said = install(bin.path(), conf.path(), src.path()).unwrap();
        assert!(said[0].starts_with("installed"), "{said:?}");
        for name in BINARIES {
            let p = bin.path().join(name);
            assert_eq!(
                fs::read_to_string(&p).unwrap(),
                format!("#!/bin/sh\necho {name}\n")
            );
            assert_eq!(
                fs::metadata(&p).unwrap().permissions().mode() & 0o777,
                0o755
            );
        }
        let said = install(bin.path(), conf.path(), src.path()).unwrap();
        assert!(said[0].starts_with("already current"), "{said:?}");
        assert!(said[2].contains("already chained"), "{said:?}");

        let e = format!(
            "{:#}",
            install(bin.path(), conf.path(), &src.path().join("nowhere")).unwrap_err()
        );
        assert!(
            e.contains("nowhere/linkem") && e.contains("--source-dir"),
            "{e}"
        );
    }
}
