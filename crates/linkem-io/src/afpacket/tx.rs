//! Queuing frames on the TX ring, flushing them with one `send`, and taking back what
//! the kernel is done with.

use super::*;
use linkem_core::port::TxOutcome;

impl AfPacket {
    /// Reclaims TX slots the kernel has finished with; returns how many are still queued
    /// or in flight.
    fn tx_reclaim(&mut self) -> u32 {
        while self.tx_in_flight() > 0 {
            // Safety: the frame pointer comes from this socket's live mapping.
            let raw =
                unsafe { Self::status(self.tx_frame_ptr(self.tx_tail)) }.load(Ordering::Acquire);
            let st = raw & !TP_STATUS_TS_MASK;
            // AVAILABLE: sent (or skipped as malformed, PACKET_LOSS being on); WRONG_FORMAT
            // would only appear without PACKET_LOSS and is equally finished with. The kernel
            // ORs the TX timestamp source into the status when it hands a slot back.
            if st != libc::TP_STATUS_AVAILABLE && st != libc::TP_STATUS_WRONG_FORMAT {
                break;
            }
            if st == libc::TP_STATUS_WRONG_FORMAT {
                self.stats.tx_wrong_format += 1;
            }
            if let Some((slot, sent_ns)) = self.lead_sample {
                if slot == self.tx_tail {
                    self.lead_sample = None;
                    if raw & libc::TP_STATUS_TS_SOFTWARE != 0 {
                        let stamped_ns = self.tx_stamp_ns(self.tx_tail);
                        self.lead.observe(sent_ns, stamped_ns);
                    }
                }
            }
            self.tx_tail = (self.tx_tail + 1) % self.tx.frame_nr;
            self.stats.tx_completed += 1;
        }
        self.tx_in_flight()
    }

    /// The kernel's stamp of a slot it handed back with `TP_STATUS_TS_SOFTWARE`.
    fn tx_stamp_ns(&self, slot: u32) -> u64 {
        // Safety: the slot is handed back (the kernel wrote it before its
        // status, read with Acquire), in this socket's live mapping.
        let hdr = unsafe { ptr::read(self.tx_frame_ptr(slot) as *const libc::tpacket2_hdr) };
        stamp_ns(&hdr)
    }

    /// The learnt send lead ([`crate::lead`]): 0 until learnt, and on a
    /// device whose frames come back unstamped.
    pub fn send_lead_ns(&self) -> u64 {
        self.lead.lead_ns()
    }

    fn tx_in_flight(&self) -> u32 {
        (self.stats.tx_queued - self.stats.tx_completed) as u32
    }

    /// Bytes of a TX slot left for the frame (after the virtio-net header, if any).
    fn tx_room(&self) -> usize {
        self.tx.tx_capacity() - if self.offload { VNET_HDR_LEN } else { 0 }
    }

    /// Largest frame the interface sends: MTU + Ethernet header, 4 bytes more for a frame
    /// tagged 802.1Q (the kernel allows exactly that, `packet_extra_vlan_len_allowed`), and
    /// never more than a TX slot.
    pub fn max_frame_bytes(&self) -> usize {
        (self.mtu as usize + ETH_HLEN + VLAN_HLEN).min(self.tx_room())
    }

    /// Copies `data` (a whole Ethernet frame) into the next TX slot. [`TxOutcome::NoRoom`] when
    /// the ring is full ([`AfPacket::tx_flush`] frees slots); [`TxOutcome::TooBig`] for a frame
    /// the interface would refuse (longer than MTU + Ethernet header, + 4 if tagged 802.1Q):
    /// nothing is queued, nothing truncated. Nothing is sent until `tx_flush`.
    pub fn tx_push(&mut self, data: &[u8]) -> TxOutcome {
        let tagged = data.len() >= ETH_HLEN && data[12..14] == [0x81, 0x00];
        let limit = self.mtu as usize + ETH_HLEN + if tagged { VLAN_HLEN } else { 0 };
        if data.len() > limit.min(self.tx_room()) {
            self.stats.tx_oversize += 1;
            return TxOutcome::TooBig;
        }
        if self.tx_in_flight() == self.tx.frame_nr && self.tx_reclaim() == self.tx.frame_nr {
            self.stats.tx_ring_full += 1;
            return TxOutcome::NoRoom;
        }
        let frame = self.tx_frame_ptr(self.tx_head);
        let vnet = if self.offload { VNET_HDR_LEN } else { 0 };
        // Safety: the slot's status is AVAILABLE (or WRONG_FORMAT, which the kernel also
        // leaves alone), so the kernel does not read it until we set SEND_REQUEST; the data
        // fits in the slot after the header (checked against tx_capacity above).
        // With PACKET_VNET_HDR the kernel reads a virtio-net header before every transmitted
        // frame too: an all-zero one says "a finished frame, nothing to offload".
        unsafe {
            ptr::write_bytes(frame.add(TX_DATA_OFFSET), 0, vnet);
            ptr::copy_nonoverlapping(data.as_ptr(), frame.add(TX_DATA_OFFSET + vnet), data.len());
            let hdr = frame as *mut libc::tpacket2_hdr;
            ptr::addr_of_mut!((*hdr).tp_len).write((vnet + data.len()) as u32);
            ptr::addr_of_mut!((*hdr).tp_snaplen).write((vnet + data.len()) as u32);
        }
        // Safety: the frame pointer comes from this socket's live mapping.
        let status = unsafe { Self::status(frame) };
        status.store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.tx_head = (self.tx_head + 1) % self.tx.frame_nr;
        self.tx_unflushed += 1;
        self.stats.tx_queued += 1;
        TxOutcome::Queued
    }

