//! The web page's data: a sampler thread ("linkem-web-sample") that reads the
//! model every [`SAMPLE_INTERVAL`] (each link of a group), makes one sample
//! per link and direction (offered and delivered rates, capacity, the
//! model's delay p50/p99 of what was stored, packets in flight, drops by
//! fate over the interval), keeps [`HISTORY`] of them per link, follows the
//! model's marks and the links' words, and broadcasts each event, already
//! formatted as Server-Sent Events, to whoever subscribed: never waiting
//! for one (a receiver that falls [`EVENTS_KEPT`] events behind gets
//! `Lagged`; the server then drops it).
//!
//! Sources: the counts are the never-reset ones (`Model::raw_stats`, those
//! of the metrics endpoint), so a `zero` never makes a rate negative. Over
//! the interval between two reads, `dt` the real time between them:
//!
//! ```text
//! offered_bps = Δreceived_bytes · 8 / dt      tput_bps = Δdelivered_bytes · 8 / dt
//! delay p50, p99 = quantiles of (delay now − delay then)   (null: nothing stored)
//! queue_packets = in_flight now               drops = Δ per fate ≠ delivered, > 0 only
//! cap_bps = the direction's rate as running (a schedule's step), null when
//!           unlimited, a trace, a forwarder or a rule set
//! ```
//!
//! Memory: [`SAMPLES_KEPT`] compact samples per link (numbers, not JSON),
//! the model's last marks; bounded whatever the clients.

use crate::control::marks::{Mark, MarkKind, DIRECTION_WORDS, MAX_MARKS};
use crate::control::{Model, Running};
use linkem_core::{Fate, LinkConfig};
use linkem_runtime::clock;
use linkem_runtime::pipeline::DirectionStats;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::broadcast;

/// How often the sampler reads the model.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(500);
/// How much of the past is kept per link.
pub const HISTORY: Duration = Duration::from_secs(300);
/// Samples kept per link: [`HISTORY`] / [`SAMPLE_INTERVAL`].
pub const SAMPLES_KEPT: usize = 600;
/// Events a subscriber may be behind before it gets `Lagged`.
pub const EVENTS_KEPT: usize = 16;

/// One direction over one interval.
#[derive(Debug, Clone, PartialEq)]
pub struct DirSample {
    pub offered_bps: u64,
    pub tput_bps: u64,
    pub cap_bps: Option<u64>,
    /// Microseconds (the histogram's precision is 1 %).
    pub delay_p50_us: Option<u32>,
    pub delay_p99_us: Option<u32>,
    pub queue_packets: u64,
    /// The fates other than delivered that grew, and by how much.
    pub drops: Box<[(Fate, u64)]>,
}

/// One direction's sample from two reads of its counts `dt_ns` apart
/// (`then` the earlier): the module doc's arithmetic.
pub fn dir_sample(
    then: &DirectionStats,
    now: &DirectionStats,
    dt_ns: u64,
    cap_bps: Option<u64>,
) -> DirSample {
    let rate = |before: u64, after: u64| {
        let bits = after.saturating_sub(before) as f64 * 8.0;
        (bits * 1e9 / dt_ns.max(1) as f64).round() as u64
    };
    let mut delay = now.delay.clone();
    let stored = delay.subtract(&then.delay).is_ok() && !delay.is_empty();
    let quantile_us = |q: f64| {
        stored.then(|| (delay.value_at_quantile(q) / 1_000).min(u64::from(u32::MAX)) as u32)
    };
    let drops: Vec<(Fate, u64)> = Fate::ALL
        .iter()
        .filter(|f| **f != Fate::Delivered)
        .map(|&f| (f, now.fates.get(f).saturating_sub(then.fates.get(f))))
        .filter(|(_, n)| *n > 0)
        .collect();
    DirSample {
        offered_bps: rate(then.received_bytes, now.received_bytes),
        tput_bps: rate(then.delivered_bytes, now.delivered_bytes),
        cap_bps,
        delay_p50_us: quantile_us(0.5),
        delay_p99_us: quantile_us(0.99),
        queue_packets: now.in_flight,
        drops: drops.into_boxed_slice(),
    }
}

