//! A pod's desired link: its emulator's base words, then, in creation order,
//! the words of every LinkChaos that applies to it (its `status.selected`
//! names the pod on this node; not being deleted, not ended, not past
//! creation + `duration`), each with its trace (named by its content, see
//! [`trace_file_name`]) and the schedule steps whose
//! instants have passed. The layers are read by linkem's own parser, a later
//! layer replacing what an earlier one set (`delay` over `delay`), and the
//! result printed as linkem's canonical words: what `replace` takes, each
//! thing named once.
//!
//! Direction: linkem-cni's `egress` names the emulator direction that carries
//! what the pod sends (`a-to-b`); ingress is the other.

use super::emulators::{Emulator, PodKey};
use crate::chaos::words::{self, DirectionWords, SpecError};
use crate::chaos::{Direction, LinkChaos, PodRef};
use linkem_core::config::{Dialect, FileLoader};
use linkem_core::LinkSpec;
use std::collections::BTreeMap;

/// A schedule step of a resource: words at an instant after its creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub at_ns: u64,
    pub words: Vec<String>,
    pub egress: bool,
    pub ingress: bool,
}

/// What the agent needs of one LinkChaos.
#[derive(Debug, Clone)]
pub struct ChaosView {
    pub namespace: String,
    pub name: String,
    /// When it took effect (`status.startedAt`, else creationTimestamp),
    /// ns since the epoch: schedule steps count from here.
    pub created_ns: i128,
    /// When it ends (`status.expiresAt`, else start + `duration`).
    pub expires_ns: Option<i128>,
    /// Deleted (a deletionTimestamp) or ended by the controller.
    pub gone: bool,
    pub selected: Vec<PodRef>,
    /// NetworkChaos's `device`: the pod's interface (CNI `ifname`) it
    /// impairs; `None`: every interface of the pod that has an emulator.
    pub device: Option<String>,
    pub words: Result<DirectionWords, SpecError>,
    pub steps: Vec<Step>,
}

impl ChaosView {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The resource as the agent reads it: its start is the controller's
    /// `status.startedAt` (creationTimestamp made finer than its whole
    /// second), else creationTimestamp; its end the controller's
    /// `status.expiresAt`, else start + `duration`.
    pub fn from_resource(lc: &LinkChaos) -> ChaosView {
        let meta = &lc.metadata;
        let status = lc.status.clone().unwrap_or_default();
        let instant = |t: &Option<String>| {
            t.as_deref()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .map(|t| t.as_nanosecond())
        };
        let created_ns = instant(&status.started_at).unwrap_or_else(|| {
            meta.creation_timestamp
                .as_ref()
                .map(|t| t.0.as_nanosecond())
                .unwrap_or(0)
        });
        let duration_ns = lc
            .spec
            .duration
            .as_deref()
            .and_then(|d| words::go_duration_ns(d).ok());
        let expires_ns =
            instant(&status.expires_at).or_else(|| duration_ns.map(|d| created_ns + i128::from(d)));
        let phase = status.phase.as_deref();
        let steps = lc
            .spec
            .linkem
            .iter()
            .flat_map(|l| l.schedule.iter().flatten())
            .filter_map(|s| {
                let dir = s.direction.unwrap_or(Direction::Both);
                Some(Step {
                    at_ns: words::go_duration_ns(&s.at).ok()?,
                    words: s.words.split_whitespace().map(str::to_string).collect(),
                    egress: dir != Direction::From,
                    ingress: dir != Direction::To,
                })
            })
            .collect();
        ChaosView {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            created_ns,
            expires_ns,
            gone: meta.deletion_timestamp.is_some() || matches!(phase, Some("Ended" | "Refused")),
            selected: status.selected.unwrap_or_default(),
            device: lc.spec.device.clone().filter(|d| !d.is_empty()),
            words: words::link_words(&lc.spec),
            steps,
        }
    }