    /// Asks the kernel to send every queued frame with one `send(fd, NULL, 0, MSG_DONTWAIT)`
    /// and reclaims completed slots. A transient failure (ENOBUFS, EAGAIN: the device queue
    /// was full) leaves the frames queued for the next flush and is counted in
    /// `tx_send_errors`. An interface down or gone (ENETDOWN, ENXIO, ENODEV: the kernel
    /// looked at no slot) drops the queued frames, counted in `tx_link_down`: a frame is
    /// never held for an interface that may not come back, and the ring never fills with
    /// them, so the sender neither spins nor stops; once the interface is up again, frames
    /// leave as before. Other failures are returned.
    pub fn tx_flush(&mut self) -> Result<(), IoError> {
        if self.tx_unflushed > 0 {
            self.stats.tx_flushes += 1;
            if self.lead_sample.is_none() {
                let first =
                    (self.tx_head + self.tx.frame_nr - self.tx_unflushed) % self.tx.frame_nr;
                self.lead_sample = Some((first, now_realtime_ns()));
            }
            // Safety: a NULL buffer of length 0 is how a TX ring send is requested; the
            // kernel reads the frames from the mapping.
            let rc = unsafe { libc::send(self.fd, ptr::null(), 0, libc::MSG_DONTWAIT) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::ENOBUFS) | Some(libc::EAGAIN) | Some(libc::EINTR) => {
                        self.stats.tx_send_errors += 1;
                        // A frame left queued goes with a later call: its
                        // time from this one is no sample of the send path.
                        self.lead_sample = None;
                        self.tx_reclaim();
                        return Ok(());
                    }
                    Some(code) if link_down_errno(code) => {
                        self.tx_drop_queued();
                        return Ok(());
                    }
                    _ => return Err(IoError::sys("send(PACKET_TX_RING)", &self.ifname, e)),
                }
            }
            self.tx_unflushed = 0;
        }
        self.tx_reclaim();
        Ok(())
    }

    /// Takes back every slot queued (`TP_STATUS_SEND_REQUEST`) and not yet taken by the
    /// kernel, counting its frame in `tx_link_down`. Only after a `send` that failed before
    /// looking at the ring (the interface down or gone): the kernel reads TX slots only
    /// inside `send`, on this thread, so none is being read meanwhile. The kernel walks
    /// the ring from its own position, the first slot it has not taken, and stops at a
    /// slot not requested: so the queued slots (from that position to `tx_head`, all
    /// requested) are given back by moving `tx_head` back to it, not skipped, or every
    /// frame queued after them would wait for the ring to wrap round.
    fn tx_drop_queued(&mut self) {
        let mut first = self.tx_tail;
        while first != self.tx_head {
            // Safety: the frame pointer comes from this socket's live mapping.
            let st = unsafe { Self::status(self.tx_frame_ptr(first)) }.load(Ordering::Acquire);
            if st & !TP_STATUS_TS_MASK == libc::TP_STATUS_SEND_REQUEST {
                break;
            }
            first = (first + 1) % self.tx.frame_nr;
        }
        let mut i = first;
        let mut dropped = 0u64;
        while i != self.tx_head {
            // Safety: the frame pointer comes from this socket's live mapping.
            unsafe { Self::status(self.tx_frame_ptr(i)) }
                .store(libc::TP_STATUS_AVAILABLE, Ordering::Release);
            dropped += 1;
            i = (i + 1) % self.tx.frame_nr;
        }
        self.tx_head = first;
        // A sampled slot among them is queued again later, by another flush.
        self.lead_sample = None;
        self.stats.tx_queued -= dropped;
        self.stats.tx_link_down += dropped;
        self.tx_unflushed = 0;
        self.tx_reclaim();
    }

    /// Frames queued or being sent that the kernel has not handed back yet.
    pub fn tx_pending(&mut self) -> u32 {
        self.tx_reclaim()
    }
}

/// Whether `code`, from `send` on a packet socket, says its interface is down (ENETDOWN)
/// or gone (ENXIO: the socket lost its binding; ENODEV).
pub fn link_down_errno(code: i32) -> bool {
    matches!(code, libc::ENETDOWN | libc::ENXIO | libc::ENODEV)
}
