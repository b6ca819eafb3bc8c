//! The plugin's configuration: its entry in a network list, the per-container
//! words from `CNI_ARGS` and the runtime config, and the command line of
//! `linkem bridge` made from them.
//!
//! Precedence, field by field (`link`, `a-to-b`, `b-to-a`, `rules`): the
//! runtime config's `linkem` object, then `CNI_ARGS` (`LINKEM_LINK`,
//! `LINKEM_A_TO_B`, `LINKEM_B_TO_A`), then the network list's entry. A
//! per-container field replaces the network's field of the same name and
//! leaves the others; rules replace words and words replace rules, since
//! linkem takes a link as one or the other.
//!
//! The bridge runs `linkem bridge lke-N lkc-N`: side a is the container, so
//! `a-to-b` is what the container sends and `b-to-a` what it receives.
//!
//! Words never start with `-`: a word is a link word, never an option, so
//! that words from a pod's annotations cannot reach linkem's options (files
//! it writes, its control socket). Options come only from the network list's
//! `options`, which the cluster's administrator writes.

use crate::error::{CniError, DECODE, INCOMPATIBLE_VERSION};
use serde_json::{Map, Value};
use std::path::PathBuf;

/// The CNI versions this plugin speaks.
pub const SUPPORTED_VERSIONS: [&str; 3] = ["0.4.0", "1.0.0", "1.1.0"];

/// The link's words, each field a string of words as typed after `linkem bridge`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LinkSpec {
    pub link: Option<String>,
    pub a_to_b: Option<String>,
    pub b_to_a: Option<String>,
    pub rules: Option<String>,
}

impl LinkSpec {
    /// `other`'s fields replace these where `other` has them. Rules and
    /// words are two ways to describe the link (linkem takes one or the
    /// other): rules in `other` replace all of these words, words in `other`
    /// replace these rules.
    pub fn overlay(mut self, other: LinkSpec) -> LinkSpec {
        if other.rules.is_some() {
            (self.link, self.a_to_b, self.b_to_a) = (None, None, None);
        }
        if other.link.is_some() || other.a_to_b.is_some() || other.b_to_a.is_some() {
            self.rules = None;
        }
        self.link = other.link.or(self.link);
        self.a_to_b = other.a_to_b.or(self.a_to_b);
        self.b_to_a = other.b_to_a.or(self.b_to_a);
        self.rules = other.rules.or(self.rules);
        self
    }
}

/// The plugin's entry of a network list, as the runtime hands it over.
#[derive(Debug, Clone, PartialEq)]
pub struct NetConf {
    pub cni_version: String,
    pub spec: LinkSpec,
    /// Options of `linkem bridge` (`--max-lag off`, `--backend packet`, ...).
    pub options: Vec<String>,
    /// The runtime config's `linkem` object (capability `linkem`).
    pub runtime: LinkSpec,
    pub prev_result: Option<Value>,
    /// GC: the attachments to keep (`cni.dev/valid-attachments`), as (container id, ifname).
    pub valid_attachments: Option<Vec<(String, String)>>,
    /// The network's name: GC only touches this network's links.
    pub network: String,
    /// `runDir`: control sockets here, the plugin's files in its `cni/`
    /// (default [`crate::daemon::DEFAULT_RUN_DIR`]).
    pub run_dir: PathBuf,
}

/// Keys every plugin's configuration may carry (the CNI spec's and the
/// runtimes' conventional ones); anything else that is not this plugin's is a
/// typo and an error.
const STANDARD_KEYS: [&str; 10] = [
    "cniVersion",
    "name",
    "type",
    "capabilities",
    "runtimeConfig",
    "prevResult",
    "args",
    "dns",
    "cni.dev/valid-attachments",
    "cni.dev/attachments",
];