    /// Whether the resource names the pod's interface `ifname` (or none).
    pub fn on_device(&self, ifname: &str) -> bool {
        self.device.as_deref().is_none_or(|d| d == ifname)
    }

    /// Whether the resource selects `pod` on `node` and is in force at `now_ns`.
    pub fn applies_to(&self, pod: &PodKey, node: &str, now_ns: i128) -> bool {
        !self.gone
            && self.expires_ns.is_none_or(|e| now_ns < e)
            && self.selected.iter().any(|p| {
                p.namespace == pod.namespace
                    && p.name == pod.name
                    && p.node.as_deref().is_none_or(|n| n == node)
            })
    }
}

/// One resource's words over a pod, per direction, as layers (its words and
/// trace, then each schedule step reached).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    pub resource: String,
    pub egress: Vec<Vec<String>>,
    pub ingress: Vec<Vec<String>>,
    /// `linkem.rules`: for an emulator running a rule set, the set that
    /// replaces its own (the last layer's that has one).
    pub rules: Option<String>,
    /// Whether the resource changes link words (NetworkChaos's fields,
    /// `linkem.link|egress|ingress|trace|schedule`): what an emulator
    /// running a rule set cannot take.
    pub link_words: bool,
}

/// The bare name a trace's text is sent under (`trace NAME`): named by its
/// content (FNV-1a, 64 bits), so the same text is one file in the emulator's
/// `--control-files` directory whatever resource carries it, and a changed
/// text is a new name (a changed word the agent sends).
pub fn trace_file_name(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("linkchaos-{h:016x}-{}.trace", text.len())
}

/// The traces of the resources `layers` carry, by [`trace_file_name`].
pub fn traces_of(chaos: &[ChaosView], layers: &[Layer]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for c in chaos
        .iter()
        .filter(|c| layers.iter().any(|l| l.resource == c.key()))
    {
        let Ok(w) = &c.words else { continue };
        for text in [&w.traces.egress, &w.traces.ingress].into_iter().flatten() {
            out.insert(trace_file_name(text), text.clone());
        }
    }
    out
}

/// The layers over `pod`'s interface `ifname` at `now_ns` (creation order), the resources whose
/// spec cannot apply (with why), and the next instant something changes by
/// itself (a step due, a duration out).
pub fn layers(
    chaos: &[ChaosView],
    pod: &PodKey,
    ifname: &str,
    node: &str,
    now_ns: i128,
) -> (Vec<Layer>, Vec<(String, SpecError)>, Option<i128>) {
    let mut applying: Vec<&ChaosView> = chaos
        .iter()
        .filter(|c| c.applies_to(pod, node, now_ns) && c.on_device(ifname))
        .collect();
    applying.sort_by_key(|c| (c.created_ns, c.key()));
    let (mut out, mut refused, mut wake) = (vec![], vec![], None::<i128>);
    let mut soonest = |t: i128| wake = Some(wake.map_or(t, |w| w.min(t)));
    for c in applying {
        if let Some(e) = c.expires_ns {
            soonest(e);
        }
        let w = match &c.words {
            Ok(w) => w,
            Err(e) => {
                refused.push((c.key(), e.clone()));
                continue;
            }
        };
        let mut layer = Layer {
            resource: c.key(),
            egress: vec![],
            ingress: vec![],
            rules: w.rules.clone(),
            link_words: w.egress.is_some()
                || w.ingress.is_some()
                || w.traces.egress.is_some()
                || w.traces.ingress.is_some()
                || !c.steps.is_empty(),
        };
        for egress in [true, false] {
            let (own, trace) = if egress {
                (&w.egress, &w.traces.egress)
            } else {
                (&w.ingress, &w.traces.ingress)
            };
            let dir = if egress {
                &mut layer.egress
            } else {
                &mut layer.ingress
            };
            let mut first: Vec<String> = split(own.as_deref());
            if let Some(text) = trace {
                first.extend(["trace".into(), trace_file_name(text)]);
            }
            dir.push(first);
            for s in &c.steps {
                let at = c.created_ns + i128::from(s.at_ns);
                if at > now_ns {
                    soonest(at);
                } else if (egress && s.egress) || (!egress && s.ingress) {
                    dir.push(s.words.clone());
                }
            }
        }
        out.push(layer);
    }
    (out, refused, wake)
}

