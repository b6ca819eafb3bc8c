//! Loss models and delay distributions against theory, with confidence bounds.
//!
//! Each check derives its bound from the sample size (binomial, batch means for
//! correlated processes, Dvoretzky-Kiefer-Wolfowitz for whole distributions) at
//! a confidence far beyond 99.9 %, so a failure means the model is wrong, not
//! that the seed was unlucky. The theory is written out here, independently of
//! the model's own helpers.

use linkem_core::{Fate, Link, LinkSpec, PacketMeta};

/// Standard normal quantile for the two-sided bounds used below (p ≈ 1e-5).
const Z: f64 = 4.42;

fn losses(words: &str, n: usize, len_bytes: u32, seed: u64) -> Vec<bool> {
    let spec = LinkSpec::parse(words).unwrap_or_else(|e| panic!("{words}: {e}"));
    let mut link = Link::new(spec.link, seed, 0);
    (0..n as u64)
        .map(|i| {
            link.on_arrival(i * 1_000_000, PacketMeta { len_bytes })
                .fate
                == Fate::Loss
        })
        .collect()
}

/// Mean, and the standard error of the mean by batch means (valid for correlated series).
fn batch_mean(x: &[f64], batches: usize) -> (f64, f64) {
    let size = x.len() / batches;
    let means: Vec<f64> = x
        .chunks_exact(size)
        .map(|c| c.iter().sum::<f64>() / size as f64)
        .collect();
    let m = means.iter().sum::<f64>() / means.len() as f64;
    let var = means.iter().map(|b| (b - m).powi(2)).sum::<f64>() / (means.len() - 1) as f64;
    (m, (var / means.len() as f64).sqrt())
}

/// Lengths of runs of consecutive losses.
fn bursts(lost: &[bool]) -> Vec<f64> {
    let mut out = Vec::new();
    let mut run = 0;
    for &l in lost {
        if l {
            run += 1;
        } else if run > 0 {
            out.push(run as f64);
            run = 0;
        }
    }
    out
}

fn assert_close(what: &str, got: f64, want: f64, se: f64) {
    assert!(
        (got - want).abs() <= Z * se,
        "{what}: measured {got:.6}, theory {want:.6}, bound ±{:.6}",
        Z * se
    );
}

fn check_loss_rate(words: &str, lost: &[bool], want: f64) {
    let x: Vec<f64> = lost.iter().map(|&l| l as u8 as f64).collect();
    let (m, se) = batch_mean(&x, 100);
    // Batch means can underestimate the error of a strongly correlated chain with
    // few batches; never accept a bound tighter than the binomial one.
    let binomial = (want * (1.0 - want) / lost.len() as f64).sqrt();
    assert_close(
        &format!("loss rate of '{words}'"),
        m,
        want,
        se.max(binomial),
    );
}

fn check_mean_burst(words: &str, lost: &[bool], want: f64) {
    let b = bursts(lost);
    assert!(b.len() > 100, "{words}: only {} bursts", b.len());
    // Bursts of a Markov chain are independent of one another.
    let m = b.iter().sum::<f64>() / b.len() as f64;
    let var = b.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (b.len() - 1) as f64;
    // With rare losses every burst may be a single packet (sample variance 0); the
    // geometric variance q/(1-q)² of the theory keeps the bound honest.
    let q = 1.0 - 1.0 / want;
    let var = var.max(q * want * want);
    assert_close(
        &format!("mean loss burst of '{words}'"),
        m,
        want,
        (var / b.len() as f64).sqrt(),
    );
}

#[test]
fn bernoulli_loss_rate_is_inside_its_binomial_bound() {
    for (words, p) in [
        ("loss 1%", 0.01),
        ("loss 10%", 0.10),
        ("plr 0.3", 0.30),
        ("loss 0.05%", 0.0005),
    ] {
        let n = 400_000;
        let lost = losses(words, n, 100, 11);
        let k = lost.iter().filter(|&&l| l).count() as f64;
        assert_close(words, k / n as f64, p, (p * (1.0 - p) / n as f64).sqrt());
        // Independent draws: bursts are geometric with mean 1/(1-p).
        check_mean_burst(words, &lost, 1.0 / (1.0 - p));
    }
}

