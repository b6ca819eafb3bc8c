//! The measures end to end, real components only: a real
//! kube-apiserver + etcd, the controller and two node agents as processes
//! (node-a, node-b, each its own run dir), and this test as the kubelet:
//! Pod objects bound to the nodes (Running, podIP) and per pod a sandbox
//! made by CNI ADD (bridge + host-local, then linkem-cni). Every effect is
//! measured with ping (or iperf3) from a probe namespace on the same bridge,
//! and timed from the resource's creation.
//!
//! Margins: medians over several pings, since this VM stalls for
//! milliseconds at times; a deadline of 2 s is checked on the emulator's own
//! words (polled every 20 ms) and on the first ping that sees the change
//! (one probe round, about 0.2 s, allowed on top).

mod cluster;
mod common;
mod node;

use cluster::{median, Cluster, Sandbox};
use common::{install_crd, ControlPlane};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kube::Client;
use linkem_operator::chaos::{LinkChaos, LinkChaosStatus};
use node::until;
use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const WITHIN: Duration = Duration::from_secs(2);
/// One probe round (a single ping per pod) on top of WITHIN for the
/// ping-observed times.
const ROUND: Duration = Duration::from_millis(250);

struct Live {
    rt: tokio::runtime::Runtime,
    client: Client,
    ns: String,
    /// web-0..2 then db-0..1.
    pods: Vec<Sandbox>,
    uids: Vec<String>,
    base_rtt_ms: Vec<f64>,
    cl: Cluster,
}

const PODS: [(&str, &str, usize); 5] = [
    ("web-0", "web", 0),
    ("web-1", "web", 1),
    ("web-2", "web", 0),
    ("db-0", "db", 1),
    ("db-1", "db", 0),
];

