//! What the pipeline needs from a backend: receive batches with timestamps,
//! queue frames for sending, flush. AF_PACKET, AF_XDP and the in-memory test
//! port implement it.

use std::io;

/// A received frame, valid during the callback only.
#[derive(Debug, Clone, Copy)]
pub struct RxFrame<'a> {
    pub data: &'a [u8],
    /// Length on the wire (may exceed `data.len()` if the backend truncates).
    pub orig_len: u32,
    /// Receive time in CLOCK_REALTIME ns; 0 if the backend has none (the
    /// pipeline then stamps the frame itself).
    pub ts_ns: u64,
}

pub trait RxPort: Send {
    /// Receives up to `max` frames, calling `f` on each; returns how many.
    /// Never blocks.
    fn rx_batch(&mut self, max: usize, f: &mut dyn FnMut(RxFrame<'_>)) -> io::Result<usize>;
    /// Blocks until a frame may be ready or `timeout_ns` has passed.
    fn wait_rx(&mut self, timeout_ns: u64) -> io::Result<()>;
}

pub trait TxPort: Send {
    /// Queues a frame; false if the backend has no room now.
    fn tx_push(&mut self, frame: &[u8]) -> bool;
    /// Hands the queued frames to the kernel.
    fn tx_flush(&mut self) -> io::Result<()>;
}

/// In-memory ports for tests: frames go in through a channel with their
/// timestamps, and come out into a shared vector with the time they were sent.
pub mod memory {
    use super::*;
    use std::sync::mpsc::{Receiver, RecvTimeoutError};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    pub struct MemoryRx {
        pub input: Receiver<(u64, Vec<u8>)>,
        pending: Option<(u64, Vec<u8>)>,
    }

    impl MemoryRx {
        pub fn new(input: Receiver<(u64, Vec<u8>)>) -> Self {
            MemoryRx {
                input,
                pending: None,
            }
        }
    }

    impl RxPort for MemoryRx {
        fn rx_batch(&mut self, max: usize, f: &mut dyn FnMut(RxFrame<'_>)) -> io::Result<usize> {
            let mut n = 0;
            while n < max {
                let Some((ts, data)) = self.pending.take().or_else(|| self.input.try_recv().ok())
                else {
                    break;
                };
                f(RxFrame {
                    data: &data,
                    orig_len: data.len() as u32,
                    ts_ns: ts,
                });
                n += 1;
            }
            Ok(n)
        }

        fn wait_rx(&mut self, timeout_ns: u64) -> io::Result<()> {
            if self.pending.is_none() {
                match self.input.recv_timeout(Duration::from_nanos(timeout_ns)) {
                    Ok(item) => self.pending = Some(item),
                    Err(RecvTimeoutError::Timeout) => {}
                    // The sender is gone: behave like an idle interface.
                    Err(RecvTimeoutError::Disconnected) => {
                        std::thread::sleep(Duration::from_nanos(timeout_ns))
                    }
                }
            }
            Ok(())
        }
    }

    /// Sent frames with the CLOCK_REALTIME ns at which they were handed over.
    pub type Sent = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;

    pub struct MemoryTx {
        pub sent: Sent,
        queued: Vec<Vec<u8>>,
    }

    impl MemoryTx {
        pub fn new() -> (Self, Sent) {
            let sent: Sent = Arc::default();
            (
                MemoryTx {
                    sent: sent.clone(),
                    queued: Vec::new(),
                },
                sent,
            )
        }
    }

    impl TxPort for MemoryTx {
        fn tx_push(&mut self, frame: &[u8]) -> bool {
            self.queued.push(frame.to_vec());
            true
        }

        fn tx_flush(&mut self) -> io::Result<()> {
            let now = crate::clock::now_ns();
            let mut sent = self
                .sent
                .lock()
                .expect("no test thread panics while holding it");
            sent.extend(self.queued.drain(..).map(|f| (now, f)));
            Ok(())
        }
    }
}