#[test]
fn correlated_loss_keeps_its_rate_and_lengthens_bursts() {
    for (words, p, rho) in [("loss 5% 50%", 0.05, 0.5), ("loss 20% 80%", 0.2, 0.8)] {
        let lost = losses(words, 1_000_000, 100, 12);
        check_loss_rate(words, &lost, p);
        check_mean_burst(words, &lost, 1.0 / ((1.0 - rho) * (1.0 - p)));
    }
}

#[test]
fn bit_error_rate_loss_follows_the_wire_bits() {
    // 1e-5 per bit; 1000-byte frames with Ethernet overhead: 8192 bits.
    let words = "loss ber 1e-5 overhead ethernet";
    let n = 300_000;
    let lost = losses(words, n, 1000, 13);
    let p = 1.0 - (1.0 - 1e-5f64).powi(8192);
    let k = lost.iter().filter(|&&l| l).count() as f64;
    assert_close(words, k / n as f64, p, (p * (1.0 - p) / n as f64).sqrt());
    // Smaller frames lose less.
    let small = losses(words, n, 64, 13).iter().filter(|&&l| l).count() as f64;
    let p_small = 1.0 - (1.0 - 1e-5f64).powi((64 + 24) * 8);
    assert_close(
        "ber, 64-byte frames",
        small / n as f64,
        p_small,
        (p_small * (1.0 - p_small) / n as f64).sqrt(),
    );
}

#[test]
fn gilbert_elliott_matches_its_loss_rate_and_burst_length() {
    // Simple Gilbert: every packet lost in the bad state, none in the good one.
    let (p, r) = (0.01, 0.25);
    let words = "loss gemodel 1% 25%";
    let lost = losses(words, 1_000_000, 100, 14);
    check_loss_rate(words, &lost, p / (p + r));
    check_mean_burst(words, &lost, 1.0 / r);

    // netem's default r = 1 - p gives independent losses at rate p.
    let lost = losses("loss gemodel 5%", 400_000, 100, 14);
    check_loss_rate("loss gemodel 5%", &lost, 0.05);

    // Full Gilbert-Elliott: losses in both states.
    let (p, r, loss_bad, loss_good) = (0.02, 0.1, 0.7, 0.01);
    let words = "loss gemodel 2% 10% 70% 1%";
    let lost = losses(words, 1_000_000, 100, 15);
    check_loss_rate(words, &lost, (r * loss_good + p * loss_bad) / (p + r));
}

#[test]
fn four_state_model_matches_its_stationary_loss_and_bursts() {
    let (p13, p31, p32, p23, p14) = (0.02, 0.4, 0.2, 0.3, 0.01);
    let words = "loss state 2% 40% 20% 30% 1%";
    // Stationary distribution by flow balance: π1·p13 = π3·p31, π2·p23 = π3·p32, π4 = π1·p14.
    let (w1, w3) = (1.0, p13 / p31);
    let (w2, w4) = (w3 * p32 / p23, p14);
    let total = w1 + w2 + w3 + w4;
    let (pi1, pi2, pi3, pi4) = (w1 / total, w2 / total, w3 / total, w4 / total);
    let lost = losses(words, 1_000_000, 100, 16);
    check_loss_rate(words, &lost, pi3 + pi4);
    // Runs into state 3 last 1/(p31+p32) packets on average; a visit to 4 is one packet.
    let starts3 = pi1 * p13 + pi2 * p23;
    let starts4 = pi1 * p14;
    let mean_burst = (starts3 / (p31 + p32) + starts4) / (starts3 + starts4);
    check_mean_burst(words, &lost, mean_burst);

    // netem's defaults (p31 = 1 - p13, p32 = 0, p23 = 1, p14 = 0): independent loss at p13/(p13+p31)… = p13.
    let lost = losses("loss state 3%", 400_000, 100, 17);
    check_loss_rate("loss state 3%", &lost, 0.03);
}

