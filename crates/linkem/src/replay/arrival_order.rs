//! Captures whose timestamps go backwards.
//!
//! The model's clock never goes back: a packet whose timestamp is earlier
//! than that of a packet before it is taken as arriving when the latest
//! earlier packet did (`Link` keeps `max(now, last arrival)`; a rule node's
//! pipes do the same), so it queues behind that packet and its delay is
//! counted from there. Its `--events` line keeps its own timestamp. Replay
//! says so once, after the run: how many packets went back, and the first.

/// Counts the packets of a capture that arrive before one read earlier.
#[derive(Debug, Default, Clone)]
pub struct Backwards {
    latest_ns: u64,
    read: u64,
    count: u64,
    /// The first one: its 1-based number in the capture and how far back it went.
    first: Option<(u64, u64)>,
}

impl Backwards {
    /// Notes the next packet of the capture, in file order.
    pub fn on_packet(&mut self, ts_ns: u64) {
        self.read += 1;
        if ts_ns < self.latest_ns {
            self.count += 1;
            self.first
                .get_or_insert((self.read, self.latest_ns - ts_ns));
        } else {
            self.latest_ns = ts_ns;
        }
    }

    /// The warning for `file`, when some packet went back.
    pub fn warning(&self, file: &str) -> Option<String> {
        let (packet, back_ns) = self.first?;
        let (n, s) = (self.count, if self.count == 1 { "" } else { "s" });
        Some(format!(
            "linkem: warning: {file}: {n} packet{s} with a timestamp earlier than a packet before \
             (first: packet {packet}, {:.9} s back); each was taken as arriving with the latest \
             earlier packet, the emulated clock never goes back",
            back_ns as f64 / 1e9
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_packets_that_go_back_and_names_the_first() {
        let mut b = Backwards::default();
        for t in [10, 20, 30] {
            b.on_packet(t);
        }
        assert_eq!(b.warning("in.pcap"), None);
        // Packet 4 goes 25 ns back, packet 6 is behind packet 5 as well.
        for t in [5, 40, 35, 50] {
            b.on_packet(t);
        }
        let w = b.warning("in.pcap").unwrap();
        assert!(
            w.contains("in.pcap: 2 packets with a timestamp earlier")
                && w.contains("first: packet 4, 0.000000025 s back"),
            "{w}"
        );
    }
}