impl Live {
    fn block<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    fn chaos(&self) -> Api<LinkChaos> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn pod_api(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn web(&self) -> &[Sandbox] {
        &self.pods[..3]
    }

    /// Creates a LinkChaos from its manifest (namespace made this test's).
    fn create(&self, mut manifest: Value) -> Result<Instant, kube::Error> {
        manifest["metadata"]["namespace"] = json!(self.ns);
        manifest["spec"]["selector"]["namespaces"] = json!([self.ns]);
        let lc: LinkChaos = serde_json::from_value(manifest).unwrap();
        let t = Instant::now();
        self.block(self.chaos().create(&PostParams::default(), &lc))?;
        Ok(t)
    }

    fn delete(&self, name: &str) -> Instant {
        let t = Instant::now();
        self.block(self.chaos().delete(name, &DeleteParams::default()))
            .unwrap();
        t
    }

    fn status(&self, name: &str) -> Option<LinkChaosStatus> {
        self.block(self.chaos().get_status(name)).ok()?.status
    }

    /// What a failure says: per pod its words and median RTT, the
    /// resource's status, the processes' last lines.
    fn seen(&self, name: &str) -> String {
        let mut s = String::new();
        for (p, base) in self.pods.iter().zip(&self.base_rtt_ms) {
            s += &format!(
                "{} ({}): base {base:.2} ms, now {:?} ms, egress {:?}\n",
                p.name,
                cluster::NODES[p.node],
                self.cl.median_rtt_ms(&p.addr),
                p.egress()
            );
        }
        s += &format!("status of {name}: {:?}\n", self.status(name));
        s + "processes' log:\n" + &self.cl.log_tail(25)
    }

    /// Polls until every pod of `pods` has `egress` words containing
    /// `word` (or not, `present` false), and until a single ping to each
    /// sees an RTT above (below) its base + `rise_ms` / 2. Both times from `t0`.
    fn observe(
        &self,
        t0: Instant,
        pods: &[usize],
        word: &str,
        present: bool,
        rise_ms: f64,
    ) -> (Option<Duration>, Option<Duration>) {
        let limit = WITHIN + Duration::from_secs(1);
        let words = until(limit, || {
            pods.iter()
                .all(|&i| self.pods[i].egress().contains(word) == present)
        })
        .map(|_| t0.elapsed());
        if rise_ms <= 0.0 {
            return (words, None);
        }
        let mut seen = vec![false; pods.len()];
        let rtt = until(limit, || {
            for (k, &i) in pods.iter().enumerate() {
                if !seen[k] {
                    let (r, _) = self.cl.ping(&self.pods[i].addr, 1, "1");
                    let mid = self.base_rtt_ms[i] + rise_ms / 2.0;
                    seen[k] = r.first().is_some_and(|&r| (r > mid) == present);
                }
            }
            seen.iter().all(|&s| s)
        })
        .map(|_| t0.elapsed());
        (words, rtt)
    }

    /// Median RTT of pod `i` minus its base, measured up to three times
    /// until `ok` holds (a stall spoils one median now and then).
    fn rise_ms(&self, i: usize, ok: impl Fn(f64) -> bool) -> f64 {
        let mut rise = f64::NAN;
        for _ in 0..3 {
            rise = self
                .cl
                .median_rtt_ms(&self.pods[i].addr)
                .unwrap_or(f64::NAN)
                - self.base_rtt_ms[i];
            if ok(rise) {
                break;
            }
        }
        rise
    }

    fn assert_rise(&self, name: &str, i: usize, lo: f64, hi: f64) -> f64 {
        let rise = self.rise_ms(i, |r| (lo..hi).contains(&r));
        assert!(
            (lo..hi).contains(&rise),
            "{}: RTT rose by {rise:.2} ms, want {lo}..{hi}\n{}",
            self.pods[i].name,
            self.seen(name)
        );
        rise
    }

    fn changes(&self) -> Vec<u64> {
        self.pods.iter().map(Sandbox::changes).collect()
    }
}

fn setup() -> Option<Live> {
    let cnitool = match cluster::prerequisites() {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipped: {why}");
            return None;
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cp = ControlPlane::shared();
    let client = rt.block_on(cp.client()).unwrap();
    rt.block_on(install_crd(&client)).unwrap();
    let ns = format!("lkl{}", std::process::id());
    let nsobj = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
    rt.block_on(Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &nsobj))
        .unwrap();
    let cl = Cluster::new(
        cnitool,
        "l",
        212,
        &cp.kubeconfig_path(),
        &["--max-lag", "off"],
    );
    let mut live = Live {
        rt,
        client,
        ns,
        pods: vec![],
        uids: vec![],
        base_rtt_ms: vec![],
        cl,
    };
    let pods = live.pod_api();
    for (name, app, node) in PODS {
        let uid = live
            .block(common::create_pod(
                &pods,
                name,
                &[("app", app)],
                cluster::NODES[node],
            ))
            .unwrap();
        let sb = live.cl.add(&live.ns.clone(), name, &uid, node);
        live.block(common::set_pod_running(&pods, name, &sb.addr))
            .unwrap();
        let base = live.cl.median_rtt_ms(&sb.addr);
        let base = base.unwrap_or_else(|| panic!("{name} ({}) does not answer", sb.addr));
        live.pods.push(sb);
        live.uids.push(uid);
        live.base_rtt_ms.push(base);
    }
    eprintln!("base RTTs (ms): {:?}", live.base_rtt_ms);
    live.cl.start_processes();
    Some(live)
}

fn delay_manifest(name: &str, direction: &str, duration: Option<&str>) -> Value {
    let mut m = json!({
        "apiVersion": "linkem.dev/v1alpha1", "kind": "LinkChaos",
        "metadata": {"name": name},
        "spec": {"selector": {"labelSelectors": {"app": "web"}}, "mode": "all",
                 "action": "delay", "delay": {"latency": "20ms"}, "direction": direction}});
    if let Some(d) = duration {
        m["spec"]["duration"] = json!(d);
    }
    m
}

/// `delay 20ms`, mode all, direction both: +40 ms on the three web pods
/// within 2 s, the db pods unchanged; then (while it runs) a pod restart and
/// an agent restart; deleted, back within 2 s.
fn all_web_pods_both_ways(live: &mut Live) {
    let t0 = live
        .create(delay_manifest("web-both", "both", None))
        .unwrap();
    let (words, rtt) = live.observe(t0, &[0, 1, 2], "delay 20ms", true, 40.0);
    eprintln!(
        "mode all, both: applied on the emulators {words:?}, seen by ping {rtt:?} after the create"
    );
    assert!(
        words.is_some_and(|t| t <= WITHIN),
        "words {words:?}\n{}",
        live.seen("web-both")
    );
    assert!(
        rtt.is_some_and(|t| t <= WITHIN + ROUND),
        "ping {rtt:?}\n{}",
        live.seen("web-both")
    );
    for i in 0..3 {
        let r = live.assert_rise("web-both", i, 37.0, 48.0);
        eprintln!("{}: +{r:.2} ms", live.pods[i].name);
    }
    for i in 3..5 {
        let r = live.assert_rise("web-both", i, -3.0, 3.0);
        eprintln!("{} (not selected): {r:+.2} ms", live.pods[i].name);
    }
    let st = until(Duration::from_secs(3), || {
        live.status("web-both")
            .and_then(|s| s.pods)
            .is_some_and(|p| p.values().filter(|e| e.state == "Applied").count() == 3)
    });
    assert!(
        st.is_some(),
        "three Applied entries\n{}",
        live.seen("web-both")
    );
    let st = live.status("web-both").unwrap();
    assert_eq!(st.selected.as_ref().map(Vec::len), Some(3), "{st:?}");

    pod_restart(live);
    agent_restart(live);

    let t0 = live.delete("web-both");
    let (words, rtt) = live.observe(t0, &[0, 1, 2], "delay 20ms", false, 40.0);
    eprintln!(
        "deleted: restored on the emulators {words:?}, seen by ping {rtt:?} after the delete"
    );
    assert!(
        words.is_some_and(|t| t <= WITHIN),
        "words {words:?}\n{}",
        live.seen("web-both")
    );
    assert!(
        rtt.is_some_and(|t| t <= WITHIN + ROUND),
        "ping {rtt:?}\n{}",
        live.seen("web-both")
    );
    for i in 0..3 {
        live.assert_rise("web-both", i, -3.0, 3.0);
    }
}

/// web-0's sandbox goes (CNI DEL) and a new one comes (ADD, a new
/// container id): the running resource reaches its new emulator within 2 s.
fn pod_restart(live: &mut Live) {
    let old = live.pods[0].clone();
    live.cl.del(&old);
    let sb = live
        .cl
        .add(&live.ns.clone(), &old.name, &live.uids[0], old.node);
    let t0 = Instant::now();
    assert_ne!(sb.emulator, old.emulator);
    live.block(common::set_pod_running(&live.pod_api(), &sb.name, &sb.addr))
        .unwrap();
    live.pods[0] = sb;
    let (words, rtt) = live.observe(t0, &[0], "delay 20ms", true, 40.0);
    eprintln!("pod restarted: re-applied on the new emulator {words:?}, seen by ping {rtt:?} after the ADD");
    assert!(
        words.is_some_and(|t| t <= WITHIN),
        "words {words:?}\n{}",
        live.seen("web-both")
    );
    assert!(
        rtt.is_some_and(|t| t <= WITHIN + ROUND),
        "ping {rtt:?}\n{}",
        live.seen("web-both")
    );
    live.assert_rise("web-both", 0, 37.0, 48.0);
}

/// node-b's agent killed and started again while web-1 (node-b) carries the
/// delay: nothing is sent twice (the emulators' change counts, the new
/// agent's apply counter) and pings every 10 ms to both of node-b's pods
/// lose nothing beyond a stall's margin.
fn agent_restart(live: &mut Live) {
    let before = live.changes();
    let pingers: Vec<_> = [1, 3]
        .iter()
        .map(|&i| {
            Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &live.cl.probe,
                    "ping",
                    "-n",
                    "-q",
                    "-i",
                    "0.01",
                    "-c",
                    "300",
                    "-W",
                    "1",
                ])
                .arg(&live.pods[i].addr)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    live.cl.kill_agent(1);
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    live.cl.start_agent(1);
    eprintln!(
        "agent restarted (metrics up {:?} after its start)",
        t.elapsed()
    );
    // Its first pass: the watch's initial lists, then one reconcile.
    std::thread::sleep(Duration::from_secs(1));
    for (p, i) in pingers.into_iter().zip([1, 3]) {
        let out = p.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().find(|l| l.contains("received")).unwrap_or("");
        let nums: Vec<u32> = line
            .split(',')
            .filter_map(|f| f.split_whitespace().next()?.parse().ok())
            .collect();
        let (sent, got) = (
            nums.first().copied().unwrap_or(0),
            nums.get(1).copied().unwrap_or(0),
        );
        eprintln!(
            "{} through the agent's restart: {got}/{sent} replies",
            live.pods[i].name
        );
        assert!(
            sent >= 290 && sent - got <= 3,
            "{}: {line}\n{}",
            live.pods[i].name,
            live.seen("web-both")
        );
    }
    assert_eq!(
        live.changes(),
        before,
        "an emulator was changed again\n{}",
        live.seen("web-both")
    );
    let metrics = node::scrape(live.cl.metrics_ports[1]).unwrap_or_default();
    let applies: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("linkem_agent_applies_total{"))
        .collect();
    // A counter appears with the first batch sent: none, or all zero.
    assert!(
        applies.iter().all(|l| l.ends_with(" 0")),
        "the restarted agent applied: {applies:?}"
    );
    let found = ["web-1", "db-0"]
        .iter()
        .all(|p| metrics.contains(&format!("pod=\"{p}\"")));
    assert!(
        found,
        "the restarted agent did not find node-b's emulators:\n{metrics}"
    );
    live.assert_rise("web-both", 1, 37.0, 48.0);
}

