//! Wire frames: checksum completion and segmentation over arbitrary frames and
//! arbitrary offload metadata give a result or an error, never a panic, and
//! what they produce keeps the module's invariants; the plan of a super-frame
//! (`segment_plan`) gives the lengths `segment` emits, or its error.
//!
//! Input: 10 bytes of metadata, then the frame:
//! `flags` (bit 0: csum present, bit 1: gso present), `csum.start` (u16 BE),
//! `csum.offset` (u16 BE), `gso.kind` (mod 3), `gso.size` (u16 BE),
//! `max_frame_bytes` (u16 BE).

#![no_main]

use libfuzzer_sys::fuzz_target;
use linkem_core::wire::{
    checksum, complete_checksum, complete_partial_checksum, locate, segment, segment_plan,
    CsumPartial, Gso, GsoKind, L4Proto, Offload,
};

/// Whether a located frame's L4 checksum verifies (RFC 1071).
fn verifies(frame: &[u8]) -> bool {
    match locate(frame) {
        Ok(h) => {
            let pseudo = checksum::fold(h.pseudo_sum(h.ip_end - h.l4_offset));
            checksum::add(pseudo, checksum::sum(&frame[h.l4_offset..h.ip_end])) == 0xffff
        }
        Err(_) => false,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((meta, frame)) = data.split_first_chunk::<10>() else {
        return;
    };
    let be = |i: usize| u16::from_be_bytes([meta[i], meta[i + 1]]);
    let csum = CsumPartial {
        start: be(1),
        offset: be(3),
    };
    let kind = [GsoKind::TcpV4, GsoKind::TcpV6, GsoKind::Udp][usize::from(meta[5] % 3)];
    let offload = Offload {
        csum: (meta[0] & 1 != 0).then_some(csum),
        gso: (meta[0] & 2 != 0).then_some(Gso { kind, size: be(6) }),
    };
    let max_frame_bytes = usize::from(be(8));

    let mut f = frame.to_vec();
    let fits = usize::from(csum.start) < f.len()
        && usize::from(csum.start) + usize::from(csum.offset) + 2 <= f.len();
    assert_eq!(complete_checksum(&mut f, csum).is_ok(), fits);

    let mut f = frame.to_vec();
    if complete_partial_checksum(&mut f) {
        assert!(verifies(&f), "finished checksum does not verify");
        assert!(!complete_partial_checksum(&mut f), "finished twice");
    } else {
        assert_eq!(f, frame, "changed without saying so");
    }

    let mut emitted = 0usize;
    let mut joined = Vec::new();
    let mut lengths = Vec::new();
    let result = segment(frame, offload, max_frame_bytes, &mut |s| {
        emitted += 1;
        lengths.push(s.len());
        assert!(s.len() <= max_frame_bytes, "segment longer than the limit");
        if offload.gso.is_some() {
            let h = locate(s).expect("a segment is a well-formed frame");
            assert_eq!(h.ip_end, s.len());
            joined.extend_from_slice(&s[h.payload_offset..]);
            let no_checksum = h.l4 == L4Proto::Udp && s[h.l4_offset + 6..h.l4_offset + 8] == [0, 0];
            assert!(
                no_checksum || verifies(s),
                "segment checksum does not verify"
            );
        }
    });
    match result {
        Ok(n) => {
            assert_eq!(n, emitted);
            if offload.gso.is_some() {
                let h = locate(frame).expect("segmented frames were located");
                assert_eq!(
                    joined,
                    &frame[h.payload_offset..h.ip_end],
                    "payload lost or reordered"
                );
            }
        }
        Err(e) => {
            assert_eq!(emitted, 0, "error after emitting");
            let _ = e.to_string();
        }
    }
    if offload.gso.is_some() {
        match (segment_plan(frame, offload, max_frame_bytes), result) {
            (Ok(plan), Ok(_)) => {
                assert!(plan.lengths().eq(lengths), "plan and segment disagree")
            }
            (Err(a), Err(b)) => assert_eq!(a, b, "plan and segment fail differently"),
            (a, b) => panic!("plan {a:?}, segment {b:?}"),
        }
    }
});
