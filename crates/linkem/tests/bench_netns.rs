//! `linkem bench` end to end: a short delay scenario in its own namespaces,
//! checked for a complete, internally consistent table. Needs root (prints
//! "skipped" otherwise); as root, a missing tool fails the test.

use serde_json::Value;
use std::process::Command;

fn linkem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_linkem"))
}

/// Not root: skipped (says so); root without a tool the bench needs: fails.
fn skip() -> bool {
    match linkem_io::netns::check_prerequisites() {
        Err(e @ linkem_io::netns::NetnsError::NotRoot) => {
            eprintln!("skipped: {e}");
            true
        }
        Err(e) => panic!("{e}"),
        Ok(()) => false,
    }
}

#[test]
fn a_quick_delay_bench_prints_a_complete_consistent_table() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let plots = dir.path().join("plots");
    let o = linkem()
        .args([
            "bench",
            "delay",
            "--quick",
            "--backend",
            "packet",
            "--high-rate",
            "5000",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--plot")
        .arg(&plots)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&o.stderr)
    );
    eprintln!("{stdout}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = v["rows"].as_array().unwrap();
    // 5 cases × (linkem without delay, linkem delay 10ms, Linux bridge).
    assert_eq!(rows.len(), 15);
    for r in rows {
        let (sent, delivered, lost) = (
            r["sent"].as_u64().unwrap(),
            r["delivered"].as_u64().unwrap(),
            r["lost"].as_u64().unwrap(),
        );
        assert!(sent > 0, "{r}");
        assert_eq!(delivered + lost, sent, "delivered + lost = sent: {r}");
        assert_eq!(r["analysis"]["received"], r["delivered"]);
        assert!(
            r["repeat"].as_str().unwrap().contains("linkem probe"),
            "{r}"
        );
        let p50 = r["analysis"]["delay_ns"]["p50"].as_i64().unwrap();
        if r["configured"] == "delay 10ms" {
            assert!(r["deviation_ns"]["p50"].is_i64(), "{r}");
            // A loose sanity bound; the precise figures are the bench's
            // output, not a test's. The fastest packet took 10 ms to within a
            // millisecond (less at most the 50 µs send lead can take off),
            // which no stall can raise; the median, which a loaded machine's
            // stalls can (a CI run: 12.0 ms, its sender 63 ms late at
            // times), stays well below twice the delay.
            let min = r["analysis"]["delay_ns"]["min"].as_i64().unwrap();
            assert!((9_950_000..11_000_000).contains(&min), "{r}");
            assert!((10_000_000..20_000_000).contains(&p50), "{r}");
        } else {
            assert!(r["deviation_ns"].is_null());
            assert!(p50 < 1_000_000, "no delay configured: {r}");
        }
    }
    // Every row appears in both tables.
    let data_rows = stdout
        .lines()
        .filter(|l| l.starts_with("| linkem") || l.starts_with("| Linux bridge"))
        .count();
    assert_eq!(data_rows, 30, "{stdout}");
    let repeat_lines = stdout
        .lines()
        .filter(|l| l.starts_with("- delay,") && l.contains("linkem probe"))
        .count();
    assert_eq!(repeat_lines, 15, "every row has its command line: {stdout}");
    for f in [
        "delay-64B-constant-1000pps.png",
        "delay-64B-constant-1000pps.svg",
        "gaps-64B-burst64-1000pps.png",
    ] {
        assert!(plots.join(f).exists(), "{f} written");
    }
}