impl DirSample {
    /// `{"dir", "offered_bps", "tput_bps", "cap_bps", "delay_p50_ms",
    /// "delay_p99_ms", "queue_packets", "drops": {FATE: N}}`.
    pub fn json(&self, dir: &str) -> Value {
        let ms = |us: Option<u32>| us.map(|u| f64::from(u) / 1_000.0);
        let drops: serde_json::Map<String, Value> = self
            .drops
            .iter()
            .map(|(f, n)| (f.name().to_string(), json!(n)))
            .collect();
        json!({
            "dir": dir,
            "offered_bps": self.offered_bps,
            "tput_bps": self.tput_bps,
            "cap_bps": self.cap_bps,
            "delay_p50_ms": ms(self.delay_p50_us),
            "delay_p99_ms": ms(self.delay_p99_us),
            "queue_packets": self.queue_packets,
            "drops": drops,
        })
    }
}

/// One link's sample: its two directions at `t_s` (seconds since the run
/// started).
#[derive(Debug, Clone, PartialEq)]
struct LinkSample {
    t_s: f64,
    dirs: [DirSample; 2],
}

impl LinkSample {
    fn json(&self) -> Value {
        json!({
            "t_s": self.t_s,
            "dirs": [self.dirs[0].json(DIRECTION_WORDS[0]), self.dirs[1].json(DIRECTION_WORDS[1])],
        })
    }
}

/// What the page shows of a link besides its counts.
#[derive(Debug, Clone, PartialEq)]
struct LinkInfo {
    words: [String; 2],
    rules: Option<String>,
    changes: u64,
    changed_at_ns: Option<u64>,
}

/// One link's state in the history.
struct LinkState {
    name: String,
    info: LinkInfo,
    samples: VecDeque<LinkSample>,
}

/// What the sampler keeps, read by the server's requests.
struct State {
    links: Vec<LinkState>,
    marks: VecDeque<Mark>,
    latest: Option<Value>,
}

/// The sampler and what it kept.
pub struct History {
    model: Arc<Model>,
    /// CLOCK_REALTIME at the run's start: a mark's `t_s` is its `at_ns` from it.
    origin_ns: u64,
    interval: Duration,
    state: Mutex<State>,
    events: broadcast::Sender<Arc<str>>,
    /// The server's stop, and [`History::stop`]'s own.
    stop: Arc<AtomicBool>,
    stopped: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// The links a model serves: itself, or each member of its group.
fn links_of(model: &Arc<Model>) -> Vec<Arc<Model>> {
    match model.members() {
        Some(members) => members.to_vec(),
        None => vec![model.clone()],
    }
}

/// The rate a direction runs at now, when it has a single one.
fn cap_of(link: &Model, running: &LinkConfig) -> Option<u64> {
    if link.rules().is_some() || matches!(link.running(), Running::Forward(_)) {
        return None;
    }
    running
        .trace
        .is_none()
        .then_some(running.rate_bps)
        .flatten()
}

/// A link's words, rules and changes now: the whole running link of each
/// direction (not the words of its last change, which name only what changed).
fn info_of(link: &Model) -> LinkInfo {
    let (words, changed_at_ns) = {
        let l = link.lock_links();
        let at = l[0].changed_at_ns.max(l[1].changed_at_ns);
        let running = |i: usize| match link.forward_only() {
            true => "forward only".to_string(),
            false => l[i].config.to_string(),
        };
        ([running(0), running(1)], at)
    };
    LinkInfo {
        words,
        rules: link.rules().map(rules_text),
        changes: link.counters.changes.load(Ordering::Relaxed),
        changed_at_ns,
    }
}

/// A rule set as running: each object's config line, then each rule, in
/// `ipfw list`'s layout without the counters.
fn rules_text(r: &crate::control::rules::Rules) -> String {
    let list = r.list_json();
    let mut text = String::new();
    for o in list["objects"].as_array().into_iter().flatten() {
        let (kind, n, words) = (&o["kind"], &o["number"], &o["config"]);
        let words = words.as_str().unwrap_or("");
        text.push_str(&format!(
            "{} {n} config {words}\n",
            kind.as_str().unwrap_or("")
        ));
    }
    for rule in list["rules"].as_array().into_iter().flatten() {
        let n = rule["number"].as_u64().unwrap_or(0);
        text.push_str(&format!("{n:05} {}\n", rule["rule"].as_str().unwrap_or("")));
    }
    text
}

/// One read of every link: its counts and the rates they run at.
struct Read {
    at: Instant,
    /// Seconds since the run started.
    t_s: f64,
    links: Vec<(Vec<DirectionStats>, [Option<u64>; 2])>,
}

fn read(model: &Model, links: &[Arc<Model>]) -> Read {
    let at = Instant::now();
    let t_s = model.elapsed_s();
    let links = links
        .iter()
        .map(|l| {
            let configs = l.link_configs();
            let scheduled = l.scheduled_now();
            let caps = [0, 1].map(|i| match &scheduled[i] {
                Some(step) => cap_of(l, step),
                None => cap_of(l, &configs[i]),
            });
            let mut stats = l.raw_stats();
            for s in &mut stats {
                // Not sampled: its 32 KiB of counters need not wait for the next read.
                s.lateness = hdrhistogram::Histogram::new(1).expect("a valid precision");
            }
            (stats, caps)
        })
        .collect();
    Read { at, t_s, links }
}

/// Each link's sample between two reads.
fn samples_between(then: &Read, now: &Read) -> Vec<Option<LinkSample>> {
    let dt_ns = now.at.saturating_duration_since(then.at).as_nanos() as u64;
    then.links
        .iter()
        .zip(&now.links)
        .map(|((a, _), (b, caps))| {
            let [a0, a1] = [a.first()?, a.get(1)?];
            let [b0, b1] = [b.first()?, b.get(1)?];
            Some(LinkSample {
                t_s: now.t_s,
                dirs: [
                    dir_sample(a0, b0, dt_ns, caps[0]),
                    dir_sample(a1, b1, dt_ns, caps[1]),
                ],
            })
        })
        .collect()
}

/// An event as Server-Sent Events carry it.
fn event(name: &str, data: &Value) -> Arc<str> {
    format!("event: {name}\ndata: {data}\n\n").into()
}

impl History {
    /// Spawns the sampler thread "linkem-web-sample": every
    /// [`SAMPLE_INTERVAL`] it reads `model` (each link of a group), makes one
    /// sample, keeps [`HISTORY`] of them, and broadcasts each event to
    /// subscribers (never waits for one); it ends at `stop` or
    /// [`History::stop`].
    pub fn start(model: Arc<Model>, stop: Arc<AtomicBool>) -> Arc<History> {
        Self::start_every(model, stop, SAMPLE_INTERVAL)
    }

