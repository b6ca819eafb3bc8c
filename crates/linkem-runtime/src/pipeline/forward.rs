//! The plain forwarder: one thread that sends each received batch straight
//! back out, with no model, no delay line and no timestamps. It is the
//! baseline that benchmarks compare the emulator with (the same sockets, the
//! same batches, the same cutting of super-frames and finishing of checksums
//! that any transparent forwarder needs, nothing else). Frames the backend
//! cannot take count as `backpressure`.

use super::wire::{cut, Csum};
use super::Control;
use crate::port::{RxPort, TxOutcome, TxPort};
use linkem_core::wire::complete_checksum;
use linkem_core::{Fate, FateCounts};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// How an idle forwarder waits in poll before checking for stop.
const IDLE_WAIT_NS: u64 = 10_000_000;

#[derive(Default, Clone, Copy)]
struct Counts {
    received: u64,
    received_bytes: u64,
    segmented: u64,
    sent: u64,
    sent_bytes: u64,
    refused: u64,
    too_big: u64,
    wakeups: u64,
    kernel_drops: u64,
}

pub(super) fn forward(
    control: Arc<Control>,
    batch: usize,
    mut rx: Box<dyn RxPort>,
    mut tx: Box<dyn TxPort>,
) {
    let mut c = Counts::default();
    let max_frame_bytes = tx.max_frame_bytes();
    let mut scratch = Vec::new();
    let mut drops_read_ns = 0u64;
    let publish = |c: Counts, tx: &mut dyn TxPort| {
        let tx_errors = tx.tx_errors().min(c.sent);
        let mut counts = FateCounts::default();
        counts.set(Fate::Delivered, c.sent - tx_errors);
        counts.set(Fate::TxError, tx_errors);
        counts.set(Fate::Backpressure, c.refused);
        counts.set(Fate::TooBig, c.too_big);
        let mut input = control.input.lock().expect("the lock holders never panic");
        input.counts = counts;
        input.received = c.received;
        input.received_bytes = c.received_bytes;
        input.segmented = c.segmented;
        input.accepted = c.sent;
        input.rx_wakeups = c.wakeups;
        input.kernel_drops = c.kernel_drops;
        drop(input);
        let mut output = control.output.lock().expect("the lock holders never panic");
        output.sent = c.sent;
        output.sent_bytes = c.sent_bytes;
        output.tx_errors = tx_errors;
    };
    while !control.stop.load(Ordering::Acquire) {
        let result = rx.rx_batch(batch, &mut |frame| {
            c.received += 1;
            let r = cut(&frame, max_frame_bytes, &mut |bytes, csum| {
                c.received_bytes += bytes.len() as u64;
                let out = match csum {
                    Csum::Finish(cs) => {
                        scratch.clear();
                        scratch.extend_from_slice(bytes);
                        let _ = complete_checksum(&mut scratch, cs);
                        tx.tx_push(&scratch)
                    }
                    Csum::AsCame | Csum::Computed => tx.tx_push(bytes),
                };
                match out {
                    TxOutcome::Queued => {
                        c.sent += 1;
                        c.sent_bytes += bytes.len() as u64;
                    }
                    TxOutcome::NoRoom => c.refused += 1,
                    TxOutcome::TooBig => c.too_big += 1,
                }
            });
            c.segmented += r.segmented();
            c.too_big += r.too_big as u64;
        });
        let flushed = match result {
            Ok(0) => {
                let waited = rx.wait_rx(IDLE_WAIT_NS);
                c.wakeups += 1;
                waited.map_err(|e| format!("receive: {e}"))
            }
            Ok(_) => tx.tx_flush().map_err(|e| format!("send: {e}")),
            Err(e) => Err(format!("receive: {e}")),
        };
        let now = crate::clock::now_ns();
        if now.wrapping_sub(drops_read_ns) > super::wire::KERNEL_DROPS_EVERY_NS {
            drops_read_ns = now;
            c.kernel_drops = rx.rx_kernel_drops();
        }
        publish(c, &mut *tx);
        if let Err(e) = flushed {
            control.fail(e);
            break;
        }
    }
    let _ = tx.tx_flush();
    c.kernel_drops = rx.rx_kernel_drops();
    publish(c, &mut *tx);
}