/// Parses the configuration on the plugin's stdin.
pub fn parse(bytes: &[u8]) -> Result<NetConf, CniError> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| {
        CniError::new(DECODE, "the network configuration is not JSON").with_details(e.to_string())
    })?;
    let Value::Object(obj) = v else {
        return Err(CniError::config(
            "the network configuration is not a JSON object",
        ));
    };
    let cni_version = match obj.get("cniVersion") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(CniError::config("field \"cniVersion\" must be a string")),
        None => return Err(CniError::config("field \"cniVersion\" is missing")),
    };
    if !SUPPORTED_VERSIONS.contains(&cni_version.as_str()) {
        return Err(CniError::new(
            INCOMPATIBLE_VERSION,
            format!(
                "cniVersion \"{cni_version}\" is not supported (linkem-cni speaks {})",
                SUPPORTED_VERSIONS.join(", ")
            ),
        ));
    }
    let mut spec = LinkSpec::default();
    let mut options = Vec::new();
    let mut runtime = LinkSpec::default();
    let mut prev_result = None;
    let mut valid_attachments = None;
    let mut network = String::new();
    let mut run_dir = PathBuf::from(crate::daemon::DEFAULT_RUN_DIR);
    for (key, value) in &obj {
        match key.as_str() {
            "link" => spec.link = Some(words_field(key, value)?),
            "a-to-b" => spec.a_to_b = Some(words_field(key, value)?),
            "b-to-a" => spec.b_to_a = Some(words_field(key, value)?),
            "rules" => spec.rules = Some(string_field(key, value)?),
            "options" => options = options_field(value)?,
            "runtimeConfig" => runtime = runtime_config(value)?,
            "prevResult" => {
                if !value.is_object() {
                    return Err(CniError::config("field \"prevResult\" must be an object"));
                }
                prev_result = Some(value.clone());
            }
            "cni.dev/valid-attachments" => valid_attachments = Some(attachments(key, value)?),
            "name" => network = string_field(key, value)?,
            "runDir" => run_dir = run_dir_field(value)?,
            k if STANDARD_KEYS.contains(&k) => {}
            k => {
                return Err(CniError::config(format!(
                    "unknown field \"{k}\" in linkem-cni's configuration (its fields: link, \
                     a-to-b, b-to-a, rules, options, runDir)"
                )))
            }
        }
    }
    Ok(NetConf {
        cni_version,
        spec,
        options,
        runtime,
        prev_result,
        valid_attachments,
        network,
        run_dir,
    })
}

/// `runDir`: an absolute path of at most 200 bytes (a socket's path in it
/// must fit the kernel's 108 bytes with a name of up to 64 and `.sock`,
/// which `linkem bridge` then checks), without `..`.
fn run_dir_field(value: &Value) -> Result<PathBuf, CniError> {
    let s = string_field("runDir", value)?;
    let ok = s.starts_with('/')
        && s.len() <= 200
        && !s.contains('\0')
        && !s.split('/').any(|part| part == "..");
    if !ok {
        return Err(CniError::config(format!(
            "field \"runDir\" must be an absolute path without '..' (e.g. /run/linkem), not '{s}'"
        )));
    }
    Ok(PathBuf::from(s))
}

/// The run directory of a configuration DEL may not be able to parse as a
/// whole: its `runDir` when that is valid, else the default (DEL cleans up
/// what it can; see the crate's doc).
pub fn run_dir_lenient(bytes: &[u8]) -> PathBuf {
    serde_json::from_slice::<Value>(bytes)
        .ok()
        .and_then(|v| v.get("runDir").and_then(|d| run_dir_field(d).ok()))
        .unwrap_or_else(|| PathBuf::from(crate::daemon::DEFAULT_RUN_DIR))
}

/// The pod a Kubernetes runtime names in `CNI_ARGS` (`K8S_POD_NAMESPACE`,
/// `K8S_POD_NAME`, `K8S_POD_UID`); each None when not given.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PodArgs {
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub uid: Option<String>,
}

/// The pod named in `CNI_ARGS`; malformed pairs are [`from_cni_args`]' to refuse.
pub fn pod_args(args: &str) -> PodArgs {
    let mut pod = PodArgs::default();
    for (k, v) in args.split(';').filter_map(|p| p.split_once('=')) {
        let v = Some(v.to_string()).filter(|v| !v.is_empty());
        match k {
            "K8S_POD_NAMESPACE" => pod.namespace = v,
            "K8S_POD_NAME" => pod.name = v,
            "K8S_POD_UID" => pod.uid = v,
            _ => {}
        }
    }
    pod
}