    fn start_every(model: Arc<Model>, stop: Arc<AtomicBool>, interval: Duration) -> Arc<History> {
        let links = links_of(&model);
        let origin_ns = clock::now_ns().saturating_sub(model.started().elapsed().as_nanos() as u64);
        let state = State {
            links: links
                .iter()
                .map(|l| LinkState {
                    name: l.name.clone(),
                    info: info_of(l),
                    samples: VecDeque::with_capacity(SAMPLES_KEPT),
                })
                .collect(),
            marks: VecDeque::new(),
            latest: None,
        };
        let (events, _) = broadcast::channel(EVENTS_KEPT);
        let history = Arc::new(History {
            model,
            origin_ns,
            interval,
            state: Mutex::new(state),
            events,
            stop,
            stopped: AtomicBool::new(false),
            thread: Mutex::new(None),
        });
        let h = history.clone();
        let spawned = std::thread::Builder::new()
            .name("linkem-web-sample".into())
            .spawn(move || h.run(links));
        match spawned {
            Ok(t) => *history.lock_thread() = Some(t),
            // No sampler: the page shows the links with no samples.
            Err(e) => eprintln!("linkem: web: cannot start the sampler thread: {e}"),
        }
        history
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_thread(&self) -> MutexGuard<'_, Option<JoinHandle<()>>> {
        self.thread.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Seconds since the run started of CLOCK_REALTIME instant `at_ns`.
    fn t_s(&self, at_ns: u64) -> f64 {
        (at_ns as f64 - self.origin_ns as f64) / 1e9
    }

    fn mark_json(&self, m: &Mark) -> Value {
        json!({"t_s": self.t_s(m.at_ns), "link": m.link, "kind": m.kind.word(), "text": m.text})
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire) || self.stopped.load(Ordering::Acquire)
    }

    /// Sleeps until `beat` (woken early by a stop); false once stopping.
    fn sleep_until(&self, beat: Instant) -> bool {
        loop {
            if self.stopping() {
                return false;
            }
            let wait = beat.saturating_duration_since(Instant::now());
            if wait.is_zero() {
                return true;
            }
            std::thread::park_timeout(wait);
        }
    }

