//! One pass of the agent over its node, without the API server: the
//! emulators the run dir has now, the resources as the watch last saw them,
//! the record of what was applied. For each emulator whose desired link
//! differs from what it runs, one batch; the status entries to write follow
//! from what happened (each written once: an unchanged entry is not written
//! again).

use super::applied::{Entry, Record};
use super::apply::{self, Outcome};
use super::desired::{self, ChaosView, Desired, Layer, Refusal};
use super::emulators::{self, Emulator, PodKey};
use super::metrics::{Labels, Metrics};
use crate::chaos::words::SpecError;
use crate::chaos::PodStatus;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A `status.pods["NS/NAME"]` entry of one resource to write.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusUpdate {
    /// The resource's namespace and name.
    pub namespace: String,
    pub name: String,
    /// `NAMESPACE/NAME` of the pod.
    pub pod: String,
    pub status: PodStatus,
}

/// The agent's state between passes.
pub struct Agent {
    pub node: String,
    pub run_dir: PathBuf,
    pub record: Record,
    pub metrics: Arc<Metrics>,
    /// What was last written per (resource, pod).
    reported: HashMap<(String, String), PodStatus>,
}

/// What a pass produced.
#[derive(Debug, Default)]
pub struct Pass {
    pub updates: Vec<StatusUpdate>,
    /// The next instant (ns since the epoch) something changes by itself.
    pub wake_ns: Option<i128>,
}

