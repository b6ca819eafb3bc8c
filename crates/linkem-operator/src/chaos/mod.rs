//! The `LinkChaos` resource (`linkem.dev/v1alpha1`): Chaos Mesh's
//! NetworkChaos spec, field for field (`selector`, `mode`, `value`, `action`,
//! `delay`, `loss`, `duplicate`, `corrupt`, `bandwidth`, `direction`,
//! `target`, `duration`, ...), so that a NetworkChaos manifest ports by
//! changing `apiVersion` and `kind`, plus linkem's own `linkem:` section
//! (link words per direction, a Dummynet rule set, a schedule, a trace).
//!
//! The CRD's OpenAPI schema is generated from these types
//! (`linkem-operator crd`, `deploy/crd.yaml`): the API server refuses a spec
//! whose durations, percentages, modes or actions are malformed (the same
//! patterns Chaos Mesh's CRD carries) before any controller sees it.
//!
//! Status: the controller writes `selected` (the pods the selector and mode
//! picked, kept until the resource ends), `phase` and `expiresAt`; each node's
//! agent writes its pods' entries of `pods` (key `NAMESPACE/NAME`). A JSON
//! merge patch of one key leaves the others, so the writers never race.

pub mod words;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A Go duration as Chaos Mesh's CRD accepts it (`latency`, `jitter`).
pub const DURATION_PATTERN: &str = r"^[0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h)$";
/// `duration`: Go's `time.ParseDuration` (one or more number-unit terms).
pub const SPAN_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$";
/// A percentage as a decimal string ("25", "0.5").
pub const PERCENT_PATTERN: &str = r"^[0-9]+(\.[0-9]+)?$";
/// tc's rate units (`bps` is bytes per second, `bit` bits per second).
pub const RATE_PATTERN: &str =
    r"^[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps|tbps)$";

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "linkem.dev",
    version = "v1alpha1",
    kind = "LinkChaos",
    plural = "linkchaos",
    shortname = "lc",
    namespaced,
    status = "LinkChaosStatus",
    printcolumn = r#"{"name":"action","type":"string","jsonPath":".spec.action"}"#,
    printcolumn = r#"{"name":"duration","type":"string","jsonPath":".spec.duration"}"#,
    printcolumn = r#"{"name":"phase","type":"string","jsonPath":".status.phase"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct LinkChaosSpec {
    /// The pods to impair (NetworkChaos's `selector`).
    pub selector: PodSelectorSpec,
    /// How many of the selected pods: `one`, `all`, `fixed`, `fixed-percent`,
    /// `random-max-percent`.
    pub mode: Mode,
    /// The count (`fixed`) or percentage (`fixed-percent`, `random-max-percent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// NetworkChaos's action; without one, every impairment given applies
    /// (Chaos Mesh's `netem`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<Action>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<DelaySpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<LossSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate: Option<DuplicateSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrupt: Option<CorruptSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<BandwidthSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateSpec>,
    /// `to` (the pod's egress, the default), `from` (its ingress), `both`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    /// NetworkChaos's per-destination scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<PodSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_device: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_targets: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_cluster: Option<String>,
    /// The pod's interface (CNI_IFNAME); without one, every interface of the
    /// pod that has an emulator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// How long the impairment lasts from the resource's creation; without
    /// one, until the resource is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"))]
    pub duration: Option<String>,
    /// linkem's own: link words, rules, schedule, traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linkem: Option<LinkemSpec>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub enum Mode {
    #[serde(rename = "one")]
    One,
    #[serde(rename = "all")]
    All,
    #[serde(rename = "fixed")]
    Fixed,
    #[serde(rename = "fixed-percent")]
    FixedPercent,
    #[serde(rename = "random-max-percent")]
    RandomMaxPercent,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Netem,
    Delay,
    Loss,
    Duplicate,
    Corrupt,
    Partition,
    Bandwidth,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    To,
    From,
    Both,
}