    /// The sampler's loop: a read every interval (on a fixed beat, so
    /// the rates' intervals do not drift), its events sent.
    fn run(&self, links: Vec<Arc<Model>>) {
        let mut then = read(&self.model, &links);
        let mut next_mark = 0;
        let mut beat = then.at;
        loop {
            beat += self.interval;
            if Instant::now() > beat + self.interval {
                // Far behind (a stopped machine): a new beat from now.
                beat = Instant::now();
            }
            if !self.sleep_until(beat) {
                return;
            }
            let now = read(&self.model, &links);
            let samples = samples_between(&then, &now);
            let t_s = now.t_s;
            then = now;
            let (marks, after) = self.model.marks_since(next_mark);
            next_mark = after;
            for e in self.take(&links, t_s, samples, marks) {
                // Nobody listening is not an error; a slow listener lags.
                let _ = self.events.send(e);
            }
        }
    }

    /// Keeps a tick's samples and marks, refreshes the links' words;
    /// returns the events to send: the sample, each mark, and the links
    /// when one changed.
    fn take(
        &self,
        links: &[Arc<Model>],
        t_s: f64,
        samples: Vec<Option<LinkSample>>,
        marks: Vec<Mark>,
    ) -> Vec<Arc<str>> {
        let mut out = Vec::with_capacity(2 + marks.len());
        let mut st = self.lock();
        let mut each = Vec::with_capacity(samples.len());
        for (l, s) in st.links.iter_mut().zip(samples) {
            let Some(s) = s else { continue };
            let dirs = s.json()["dirs"].take();
            each.push(json!({"name": l.name, "dirs": dirs}));
            if l.samples.len() == SAMPLES_KEPT {
                l.samples.pop_front();
            }
            l.samples.push_back(s);
        }
        let sample = json!({"t_s": t_s, "links": each});
        out.push(event("sample", &sample));
        st.latest = Some(sample);
        for m in &marks {
            out.push(event("mark", &self.mark_json(m)));
        }
        // Words and rules are read again only when a change could have moved them.
        let mut changed = false;
        for (l, model) in st.links.iter_mut().zip(links) {
            let marked = marks
                .iter()
                .any(|m| m.link.as_deref() == Some(&l.name) && m.kind != MarkKind::Schedule);
            let count = model.counters.changes.load(Ordering::Relaxed);
            if marked || count != l.info.changes {
                let info = info_of(model);
                changed |= info != l.info;
                l.info = info;
            }
        }
        for m in marks {
            if st.marks.len() == MAX_MARKS {
                st.marks.pop_front();
            }
            st.marks.push_back(m);
        }
        if changed {
            out.push(event("links", &self.links_json(&st)));
        }
        out
    }

    fn links_json(&self, st: &State) -> Value {
        let links: Vec<Value> = st
            .links
            .iter()
            .map(|l| {
                let changed_at = st
                    .marks
                    .iter()
                    .rev()
                    .find(|m| m.link.as_deref() == Some(&l.name) && m.kind != MarkKind::Schedule)
                    .map(|m| m.at_ns)
                    .or(l.info.changed_at_ns);
                json!({
                    "name": l.name,
                    "words": {DIRECTION_WORDS[0]: l.info.words[0], DIRECTION_WORDS[1]: l.info.words[1]},
                    "rules": l.info.rules,
                    "changes": l.info.changes,
                    "changed_at_s": changed_at.map(|t| self.t_s(t)),
                })
            })
            .collect();
        Value::Array(links)
    }

    /// `{"links": [{name, words: {a-to-b, b-to-a}, rules (text or null),
    /// changes, changed_at_s}], "marks": [{t_s, link, kind, text}],
    /// "sample": the latest (null before the first), "interval_ms",
    /// "history_s", "now_s"}`.
    pub fn state_json(&self) -> Value {
        let st = self.lock();
        let marks: Vec<Value> = st.marks.iter().map(|m| self.mark_json(m)).collect();
        json!({
            "links": self.links_json(&st),
            "marks": marks,
            "sample": st.latest,
            "interval_ms": self.interval.as_millis() as u64,
            "history_s": HISTORY.as_secs(),
            "now_s": self.model.elapsed_s(),
        })
    }