/// `latency: 20xs` is refused by the API server's schema (422), and no
/// emulator changes.
fn malformed_latency_is_refused(live: &Live) {
    let before = live.changes();
    let mut m = delay_manifest("web-bad", "to", None);
    m["spec"]["delay"]["latency"] = json!("20xs");
    match live.create(m) {
        Err(kube::Error::Api(e)) => {
            eprintln!("latency 20xs: {} {}", e.code, e.message);
            assert_eq!(e.code, 422, "{e:?}");
            assert!(e.message.contains("latency"), "{e:?}");
        }
        other => panic!("latency 20xs was not refused: {other:?}"),
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        live.changes(),
        before,
        "an emulator changed\n{}",
        live.seen("web-bad")
    );
    assert!(live
        .block(live.chaos().get_opt("web-bad"))
        .unwrap()
        .is_none());
}

/// `duration: 10s`: applied within 2 s, restored at 10 s ± 1 s after the
/// creation, the phase Ended.
fn duration_runs_out(live: &Live) {
    let t0 = live
        .create(delay_manifest("web-10s", "to", Some("10s")))
        .unwrap();
    let (words, _) = live.observe(t0, &[0, 1, 2], "delay 20ms", true, 20.0);
    assert!(
        words.is_some_and(|t| t <= WITHIN),
        "{words:?}\n{}",
        live.seen("web-10s")
    );
    let gone = until(Duration::from_secs(13), || {
        live.web()
            .iter()
            .all(|p| !p.egress().contains("delay 20ms"))
    })
    .map(|_| t0.elapsed());
    eprintln!("duration 10s: applied {words:?}, restored {gone:?} after the create");
    let ok = gone.is_some_and(|t| (9.0..=11.0).contains(&t.as_secs_f64()));
    assert!(ok, "restored {gone:?}\n{}", live.seen("web-10s"));
    for i in 0..3 {
        live.assert_rise("web-10s", i, -3.0, 3.0);
    }
    let st = live.status("web-10s");
    assert_eq!(
        st.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Ended"),
        "{st:?}"
    );
    live.delete("web-10s");
}

