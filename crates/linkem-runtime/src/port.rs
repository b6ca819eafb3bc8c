//! The ports' traits (from `linkem_core::port`, re-exported here for the
//! pipeline), closing many ports at once, the send half left in place of a
//! closed one, and the in-memory ports of the tests.

pub use linkem_core::port::*;
use linkem_core::wire::Offload;
use std::io;

/// Threads [`close_all`] closes on at most.
const CLOSERS: usize = 16;

/// Drops `items` (ports, or what holds them) on up to 16 threads at once:
/// closing an AF_PACKET socket with rings waits for three RCU grace periods
/// in the kernel (`synchronize_net`, tens of ms each on a busy machine), and
/// the waits of several threads overlap, where one after the other they made
/// a bridge of many pairs take seconds to stop. Items left when no thread
/// can be started are dropped here.
pub fn close_all<T: Send>(mut items: Vec<T>) {
    if items.len() <= 1 {
        return;
    }
    let per = items.len().div_ceil(CLOSERS);
    std::thread::scope(|s| {
        while !items.is_empty() {
            let chunk: Vec<T> = items.drain(..per.min(items.len())).collect();
            // A thread that cannot start leaves its chunk to this one.
            let _ = std::thread::Builder::new()
                .name("linkem-close".into())
                .spawn_scoped(s, move || drop(chunk));
        }
    });
}

/// A send half that sends nothing, left in place of a port closed while its
/// output stage's state lives on ([`close_all`]).
pub struct ClosedTx;

impl TxPort for ClosedTx {
    fn tx_push(&mut self, _frame: &[u8]) -> TxOutcome {
        TxOutcome::TooBig
    }

    fn tx_flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn max_frame_bytes(&self) -> usize {
        0
    }
}

/// In-memory ports for tests: frames go in through a channel with their
/// timestamps (and offload metadata), and come out into a shared vector with
/// the time they were sent.
pub mod memory {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::mpsc::{Receiver, RecvTimeoutError};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// One frame offered to a [`MemoryRx`].
    #[derive(Debug, Clone, Default)]
    pub struct MemFrame {
        /// Receive time in CLOCK_REALTIME ns, given as [`RxFrame::ts_ns`]; 0
        /// lets the pipeline stamp the frame when it takes it, as for a
        /// backend without kernel timestamps.
        pub ts_ns: u64,
        /// The whole frame (so `orig_len` is its length: never truncated).
        pub data: Vec<u8>,
        /// Offload metadata as a backend with PACKET_VNET_HDR would report it,
        /// for tests of segmentation and checksum completion.
        pub offload: Offload,
    }

    impl From<(u64, Vec<u8>)> for MemFrame {
        fn from((ts_ns, data): (u64, Vec<u8>)) -> Self {
            MemFrame {
                ts_ns,
                data,
                offload: Offload::default(),
            }
        }
    }

    /// A receive port fed through a channel by the test: anything that turns
    /// into a [`MemFrame`] (a bare `(ts_ns, frame)` pair by default). A
    /// channel whose sender is gone behaves as an idle interface, so a test
    /// can end its input without stopping the pipeline.
    pub struct MemoryRx<T = (u64, Vec<u8>)> {
        /// Where the frames come from, in the order they are received.
        pub input: Receiver<T>,
        pending: Option<MemFrame>,
        /// What [`RxPort::rx_kernel_drops`] reports: tests set it to stand for
        /// frames a kernel dropped.
        pub kernel_drops: Arc<AtomicU64>,
    }

    impl<T: Into<MemFrame> + Send> MemoryRx<T> {
        /// A port that receives what is sent on `input`, with no kernel drops.
        pub fn new(input: Receiver<T>) -> Self {
            MemoryRx {
                input,
                pending: None,
                kernel_drops: Arc::default(),
            }
        }
    }

    impl<T: Into<MemFrame> + Send> RxPort for MemoryRx<T> {
        fn rx_batch(&mut self, max: usize, f: &mut dyn FnMut(RxFrame<'_>)) -> io::Result<usize> {
            let mut n = 0;
            while n < max {
                let Some(m) = self
                    .pending
                    .take()
                    .or_else(|| self.input.try_recv().ok().map(Into::into))
                else {
                    break;
                };
                f(RxFrame {
                    data: &m.data,
                    orig_len: m.data.len() as u32,
                    ts_ns: m.ts_ns,
                    offload: m.offload,
                    owner: None,
                });
                n += 1;
            }
            Ok(n)
        }

        fn wait_rx(&mut self, timeout_ns: u64) -> io::Result<()> {
            if self.pending.is_none() {
                match self.input.recv_timeout(Duration::from_nanos(timeout_ns)) {
                    Ok(item) => self.pending = Some(item.into()),
                    Err(RecvTimeoutError::Timeout) => {}
                    // The sender is gone: behave like an idle interface.
                    Err(RecvTimeoutError::Disconnected) => {
                        std::thread::sleep(Duration::from_nanos(timeout_ns))
                    }
                }
            }
            Ok(())
        }

        fn rx_kernel_drops(&mut self) -> u64 {
            self.kernel_drops.load(Ordering::Relaxed)
        }
    }