    /// One link's samples, oldest first, and its marks: `{"link",
    /// "interval_ms", "samples": [{t_s, dirs}], "marks"}`; None for an
    /// unknown link.
    pub fn link_history_json(&self, link: &str) -> Option<Value> {
        let st = self.lock();
        let l = st.links.iter().find(|l| l.name == link)?;
        let samples: Vec<Value> = l.samples.iter().map(LinkSample::json).collect();
        let marks: Vec<Value> = st
            .marks
            .iter()
            .filter(|m| m.link.as_deref() == Some(link))
            .map(|m| self.mark_json(m))
            .collect();
        Some(json!({
            "link": link,
            "interval_ms": self.interval.as_millis() as u64,
            "samples": samples,
            "marks": marks,
        }))
    }

    /// The events from now on, each already formatted (`event: sample\ndata:
    /// {...}\n\n`); a receiver [`EVENTS_KEPT`] behind gets
    /// `RecvError::Lagged`.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.events.subscribe()
    }

    /// Stops the sampler and waits for it (the stop flag it was started
    /// with stops it too).
    pub fn stop(self: &Arc<Self>) {
        self.stopped.store(true, Ordering::Release);
        let thread = self.lock_thread().take();
        if let Some(t) = thread {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linkem_core::model::LinkModel;
    use linkem_core::{FateCounts, LinkSpec};
    use linkem_runtime::pipeline::{LiveBridge, LiveOptions};
    use linkem_runtime::port::memory::{MemoryRx, MemoryTx};
    use std::sync::mpsc::channel;
    use tokio::sync::broadcast::error::TryRecvError;

    /// A direction's never-reset counts: bytes, fates, in flight, and the
    /// model's delays (ns, each once).
    fn counts(
        received_bytes: u64,
        delivered_bytes: u64,
        fates: &[(Fate, u64)],
        in_flight: u64,
        delays_ns: &[(u64, u64)],
    ) -> DirectionStats {
        let mut f = FateCounts::default();
        for (fate, n) in fates {
            f.set(*fate, *n);
        }
        let mut d = DirectionStats {
            fates: f,
            received_bytes,
            in_flight,
            delivered_bytes,
            ..DirectionStats::empty("a->b")
        };
        for (ns, n) in delays_ns {
            d.delay.record_n(*ns, *n).unwrap();
        }
        d
    }

    fn near(got: f64, want: f64) -> bool {
        (got - want).abs() <= want / 100.0
    }

    #[test]
    fn a_sample_is_the_rates_delays_and_drops_of_the_interval_alone() {
        let then = counts(
            1_000,
            500,
            &[(Fate::Delivered, 4), (Fate::Loss, 2)],
            3,
            &[(5_000_000, 10)],
        );
        // 0.5 s later: 1.125 MB offered (18 Mbit/s), 625 kB sent (10
        // Mbit/s); 90 stored at 20 ms, 10 at 50 ms.
        let now = counts(
            1_126_000,
            625_500,
            &[
                (Fate::Delivered, 104),
                (Fate::Loss, 5),
                (Fate::Backpressure, 1),
            ],
            7,
            &[(5_000_000, 10), (20_000_000, 90), (50_000_000, 10)],
        );
        let s = dir_sample(&then, &now, 500_000_000, Some(10_000_000));
        assert_eq!(s.offered_bps, 18_000_000);
        assert_eq!(s.tput_bps, 10_000_000);
        let v = s.json("a-to-b");
        assert_eq!(v["dir"], "a-to-b");
        assert_eq!(v["cap_bps"], 10_000_000);
        assert!(near(v["delay_p50_ms"].as_f64().unwrap(), 20.0), "{v}");
        assert!(near(v["delay_p99_ms"].as_f64().unwrap(), 50.0), "{v}");
        assert_eq!(v["queue_packets"], 7);
        assert_eq!(v["drops"], json!({"loss": 3, "backpressure": 1}));
    }

    #[test]
    fn nothing_stored_gives_no_delay_and_counts_that_went_back_no_negative_rate() {
        let then = counts(9_000, 9_000, &[(Fate::Loss, 4)], 0, &[(1_000, 3)]);
        // Never-reset counts do not go back; if they did, rates stay 0.
        let now = counts(1_000, 1_000, &[(Fate::Loss, 4)], 0, &[(1_000, 3)]);
        let v = dir_sample(&then, &now, 500_000_000, None).json("b-to-a");
        assert_eq!(
            v,
            json!({"dir": "b-to-a", "offered_bps": 0, "tput_bps": 0, "cap_bps": null,
                   "delay_p50_ms": null, "delay_p99_ms": null, "queue_packets": 0,
                   "drops": {}})
        );
    }

    /// A plain link's model over idle in-memory ports, both directions `words`.
    fn plain(words: &str) -> Arc<Model> {
        let w: Vec<&str> = words.split_whitespace().collect();
        let link = LinkSpec::parse_words(&w, &mut linkem_core::config::no_files)
            .unwrap()
            .link;
        let (_, rx_a) = channel::<(u64, Vec<u8>)>();
        let (_, rx_b) = channel::<(u64, Vec<u8>)>();
        let bridge = LiveBridge::start(
            LiveOptions::new(1 << 20),
            LinkModel::new([link.clone(), link.clone()], 1),
            [Box::new(MemoryRx::new(rx_a)), Box::new(MemoryRx::new(rx_b))],
            [Box::new(MemoryTx::new().0), Box::new(MemoryTx::new().0)],
        )
        .unwrap();
        Arc::new(Model::new(
            "a-b".into(),
            Running::Link(bridge),
            [(link.clone(), words.into()), (link, words.into())],
            1,
            Instant::now(),
        ))
    }

    fn sample_at(t_s: f64) -> LinkSample {
        let d = dir_sample(
            &counts(0, 0, &[], 0, &[]),
            &counts(0, 0, &[], 0, &[]),
            1,
            None,
        );
        LinkSample {
            t_s,
            dirs: [d.clone(), d],
        }
    }

    #[test]
    fn a_link_keeps_its_last_samples_and_says_what_it_runs() {
        let model = plain("rate 10mbit delay 5ms");
        // A sampler that will not tick during the test.
        let stop = Arc::new(AtomicBool::new(false));
        let h = History::start_every(model.clone(), stop, Duration::from_secs(3600));
        let links = links_of(&model);
        for i in 0..SAMPLES_KEPT + 7 {
            h.take(
                &links,
                i as f64,
                vec![Some(sample_at(i as f64))],
                Vec::new(),
            );
        }
        let v = h.link_history_json("a-b").unwrap();
        let samples = v["samples"].as_array().unwrap();
        assert_eq!(samples.len(), SAMPLES_KEPT);
        assert_eq!(samples[0]["t_s"], 7.0);
        assert_eq!(samples[SAMPLES_KEPT - 1]["t_s"], (SAMPLES_KEPT + 6) as f64);
        assert!(h.link_history_json("nope").is_none());
        let st = h.state_json();
        assert_eq!(st["links"][0]["name"], "a-b");
        assert_eq!(
            st["links"][0]["words"]["a-to-b"],
            "rate 10mbit queue 1000 delay 5ms"
        );
        assert_eq!(st["links"][0]["rules"], Value::Null);
        assert_eq!(st["sample"]["t_s"], (SAMPLES_KEPT + 6) as f64);
        assert_eq!(st["interval_ms"], 3_600_000);
        assert_eq!(st["history_s"], 300);
        // A change: its mark, and the links' event with the new words.
        let rx_events = h.subscribe();
        let request = model.parse_line("link a-to-b delay 20ms").unwrap().request;
        let cred = crate::control::PeerCred {
            uid: 0,
            gid: 0,
            pid: 1,
        };
        model
            .apply(&cred, &[&request], &["link a-to-b delay 20ms"])
            .unwrap();
        let (marks, _) = model.marks_since(0);
        let sent = h.take(&links, 1.0, vec![None], marks);
        drop(rx_events);
        let kinds: Vec<&str> = sent
            .iter()
            .map(|e| e.lines().next().unwrap_or(""))
            .collect();
        assert_eq!(kinds, ["event: sample", "event: mark", "event: links"]);
        let st = h.state_json();
        // The whole running link, not only the words of the change.
        assert_eq!(
            st["links"][0]["words"]["a-to-b"],
            "rate 10mbit queue 1000 delay 20ms"
        );
        assert_eq!(st["links"][0]["changes"], 1);
        assert!(st["links"][0]["changed_at_s"].as_f64().is_some());
        assert_eq!(st["marks"][0]["kind"], "change");
        assert_eq!(st["marks"][0]["text"], "link a-to-b delay 20ms");
        h.stop();
    }

    #[test]
    fn a_rule_set_shows_its_rules_and_no_capacity_a_group_each_link() {
        let rules = crate::control::rules::tests::rules_over_memory(
            "pipe 1 config bw 10Mbit/s delay 1ms\nadd 100 pipe 1 ip from any to any\n",
        );
        let model = Arc::new(Model::new(
            "r".into(),
            Running::Rules(Box::new(rules)),
            [Default::default(), Default::default()],
            1,
            Instant::now(),
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let h = History::start_every(model.clone(), stop.clone(), Duration::from_millis(5));
        let until = Instant::now() + Duration::from_secs(5);
        while h.state_json()["sample"].is_null() {
            assert!(Instant::now() < until, "no sample in 5 s");
            std::thread::sleep(Duration::from_millis(5));
        }
        let st = h.state_json();
        let text = st["links"][0]["rules"].as_str().unwrap();
        assert!(
            text.contains("pipe 1 config bw 10Mbit/s delay 1ms"),
            "{text}"
        );
        assert!(text.contains("00100 pipe 1 ip from any to any"), "{text}");
        assert_eq!(st["sample"]["links"][0]["dirs"][0]["cap_bps"], Value::Null);
        h.stop();
        // A group: each member its own link, by name.
        let members = vec![plain("delay 1ms"), plain("rate 5mbit")];
        let names = ["p0", "p1"];
        let members: Vec<Arc<Model>> = members
            .into_iter()
            .zip(names)
            .map(|(m, n)| {
                let m = Arc::into_inner(m).unwrap();
                let words = m.lock_links()[0].words.clone();
                let cfg = m.link_configs()[0].clone();
                let running = m.into_running();
                Arc::new(Model::new(
                    n.into(),
                    running,
                    [(cfg.clone(), words.clone()), (cfg, words)],
                    1,
                    Instant::now(),
                ))
            })
            .collect();
        let g = Arc::new(Model::group("g".into(), members, Instant::now()));
        let h = History::start_every(g, stop, Duration::from_millis(5));
        while h.state_json()["sample"].is_null() {
            assert!(Instant::now() < until, "no sample in 5 s");
            std::thread::sleep(Duration::from_millis(5));
        }
        let st = h.state_json();
        let listed: Vec<&str> = st["links"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["name"].as_str().unwrap())
            .collect();
        assert_eq!(listed, names);
        let caps: Vec<&Value> = st["sample"]["links"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| &l["dirs"][1]["cap_bps"])
            .collect();
        assert_eq!(caps, [&Value::Null, &json!(5_000_000)]);
        assert!(h.link_history_json("p1").is_some());
        assert!(h.link_history_json("g").is_none());
        h.stop();
    }

    #[test]
    fn a_receiver_that_lags_is_told_so_while_the_sampler_goes_on() {
        let model = plain("delay 1ms");
        let stop = Arc::new(AtomicBool::new(false));
        let h = History::start_every(model, stop.clone(), Duration::from_millis(5));
        let mut slow = h.subscribe();
        // Well over EVENTS_KEPT ticks, never read.
        std::thread::sleep(Duration::from_millis(5 * 4 * EVENTS_KEPT as u64));
        let Err(TryRecvError::Lagged(missed)) = slow.try_recv() else {
            panic!("no lag after {} ticks", 4 * EVENTS_KEPT);
        };
        assert!(missed > 0);
        // The sampler never waited for it: it went on, and goes on. The
        // latest sample is kept before it is sent, so the one read here may
        // still be on its way: the receiver waits for a later one.
        let t_before = h.state_json()["sample"]["t_s"].as_f64().unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        let data = loop {
            match slow.try_recv() {
                Ok(e) => {
                    let data: Value = serde_json::from_str(
                        e.strip_prefix("event: sample\ndata: ").unwrap().trim_end(),
                    )
                    .unwrap();
                    if data["t_s"].as_f64().unwrap() > t_before {
                        break data;
                    }
                    continue;
                }
                Err(TryRecvError::Lagged(_)) | Err(TryRecvError::Empty) => {}
                Err(e) => panic!("{e}"),
            }
            assert!(Instant::now() < until, "no sample after the lag");
            std::thread::sleep(Duration::from_millis(5));
        };
        let dirs = &data["links"][0]["dirs"];
        assert_eq!(
            (&dirs[0]["dir"], &dirs[1]["dir"]),
            (&json!("a-to-b"), &json!("b-to-a"))
        );
        assert_eq!(dirs[0]["tput_bps"], 0);
        stop.store(true, Ordering::Release);
        h.stop();
    }
}