fn split(words: Option<&str>) -> Vec<String> {
    words
        .unwrap_or("")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The words to send per emulator direction, and the resources they carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub a_to_b: String,
    pub b_to_a: String,
    pub resources: Vec<String>,
}

/// Why a desired link cannot be made: the resource and direction whose word
/// linkem refused, the word and its 1-based position in `words`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub resource: Option<String>,
    /// `egress` or `ingress`.
    pub direction: String,
    pub message: String,
    pub word: Option<String>,
    pub position: Option<u32>,
    pub words: String,
}

/// The emulator's base with `layers` over it; `files` reads the files words
/// name (the agent's traces, the system's distribution tables).
pub fn desired(
    emulator: &Emulator,
    layers: &[Layer],
    files: &mut FileLoader<'_>,
) -> Result<Desired, Box<Refusal>> {
    let mut per_dir = [String::new(), String::new()];
    for egress in [true, false] {
        let mut all: Vec<(Option<&str>, Vec<String>)> = emulator
            .base_layers(egress)
            .into_iter()
            .map(|l| (None, l))
            .collect();
        for l in layers {
            let own = if egress { &l.egress } else { &l.ingress };
            all.extend(own.iter().map(|w| (Some(l.resource.as_str()), w.clone())));
        }
        let text = merge(&all, files).map_err(|(i, e)| {
            let (resource, words) = &all[i];
            let offset: usize = all[..i].iter().map(|(_, w)| w.len()).sum();
            let inside = e.position > offset && e.position <= offset + words.len();
            Box::new(Refusal {
                resource: resource.map(str::to_string),
                direction: if egress { "egress" } else { "ingress" }.into(),
                message: e.message.clone(),
                word: inside.then(|| e.word.clone()),
                position: inside.then(|| (e.position - offset) as u32),
                words: words.join(" "),
            })
        })?;
        // linkem-cni's side a is the pod: its egress is a-to-b.
        let slot = if egress == (linkem_cni::state::EGRESS == "a-to-b") {
            0
        } else {
            1
        };
        per_dir[slot] = text;
    }
    let [a_to_b, b_to_a] = per_dir;
    Ok(Desired {
        a_to_b,
        b_to_a,
        resources: layers.iter().map(|l| l.resource.clone()).collect(),
    })
}

/// The layers read as one link, printed canonically; on a refusal the index
/// of the layer that holds the word (the last one when no word is named).
fn merge(
    layers: &[(Option<&str>, Vec<String>)],
    files: &mut FileLoader<'_>,
) -> Result<String, (usize, linkem_core::ConfigError)> {
    let words: Vec<&[String]> = layers.iter().map(|(_, w)| w.as_slice()).collect();
    match LinkSpec::parse_layers(&words, Dialect::Linkem, files) {
        Ok(spec) => {
            let mut text = spec.link.to_string();
            if let Some(seed) = spec.seed {
                text = format!("{text} seed {seed}");
            }
            // `replace` needs a word: a link with nothing set is no delay.
            if text.trim().is_empty() {
                text = "delay 0ms".into();
            }
            Ok(text)
        }
        Err(e) => {
            let mut end = 0;
            let at = layers
                .iter()
                .position(|(_, w)| {
                    end += w.len();
                    e.position <= end
                })
                .unwrap_or(layers.len().saturating_sub(1));
            Err((at, e))
        }
    }
}

#[cfg(test)]
#[path = "desired_tests.rs"]
mod tests;