fn example(name: &str) -> Value {
    let path = format!(
        "{}/../../deploy/examples/{name}.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Waits until the emulators of `pods` no longer carry `word` after a delete.
fn deleted(live: &Live, name: &str, pods: &[usize], word: &str) {
    let t0 = live.delete(name);
    let (words, _) = live.observe(t0, pods, word, false, 0.0);
    assert!(
        words.is_some_and(|t| t <= WITHIN),
        "{words:?}\n{}",
        live.seen(name)
    );
}

/// Selected pods as indices into `live.pods`, from the status.
fn selected(live: &Live, name: &str, want: usize) -> Vec<usize> {
    let ok = until(Duration::from_secs(3), || {
        live.status(name)
            .and_then(|s| s.selected)
            .is_some_and(|s| s.len() == want)
    });
    assert!(ok.is_some(), "{want} selected\n{}", live.seen(name));
    let sel = live.status(name).unwrap().selected.unwrap();
    sel.iter()
        .map(|r| live.pods.iter().position(|p| p.name == r.name).unwrap())
        .collect()
}

/// deploy/examples/delay.yaml: +20 ms (jitter 2 ms) on the web pods' egress.
fn delay_example(live: &Live) {
    let m = example("delay");
    let name = m["metadata"]["name"].as_str().unwrap().to_string();
    let t0 = live.create(m).unwrap();
    let (words, _) = live.observe(t0, &[0, 1, 2], "delay 20ms", true, 20.0);
    assert!(
        words.is_some_and(|t| t <= WITHIN),
        "{words:?}\n{}",
        live.seen(&name)
    );
    for i in 0..3 {
        let r = live.assert_rise(&name, i, 16.0, 27.0);
        eprintln!(
            "delay example: {} +{r:.2} ms ({})",
            live.pods[i].name,
            live.pods[i].egress()
        );
    }
    live.assert_rise(&name, 3, -3.0, 3.0);
    deleted(live, &name, &[0, 1, 2], "delay 20ms");
}

/// deploy/examples/loss.yaml: fixed-percent 50 of the three web pods is
/// ceil(1.5) = 2 (Chaos Mesh's `FilterObjectsByMode`), both web pods; their
/// replies are lost at 10% within a binomial bound, the third's not.
fn loss_example(live: &Live) {
    let m = example("loss");
    let name = m["metadata"]["name"].as_str().unwrap().to_string();
    live.create(m).unwrap();
    let picked = selected(live, &name, 2);
    assert!(picked.iter().all(|&i| i < 3), "not web pods: {picked:?}");
    let ok = until(WITHIN, || {
        picked
            .iter()
            .all(|&i| live.pods[i].egress().contains("loss"))
    });
    assert!(ok.is_some(), "{}", live.seen(&name));
    const N: u32 = 500;
    let pingers: Vec<_> = (0..3)
        .map(|i| {
            Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &live.cl.probe,
                    "ping",
                    "-n",
                    "-q",
                    "-i",
                    "0.005",
                    "-W",
                    "1",
                    "-c",
                    &N.to_string(),
                ])
                .arg(&live.pods[i].addr)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let (mut lost_sel, mut sent_sel) = (0u32, 0u32);
    for (i, p) in pingers.into_iter().enumerate() {
        let text = String::from_utf8_lossy(&p.wait_with_output().unwrap().stdout).into_owned();
        let line = text
            .lines()
            .find(|l| l.contains("received"))
            .unwrap_or("")
            .to_string();
        let nums: Vec<u32> = line
            .split(',')
            .filter_map(|f| f.split_whitespace().next()?.parse().ok())
            .collect();
        let (sent, got) = (nums[0], nums[1]);
        eprintln!(
            "loss example: {} {} lost {}/{sent}",
            live.pods[i].name,
            if picked.contains(&i) { "(picked)" } else { "" },
            sent - got
        );
        if picked.contains(&i) {
            lost_sel += sent - got;
            sent_sel += sent;
        } else {
            assert!(sent - got <= 2, "{}: {line}", live.pods[i].name);
        }
    }
    // 10% lost, each loss 25% correlated with the one before: a binomial
    // bound (3.3 sd, 1 in 1000) widened by sqrt((1+r)/(1-r)) for the correlation.
    let (p, r, n): (f64, f64, f64) = (0.10, 0.25, f64::from(sent_sel));
    let bound = 3.3 * (p * (1.0 - p) / n).sqrt() * ((1.0 + r) / (1.0 - r)).sqrt();
    let rate = f64::from(lost_sel) / n;
    eprintln!("loss example: {rate:.3} lost on the picked pods, want {p} ± {bound:.3}");
    assert!(
        (rate - p).abs() <= bound,
        "loss rate {rate:.3}\n{}",
        live.seen(&name)
    );
    deleted(live, &name, &picked, "loss");
}

/// deploy/examples/bandwidth.yaml: one db pod sends at 1 mbit/s: an iperf3
/// stream from it measures 1 Mbit/s ± 15%.
fn bandwidth_example(live: &Live) {
    let m = example("bandwidth");
    let name = m["metadata"]["name"].as_str().unwrap().to_string();
    live.create(m).unwrap();
    let picked = selected(live, &name, 1);
    let i = picked[0];
    assert!((3..5).contains(&i), "not a db pod: {picked:?}");
    let ok = until(WITHIN, || live.pods[i].egress().contains("rate 1mbit"));
    assert!(ok.is_some(), "{}", live.seen(&name));
    let mut server = Command::new("ip")
        .args([
            "netns",
            "exec",
            &live.pods[i].netns,
            "iperf3",
            "-s",
            "-1",
            "-p",
            "5212",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &live.cl.probe,
            "iperf3",
            "-c",
            &live.pods[i].addr,
            "-p",
            "5212",
            "-R",
            "-t",
            "4",
            "-O",
            "1",
            "-J",
        ])
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let bps = v["end"]["sum_received"]["bits_per_second"].as_f64();
    eprintln!(
        "bandwidth example: {} received {bps:?} bit/s (rate 1mbit)",
        live.pods[i].name
    );
    let ok = bps.is_some_and(|b| (0.85e6..=1.15e6).contains(&b));
    assert!(
        ok,
        "iperf3: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        live.seen(&name)
    );
    deleted(live, &name, &[i], "rate 1mbit");
}

#[test]
fn linkchaos_measures_on_a_live_two_node_cluster() {
    let t = Instant::now();
    let Some(mut live) = setup() else { return };
    eprintln!("setup {:?}", t.elapsed());
    all_web_pods_both_ways(&mut live);
    malformed_latency_is_refused(&live);
    duration_runs_out(&live);
    delay_example(&live);
    loss_example(&live);
    bandwidth_example(&live);
    let mut rtts: Vec<f64> = live.base_rtt_ms.clone();
    eprintln!(
        "done in {:?} (median base RTT {:.2} ms)",
        t.elapsed(),
        median(&mut rtts)
    );
}