/// RFC 3339 with nanoseconds, UTC.
pub fn rfc3339_ns(at_ns: u64) -> String {
    jiff::Timestamp::from_nanosecond(i128::from(at_ns))
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// Now, ns since the epoch.
pub fn now_ns() -> i128 {
    jiff::Timestamp::now().as_nanosecond()
}

impl Agent {
    /// The agent of `node` over `run_dir`, its record read from
    /// `RUN/agent/applied.json`.
    pub fn new(node: &str, run_dir: &Path, metrics: Arc<Metrics>) -> anyhow::Result<Agent> {
        Ok(Agent {
            node: node.to_string(),
            run_dir: run_dir.to_path_buf(),
            record: Record::load(&Record::path(run_dir))?,
            metrics,
            reported: HashMap::new(),
        })
    }

    /// Writes `traces` into the emulator's `--control-files` directory
    /// (`RUN/files/NAME/`, made by linkem-cni) where they are not yet, each
    /// to a temporary name then renamed (the emulator never reads half a
    /// file), and removes the traces there no layer names any more.
    fn write_traces(&self, e: &Emulator, traces: &BTreeMap<String, String>) {
        let dir = linkem_cni::daemon::Files::new(&self.run_dir, &e.name).control_files;
        if !dir.is_dir() {
            // An emulator started without --control-files: it refuses the
            // trace's name, and the pod's status says so.
            return;
        }
        for old in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = old.file_name().to_string_lossy().into_owned();
            if name.starts_with("linkchaos-") && !traces.contains_key(&name) {
                let _ = std::fs::remove_file(old.path());
            }
        }
        for (name, text) in traces {
            let path = dir.join(name);
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
                continue;
            }
            let tmp = dir.join(format!(".{name}.tmp"));
            let written = std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, &path));
            if let Err(err) = written {
                let _ = std::fs::remove_file(&tmp);
                eprintln!(
                    "linkem-operator agent: cannot write {}: {err}",
                    path.display()
                );
            }
        }
    }

    /// One pass at `now_ns`. `pod_uids`: the node's pods as the API server
    /// has them, when known: an emulator of an older pod of the same name
    /// (another uid) is left alone.
    pub fn pass(
        &mut self,
        chaos: &[ChaosView],
        pod_uids: Option<&HashMap<PodKey, String>>,
        now_ns: i128,
    ) -> Pass {
        let found: Vec<Emulator> = emulators::scan(&self.run_dir)
            .into_iter()
            .filter(|e| {
                let known = pod_uids.and_then(|m| m.get(&e.pod));
                known.is_none_or(|uid| e.pod_uid.as_ref().is_none_or(|u| u == uid))
            })
            .collect();
        self.metrics.set_emulators(
            found
                .iter()
                .map(|e| (labels(e), e.socket.clone()))
                .collect::<BTreeMap<_, _>>(),
        );
        let mut pass = Pass::default();
        let before = self.record.clone();
        for e in &found {
            let (layers, refused, wake) =
                desired::layers(chaos, &e.pod, &e.ifname, &self.node, now_ns);
            if let Some(w) = wake {
                pass.wake_ns = Some(pass.wake_ns.map_or(w, |p: i128| p.min(w)));
            }
            for (resource, err) in refused {
                self.spec_refused(e, &resource, &err, &mut pass);
            }
            let (layers, misfits) = fit(e, layers);
            for (resource, err) in misfits {
                self.spec_refused(e, &resource, &err, &mut pass);
            }
            if let Some(base_rules) = &e.base.rules {
                self.reconcile_rules(e, base_rules, &layers, &mut pass);
                continue;
            }
            let traces = desired::traces_of(chaos, &layers);
            self.write_traces(e, &traces);
            self.reconcile(e, &layers, &traces, &mut pass);
        }
        self.report_waiting(chaos, &found, now_ns, &mut pass);
        let live: Vec<String> = found.iter().map(Emulator::instance).collect();
        let resources: Vec<String> = chaos.iter().map(ChaosView::key).collect();
        self.reported.retain(|(r, _), _| resources.contains(r));
        self.record.emulators.retain(|k, _| live.contains(k));
        if self.record != before {
            if let Err(e) = self.record.save(&Record::path(&self.run_dir)) {
                eprintln!("linkem-operator agent: {e:#}");
            }
        }
        pass
    }

    /// Forgets that `u` was written (its write failed): the next pass
    /// queues it again.
    pub fn forget(&mut self, u: &StatusUpdate) {
        let resource = format!("{}/{}", u.namespace, u.name);
        self.reported.remove(&(resource, u.pod.clone()));
    }

    /// `Waiting` for the pods a resource in force selects on this node
    /// that have no emulator (yet: the sandbox is being made, or the pod's
    /// network has no linkem-cni).
    fn report_waiting(
        &mut self,
        chaos: &[ChaosView],
        found: &[Emulator],
        now_ns: i128,
        pass: &mut Pass,
    ) {
        for c in chaos {
            for p in &c.selected {
                let pod = PodKey {
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                };
                let here = p.node.as_deref() == Some(self.node.as_str());
                if !here
                    || !c.applies_to(&pod, &self.node, now_ns)
                    || found.iter().any(|e| e.pod == pod && c.on_device(&e.ifname))
                {
                    continue;
                }
                let status = PodStatus {
                    node: self.node.clone(),
                    state: "Waiting".into(),
                    message: Some(format!(
                        "no emulator of this pod in {}/cni (linkem-cni not in its network, or its sandbox not made yet)",
                        self.run_dir.display()
                    )),
                    ..PodStatus::default()
                };
                self.report_all(&[c.key()], &pod, &status, pass);
            }
        }
    }

    /// Brings one emulator to its desired link.
    fn reconcile(
        &mut self,
        e: &Emulator,
        layers: &[Layer],
        traces: &BTreeMap<String, String>,
        pass: &mut Pass,
    ) {
        let mut files = |name: &str| match traces.get(name) {
            Some(text) => Ok(text.clone()),
            None => load_file(name),
        };
        let want = match desired::desired(e, layers, &mut files) {
            Ok(d) => d,
            Err(r) => {
                let resources: Vec<String> = match &r.resource {
                    Some(res) => vec![res.clone()],
                    None => layers.iter().map(|l| l.resource.clone()).collect(),
                };
                let status = refused_status(e, &self.node, &r);
                if self.report_all(&resources, &e.pod, &status, pass) {
                    self.metrics.count(&labels(e), |c| c.refusals += 1);
                }
                return;
            }
        };
        let instance = e.instance();
        let entry = self.record.emulators.get(&instance).cloned();
        let Some(entry) = entry else {
            if layers.is_empty() {
                // A new emulator runs its base: nothing to send.
                self.record
                    .emulators
                    .insert(instance, entry_of(e, &want, None));
                return;
            }
            return self.send(e, &want, None, pass);
        };
        let same_words = entry.a_to_b == want.a_to_b && entry.b_to_a == want.b_to_a;
        if same_words {
            let at = entry.at_ns;
            if entry.resources != want.resources || entry.refused.is_some() {
                self.record
                    .emulators
                    .insert(instance, entry_of(e, &want, at));
            }
            self.report_outcome(e, &entry.resources, &want, at, pass);
            return;
        }
        if entry.refused == Some((want.a_to_b.clone(), want.b_to_a.clone())) {
            return;
        }
        self.send(e, &want, Some(entry), pass);
    }

    /// Brings an emulator running a rule set to the last layer's
    /// `linkem.rules`, else its base rule set (the network's `rules`).
    fn reconcile_rules(&mut self, e: &Emulator, base: &str, layers: &[Layer], pass: &mut Pass) {
        let want_rules = layers
            .iter()
            .rev()
            .find_map(|l| l.rules.clone())
            .unwrap_or_else(|| base.to_string());
        let want = Desired {
            a_to_b: String::new(),
            b_to_a: String::new(),
            resources: layers.iter().map(|l| l.resource.clone()).collect(),
        };
        let instance = e.instance();
        let old = self.record.emulators.get(&instance).cloned();
        let running = match &old {
            Some(o) => o.rules.clone(),
            // A new emulator runs its base.
            None => Some(base.to_string()),
        };
        if running.as_deref() == Some(want_rules.as_str()) {
            let at = old.as_ref().and_then(|o| o.at_ns);
            let before = old
                .as_ref()
                .map(|o| o.resources.clone())
                .unwrap_or_default();
            let mut entry = entry_of(e, &want, at);
            entry.rules = Some(want_rules.clone());
            if old.as_ref() != Some(&entry) {
                self.record.emulators.insert(instance, entry);
            }
            self.report_rules(e, &before, &want, &want_rules, at, pass);
            return;
        }
        if old.as_ref().and_then(|o| o.refused.as_ref())
            == Some(&(want_rules.clone(), "rules".into()))
        {
            return;
        }
        let l = labels(e);
        match apply::apply_rules(&e.socket, &want_rules) {
            Ok(Outcome::Applied { at_ns }) => {
                self.metrics.count(&l, |c| {
                    if want.resources.is_empty() {
                        c.restores += 1;
                    } else {
                        c.applies += 1;
                    }
                    c.last_apply_s = Some(at_ns as f64 / 1e9);
                });
                let before = old.map(|o| o.resources).unwrap_or_default();
                let mut entry = entry_of(e, &want, Some(at_ns));
                entry.rules = Some(want_rules.clone());
                self.record.emulators.insert(instance, entry);
                self.report_rules(e, &before, &want, &want_rules, Some(at_ns), pass);
            }
            Ok(Outcome::Refused {
                words,
                message,
                word,
                position,
                ..
            }) => {
                self.metrics.count(&l, |c| c.refusals += 1);
                let mut entry = old.unwrap_or_else(|| {
                    let mut b = entry_of(e, &base_only(e), None);
                    b.rules = Some(base.to_string());
                    b
                });
                entry.refused = Some((want_rules, "rules".into()));
                self.record.emulators.insert(instance, entry);
                let r = Refusal {
                    resource: None,
                    direction: "linkem.rules".into(),
                    message: format!(
                        "the emulator refused the rule set's line '{words}': {message}"
                    ),
                    word,
                    position,
                    words,
                };
                let status = refused_status(e, &self.node, &r);
                self.report_all(&want.resources, &e.pod, &status, pass);
            }
            Err(err) => eprintln!(
                "linkem-operator agent: {} ({}): {err}",
                e.name,
                e.socket.display()
            ),
        }
    }

    /// [`Agent::report_outcome`] for a rule set: `words` is the set, its
    /// lines joined by `; `.
    fn report_rules(
        &mut self,
        e: &Emulator,
        before: &[String],
        want: &Desired,
        rules: &str,
        at_ns: Option<u64>,
        pass: &mut Pass,
    ) {
        let lines = apply::rule_lines(rules).unwrap_or_default();
        let mk = |state: &str| PodStatus {
            node: self.node.clone(),
            state: state.into(),
            at: at_ns.map(rfc3339_ns),
            emulator: Some(e.name.clone()),
            words: Some(format!("rules: {}", lines.join("; "))),
            ..PodStatus::default()
        };
        let (applied, restored) = (mk("Applied"), mk("Restored"));
        self.report_all(&want.resources, &e.pod, &applied, pass);
        let gone: Vec<String> = before
            .iter()
            .filter(|r| !want.resources.contains(r))
            .cloned()
            .collect();
        self.report_all(&gone, &e.pod, &restored, pass);
    }

    fn send(&mut self, e: &Emulator, want: &Desired, old: Option<Entry>, pass: &mut Pass) {
        let l = labels(e);
        match apply::apply_batch(&e.socket, &want.a_to_b, &want.b_to_a) {
            Ok(Outcome::Applied { at_ns }) => {
                self.metrics.count(&l, |c| {
                    if want.resources.is_empty() {
                        c.restores += 1;
                    } else {
                        c.applies += 1;
                    }
                    c.last_apply_s = Some(at_ns as f64 / 1e9);
                });
                let before = old.map(|o| o.resources).unwrap_or_default();
                self.record
                    .emulators
                    .insert(e.instance(), entry_of(e, want, Some(at_ns)));
                self.report_outcome(e, &before, want, Some(at_ns), pass);
            }
            Ok(Outcome::Refused {
                direction,
                words,
                message,
                word,
                position,
            }) => {
                self.metrics.count(&l, |c| c.refusals += 1);
                let mut entry = old.unwrap_or_else(|| entry_of(e, &base_only(e), None));
                entry.refused = Some((want.a_to_b.clone(), want.b_to_a.clone()));
                self.record.emulators.insert(e.instance(), entry);
                let pod_dir = match direction.as_str() {
                    "a-to-b" => "egress",
                    "b-to-a" => "ingress",
                    _ => "batch",
                };
                let r = Refusal {
                    resource: None,
                    direction: pod_dir.into(),
                    message: format!("the emulator refused the {pod_dir} words: {message}"),
                    word,
                    position,
                    words,
                };
                let status = refused_status(e, &self.node, &r);
                self.report_all(&want.resources, &e.pod, &status, pass);
            }
            // No socket yet, or a stalled emulator: the next pass tries again.
            Err(err) => eprintln!(
                "linkem-operator agent: {} ({}): {err}",
                e.name,
                e.socket.display()
            ),
        }
    }

    /// Status after the emulator runs `want`: Applied for its resources,
    /// Restored for those it no longer carries.
    fn report_outcome(
        &mut self,
        e: &Emulator,
        before: &[String],
        want: &Desired,
        at_ns: Option<u64>,
        pass: &mut Pass,
    ) {
        let words = format!(
            "egress: {}; ingress: {}",
            egress_words(want).0,
            egress_words(want).1
        );
        let node = self.node.clone();
        let mk = |state: &str| PodStatus {
            node: node.clone(),
            state: state.into(),
            at: at_ns.map(rfc3339_ns),
            emulator: Some(e.name.clone()),
            words: Some(words.clone()),
            ..PodStatus::default()
        };
        let applied = mk("Applied");
        self.report_all(&want.resources, &e.pod, &applied, pass);
        let gone: Vec<String> = before
            .iter()
            .filter(|r| !want.resources.contains(r))
            .cloned()
            .collect();
        let restored = mk("Restored");
        self.report_all(&gone, &e.pod, &restored, pass);
    }

    fn spec_refused(&mut self, e: &Emulator, resource: &str, err: &SpecError, pass: &mut Pass) {
        let r = Refusal {
            resource: Some(resource.into()),
            direction: err.field.clone(),
            message: err.to_string(),
            word: err.word.clone(),
            position: err.position,
            words: String::new(),
        };
        let mut status = refused_status(e, &self.node, &r);
        status.words = None;
        if self.report_all(&[resource.to_string()], &e.pod, &status, pass) {
            self.metrics.count(&labels(e), |c| c.refusals += 1);
        }
    }

    /// Queues `status` for each resource's entry of this pod unless it is
    /// what was written last; whether any was new.
    fn report_all(
        &mut self,
        resources: &[String],
        pod: &PodKey,
        status: &PodStatus,
        pass: &mut Pass,
    ) -> bool {
        let pod = pod.to_string();
        let mut new = false;
        for r in resources {
            let key = (r.clone(), pod.clone());
            if self.reported.get(&key) == Some(status) {
                continue;
            }
            let Some((namespace, name)) = r.split_once('/') else {
                continue;
            };
            self.reported.insert(key, status.clone());
            new = true;
            pass.updates.push(StatusUpdate {
                namespace: namespace.into(),
                name: name.into(),
                pod: pod.clone(),
                status: status.clone(),
            });
        }
        new
    }
}