    /// Sent frames with the CLOCK_REALTIME ns at which they were handed over.
    pub type Sent = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;

    /// Super-frames sent, each as the wire frames it carried, with the
    /// CLOCK_REALTIME ns at which it was handed over.
    pub type Supers = Arc<Mutex<Vec<(u64, Vec<Vec<u8>>)>>>;

    /// A send port that appends what it flushes to a shared vector, stamped
    /// with the flush time, so tests can check what left and when.
    pub struct MemoryTx {
        /// The frames handed over so far; the same vector
        /// [`MemoryTx::new`] returns, for a test to read after moving the
        /// port into the pipeline.
        pub sent: Sent,
        queued: Vec<Vec<u8>>,
        /// Largest frame accepted; longer ones are refused as [`TxOutcome::TooBig`].
        pub max_frame_bytes: usize,
        /// Frames for which this returns true are queued but then refused at
        /// the flush, as a kernel refuses a malformed frame: counted in
        /// [`TxPort::tx_errors`] and not sent.
        pub refuse: fn(&[u8]) -> bool,
        /// Super-frames are taken ([`TxPort::sends_super_frames`]) when
        /// this is set: each is cut back into wire frames with
        /// [`linkem_core::wire::segment`] and recorded as one entry of
        /// this vector, so a test sees which frames left merged; the wire
        /// frames also go to `sent`.
        pub supers: Option<Supers>,
        /// What [`TxPort::send_lead_ns`] says (0: none learnt).
        pub send_lead_ns: u64,
        errors: u64,
    }

    impl MemoryTx {
        /// A port that sends everything up to 1514 bytes (MTU 1500).
        pub fn new() -> (Self, Sent) {
            let sent: Sent = Arc::default();
            (
                MemoryTx {
                    sent: sent.clone(),
                    queued: Vec::new(),
                    max_frame_bytes: 1514,
                    refuse: |_| false,
                    supers: None,
                    send_lead_ns: 0,
                    errors: 0,
                },
                sent,
            )
        }
    }

    impl TxPort for MemoryTx {
        fn tx_push(&mut self, frame: &[u8]) -> TxOutcome {
            if frame.len() > self.max_frame_bytes {
                return TxOutcome::TooBig;
            }
            self.queued.push(frame.to_vec());
            TxOutcome::Queued
        }

        fn tx_flush(&mut self) -> io::Result<()> {
            let now = crate::clock::now_ns();
            let mut sent = self
                .sent
                .lock()
                .expect("no test thread panics while holding it");
            for f in self.queued.drain(..) {
                if (self.refuse)(&f) {
                    self.errors += 1;
                } else {
                    sent.push((now, f));
                }
            }
            Ok(())
        }

        fn tx_errors(&mut self) -> u64 {
            self.errors
        }

        fn max_frame_bytes(&self) -> usize {
            self.max_frame_bytes
        }

        fn send_lead_ns(&self) -> u64 {
            self.send_lead_ns
        }

        fn sends_super_frames(&self) -> bool {
            self.supers.is_some()
        }

        fn tx_send_super(&mut self, frame: &[u8], offload: Offload) -> io::Result<bool> {
            let Some(supers) = self.supers.clone() else {
                return Err(io::Error::from(io::ErrorKind::Unsupported));
            };
            self.tx_flush()?;
            let now = crate::clock::now_ns();
            let mut segs = Vec::new();
            linkem_core::wire::segment(frame, offload, usize::MAX, &mut |s| segs.push(s.to_vec()))
                .map_err(io::Error::other)?;
            let mut sent = self
                .sent
                .lock()
                .expect("no test thread panics while holding it");
            sent.extend(segs.iter().map(|f| (now, f.clone())));
            supers
                .lock()
                .expect("no test thread panics while holding it")
                .push((now, segs));
            Ok(true)
        }
    }
}
