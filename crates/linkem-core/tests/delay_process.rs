//! `jitter-mode process`: the delay is a process in time, so packets keep their
//! order and the delays keep the configured distribution at any packet rate
//! (the per-packet jitter's order rule shifts the mean up as the rate grows).
//!
//! Theory, independent of the model: `delay 10ms 2ms` is uniform on [8, 12] ms,
//! mean 10 ms, standard deviation 2/√3 = 1.1547 ms. The delays are constant over
//! each hold, so the standard error of the mean is taken from batch means over
//! batches of many holds; the bounds are at z = 4.42 (p ≈ 1e-5), plus, for the
//! standard deviation, the part of the time spent on falls (J/3 / HOLD, where the
//! delay runs between two held values: their spread is smaller).

use linkem_core::{Fate, Link, LinkSpec, PacketMeta};

const Z: f64 = 4.42;
const BATCHES: usize = 40;

struct Run {
    mean_ms: f64,
    mean_se_ms: f64,
    sd_ms: f64,
    sd_se_ms: f64,
    reordered: u64,
    packets: u64,
}

/// Periodic packets at `pps` for `secs` through `words`; delays streamed into
/// batch sums (80 M packets do not fit in memory as a list).
fn run(words: &str, pps: u64, secs: u64, seed: u64) -> Run {
    let spec = LinkSpec::parse(words).unwrap_or_else(|e| panic!("{words}: {e}"));
    let mut link = Link::new(spec.link, seed, 0);
    let n = pps * secs;
    let per_batch = n / BATCHES as u64;
    let (mut sums, mut squares) = (vec![0.0f64; BATCHES], vec![0.0f64; BATCHES]);
    let (mut last_release, mut reordered) = (0u64, 0u64);
    for i in 0..per_batch * BATCHES as u64 {
        let t = i * 1_000_000_000 / pps;
        let v = link.on_arrival(t, PacketMeta { len_bytes: 100 });
        assert_eq!(v.fate, Fate::Delivered);
        reordered += (v.release_ns < last_release) as u64;
        last_release = v.release_ns;
        let d_ms = (v.release_ns - t) as f64 / 1e6;
        let b = (i / per_batch) as usize;
        sums[b] += d_ms;
        squares[b] += d_ms * d_ms;
    }
    let k = BATCHES as f64;
    let m = per_batch as f64;
    let means: Vec<f64> = sums.iter().map(|s| s / m).collect();
    let vars: Vec<f64> = squares
        .iter()
        .zip(&means)
        .map(|(q, mu)| q / m - mu * mu)
        .collect();
    let mean = means.iter().sum::<f64>() / k;
    let mean_var = means.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (k - 1.0);
    // Within-batch variance plus the spread of the batch means: the whole variance.
    let var = vars.iter().sum::<f64>() / k + mean_var * (k - 1.0) / k;
    let sds: Vec<f64> = vars.iter().map(|v| v.sqrt()).collect();
    let sd_mean = sds.iter().sum::<f64>() / k;
    let sd_var = sds.iter().map(|x| (x - sd_mean).powi(2)).sum::<f64>() / (k - 1.0);
    Run {
        mean_ms: mean,
        mean_se_ms: (mean_var / k).sqrt(),
        sd_ms: var.sqrt(),
        sd_se_ms: (sd_var / k).sqrt() + mean_var.sqrt() / k.sqrt(),
        reordered,
        packets: per_batch * BATCHES as u64,
    }
}

fn check(words: &str, pps: u64, secs: u64, hold_ms: f64) {
    let r = run(words, pps, secs, 7);
    let (mean, sd) = (10.0, 2.0 / 3f64.sqrt());
    eprintln!(
        "{words} at {pps} pps: {} packets, mean {:.4} ms (se {:.4}), sd {:.4} ms",
        r.packets, r.mean_ms, r.mean_se_ms, r.sd_ms
    );
    assert_eq!(r.reordered, 0, "{words} at {pps} pps: packets overtook");
    assert!(
        (r.mean_ms - mean).abs() <= Z * r.mean_se_ms + 0.01,
        "{words} at {pps} pps ({} packets): mean {:.4} ms, expected {mean} ± {:.4}",
        r.packets,
        r.mean_ms,
        Z * r.mean_se_ms
    );
    // Falls take J/3 / HOLD of the time: the spread there is at most σ lower.
    let falls = (2.0 / 3.0) / hold_ms;
    assert!(
        (r.sd_ms - sd).abs() <= Z * r.sd_se_ms + falls * sd,
        "{words} at {pps} pps: standard deviation {:.4} ms, expected {sd:.4} ± {:.4}",
        r.sd_ms,
        Z * r.sd_se_ms + falls * sd
    );
}

#[test]
fn the_delay_process_keeps_order_and_distribution_at_1_kpps() {
    check("delay 10ms 2ms jitter-mode process 20ms", 1_000, 80, 20.0);
    // The default hold: 100 × the jitter.
    check("delay 10ms 2ms jitter-mode process", 1_000, 800, 200.0);
}

#[test]
fn the_delay_process_keeps_order_and_distribution_at_200_kpps() {
    check("delay 10ms 2ms jitter-mode process 20ms", 200_000, 80, 20.0);
}

#[test]
fn per_packet_jitter_in_order_shifts_the_mean_where_the_process_does_not() {
    // The control: the default mode at 125 kpps, the 11.8 ms.
    let r = run("delay 10ms 2ms", 125_000, 2, 7);
    eprintln!("delay 10ms 2ms at 125 kpps: mean {:.3} ms", r.mean_ms);
    assert_eq!(r.reordered, 0);
    assert!(
        r.mean_ms > 11.5,
        "per-packet mode: mean {:.3} ms",
        r.mean_ms
    );
    let r = run("delay 10ms 2ms jitter-mode process 20ms", 125_000, 40, 7);
    assert!(
        (r.mean_ms - 10.0).abs() < 0.2,
        "process: mean {:.3} ms",
        r.mean_ms
    );
}

#[test]
fn jitter_mode_words_parse_print_back_and_refuse_what_has_no_meaning() {
    let spec = LinkSpec::parse("delay 10ms 2ms jitter-mode process").unwrap();
    assert_eq!(spec.link.jitter_hold_ns, Some(200_000_000));
    assert_eq!(
        spec.link.to_string(),
        "queue 1000 delay 10ms 2ms jitter-mode process 200ms"
    );
    assert_eq!(LinkSpec::parse(&spec.link.to_string()).unwrap(), spec);
    let spec = LinkSpec::parse("delay 10ms 2ms jitter-mode packet").unwrap();
    assert_eq!(spec.link.jitter_hold_ns, None);
    let e = LinkSpec::parse("delay 10ms jitter-mode process").unwrap_err();
    assert!(e.message.contains("needs a jitter"), "{e}");
    let e = LinkSpec::parse("delay 10ms 1ms jitter-mode wobbly").unwrap_err();
    assert!(e.message.contains("'packet' or 'process"), "{e}");
    let e = LinkSpec::parse("delay 10ms 1ms jitter-mode process 0ms").unwrap_err();
    assert!(e.message.contains("longer than 0"), "{e}");
}