/// The egress and ingress words of `d` (linkem-cni's egress is a-to-b).
fn egress_words(d: &Desired) -> (&str, &str) {
    if linkem_cni::state::EGRESS == "a-to-b" {
        (&d.a_to_b, &d.b_to_a)
    } else {
        (&d.b_to_a, &d.a_to_b)
    }
}

fn labels(e: &Emulator) -> Labels {
    (e.pod.namespace.clone(), e.pod.name.clone(), e.name.clone())
}

fn entry_of(e: &Emulator, d: &Desired, at_ns: Option<u64>) -> Entry {
    Entry {
        pod: e.pod.to_string(),
        a_to_b: d.a_to_b.clone(),
        b_to_a: d.b_to_a.clone(),
        resources: d.resources.clone(),
        at_ns,
        refused: None,
        rules: None,
    }
}

/// The layers `e` can take, and the resources it cannot, with why: an
/// emulator running a rule set takes only `linkem.rules` (it refuses
/// `replace`), any other only link words.
fn fit(e: &Emulator, layers: Vec<Layer>) -> (Vec<Layer>, Vec<(String, SpecError)>) {
    let mut misfits = vec![];
    let kept = layers
        .into_iter()
        .filter(|l| {
            let why = match (&e.base.rules, &l.rules) {
                (Some(_), _) if l.link_words => (
                    "delay, loss, duplicate, corrupt, bandwidth, linkem.link/egress/ingress/trace/schedule",
                    "this pod's emulator runs a Dummynet rule set (its linkem-cni network has \
                     `rules`) and takes no link words: give the impairment as linkem.rules \
                     (e.g. 'pipe 1 config delay 20' and 'add pipe 1 ip from any to any'), \
                     which replaces the network's rule set while the resource lasts",
                ),
                (None, Some(_)) => (
                    "linkem.rules",
                    "this pod's emulator runs a plain link (its linkem-cni network has no \
                     `rules`): give the impairment as link words (delay, loss, bandwidth, \
                     linkem.link), or select pods of a network with `rules`",
                ),
                _ => return true,
            };
            misfits.push((l.resource.clone(), crate::chaos::words::refuse_field(why.0, why.1)));
            false
        })
        .collect();
    (kept, misfits)
}

