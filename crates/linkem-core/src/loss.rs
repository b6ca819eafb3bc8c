//! Loss models, decided per packet at arrival (before the queue, as in netem and
//! Dummynet, and after the policer, as in MoonEm §5.3).
//!
//! # Models
//! - `loss P% [ρ%]`: Bernoulli with probability P. With a correlation ρ, a
//!   two-state Markov chain keeps the loss rate at P while the next packet is lost
//!   with probability `P + ρ(1-P)` after a loss and `P(1-ρ)` after a delivery
//!   (lag-1 autocorrelation ρ, mean burst `1/((1-ρ)(1-P))`). netem's own
//!   correlation averages uniforms and so changes the loss rate; this one does not.
//! - `loss ber X`: each wire bit is flipped with probability X, and a frame with
//!   any flipped bit is lost: `P = 1 - (1-X)^bits`, bits including the overhead.
//! - `loss gemodel p [r [1-h [1-k]]]` (Gilbert-Elliott, netem's meanings and
//!   defaults `r = 1-p`, `1-h = 100%`, `1-k = 0%`): a packet is lost with
//!   probability `1-k` in the good state and `1-h` in the bad state; then the state
//!   moves good→bad with p and bad→good with r. Loss rate
//!   `(r(1-k) + p(1-h)) / (p + r)`; with 1-h = 100 % and 1-k = 0 % the mean loss
//!   burst is `1/r` packets.
//! - `loss state p13 [p31 [p32 [p23 [p14]]]]` (the 4-state Markov model of
//!   Salsano et al., netem's defaults `p31 = 1-p13`, `p32 = 0`, `p23 = 100%`,
//!   `p14 = 0`): states 1 (received, gap), 2 (received, burst), 3 (lost, burst),
//!   4 (isolated loss); each packet moves the chain once and is lost if it lands
//!   in 3 or 4. Transitions not listed keep the state, and 4 always returns to 1.

use crate::rng::{Chance, Stream};

#[derive(Debug, Clone, PartialEq)]
pub enum LossConfig {
    None,
    Random {
        p: f64,
        correlation: f64,
    },
    Ber {
        ber: f64,
    },
    GilbertElliott {
        p: f64,
        r: f64,
        loss_bad: f64,
        loss_good: f64,
    },
    FourState {
        p13: f64,
        p31: f64,
        p32: f64,
        p23: f64,
        p14: f64,
    },
}

impl LossConfig {
    /// The long-run fraction of packets lost, for a fixed frame size (`ber` needs
    /// the wire bits of that size).
    pub fn expected_loss_rate(&self, wire_bits: u64) -> f64 {
        match *self {
            LossConfig::None => 0.0,
            LossConfig::Random { p, .. } => p,
            LossConfig::Ber { ber } => 1.0 - libm::pow(1.0 - ber, wire_bits as f64),
            LossConfig::GilbertElliott {
                p,
                r,
                loss_bad,
                loss_good,
            } => {
                if p + r == 0.0 {
                    loss_good
                } else {
                    (r * loss_good + p * loss_bad) / (p + r)
                }
            }
            LossConfig::FourState {
                p13,
                p31,
                p32,
                p23,
                p14,
            } => {
                let [_, _, s3, s4] = four_state_stationary(p13, p31, p32, p23, p14);
                s3 + s4
            }
        }
    }
}

/// Stationary distribution of the 4-state chain (states 1..4).
pub fn four_state_stationary(p13: f64, p31: f64, p32: f64, p23: f64, p14: f64) -> [f64; 4] {
    // Balance: π1·p13 = π3·p31, π2·p23 = π3·p32, π4 = π1·p14.
    let pi1 = 1.0;
    let pi3 = if p31 > 0.0 {
        p13 / p31
    } else if p13 > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    let pi2 = if p23 > 0.0 {
        pi3 * p32 / p23
    } else if pi3 * p32 > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    let pi4 = p14;
    let total = pi1 + pi2 + pi3 + pi4;
    if !total.is_finite() {
        // Absorbing states: the chain ends in 3 (or 2); report the limit.
        return if pi2.is_infinite() {
            [0.0, 1.0, 0.0, 0.0]
        } else {
            [0.0, 0.0, 1.0, 0.0]
        };
    }
    [pi1 / total, pi2 / total, pi3 / total, pi4 / total]
}

/// A Bernoulli draw whose successive outcomes may be correlated (see the module
/// docs for the chain); used by random loss, duplication, corruption and netem's
/// reordering.
#[derive(Debug, Clone)]
pub struct CorrelatedChance {
    first: Chance,
    after_yes: Chance,
    after_no: Chance,
    last: Option<bool>,
}