#[test]
fn duplicate_and_corrupt_rates_and_corrupted_bits() {
    let spec = LinkSpec::parse("duplicate 7% corrupt 4%").unwrap();
    let mut link = Link::new(spec.link, 18, 0);
    let n = 300_000u64;
    let len = 50u32;
    let (mut dup, mut bits) = (0u64, Vec::new());
    for i in 0..n {
        let v = link.on_arrival(i * 1000, PacketMeta { len_bytes: len });
        dup += v.duplicate as u64;
        if let Some(b) = v.corrupt_bit {
            assert!(b < len * 8);
            bits.push(b as f64);
        }
    }
    let se = |p: f64| (p * (1.0 - p) / n as f64).sqrt();
    assert_close("duplicate rate", dup as f64 / n as f64, 0.07, se(0.07));
    assert_close("corrupt rate", bits.len() as f64 / n as f64, 0.04, se(0.04));
    // The flipped bit is uniform over the frame: mean (L-1)/2, variance (L²-1)/12.
    let l = (len * 8) as f64;
    let m = bits.iter().sum::<f64>() / bits.len() as f64;
    assert_close(
        "corrupted bit position",
        m,
        (l - 1.0) / 2.0,
        ((l * l - 1.0) / 12.0 / bits.len() as f64).sqrt(),
    );
    let counts_per_byte = bits.iter().fold(vec![0u32; len as usize], |mut c, b| {
        c[*b as usize / 8] += 1;
        c
    });
    assert!(
        counts_per_byte.iter().all(|&c| c > 0),
        "every byte gets hit"
    );
}

/// Per-packet delays (release - arrival) of a link, arrivals 1 ms apart so that
/// no rule other than the distribution acts on them.
fn delays_ms(words: &str, n: u64, seed: u64) -> Vec<f64> {
    let spec = LinkSpec::parse(words).unwrap_or_else(|e| panic!("{words}: {e}"));
    let mut link = Link::new(spec.link, seed, 0);
    (0..n)
        .map(|i| {
            let t = i * 1_000_000;
            (link.on_arrival(t, PacketMeta { len_bytes: 100 }).release_ns - t) as f64 / 1e6
        })
        .collect()
}

/// Dvoretzky-Kiefer-Wolfowitz: sup |F_n - F| ≤ sqrt(ln(2/α) / 2n) with probability 1 - α.
fn check_cdf(what: &str, sample: &mut [f64], cdf: impl Fn(f64) -> f64) {
    sample.sort_by(f64::total_cmp);
    let n = sample.len() as f64;
    let eps = ((2.0f64 / 1e-6).ln() / (2.0 * n)).sqrt();
    let mut worst: f64 = 0.0;
    for (i, &x) in sample.iter().enumerate() {
        let f = cdf(x);
        worst = worst
            .max((f - i as f64 / n).abs())
            .max((f - (i + 1) as f64 / n).abs());
    }
    // Delays are rounded to the ns: a shift of 1e-6 ms is far below eps.
    assert!(
        worst <= eps + 1e-6,
        "{what}: KS distance {worst:.5} > DKW bound {eps:.5}"
    );
}

fn mean_var(x: &[f64]) -> (f64, f64) {
    let m = x.iter().sum::<f64>() / x.len() as f64;
    (
        m,
        x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (x.len() - 1) as f64,
    )
}

fn normal_cdf(z: f64) -> f64 {
    // Abramowitz-Stegun 7.1.26 on erf; error below 1.5e-7, far inside the DKW bound.
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.3275911 * x);
    let poly = t
        * (0.254829592
            + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    let erf = 1.0 - poly * (-x * x).exp();
    if z >= 0.0 {
        0.5 * (1.0 + erf)
    } else {
        0.5 * (1.0 - erf)
    }
}

type Cdf = Box<dyn Fn(f64) -> f64>;

