//! LinkChaos specs, as a user or an API server hands them over: any text
//! must give words per direction or an error naming a field, and a pick of
//! pods within the candidates, never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use linkem_operator::chaos::words::{go_duration_ns, link_words, tc_rate_bits_per_s};
use linkem_operator::chaos::{LinkChaosSpec, PodRef};
use linkem_operator::controller::select::{check_selector, pick};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = go_duration_ns(&text);
    let _ = tc_rate_bits_per_s(&text);
    let Ok(spec) = serde_yaml::from_str::<LinkChaosSpec>(&text) else {
        return;
    };
    let _ = link_words(&spec);
    let _ = check_selector(&spec.selector);
    let pods: Vec<PodRef> = (0..7)
        .map(|i| PodRef {
            namespace: "default".into(),
            name: format!("p{i}"),
            node: None,
        })
        .collect();
    if let Ok(picked) = pick(&spec.mode, spec.value.as_deref(), &pods, data.len() as u64) {
        assert!(picked.len() <= pods.len(), "picked more pods than there are");
        assert!(picked.iter().all(|p| pods.contains(p)), "picked a pod not offered");
    }
});