#[test]
fn a_quick_tail_bench_compares_every_backend_and_policy_with_the_default() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("tail.json");
    let o = linkem()
        .args(["bench", "tail", "--quick", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&o.stderr)
    );
    eprintln!("{stdout}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let all_rows = v["rows"].as_array().unwrap();
    let (sparse, rows): (Vec<&Value>, Vec<&Value>) =
        all_rows.iter().partition(|r| r["scenario"] == "sparse");
    check_sparse_rows(&sparse);
    // One round: linkem's defaults and the same with coalescing off, then
    // 2 backends × 4 policies, each beside the Linux bridge and the timer floor.
    let devices: Vec<&str> = rows.iter().map(|r| r["device"].as_str().unwrap()).collect();
    assert_eq!(
        devices,
        [
            "linkem (defaults)",
            "linkem --coalesce off",
            "linkem --backend xdp --realtime off",
            "linkem --backend xdp --realtime timed",
            "linkem --backend xdp --realtime out",
            "linkem --backend xdp --realtime all",
            "linkem --backend packet --realtime off",
            "linkem --backend packet --realtime timed",
            "linkem --backend packet --realtime out",
            "linkem --backend packet --realtime all",
        ]
    );
    for r in rows.iter().copied() {
        let d = &r["deviation_ns"];
        let sent = r["sent"].as_u64().unwrap();
        assert_eq!(sent, 1000, "{r}");
        assert_eq!(
            r["delivered"].as_u64().unwrap() + r["lost"].as_u64().unwrap(),
            sent
        );
        assert_eq!(r["configured"], "delay 10ms");
        // The bridge between the twin hosts carried as many at the same time.
        let beside = &r["beside"];
        let bridge = &beside["bridge"];
        assert_eq!(bridge["sent"].as_u64().unwrap(), sent, "{r}");
        assert!(
            bridge["received"].as_u64().unwrap() * 10 >= sent * 9,
            "the twin's bridge delivered under 90 %: {r}"
        );
        // Each percentile is judged beyond the bridge's same percentile.
        for p in ["p50", "p99", "p99_9", "max"] {
            let own = r["analysis"]["delay_ns"][p].as_i64().unwrap();
            let beyond = own - 10_000_000 - bridge["delay_ns"][p].as_i64().unwrap();
            assert_eq!(d[p].as_i64().unwrap(), beyond, "{p}: {r}");
        }
        // The floor woke about once a ms while the probe ran (a second of
        // sends and the time to start and drain them).
        let floor = &beside["timer_floor_ns"];
        let woke = floor["count"].as_u64().unwrap();
        assert!((800..=5000).contains(&woke), "{r}");
        let (p50, p99_9) = (
            floor["p50"].as_i64().unwrap(),
            floor["p99_9"].as_i64().unwrap(),
        );
        assert!(0 <= p50 && p50 <= p99_9, "{r}");
        // A sanity bound only: the figures are the bench's output, not a test's.
        assert!(d["p50"].as_i64().unwrap().abs() < 1_000_000, "{r}");
        let repeat = r["repeat"].as_str().unwrap();
        assert!(
            repeat.contains("linkem bridge") && repeat.contains("type bridge"),
            "{r}"
        );
        // Every linkem row carries the bridge's own counts.
        assert!(r["linkem_counts"]["directions"].is_array(), "{r}");
    }
    assert!(
        stdout.contains("linkem as started by default, beyond the bridge beside it: p50")
            && stdout.contains("within the timer floor's p99.9 of the same seconds")
            && stdout.contains("of the floor's at the median round"),
        "the verdict on the default: {stdout}"
    );
    assert!(
        stdout.contains("Every row of every setting: p99.9 within the timer floor's"),
        "the tail of every row against the floor: {stdout}"
    );
    assert!(
        stdout.contains("linkem as started by default:")
            && stdout.contains("the best setting")
            && (stdout.contains("the default is within the best setting's spread")
                || stdout.contains("the default is above every round of the best")),
        "the verdict line: {stdout}"
    );
}

#[test]
fn probe_and_bench_refuse_bad_arguments_plainly() {
    let run = |args: &[&str]| {
        let o = linkem().args(args).output().unwrap();
        assert!(!o.status.success(), "{args:?} should fail");
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    let e = run(&["probe", "10.0.0.2", "--rate", "fast"]);
    assert!(e.contains("fast"), "{e}");
    let e = run(&["probe", "10.0.0.2", "--pattern", "burst"]);
    assert!(e.contains("burst:64"), "{e}");
    let e = run(&["probe", "10.0.0.2", "--size", "20"]);
    assert!(e.contains("64 to 1518"), "{e}");
    let e = run(&["probe", "10.0.0.2", "--packets", "0"]);
    assert!(e.contains("nothing to send"), "{e}");
    let e = run(&["bench", "speed"]);
    assert!(e.contains("unknown scenario 'speed'"), "{e}");
}

/// The sparse table of `tail --quick`: the timer floor for a short sleep
/// and a sparse gap, then per rate linkem through each small delay, each
/// beside the twin's Linux bridge at the same rate; every stream carries
/// what it sent (a packet or two may be lost to a stall) and says its
/// wake-ups per packet.
fn check_sparse_rows(sparse: &[&Value]) {
    let count = |device: &str| sparse.iter().filter(|r| r["device"] == device).count();
    assert_eq!(count("timer wake-up (platform floor)"), 2, "{sparse:?}");
    assert_eq!(
        count("Linux bridge"),
        0,
        "the bridge is beside each row: {sparse:?}"
    );
    let linkems = count("linkem (defaults)");
    assert!(
        linkems >= 4 && linkems % 4 == 0,
        "four small delays per rate: {sparse:?}"
    );
    for r in sparse.iter().filter(|r| r["device"] == "linkem (defaults)") {
        let bridge = &r["beside"]["bridge"];
        assert_eq!(bridge["sent"], r["sent"], "the twin sent as many: {r}");
        let beyond = r["analysis"]["delay_ns"]["p50"].as_i64().unwrap()
            - r["analysis"]["expected_delay_ns"].as_i64().unwrap()
            - bridge["delay_ns"]["p50"].as_i64().unwrap();
        assert_eq!(r["deviation_ns"]["p50"].as_i64().unwrap(), beyond, "{r}");
    }
    for r in sparse
        .iter()
        .filter(|r| r["device"] != "timer wake-up (platform floor)")
    {
        let sent = r["sent"].as_u64().unwrap();
        let delivered = r["delivered"].as_u64().unwrap();
        // What linkem took in and dropped for lateness: a stall of the
        // machine past --max-lag (5 ms by default) is counted, not lost.
        let dirs = r["linkem_counts"]["directions"].as_array();
        let count = |key: &str| -> u64 {
            dirs.map_or(0, |d| {
                d.iter()
                    .filter_map(|d| d[key].as_u64().or(d["fates"][key].as_u64()))
                    .sum()
            })
        };
        let (received, late) = (count("received"), count("late"));
        assert!(
            sent >= 1 && (delivered + late) * 10 >= sent * 9,
            "{} {} at {} pps: the probe sent {sent} and got {delivered}; linkem received \
             {received} (both directions) and dropped {late} as late; the row: {r}",
            r["device"],
            r["configured"],
            r["rate_pps"],
        );
    }
}