#[test]
fn delay_distributions_have_their_mean_variance_and_shape() {
    let (d, j) = (100.0, 10.0); // ms
    let n = 200_000;
    // (distribution, theoretical CDF of the delay in ms, variance, finite fourth moment)
    let pareto_cdf = move |x: f64| {
        // Standardised Pareto α = 3: (X - 1.5) / 0.866, X ≥ 1 with P(X > x) = x^-3.
        let xs = (x - d) / j * 0.75f64.sqrt() + 1.5;
        if xs < 1.0 {
            0.0
        } else {
            1.0 - xs.powi(-3)
        }
    };
    let cases: Vec<(&str, Cdf, f64, Option<f64>)> = vec![
        (
            "uniform",
            Box::new(move |x: f64| ((x - (d - j)) / (2.0 * j)).clamp(0.0, 1.0)),
            j * j / 3.0,
            Some(1.8),
        ),
        (
            "normal",
            Box::new(move |x: f64| normal_cdf((x - d) / j)),
            j * j,
            Some(3.0),
        ),
        (
            "exponential",
            Box::new(move |x: f64| {
                if x < d - j {
                    0.0
                } else {
                    1.0 - (-(x - (d - j)) / j).exp()
                }
            }),
            j * j,
            Some(9.0),
        ),
        ("pareto", Box::new(pareto_cdf), j * j, None),
    ];
    for (name, cdf, var, kurtosis) in cases {
        let words = format!("delay {d}ms {j}ms distribution {name} reorder allow");
        let mut x = delays_ms(&words, n, 21);
        let (m, v) = mean_var(&x);
        assert_close(
            &format!("mean delay of {name}"),
            m,
            d,
            (var / n as f64).sqrt(),
        );
        if let Some(k) = kurtosis {
            // Var of the sample variance ≈ σ⁴ (κ - 1) / n.
            assert_close(
                &format!("delay variance of {name}"),
                v,
                var,
                var * ((k - 1.0) / n as f64).sqrt(),
            );
        }
        check_cdf(&words, &mut x, cdf);
    }
    // paretonormal: mean D and standard deviation J by construction (0.25·N + 0.75·P, rescaled).
    let x = delays_ms(
        &format!("delay {d}ms {j}ms distribution paretonormal reorder allow"),
        n,
        22,
    );
    let (m, v) = mean_var(&x);
    assert_close(
        "mean delay of paretonormal",
        m,
        d,
        (j * j / n as f64).sqrt(),
    );
    // Heavy tail (no fourth moment): a loose check of the spread only.
    assert!((v / (j * j) - 1.0).abs() < 0.2, "paretonormal variance {v}");
}

#[test]
fn cdf_profile_and_netem_table_are_sampled_by_inverse_cdf() {
    // A Dummynet-style profile: 40 % at 10-20 ms, 60 % at 20-50 ms.
    let profile = "prob delay\n0 10ms\n0.4 20ms\n1 50ms\n";
    let mut files = |_: &str| Ok(profile.to_string());
    let spec = LinkSpec::parse_words(
        &["delay", "0ms", "distribution", "p.txt", "reorder", "allow"],
        &mut files,
    )
    .unwrap();
    let mut link = Link::new(spec.link, 23, 0);
    let mut x: Vec<f64> = (0..100_000u64)
        .map(|i| {
            (link
                .on_arrival(i * 1_000_000, PacketMeta { len_bytes: 64 })
                .release_ns
                - i * 1_000_000) as f64
                / 1e6
        })
        .collect();
    check_cdf("profile", &mut x, |ms| {
        if ms < 10.0 {
            0.0
        } else if ms < 20.0 {
            0.4 * (ms - 10.0) / 10.0
        } else {
            (0.4 + 0.6 * (ms - 20.0) / 30.0).min(1.0)
        }
    });

    // A netem table of two values, ±8192 (= ±J): half the packets at D - J, half at D + J.
    let table = "-8192 8192\n";
    let mut files = |_: &str| Ok(table.to_string());
    let spec = LinkSpec::parse_words(
        &[
            "delay",
            "30ms",
            "10ms",
            "distribution",
            "two.dist",
            "reorder",
            "allow",
        ],
        &mut files,
    )
    .unwrap();
    let mut link = Link::new(spec.link, 24, 0);
    let n = 100_000u64;
    let high = (0..n)
        .map(|i| {
            link.on_arrival(i * 1_000_000, PacketMeta { len_bytes: 64 })
                .release_ns
                - i * 1_000_000
        })
        .inspect(|d| assert!(*d == 20_000_000 || *d == 40_000_000, "delay {d}"))
        .filter(|&d| d == 40_000_000)
        .count() as f64;
    assert_close(
        "table: share at D + J",
        high / n as f64,
        0.5,
        (0.25 / n as f64).sqrt(),
    );
}

#[test]
fn correlated_delay_is_autocorrelated() {
    let lag1 = |words: &str| {
        let x = delays_ms(words, 100_000, 25);
        let (m, v) = mean_var(&x);
        x.windows(2).map(|w| (w[0] - m) * (w[1] - m)).sum::<f64>() / (x.len() - 1) as f64 / v
    };
    let independent = lag1("delay 100ms 10ms reorder allow");
    assert!(
        independent.abs() < Z / (100_000f64).sqrt(),
        "independent draws: lag-1 {independent}"
    );
    assert!(lag1("delay 100ms 10ms 75% reorder allow") > 0.5);
}
