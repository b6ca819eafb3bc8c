//! The scale measure (run by `scripts/bench-k8s.sh`, ignored in the
//! suite): N pods (default 200) on two nodes, each with a real emulator from
//! linkem-cni ADD, the controller and two agents as processes against a real
//! kube-apiserver; one LinkChaos (delay 20ms, mode all) selects every pod.
//! Printed: the time from its creation to every pod Applied (as polled
//! from the API and from the latest `status.pods[*].at`), to every emulator
//! restored after its delete, the agents' CPU and RSS, the emulators'
//! memory (summed RSS, summed PSS, and the drop of MemAvailable).
//!
//! `LINKEM_BENCH_PODS` (default 200), `LINKEM_BENCH_OPTIONS` (linkem-cni's
//! `options`, space-separated; default `--max-lag off`).

mod cluster;
mod common;
mod node;

use cluster::{Cluster, NODES};
use common::{install_crd, ControlPlane};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use linkem_operator::chaos::LinkChaos;
use serde_json::json;
use std::time::{Duration, Instant, SystemTime};

/// /proc/PID/stat's utime + stime, in seconds (USER_HZ 100).
fn cpu_s(pid: u32) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = text.rsplit(')').next().unwrap_or("");
    let f: Vec<f64> = after
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // After the comm: state (not a number, skipped), then ppid... utime is
    // the 14th field of the line, the 11th number after the state.
    (f.get(10).unwrap_or(&0.0) + f.get(11).unwrap_or(&0.0)) / 100.0
}

/// A `KEY: N kB` line of a /proc file, in KiB.
fn kib(path: &str, key: &str) -> u64 {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[test]
#[ignore = "a benchmark: scripts/bench-k8s.sh"]
fn bench_many_pods_on_two_nodes() {
    let cnitool = cluster::prerequisites().expect("prerequisites");
    let n: usize = std::env::var("LINKEM_BENCH_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let options = std::env::var("LINKEM_BENCH_OPTIONS").unwrap_or("--max-lag off".into());
    let options: Vec<&str> = options.split_whitespace().collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cp = ControlPlane::shared();
    let client = rt.block_on(cp.client()).unwrap();
    rt.block_on(install_crd(&client)).unwrap();
    let ns = format!("lkq{}", std::process::id());
    let nsobj = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
    rt.block_on(Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &nsobj))
        .unwrap();
    let mut cl = Cluster::new(cnitool, "q", 213, &cp.kubeconfig_path(), &options);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let avail_before = kib("/proc/meminfo", "MemAvailable:");
    let t = Instant::now();
    for k in 0..n {
        let name = format!("pod-{k}");
        let node = k % NODES.len();
        let uid = rt
            .block_on(common::create_pod(
                &pods,
                &name,
                &[("app", "bench")],
                NODES[node],
            ))
            .unwrap();
        let sb = cl.add(&ns, &name, &uid, node);
        rt.block_on(common::set_pod_running(&pods, &name, &sb.addr))
            .unwrap();
    }
    let add_s = t.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(3));
    let pids = cl.emulator_pids();
    assert_eq!(pids.len(), n, "emulators running");
    let rss: u64 = pids
        .iter()
        .map(|p| kib(&format!("/proc/{p}/status"), "VmRSS:"))
        .sum();
    let pss: u64 = pids
        .iter()
        .map(|p| kib(&format!("/proc/{p}/smaps_rollup"), "Pss:"))
        .sum();
    let avail_after = kib("/proc/meminfo", "MemAvailable:");
    println!(
        "{n} pods: CNI ADD + Pod objects {add_s:.1} s ({:.0} ms per pod); emulators ({:?}): \
         RSS sum {:.0} MiB ({:.1} MiB each), PSS sum {:.0} MiB ({:.1} MiB each), \
         MemAvailable dropped {:.0} MiB",
        add_s * 1000.0 / n as f64,
        options,
        mib(rss),
        mib(rss) / n as f64,
        mib(pss),
        mib(pss) / n as f64,
        mib(avail_before.saturating_sub(avail_after))
    );

    cl.start_processes();
    let agent_pids: Vec<u32> = cl.agents.iter().flatten().map(|a| a.pid()).collect();
    std::thread::sleep(Duration::from_secs(3));
    let cpu0: Vec<f64> = agent_pids.iter().map(|&p| cpu_s(p)).collect();
    let chaos: Api<LinkChaos> = Api::namespaced(client.clone(), &ns);
    let lc: LinkChaos = serde_json::from_value(json!({
        "apiVersion": "linkem.dev/v1alpha1", "kind": "LinkChaos",
        "metadata": {"name": "all-slow"},
        "spec": {"selector": {"namespaces": [ns], "labelSelectors": {"app": "bench"}},
                 "mode": "all", "action": "delay", "delay": {"latency": "20ms"}}}))
    .unwrap();
    let wall0 = SystemTime::now();
    let t0 = Instant::now();
    rt.block_on(chaos.create(&PostParams::default(), &lc))
        .unwrap();
    let applied = node::until(Duration::from_secs(120), || {
        std::thread::sleep(Duration::from_millis(80));
        let st = rt
            .block_on(chaos.get_status("all-slow"))
            .ok()
            .and_then(|c| c.status);
        st.and_then(|s| s.pods)
            .is_some_and(|p| p.values().filter(|e| e.state == "Applied").count() == n)
    })
    .map(|_| t0.elapsed());
    let st = rt.block_on(chaos.get_status("all-slow")).unwrap().status;
    let entries = st.and_then(|s| s.pods).unwrap_or_default();
    let last_at = entries
        .values()
        .filter_map(|e| e.at.as_deref())
        .filter_map(|a| a.parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_nanosecond())
        .max();
    let wall0_ns = wall0
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128;
    let at_s = last_at.map(|a| (a - wall0_ns) as f64 / 1e9);
    let cpu1: Vec<f64> = agent_pids.iter().map(|&p| cpu_s(p)).collect();
    let slow = cl
        .sandboxes
        .iter()
        .filter(|s| s.egress().contains("delay 20ms"))
        .count();
    println!(
        "creation -> every pod Applied in the status: {applied:?} (polled every ~0.1 s); \
         latest status `at` {at_s:?} s after the create; emulators with the delay: {slow}/{n}"
    );
    assert_eq!(applied.map(|_| slow), Some(n), "not every pod applied");
    for (i, p) in agent_pids.iter().enumerate() {
        println!(
            "agent {}: CPU {:.2} s over the apply, RSS {:.1} MiB",
            NODES[i],
            cpu1[i] - cpu0[i],
            mib(kib(&format!("/proc/{p}/status"), "VmRSS:"))
        );
    }

    let t1 = Instant::now();
    rt.block_on(chaos.delete("all-slow", &DeleteParams::default()))
        .unwrap();
    let restored = node::until(Duration::from_secs(120), || {
        cl.sandboxes
            .iter()
            .all(|s| !s.egress().contains("delay 20ms"))
    })
    .map(|_| t1.elapsed());
    println!("delete -> every emulator restored: {restored:?}");
    let idle0: Vec<f64> = agent_pids.iter().map(|&p| cpu_s(p)).collect();
    std::thread::sleep(Duration::from_secs(10));
    for (i, &p) in agent_pids.iter().enumerate() {
        println!(
            "agent {}: idle CPU {:.2}% of a core over 10 s, RSS {:.1} MiB",
            NODES[i],
            (cpu_s(p) - idle0[i]) * 10.0,
            mib(kib(&format!("/proc/{p}/status"), "VmRSS:"))
        );
    }
    assert!(restored.is_some(), "not every emulator restored");
}