/// The base link alone, as the desired state without resources.
fn base_only(e: &Emulator) -> Desired {
    desired::desired(e, &[], &mut load_file).unwrap_or(Desired {
        a_to_b: String::new(),
        b_to_a: String::new(),
        resources: vec![],
    })
}

fn refused_status(e: &Emulator, node: &str, r: &Refusal) -> PodStatus {
    PodStatus {
        node: node.to_string(),
        state: "Refused".into(),
        at: None,
        emulator: Some(e.name.clone()),
        message: Some(match &r.resource {
            Some(res) => format!("{} ({res}, {})", r.message, r.direction),
            None => format!("{} ({})", r.message, r.direction),
        }),
        word: r.word.clone(),
        position: r.position,
        words: Some(r.words.clone()).filter(|w| !w.is_empty()),
    }
}

/// The files the base words name: a path as the network gave it, the
/// system's distribution tables by bare name (the traces of resources come
/// from their specs).
fn load_file(name: &str) -> Result<String, String> {
    if name.starts_with('/') {
        std::fs::read_to_string(name).map_err(|e| format!("'{name}': {e}"))
    } else {
        linkem_ctl::system_tables(name)
    }
}

/// Whether `name` is a bare file name an emulator's `--control-files`
/// directory serves (`A-Z a-z 0-9 . _ -`, not `.` or `..`).
pub fn bare(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}
