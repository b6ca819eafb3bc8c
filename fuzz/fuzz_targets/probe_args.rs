//! `linkem probe` arguments as users type them: a packet or bit rate and a
//! traffic pattern. Parsing must refuse bad text with an error, never a panic,
//! and what it accepts must be usable (a positive, finite rate; a burst of at
//! least one) within the probe's bounds.

#![no_main]

use libfuzzer_sys::fuzz_target;
use linkem::tools::probe::{parse_packet_rate, Pattern, MAX_RATE_PPS, MIN_RATE_PPS};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (rate, rest) = text.split_once(' ').unwrap_or((&text, ""));
    let size = 64 + (data.first().copied().unwrap_or(0) as u32) * 5;
    if let Ok(pps) = parse_packet_rate(rate, size) {
        assert!(
            pps.is_finite() && (MIN_RATE_PPS..=MAX_RATE_PPS).contains(&pps),
            "{rate:?} gave {pps}"
        );
    }
    if let Ok(p) = rest.parse::<Pattern>() {
        if let Pattern::Burst(n) = p {
            assert!(n >= 1);
        }
        // The printed form reads back as the same pattern.
        assert_eq!(p.to_string().parse::<Pattern>(), Ok(p));
    }
});
