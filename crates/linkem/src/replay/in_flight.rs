//! The frames a replay has decided but not yet written, leaving by (release
//! time, decision order) as a [`ReleaseRuns`](linkem_core::order::ReleaseRuns)
//! orders them, their bytes kept in one buffer rather than one allocation each.

use linkem_core::order::ReleaseQueue;
use std::collections::VecDeque;

/// Below this many written bytes at its front the buffer is not compacted.
const COMPACT_MIN_BYTES: usize = 256 << 10;

/// A frame of the run; its bytes follow those of the frame before it.
struct RunFrame {
    release_ns: u64,
    seq: u64,
    orig_len: u32,
    len_bytes: u32,
}

/// Frames in flight: those released no earlier than the last of the run join
/// the run, a FIFO whose bytes lie in order in one buffer (written from its
/// front, so the frames of a link that does not reorder cost no allocation
/// and are read back in the order they were stored); the others go into a
/// heap with bytes of their own. Equal release times leave in push order.
#[derive(Default)]
pub(super) struct InFlight {
    run: VecDeque<RunFrame>,
    /// The run's bytes from `head` on; those before `head` were written.
    bytes: Vec<u8>,
    head: usize,
    /// (sequence, original length, bytes) by (release time, sequence).
    rest: ReleaseQueue<(u64, u32, Vec<u8>)>,
    next_seq: u64,
}

impl InFlight {
    /// Adds a copy of `data` (length on the wire `orig_len`), `edit` applied
    /// to the copy, to leave at `release_ns` after every frame pushed earlier
    /// with that release time.
    #[inline]
    pub(super) fn push(
        &mut self,
        release_ns: u64,
        orig_len: u32,
        data: &[u8],
        edit: impl FnOnce(&mut [u8]),
    ) {
        let seq = self.next_seq;
        self.next_seq += 1;
        match self.run.back() {
            Some(last) if release_ns < last.release_ns => {
                let mut own = data.to_vec();
                edit(&mut own);
                self.rest.push_seq(release_ns, seq, (seq, orig_len, own));
            }
            _ => {
                let start = self.bytes.len();
                self.bytes.extend_from_slice(data);
                edit(&mut self.bytes[start..]);
                self.run.push_back(RunFrame {
                    release_ns,
                    seq,
                    orig_len,
                    // A captured length is at most MAX_CAPLEN.
                    len_bytes: data.len() as u32,
                });
            }
        }
    }

    /// Hands the frames released by `horizon_ns` to `write` (release time,
    /// length on the wire, bytes) in order, each gone once written.
    #[inline]
    pub(super) fn write_due<E>(
        &mut self,
        horizon_ns: u64,
        mut write: impl FnMut(u64, u32, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        loop {
            let heap = self.rest.peek().map(|(r, &(s, _, _))| (r, s));
            let run = self.run.front().map(|f| (f.release_ns, f.seq));
            let run_first = match (run, heap) {
                (Some(r), Some(h)) => r < h,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => return Ok(()),
            };
            let (release_ns, _) = if run_first { run } else { heap }.expect("a head");
            if release_ns > horizon_ns {
                return Ok(());
            }
            if run_first {
                let f = self.run.pop_front().expect("the run's head");
                let end = self.head + f.len_bytes as usize;
                write(release_ns, f.orig_len, &self.bytes[self.head..end])?;
                self.head = end;
                self.compact();
            } else {
                let (_, (_, orig_len, data)) = self.rest.pop().expect("the heap's head");
                write(release_ns, orig_len, &data)?;
            }
        }
    }

    /// Drops the written bytes once they outnumber those waiting (so each
    /// byte is moved at most about once), or at once when none wait.
    #[inline]
    fn compact(&mut self) {
        if self.run.is_empty() {
            self.bytes.clear();
            self.head = 0;
        } else if self.head >= COMPACT_MIN_BYTES && self.head >= self.bytes.len() - self.head {
            self.bytes.copy_within(self.head.., 0);
            self.bytes.truncate(self.bytes.len() - self.head);
            self.head = 0;
        }
    }

    /// The number of frames waiting.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.run.len() + self.rest.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_leave_as_release_runs_order_them() {
        use linkem_core::order::ReleaseRuns;
        let mut rng = 11u64;
        let (mut runs, mut in_flight) = (ReleaseRuns::default(), InFlight::default());
        let (mut t, mut got, mut want) = (0u64, Vec::new(), Vec::new());
        for i in 0..20_000u32 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let draw = rng >> 33;
            t += draw % 3;
            let release = if draw.is_multiple_of(7) {
                t.saturating_sub(draw % 50)
            } else {
                t
            };
            let data = vec![(i % 251) as u8; 1 + (draw % 90) as usize];
            let flip = draw.is_multiple_of(3);
            let mut edited = data.clone();
            if flip {
                edited[0] ^= 0x80;
            }
            runs.push(release, (i, edited));
            in_flight.push(release, i, &data, |f| {
                if flip {
                    f[0] ^= 0x80
                }
            });
            if draw.is_multiple_of(5) {
                while let Some(x) = runs.pop_due(t / 2) {
                    want.push(x);
                }
                in_flight
                    .write_due::<()>(t / 2, |r, n, b| {
                        got.push((r, (n, b.to_vec())));
                        Ok(())
                    })
                    .unwrap();
            }
        }
        assert_eq!(in_flight.len(), runs.len());
        while let Some(x) = runs.pop() {
            want.push(x);
        }
        in_flight
            .write_due::<()>(u64::MAX, |r, n, b| {
                got.push((r, (n, b.to_vec())));
                Ok(())
            })
            .unwrap();
        assert_eq!(got, want);
        assert_eq!(in_flight.len(), 0);
    }
}
