//! Golden outputs: the exact fates and release times of a seeded run, for every
//! delay distribution, every loss model, duplication, corruption and reordering.
//!
//! The model promises the same output for the same seed and input on every
//! machine and toolchain (deterministic math: `libm`, integers and tables; see
//! `linkem_core::dist`). These tests pin that output. A failing test means the
//! model's output changed: if that was meant, note it in CHANGELOG.md and
//! regenerate `tests/golden/runs.txt` with `LINKEM_BLESS=1 cargo test -p
//! linkem-core --test golden`; if not, it is a bug.

use linkem_core::{Fate, Link, LinkSpec, PacketMeta};
use std::collections::BTreeMap;
use std::fmt::Write as _;

const PACKETS: usize = 2000;
const SEED: u64 = 20_261_123;
const GOLDEN: &str = "tests/golden/runs.txt";

/// A netem-format table (values in units of jitter/8192): a skewed shape, so
/// that the table's order and scale both matter.
fn netem_table() -> String {
    (0..64)
        .map(|i: i64| ((i * i * 7) - 6000).to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

const CDF_PROFILE: &str = "prob delay\n0 1\n0.5 2\n0.9 8\n1 20\n";

/// Each case: a name and its link words (files: `table.dist`, `profile.cdf`).
const CASES: &[(&str, &str)] = &[
    ("uniform", "delay 10ms 3ms"),
    ("uniform-correlated", "delay 10ms 3ms 40%"),
    ("normal", "delay 10ms 3ms distribution normal reorder allow"),
    ("pareto", "delay 10ms 3ms distribution pareto"),
    ("paretonormal", "delay 10ms 3ms distribution paretonormal"),
    ("exponential", "delay 10ms 3ms 25% distribution exponential"),
    ("table", "delay 10ms 3ms distribution table.dist"),
    ("cdf-profile", "delay 0ms distribution profile.cdf"),
    ("loss-random", "loss 5%"),
    ("loss-correlated", "loss 5% 60%"),
    ("loss-ber", "loss ber 2e-5 overhead ethernet"),
    ("loss-gemodel", "loss gemodel 2% 20% 80% 0.5%"),
    ("loss-state", "loss state 2% 30% 5% 20% 1%"),
    ("loss-at-link", "rate 20mbit loss 3% loss-at link"),
    ("duplicate", "delay 1ms duplicate 5% 30%"),
    ("corrupt", "corrupt 5% 30%"),
    ("reorder", "delay 10ms 1ms reorder 10% 30% gap 3"),
    ("rate-queue-policer", "rate 10mbit queue 20 delay 5ms policer 8mbit burst 30kB"),
];

/// A fixed trace: mixed sizes, pseudo-random gaps of 0-400 µs (xorshift, so the
/// trace itself needs no floating point).
fn trace() -> Vec<(u64, u32)> {
    let sizes = [64u32, 1500, 576, 1500, 40, 1200, 9000];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut t = 0u64;
    (0..PACKETS)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            t += x % 400_000;
            (t, sizes[i % sizes.len()])
        })
        .collect()
}

/// FNV-1a, 64 bits: a fixed, documented hash (std's hasher may change between
/// releases).
struct Fnv(u64);

impl Fnv {
    fn eat(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

fn files(name: &str) -> Result<String, String> {
    match name {
        "table.dist" => Ok(netem_table()),
        "profile.cdf" => Ok(CDF_PROFILE.to_string()),
        _ => Err(format!("no file {name}")),
    }
}

/// One case's run, summarised: hash of every verdict, and counts to read.
fn run(words: &str) -> String {
    let w: Vec<&str> = words.split_whitespace().collect();
    let spec = LinkSpec::parse_words(&w, &mut files).unwrap_or_else(|e| panic!("{words}: {e}"));
    let mut link = Link::new(spec.link, SEED, 0);
    let mut hash = Fnv(0xcbf2_9ce4_8422_2325);
    let (mut delivered, mut dups, mut corrupt, mut release_sum) = (0u64, 0u64, 0u64, 0u128);
    for (i, &(t, len)) in trace().iter().enumerate() {
        let v = link.on_arrival(t, PacketMeta { len_bytes: len });
        hash.eat(&(i as u64).to_le_bytes());
        hash.eat(v.fate.to_string().as_bytes());
        hash.eat(&v.release_ns.to_le_bytes());
        hash.eat(&[u8::from(v.duplicate)]);
        hash.eat(&v.corrupt_bit.unwrap_or(u32::MAX).to_le_bytes());
        hash.eat(&v.queue_packets.to_le_bytes());
        hash.eat(&v.queue_bytes.to_le_bytes());
        if v.fate == Fate::Delivered {
            delivered += 1;
            release_sum += u128::from(v.release_ns);
        }
        dups += u64::from(v.duplicate);
        corrupt += u64::from(v.corrupt_bit.is_some());
    }
    format!(
        "{:016x} delivered={delivered} duplicates={dups} corrupted={corrupt} release_sum={release_sum}",
        hash.0
    )
}

#[test]
fn seeded_runs_match_the_golden_outputs() {
    let got: BTreeMap<&str, String> = CASES.iter().map(|&(n, w)| (n, run(w))).collect();
    let mut text = String::new();
    for (name, line) in &got {
        writeln!(text, "{name} {line}").unwrap();
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(GOLDEN);
    if std::env::var_os("LINKEM_BLESS").is_some() {
        std::fs::write(&path, &text).expect("golden file writable");
        return;
    }
    let want = std::fs::read_to_string(&path).expect("golden file present");
    let mut changed = Vec::new();
    for line in want.lines() {
        let (name, expected) = line.split_once(' ').expect("name, then the summary");
        match got.get(name) {
            Some(actual) if actual == expected => {}
            Some(actual) => changed.push(format!("{name}:\n  want {expected}\n  got  {actual}")),
            None => changed.push(format!("{name}: no such case any more")),
        }
    }
    assert_eq!(want.lines().count(), got.len(), "cases added or removed: bless");
    assert!(
        changed.is_empty(),
        "the model's seeded output changed (a deliberate change must be noted in \
         CHANGELOG.md, then blessed):\n{}",
        changed.join("\n")
    );
}