/// Chaos Mesh's `PodSelectorSpec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSelectorSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selectors: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression_selectors: Option<Vec<LabelSelectorRequirement>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_selectors: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_selectors: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selectors: Option<BTreeMap<String, String>>,
    /// Namespace to pod names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<BTreeMap<String, Vec<String>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_phase_selectors: Option<Vec<String>>,
}

/// Kubernetes' set-based label requirement (`In`, `NotIn`, `Exists`, `DoesNotExist`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct LabelSelectorRequirement {
    pub key: String,
    pub operator: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<String>>,
}

/// Chaos Mesh's `PodSelector` (the `target`'s shape).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct PodSelector {
    pub selector: PodSelectorSpec,
    pub mode: Mode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct DelaySpec {
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h)$"))]
    pub latency: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h)$"))]
    pub jitter: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?$"))]
    pub correlation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reorder: Option<ReorderSpec>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct ReorderSpec {
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?$"))]
    pub reorder: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?$"))]
    pub correlation: Option<String>,
    #[serde(default)]
    pub gap: u32,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct LossSpec {
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?$"))]
    pub loss: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?$"))]
    pub correlation: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct DuplicateSpec {
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?$"))]
    pub duplicate: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?$"))]
    pub correlation: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct CorruptSpec {
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?$"))]
    pub corrupt: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?$"))]
    pub correlation: Option<String>,
}

/// tc tbf's knobs: `rate` in tc's units, `limit` (bytes queued), `buffer`
/// (the bucket, bytes), `peakrate` (bytes per second), `minburst` (bytes).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct BandwidthSpec {
    #[schemars(regex(
        pattern = r"^[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps|tbps)$"
    ))]
    pub rate: String,
    #[schemars(range(min = 1))]
    pub limit: u32,
    #[schemars(range(min = 1))]
    pub buffer: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peakrate: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minburst: Option<u32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct RateSpec {
    #[schemars(regex(
        pattern = r"^[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps|tbps)$"
    ))]
    pub rate: String,
}

/// linkem's own impairments, in linkem's words (`linkem bridge --help`).
/// Egress is what the pod sends, ingress what it receives.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LinkemSpec {
    /// Words for both directions (`delay 20ms jitter 2ms rate 10mbit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<String>,
    /// A Dummynet rule set (ipfw/dnctl lines), for pods whose emulator runs rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<String>,
    /// Changes at instants after the resource takes effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Vec<ScheduleStep>>,
    /// A packet-delivery trace per direction (the file's text, mahimahi's format).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceSpec>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct ScheduleStep {
    /// From the resource's start (`10s`, `1m30s`).
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"))]
    pub at: String,
    /// Link words; the direction's other words stay.
    pub words: String,
    /// `to` (egress), `from` (ingress) or `both` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct TraceSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LinkChaosStatus {
    /// `Running`, `Ended` (duration out) or `Refused` (see `message`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// RFC 3339 (with the fraction of a second): `startedAt` + duration.
    /// Agents take the expiry from here when it is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// RFC 3339 (with the fraction of a second): when the resource took
    /// effect, creationTimestamp made precise (the API server keeps whole
    /// seconds): the instant the controller first saw it, when that lies
    /// within creationTimestamp's second, else the middle of that second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// The pods the selector and mode picked (the controller's pick, kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected: Option<Vec<PodRef>>,
    /// Per pod (`NAMESPACE/NAME`), what its node's agent did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<BTreeMap<String, PodStatus>>,
}

#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PodStatus {
    pub node: String,
    /// `Applied`, `Refused`, `Restored` or `Waiting` (no emulator for it yet).
    pub state: String,
    /// RFC 3339 with nanoseconds: the instant the emulator applied the change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// The emulator (`cni-SANDBOX-IFNAME`) it was applied to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emulator: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A refusal's word and its 1-based position in `words`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub word: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u32>,
    /// The words sent (per direction: `egress: ...; ingress: ...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub words: Option<String>,
}
