//! The send lead: how long a frame takes from linkem's `send` to the kernel's
//! stamp of it reaching the device beyond, learnt from the frames the kernel
//! hands back, so that the output stage can hand each frame over that much
//! before its release. Each backend takes one sample per flush (its first
//! frame) and keeps a [`SendLead`]; a port that learns nothing keeps 0.
//!
//! AF_PACKET: with `PACKET_TIMESTAMP` set (`SOF_TIMESTAMPING_SOFTWARE`), the
//! kernel writes into each TX slot it hands back the frame's `skb->tstamp` as
//! it was when the frame was freed, and ORs `TP_STATUS_TS_SOFTWARE` into its
//! status (`tpacket_destruct_skb`, `__packet_set_timestamp`). On a veth, the
//! frame crosses to the peer inside the `send` call and the peer's `netif_rx`
//! stamps it (the stack's receive stamp, on while any socket asks for one:
//! linkem's own receive sockets do): the slot then holds the instant the frame
//! reached the host's end, the instant that host's sockets report
//! (`SO_TIMESTAMPNS`) and the instant the model's release stands for. A real
//! NIC frees the frame after sending it with no stamp set (this socket
//! bypasses the qdisc, and sets no transmit time), so nothing is learnt and
//! the lead stays 0: releases are handed over at their instant, as before.
//!
//! AF_XDP (Linux 6.8+, TX metadata): the sampled frame's descriptor carries
//! `XDP_TX_METADATA` with `XDP_TXMD_FLAGS_TIMESTAMP`, and in copy mode the
//! kernel writes `CLOCK_TAI` into the frame's metadata when it frees the
//! frame's skb (`xsk_destruct_skb`). On a veth that is when the host's stack
//! takes the frame as its own (`ip_rcv` orphans it), a few hundred ns after
//! its receive stamp, inside the same kick. On any other device it is when
//! the driver cleans up after sending, which lags the wire by the NIC's
//! interrupt moderation, so only a veth asks for it.
//!
//! Measured on this project's machine (Linux 6.18, veth between namespaces,
//! 1 kpps): 1.3 / 2.3 / 5.8 µs at p10 / p50 / p90 from the `send` call to the
//! stamp; a host 10 ms away through `delay 10ms` saw its packets 2-4 µs later
//! than one beside it on a Linux bridge, this time included (docs/numbers.md).
//!
//! The estimate is the median of the samples: the median, because the lead
//! is a shift of every release, and it makes the host's median arrival the
//! model's release (half arrive up to a few hundred ns early, where before
//! nearly all arrived µs late). The samples are a mixture (on this machine
//! most near 1.5 µs, one in five or so 4-7 µs), so the median of a window
//! of a few dozen jumped between the two from one window to the next; the
//! estimate is the median of the first [`FIRST_LEAD_AFTER`] samples, then
//! moves [`STEP_NS`] towards each sample (the "frugal" streaming median:
//! it settles where as many samples fall above as below, and follows a
//! change of the machine at [`STEP_NS`] per sample, 4 µs in 200 samples).
//! A sample beyond [`MAX_SAMPLE_NS`] (a stall inside the send call, a clock
//! step) is not taken: the lead is the path's time, not its stalls.

/// Samples the first estimate is the median of: one stall among fewer moves it.
const FIRST_LEAD_AFTER: usize = 8;
/// How far each later sample moves the estimate.
const STEP_NS: u64 = 20;
/// The longest sample taken (see the module doc).
pub(crate) const MAX_SAMPLE_NS: u64 = 50_000;

/// The learnt send lead (see the module doc).
#[derive(Debug, Clone, Default)]
pub(crate) struct SendLead {
    first: [u32; FIRST_LEAD_AFTER],
    taken: usize,
    lead_ns: u64,
}

impl SendLead {
    /// Takes one sample: from the `send` call to the kernel's stamp of the
    /// frame, both on one clock. A stamp before the call (a clock step)
    /// or too long after it is not taken.
    pub(crate) fn observe(&mut self, sent_ns: u64, stamped_ns: u64) {
        let Some(sample_ns) = stamped_ns.checked_sub(sent_ns) else {
            return;
        };
        if sample_ns > MAX_SAMPLE_NS {
            return;
        }
        if self.taken < FIRST_LEAD_AFTER {
            self.first[self.taken] = sample_ns as u32;
            self.taken += 1;
            if self.taken == FIRST_LEAD_AFTER {
                let mut first = self.first;
                let (_, median, _) = first.select_nth_unstable(FIRST_LEAD_AFTER / 2);
                self.lead_ns = u64::from(*median);
            }
            return;
        }
        match sample_ns.cmp(&self.lead_ns) {
            std::cmp::Ordering::Greater => self.lead_ns += STEP_NS,
            std::cmp::Ordering::Less => self.lead_ns = self.lead_ns.saturating_sub(STEP_NS),
            std::cmp::Ordering::Equal => {}
        }
    }

    /// The lead: 0 until [`FIRST_LEAD_AFTER`] samples were taken.
    pub(crate) fn lead_ns(&self) -> u64 {
        self.lead_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_lead_before_enough_samples() {
        let mut l = SendLead::default();
        for i in 0..FIRST_LEAD_AFTER as u64 - 1 {
            l.observe(1_000 * i, 1_000 * i + 2_000);
        }
        assert_eq!(l.lead_ns(), 0);
        l.observe(0, 2_000);
        assert_eq!(l.lead_ns(), 2_000);
    }

    #[test]
    fn the_lead_settles_at_the_median_of_a_mixture_and_ignores_stalls_and_clock_steps() {
        let mut l = SendLead::default();
        // A mixture as measured: four in five at 1.4-1.7 µs, one at 5 µs,
        // so the median is 1.6 µs; a stall and a clock step between.
        let mix = [
            1_400, 5_000, 1_600, 1_500, 1_700, 1_600, 1_550, 5_000, 1_650, 1_600,
        ];
        for i in 0..2_000 {
            l.observe(10_000_000, 10_000_000 + mix[i % mix.len()]);
            l.observe(10_000_000, 10_000_000 + 5_000_000);
            l.observe(10_000_000, 9_000_000);
        }
        assert!((1_550..=1_650).contains(&l.lead_ns()), "{}", l.lead_ns());
    }

    #[test]
    fn the_lead_follows_a_change_of_the_machine() {
        let mut l = SendLead::default();
        for _ in 0..100 {
            l.observe(0, 2_000);
        }
        assert_eq!(l.lead_ns(), 2_000);
        for _ in 0..200 {
            l.observe(0, 6_000);
        }
        assert_eq!(l.lead_ns(), 6_000);
        for _ in 0..250 {
            l.observe(0, 1_000);
        }
        assert_eq!(l.lead_ns(), 1_000);
    }
}
