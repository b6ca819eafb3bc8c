//! A netfilter queue datagram as `linkem host` reads it: any bytes must give
//! packets or an error, never a panic; every packet's payload lies inside the
//! input, and a host-mode frame made from it gives its id back.

#![no_main]

use libfuzzer_sys::fuzz_target;
use linkem_io::nfqueue::parse_packets;

fuzz_target!(|data: &[u8]| {
    let range = data.as_ptr_range();
    let _ = parse_packets(data, &mut |p| {
        if !p.payload.is_empty() {
            let r = p.payload.as_ptr_range();
            assert!(range.start <= r.start && r.end <= range.end);
        }
        let mut frame = Vec::new();
        for _ in 0..3 {
            frame.extend_from_slice(&p.id.to_be_bytes());
        }
        assert_eq!(linkem_io::nfqueue::port::frame_id(&frame), Some(p.id));
    });
});