fn string_field(key: &str, value: &Value) -> Result<String, CniError> {
    match value {
        Value::String(s) => Ok(s.clone()),
        _ => Err(CniError::config(format!(
            "field \"{key}\" must be a string, not {value}"
        ))),
    }
}

/// A string of link words, none of them an option.
fn words_field(key: &str, value: &Value) -> Result<String, CniError> {
    let s = string_field(key, value)?;
    check_words(key, &s)?;
    Ok(s)
}

/// Words must not start with `-` (see the module's doc).
pub fn check_words(field: &str, words: &str) -> Result<(), CniError> {
    if let Some(w) = words.split_whitespace().find(|w| w.starts_with('-')) {
        return Err(CniError::config(format!(
            "field \"{field}\": word '{w}' starts with '-': link words only (options of \
             linkem bridge go in the network list's \"options\")"
        )));
    }
    Ok(())
}

fn options_field(value: &Value) -> Result<Vec<String>, CniError> {
    let err = || {
        CniError::config(format!(
            "field \"options\" must be an array of strings (e.g. [\"--max-lag\", \"off\"]), not {value}"
        ))
    };
    let Value::Array(items) = value else {
        return Err(err());
    };
    items
        .iter()
        .map(|i| i.as_str().map(str::to_string).ok_or_else(err))
        .collect()
}

/// `runtimeConfig.linkem`: the same fields as the network's, per container.
fn runtime_config(value: &Value) -> Result<LinkSpec, CniError> {
    let Value::Object(rc) = value else {
        return Err(CniError::config(
            "field \"runtimeConfig\" must be an object",
        ));
    };
    let Some(linkem) = rc.get("linkem") else {
        return Ok(LinkSpec::default());
    };
    let Value::Object(m) = linkem else {
        return Err(CniError::config(format!(
            "field \"runtimeConfig.linkem\" must be an object with link, a-to-b, b-to-a or rules, not {linkem}"
        )));
    };
    spec_from_map("runtimeConfig.linkem", m)
}

fn spec_from_map(prefix: &str, m: &Map<String, Value>) -> Result<LinkSpec, CniError> {
    let mut spec = LinkSpec::default();
    for (k, v) in m {
        let field = format!("{prefix}.{k}");
        match k.as_str() {
            "link" => spec.link = Some(words_field(&field, v)?),
            "a-to-b" => spec.a_to_b = Some(words_field(&field, v)?),
            "b-to-a" => spec.b_to_a = Some(words_field(&field, v)?),
            "rules" => spec.rules = Some(string_field(&field, v)?),
            _ => {
                return Err(CniError::config(format!(
                    "unknown field \"{field}\" (its fields: link, a-to-b, b-to-a, rules)"
                )))
            }
        }
    }
    Ok(spec)
}

fn attachments(key: &str, value: &Value) -> Result<Vec<(String, String)>, CniError> {
    let err = || {
        CniError::config(format!(
            "field \"{key}\" must be an array of {{containerID, ifname}}"
        ))
    };
    let Value::Array(items) = value else {
        return Err(err());
    };
    items
        .iter()
        .map(|i| {
            let id = i
                .get("containerID")
                .and_then(Value::as_str)
                .ok_or_else(err)?;
            let ifname = i.get("ifname").and_then(Value::as_str).ok_or_else(err)?;
            Ok((id.to_string(), ifname.to_string()))
        })
        .collect()
}

/// The link words in `CNI_ARGS` (`K=V;K=V`, as Kubernetes' runtimes pass
/// them): `LINKEM_LINK`, `LINKEM_A_TO_B`, `LINKEM_B_TO_A`. Other keys belong
/// to other plugins and are left alone.
pub fn from_cni_args(args: &str) -> Result<LinkSpec, CniError> {
    let mut spec = LinkSpec::default();
    for pair in args.split(';').filter(|p| !p.is_empty()) {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(CniError::new(
                crate::error::INVALID_ENV,
                format!("CNI_ARGS: '{pair}' is not KEY=VALUE"),
            ));
        };
        let field = format!("CNI_ARGS {k}");
        match k {
            "LINKEM_LINK" => spec.link = Some(checked(&field, v)?),
            "LINKEM_A_TO_B" => spec.a_to_b = Some(checked(&field, v)?),
            "LINKEM_B_TO_A" => spec.b_to_a = Some(checked(&field, v)?),
            _ => {}
        }
    }
    Ok(spec)
}