impl CorrelatedChance {
    pub fn new(p: f64, correlation: f64) -> Self {
        CorrelatedChance {
            first: Chance::new(p),
            after_yes: Chance::new(p + correlation * (1.0 - p)),
            after_no: Chance::new(p * (1.0 - correlation)),
            last: None,
        }
    }

    /// Continues the previous outcome's correlation after a reconfiguration.
    pub fn carry_state_from(&mut self, old: &CorrelatedChance) {
        self.last = old.last;
    }

    pub fn is_never(&self) -> bool {
        self.first == Chance::Never && self.after_yes == Chance::Never
    }

    #[inline]
    pub fn draw(&mut self, stream: &mut Stream) -> bool {
        let chance = match self.last {
            None => self.first,
            Some(true) => self.after_yes,
            Some(false) => self.after_no,
        };
        let hit = chance.draw(stream);
        self.last = Some(hit);
        hit
    }
}

/// The running state of a loss model.
#[derive(Debug, Clone)]
pub(crate) enum LossState {
    None,
    Random(CorrelatedChance),
    Ber {
        /// ln(1 - ber), so that P(keep) = exp(bits · ln_keep).
        ln_keep: f64,
        cached_bits: u64,
        cached: Chance,
    },
    GilbertElliott {
        to_bad: Chance,
        to_good: Chance,
        loss_bad: Chance,
        loss_good: Chance,
        bad: bool,
    },
    FourState {
        p13: f64,
        p13_14: f64,
        p31: f64,
        p31_32: f64,
        p23: f64,
        state: u8,
    },
}

impl LossState {
    pub(crate) fn new(cfg: &LossConfig) -> Self {
        match *cfg {
            LossConfig::None => LossState::None,
            LossConfig::Random { p, correlation } => {
                LossState::Random(CorrelatedChance::new(p, correlation))
            }
            LossConfig::Ber { ber } => LossState::Ber {
                ln_keep: libm::log1p(-ber),
                cached_bits: u64::MAX,
                cached: Chance::Never,
            },
            LossConfig::GilbertElliott {
                p,
                r,
                loss_bad,
                loss_good,
            } => LossState::GilbertElliott {
                to_bad: Chance::new(p),
                to_good: Chance::new(r),
                loss_bad: Chance::new(loss_bad),
                loss_good: Chance::new(loss_good),
                bad: false,
            },
            LossConfig::FourState {
                p13,
                p31,
                p32,
                p23,
                p14,
            } => LossState::FourState {
                p13,
                p13_14: p13 + p14,
                p31,
                p31_32: p31 + p32,
                p23,
                state: 1,
            },
        }
    }

    /// Keeps the chain's state when a reconfiguration keeps the same model, so a
    /// changed parameter does not restart a burst in progress.
    pub(crate) fn reconfigure(&mut self, cfg: &LossConfig) {
        let mut next = LossState::new(cfg);
        match (&*self, &mut next) {
            (LossState::GilbertElliott { bad, .. }, LossState::GilbertElliott { bad: b, .. }) => {
                *b = *bad
            }
            (LossState::FourState { state, .. }, LossState::FourState { state: s, .. }) => {
                *s = *state
            }
            (LossState::Random(old), LossState::Random(new)) => new.last = old.last,
            _ => {}
        }
        *self = next;
    }

    #[inline]
    pub(crate) fn draw(&mut self, wire_bits: u64, stream: &mut Stream) -> bool {
        match self {
            LossState::None => false,
            LossState::Random(c) => c.draw(stream),
            LossState::Ber {
                ln_keep,
                cached_bits,
                cached,
            } => {
                // Most traffic repeats a few frame sizes: keep the last size's chance.
                if *cached_bits != wire_bits {
                    *cached_bits = wire_bits;
                    *cached = Chance::new(-libm::expm1(wire_bits as f64 * *ln_keep));
                }
                cached.draw(stream)
            }
            LossState::GilbertElliott {
                to_bad,
                to_good,
                loss_bad,
                loss_good,
                bad,
            } => {
                // netem's order: the loss is decided in the current state, then the
                // state moves.
                if *bad {
                    let lost = loss_bad.draw(stream);
                    if to_good.draw(stream) {
                        *bad = false;
                    }
                    lost
                } else {
                    let lost = loss_good.draw(stream);
                    if to_bad.draw(stream) {
                        *bad = true;
                    }
                    lost
                }
            }
            LossState::FourState {
                p13,
                p13_14,
                p31,
                p31_32,
                p23,
                state,
            } => {
                let u = stream.unit();
                *state = match *state {
                    1 if u < *p13 => 3,
                    1 if u < *p13_14 => 4,
                    1 => 1,
                    2 if u < *p23 => 3,
                    2 => 2,
                    3 if u < *p31 => 1,
                    3 if u < *p31_32 => 2,
                    3 => 3,
                    _ => 1,
                };
                *state >= 3
            }
        }
    }
}
