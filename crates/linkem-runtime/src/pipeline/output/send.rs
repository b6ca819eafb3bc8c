//! Sending one record through the port: a super-frame through its offload
//! path, a frame offered until the port takes or refuses it.

use super::*;

/// What [`send_super`] did with a super-frame.
pub(super) struct SuperSent {
    /// It went through the port's offload path whole.
    pub(super) whole: bool,
    /// Refused for good, its wire frames went one by one into the ring
    /// (to be flushed).
    pub(super) queued: bool,
    /// Of those, the ones the port refused as too big.
    pub(super) too_big: u64,
    /// Bytes of the wire frames sent, each with its headers (of a
    /// super-frame sent whole: as its offload will cut it).
    pub(super) bytes: u64,
}

/// Sends a super-frame (`offload.gso` set) through the port's offload path,
/// or, if the kernel refuses it, its wire frames one by one through the
/// ring; a frame without `gso` goes into the ring as it is.
pub(super) fn send_super(
    tx: &mut dyn TxPort,
    frame: &[u8],
    offload: Offload,
) -> Result<SuperSent, String> {
    let mut whole = offload.gso.is_some();
    let mut tries = 0u32;
    while whole {
        match tx.tx_send_super(frame, offload) {
            Ok(true) => break,
            Ok(false) if tries < 100_000 => {
                tries += 1;
                std::thread::yield_now();
            }
            // Refused for good: the wire frames leave one by one.
            _ => whole = false,
        }
    }
    let mut sent = SuperSent {
        whole,
        queued: !whole,
        too_big: 0,
        bytes: 0,
    };
    let max = tx.max_frame_bytes();
    if whole {
        // Its wire frames' bytes from its headers alone (no copy, no cut);
        // one the plan cannot read counts as it is.
        sent.bytes = linkem_core::wire::segment_plan(frame, offload, max)
            .map_or(frame.len() as u64, |p| {
                (p.header_bytes * p.segments + p.payload_bytes) as u64
            });
        return Ok(sent);
    }
    let mut err = None;
    let mut each = |f: &[u8]| match push_until_taken(tx, f) {
        Ok(TxOutcome::Queued) => sent.bytes += f.len() as u64,
        Ok(_) => sent.too_big += 1,
        Err(e) => err = Some(e),
    };
    if offload.gso.is_some() {
        let _ = linkem_core::wire::segment(frame, offload, max, &mut each);
    } else {
        each(frame);
    }
    match err {
        Some(e) => Err(e),
        None => Ok(sent),
    }
}

/// Offers a frame until the port takes or refuses it for good.
pub(super) fn push_until_taken(tx: &mut dyn TxPort, frame: &[u8]) -> Result<TxOutcome, String> {
    let mut tries = 0;
    loop {
        match tx.tx_push(frame) {
            TxOutcome::NoRoom => {}
            done => return Ok(done),
        }
        // The kernel has no room: wait for it rather than drop, since this
        // packet was promised; lateness records the cost (and max-lag bounds it).
        if tries > 0 {
            std::thread::yield_now();
        }
        tx.tx_flush().map_err(|e| format!("send: {e}"))?;
        tries += 1;
        if tries > 100_000 {
            return Err("send: the interface accepts no frames".into());
        }
    }
}