fn checked(field: &str, words: &str) -> Result<String, CniError> {
    check_words(field, words)?;
    Ok(words.to_string())
}

/// The arguments after `linkem bridge IF_A IF_B`: the words for both
/// directions, the options, the emulator's name, control socket and the
/// directory its control requests may read files from (the agent's traces),
/// the rule file, then the per-direction words (last: each takes the words
/// up to the next option).
pub fn bridge_args(
    spec: &LinkSpec,
    options: &[String],
    name: &str,
    socket: &std::path::Path,
    control_files: &std::path::Path,
    rules_file: Option<&str>,
) -> Vec<String> {
    let mut args: Vec<String> = Vec::new();
    if let Some(link) = &spec.link {
        args.extend(link.split_whitespace().map(str::to_string));
    }
    args.extend(options.iter().cloned());
    args.extend(["--name".to_string(), name.to_string()]);
    args.extend(["--control".to_string(), socket.display().to_string()]);
    args.extend([
        "--control-files".to_string(),
        control_files.display().to_string(),
    ]);
    if let Some(path) = rules_file {
        args.extend(["--rules".to_string(), path.to_string()]);
    }
    for (flag, words) in [("--a-to-b", &spec.a_to_b), ("--b-to-a", &spec.b_to_a)] {
        if let Some(words) = words.as_deref().filter(|w| !w.trim().is_empty()) {
            args.push(flag.to_string());
            args.extend(words.split_whitespace().map(str::to_string));
        }
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::INVALID_CONFIG;

    fn conf(json: &str) -> Result<NetConf, CniError> {
        parse(json.as_bytes())
    }

    #[test]
    fn the_network_words_become_the_command_line() {
        let c = conf(
            r#"{"cniVersion":"1.0.0","name":"n","type":"linkem-cni","link":"delay 20ms rate 100mbit",
                "b-to-a":"delay 5ms","options":["--max-lag","off"]}"#,
        )
        .unwrap();
        let sock = std::path::Path::new("/run/linkem/cni-x-eth0.sock");
        let files = std::path::Path::new("/run/linkem/files/cni-x-eth0");
        let args = bridge_args(&c.spec, &c.options, "cni-x-eth0", sock, files, None);
        assert_eq!(
            args,
            [
                "delay",
                "20ms",
                "rate",
                "100mbit",
                "--max-lag",
                "off",
                "--name",
                "cni-x-eth0",
                "--control",
                "/run/linkem/cni-x-eth0.sock",
                "--control-files",
                "/run/linkem/files/cni-x-eth0",
                "--b-to-a",
                "delay",
                "5ms"
            ]
        );
    }

    #[test]
    fn runtime_config_wins_over_cni_args_which_win_over_the_network() {
        let c = conf(
            r#"{"cniVersion":"1.1.0","name":"n","type":"linkem-cni","link":"delay 20ms","a-to-b":"loss 1%",
                "runtimeConfig":{"linkem":{"link":"delay 50ms"}}}"#,
        )
        .unwrap();
        let args = from_cni_args(
            "IgnoreUnknown=1;K8S_POD_NAME=p;LINKEM_LINK=delay 30ms;LINKEM_B_TO_A=rate 1mbit",
        )
        .unwrap();
        let spec = c.spec.clone().overlay(args).overlay(c.runtime.clone());
        assert_eq!(spec.link.as_deref(), Some("delay 50ms"));
        assert_eq!(spec.a_to_b.as_deref(), Some("loss 1%"));
        assert_eq!(spec.b_to_a.as_deref(), Some("rate 1mbit"));
    }

    #[test]
    fn per_container_rules_replace_the_networks_words_and_back() {
        let net = LinkSpec {
            link: Some("delay 20ms".into()),
            a_to_b: Some("delay 30ms".into()),
            ..LinkSpec::default()
        };
        let rules = LinkSpec {
            rules: Some("pipe 1 config delay 5".into()),
            ..LinkSpec::default()
        };
        let spec = net.overlay(rules.clone());
        assert_eq!(spec, rules);
        let words = LinkSpec {
            b_to_a: Some("loss 1%".into()),
            ..LinkSpec::default()
        };
        assert_eq!(rules.overlay(words.clone()), words);
    }

    #[test]
    fn bad_config_names_the_field() {
        let cases = [
            (
                r#"{"cniVersion":"1.0.0","type":"linkem-cni","link":5}"#,
                "\"link\"",
            ),
            (
                r#"{"cniVersion":"1.0.0","type":"linkem-cni","lnk":"delay 1ms"}"#,
                "\"lnk\"",
            ),
            (
                r#"{"cniVersion":"1.0.0","type":"linkem-cni","options":"--max-lag off"}"#,
                "\"options\"",
            ),
            (
                r#"{"cniVersion":"1.0.0","type":"linkem-cni","runtimeConfig":{"linkem":{"lnk":"x"}}}"#,
                "runtimeConfig.linkem.lnk",
            ),
            (
                r#"{"cniVersion":"1.0.0","type":"linkem-cni","link":"delay 1ms --events /etc/passwd"}"#,
                "'--events'",
            ),
            (r#"{"type":"linkem-cni"}"#, "\"cniVersion\""),
        ];
        for (json, named) in cases {
            let e = conf(json).unwrap_err();
            assert_eq!(e.code, INVALID_CONFIG, "{json}: {e}");
            assert!(
                e.msg.contains(named),
                "{json}: '{}' does not name {named}",
                e.msg
            );
        }
        let e = conf(r#"{"cniVersion":"0.3.1","type":"linkem-cni"}"#).unwrap_err();
        assert_eq!(e.code, INCOMPATIBLE_VERSION);
        assert!(e.msg.contains("0.3.1"));
        let e = from_cni_args("LINKEM_LINK=delay 1ms -x").unwrap_err();
        assert!(e.msg.contains("CNI_ARGS LINKEM_LINK"), "{}", e.msg);
        let e = conf("{not json").unwrap_err();
        assert_eq!(e.code, DECODE);
    }

    #[test]
    fn run_dir_is_read_checked_and_defaulted() {
        let c = conf(r#"{"cniVersion":"1.0.0","type":"linkem-cni","runDir":"/tmp/node-a"}"#);
        assert_eq!(c.unwrap().run_dir, std::path::Path::new("/tmp/node-a"));
        let c = conf(r#"{"cniVersion":"1.0.0","type":"linkem-cni"}"#).unwrap();
        assert_eq!(c.run_dir, std::path::Path::new("/run/linkem"));
        for bad in [r#""run""#, r#""/run/../etc""#, "5"] {
            let json = format!(r#"{{"cniVersion":"1.0.0","type":"linkem-cni","runDir":{bad}}}"#);
            let e = conf(&json).unwrap_err();
            assert!(e.msg.contains("runDir"), "{bad}: {e}");
        }
        // DEL reads runDir from a configuration it cannot otherwise parse.
        let lenient = |s: &str| run_dir_lenient(s.as_bytes());
        let d = lenient(r#"{"cniVersion":"9","lnk":5,"runDir":"/tmp/node-b"}"#);
        assert_eq!(d, std::path::Path::new("/tmp/node-b"));
        assert_eq!(lenient("{not json"), std::path::Path::new("/run/linkem"));
        assert_eq!(
            lenient(r#"{"runDir":"x/.."}"#),
            std::path::Path::new("/run/linkem")
        );
    }

    #[test]
    fn the_pod_is_read_from_cni_args() {
        let p = pod_args("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0;K8S_POD_UID=u-1;K8S_POD_INFRA_CONTAINER_ID=x");
        assert_eq!(
            p,
            PodArgs {
                namespace: Some("ns".into()),
                name: Some("web-0".into()),
                uid: Some("u-1".into())
            }
        );
        assert_eq!(pod_args("K8S_POD_NAME=;x"), PodArgs::default());
    }

    #[test]
    fn gc_reads_the_attachments_to_keep() {
        let c = conf(
            r#"{"cniVersion":"1.1.0","type":"linkem-cni",
                "cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]}"#,
        )
        .unwrap();
        assert_eq!(
            c.valid_attachments,
            Some(vec![("c1".to_string(), "eth0".to_string())])
        );
    }
}
