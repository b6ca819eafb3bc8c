//! Seeded randomness for the model.
//!
//! Every random draw comes from one user seed. Each direction and each
//! impairment gets its own stream derived from (seed, direction, impairment), so
//! that turning on jitter does not change which packets are lost, and the two
//! directions of a bridge are independent yet both reproducible.

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Which impairment a stream feeds. The numbers are part of the determinism
/// contract: changing them changes every run's outcome for a given seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum StreamId {
    /// Loss draws.
    Loss = 1,
    /// Delay draws.
    Delay = 2,
    /// netem reordering draws.
    Reorder = 3,
    /// Duplication draws.
    Duplicate = 4,
    /// Corruption draws (whether, and which bit).
    Corrupt = 5,
    /// netem `slot` draws (the time to the next slot).
    Slot = 6,
    /// A schedule's random walk (seeded by the walk's own `seed N`).
    Schedule = 7,
}

/// SplitMix64 finaliser: spreads nearby inputs (seed 1, seed 2) over the whole
/// state space before they seed xoshiro, whose early outputs are otherwise
/// correlated for correlated seeds.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The seed of pair `index` of a bridge of several interface pairs (`linkem
/// bridge --pair`), from the run's seed: pair 0 keeps the run's seed, pair
/// k > 0 gets `mix(seed ^ mix(k))`. Each pair's link then draws from streams
/// of its own seed alone, so a one-pair run given that seed makes the same
/// decisions for the same arrivals as the pair did.
pub fn pair_seed(seed: u64, index: u64) -> u64 {
    if index == 0 {
        seed
    } else {
        mix(seed ^ mix(index))
    }
}

/// One reproducible stream of random numbers.
#[derive(Debug, Clone)]
pub struct Stream(Xoshiro256PlusPlus);

impl Stream {
    /// The stream for `id` on direction `direction` (0 = a→b or replay, 1 = b→a).
    pub fn new(seed: u64, direction: u64, id: StreamId) -> Self {
        let key = mix(mix(seed) ^ mix(direction.wrapping_mul(0x100) | id as u64));
        Stream(Xoshiro256PlusPlus::seed_from_u64(key))
    }

    /// 64 uniform bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in [0, 1) with 53 bits of precision.
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in 0..n (n > 0), by Lemire's multiply-shift; the bias is below
    /// n / 2^64, far under anything a statistical test could see.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.0.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// A probability compiled for the per-packet path: one integer comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chance {
    /// Probability 0.
    Never,
    /// Probability 1.
    Always,
    /// True when a uniform u64 is below the threshold (p · 2^64).
    Below(u64),
}

impl Chance {
    /// The chance of probability `p` (NaN and p <= 0 never, p >= 1 always).
    pub fn new(p: f64) -> Self {
        if p <= 0.0 || p.is_nan() {
            Chance::Never
        } else if p >= 1.0 {
            Chance::Always
        } else {
            Chance::Below((p * 18_446_744_073_709_551_616.0) as u64)
        }
    }

    /// One outcome: one u64 drawn unless the chance is certain.
    #[inline]
    pub fn draw(self, stream: &mut Stream) -> bool {
        match self {
            Chance::Never => false,
            Chance::Always => true,
            Chance::Below(t) => stream.next_u64() < t,
        }
    }

    /// The probability it stands for (rounded down to a multiple of 2^-64).
    pub fn probability(self) -> f64 {
        match self {
            Chance::Never => 0.0,
            Chance::Always => 1.0,
            Chance::Below(t) => t as f64 / 18_446_744_073_709_551_616.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_differ_by_seed_direction_and_impairment() {
        let first = |s, d, id| Stream::new(s, d, id).next_u64();
        let a = first(1, 0, StreamId::Loss);
        assert_eq!(a, first(1, 0, StreamId::Loss));
        assert_ne!(a, first(2, 0, StreamId::Loss));
        assert_ne!(a, first(1, 1, StreamId::Loss));
        assert_ne!(a, first(1, 0, StreamId::Delay));
    }

    /// Pair 0 keeps the run's seed (a one-pair run is unchanged); the other
    /// pairs' seeds differ from it and from each other, and depend on the
    /// run's seed.
    #[test]
    fn pair_seeds_are_distinct_and_pair_zero_keeps_the_seed() {
        assert_eq!(pair_seed(42, 0), 42);
        let seeds: std::collections::HashSet<u64> = (0..100).map(|i| pair_seed(42, i)).collect();
        assert_eq!(seeds.len(), 100);
        assert_ne!(pair_seed(42, 3), pair_seed(43, 3));
    }

    #[test]
    fn chance_extremes_are_exact() {
        let mut s = Stream::new(7, 0, StreamId::Loss);
        assert!((0..1000).all(|_| Chance::new(1.0).draw(&mut s)));
        assert!((0..1000).all(|_| !Chance::new(0.0).draw(&mut s)));
        assert!((Chance::new(0.25).probability() - 0.25).abs() < 1e-15);
    }

    #[test]
    fn unit_is_in_range() {
        let mut s = Stream::new(3, 0, StreamId::Delay);
        for _ in 0..10_000 {
            let u = s.unit();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
