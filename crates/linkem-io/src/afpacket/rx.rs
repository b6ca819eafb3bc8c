//! Taking received frames from the RX ring (or, for frames longer than a slot, from the
//! socket queue), with their offload state, and waiting for them.

use super::*;
use linkem_core::port::RxFrame;

impl AfPacket {
    /// True when a received frame is waiting (no system call).
    pub fn rx_ready(&self) -> bool {
        // Safety: the frame pointer comes from this socket's live mapping.
        let st = unsafe { Self::status(self.rx_frame_ptr(self.rx_head)) };
        st.load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }

    /// Hands up to `max` received frames to `f`, oldest first, returning each slot to the
    /// kernel after `f` returns. Makes no system call. Returns the number of frames. Each
    /// frame's `data` starts at the Ethernet header (VLAN tag written back if configured;
    /// a tag not written back is lost), its `ts_ns` is the kernel's receive time
    /// (`CLOCK_REALTIME`), its `offload` what is left to do to make it a wire frame (from
    /// the virtio-net header; empty without [`AfPacketConfig::offload`]). A frame whose
    /// sender left its checksum for offload (`TP_STATUS_CSUMNOTREADY`) is counted in
    /// [`AfPacketStats::rx_csum_not_ready`]; `offload` says where to finish it.
    pub fn rx_batch(&mut self, max: usize, mut f: impl FnMut(RxFrame<'_>)) -> usize {
        let mut n = 0;
        while n < max {
            let frame = self.rx_frame_ptr(self.rx_head);
            // Safety: the frame pointer comes from this socket's live mapping, which outlives
            // this loop iteration.
            let status = unsafe { Self::status(frame) };
            let st = status.load(Ordering::Acquire);
            if st & libc::TP_STATUS_USER == 0 {
                break;
            }
            // Safety: the kernel set TP_STATUS_USER (read with Acquire above), so it has
            // finished writing this slot and will not touch it until we write
            // TP_STATUS_KERNEL; the header lies at the frame's start inside the mapping.
            let hdr = unsafe { ptr::read(frame as *const libc::tpacket2_hdr) };
            let slot = self.rx.frame_size as usize;
            let mac = hdr.tp_mac as usize;
            let vlan = if st & libc::TP_STATUS_VLAN_VALID != 0 {
                let tpid = if st & libc::TP_STATUS_VLAN_TPID_VALID != 0 && hdr.tp_vlan_tpid != 0 {
                    hdr.tp_vlan_tpid
                } else {
                    libc::ETH_P_8021Q as u16
                };
                Some((tpid, hdr.tp_vlan_tci))
            } else {
                None
            };
            let ts_ns = stamp_ns(&hdr);
            let csum_not_ready = st & libc::TP_STATUS_CSUMNOTREADY != 0;
            let taken = if st & libc::TP_STATUS_COPY != 0 && self.offload {
                // Longer than the slot: the whole frame waits on the socket queue, in order.
                self.take_big(vlan)
            } else if (hdr.tp_snaplen as usize) < hdr.tp_len as usize && self.offload {
                // Longer than the slot and not queued (socket buffer full): lost.
                self.stats.rx_lost_big += 1;
                None
            } else {
                // Safety: the slot is ours until the status write below (see above).
                Some(unsafe { self.take_in_slot(frame, slot, mac, &hdr, vlan) })
            };
            let Some((start, len, orig_len, offload, in_big)) = taken else {
                status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
                self.rx_head = (self.rx_head + 1) % self.rx.frame_nr;
                continue;
            };
            let data = if in_big {
                &self.big[start..start + len]
            } else {
                // Safety: [start, start + len) lies inside this frame slot (clamped to the
                // slot in take_in_slot), which stays ours until the status write below.
                unsafe { std::slice::from_raw_parts(frame.add(start), len) }
            };
            let rx = RxFrame {
                data,
                orig_len,
                ts_ns,
                offload,
                owner: None,
            };
            if rx.truncated() {
                self.stats.rx_truncated += 1;
            }
            if csum_not_ready {
                self.stats.rx_csum_not_ready += 1;
            }
            if offload.gso.is_some() {
                self.stats.rx_gso += 1;
            }
            f(rx);
            status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
            self.rx_head = (self.rx_head + 1) % self.rx.frame_nr;
            n += 1;
        }
        self.stats.rx_frames += n as u64;
        n
    }

    /// The frame in a ring slot, its VLAN tag written back if configured: (start in the
    /// slot, length, length on the wire, offload, false).
    ///
    /// # Safety
    /// `frame` must be a ring slot of `slot` bytes handed to user space (TP_STATUS_USER)
    /// and not yet returned; `hdr` its header.
    unsafe fn take_in_slot(
        &self,
        frame: *mut u8,
        slot: usize,
        mac: usize,
        hdr: &libc::tpacket2_hdr,
        vlan: Option<(u16, u16)>,
    ) -> (usize, usize, u32, Offload, bool) {
        let mut snap = (hdr.tp_snaplen as usize).min(slot.saturating_sub(mac));
        let mut start = mac;
        let mut orig_len = hdr.tp_len;
        let mut offload = Offload::default();
        if self.offload && mac >= TPACKET2_HDR_SIZE + VNET_HDR_LEN {
            let mut vh = [0u8; VNET_HDR_LEN];
            // Safety: the header lies in this slot just before the frame, after the
            // tpacket2_hdr (checked above); read before the tag below overwrites it.
            unsafe {
                ptr::copy_nonoverlapping(
                    frame.add(mac - VNET_HDR_LEN),
                    vh.as_mut_ptr(),
                    VNET_HDR_LEN,
                )
            };
            offload = parse_vnet_hdr(&vh);
        }
        if let Some((tpid, tci)) = vlan {
            if self.reinsert_vlan && mac >= TPACKET2_HDR_SIZE + VLAN_HLEN && snap >= 12 {
                // Safety: the slot is ours (see above); both ranges lie inside this frame
                // slot, after the tpacket2_hdr; `ptr::copy` allows the overlap.
                unsafe {
                    ptr::copy(frame.add(mac), frame.add(mac - VLAN_HLEN), 12);
                    let tag = frame.add(mac - VLAN_HLEN + 12);
                    ptr::copy_nonoverlapping(tpid.to_be_bytes().as_ptr(), tag, 2);
                    ptr::copy_nonoverlapping(tci.to_be_bytes().as_ptr(), tag.add(2), 2);
                }
                start = mac - VLAN_HLEN;
                snap += VLAN_HLEN;
                orig_len += VLAN_HLEN as u32;
                offload = shift_offload(offload, VLAN_HLEN as u16);
            }
        }
        (start, snap, orig_len, offload, false)
    }

    /// Reads the frame the kernel queued whole on the socket (slot marked TP_STATUS_COPY)
    /// into `self.big`: (start in `big`, length, length, offload, true); `None` when the
    /// queue holds nothing (the frame is then lost, and counted so).
    fn take_big(&mut self, vlan: Option<(u16, u16)>) -> Option<(usize, usize, u32, Offload, bool)> {
        if self.big.is_empty() {
            self.big = vec![0u8; BIG_FRAME_BUF];
        }
        // Leave room before the virtio-net header to write a VLAN tag back.
        let at = VLAN_HLEN;
        // Safety: recv writes at most `BIG_FRAME_BUF - at` bytes into `big` past `at`.
        let n = unsafe {
            libc::recv(
                self.fd,
                self.big.as_mut_ptr().add(at).cast(),
                BIG_FRAME_BUF - at,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        if n < (VNET_HDR_LEN + ETH_HLEN) as isize {
            self.stats.rx_lost_big += 1;
            return None;
        }
        let n = n as usize;
        if n > BIG_FRAME_BUF - at {
            // Longer than any frame the kernel builds: cut, so not forwardable.
            self.stats.rx_lost_big += 1;
            return None;
        }
        self.stats.rx_copied += 1;
        let mut vh = [0u8; VNET_HDR_LEN];
        vh.copy_from_slice(&self.big[at..at + VNET_HDR_LEN]);
        let mut offload = parse_vnet_hdr(&vh);
        let mut start = at + VNET_HDR_LEN;
        let mut len = n - VNET_HDR_LEN;
        if let (Some((tpid, tci)), true) = (vlan, self.reinsert_vlan) {
            self.big.copy_within(start..start + 12, start - VLAN_HLEN);
            start -= VLAN_HLEN;
            self.big[start + 12..start + 14].copy_from_slice(&tpid.to_be_bytes());
            self.big[start + 14..start + 16].copy_from_slice(&tci.to_be_bytes());
            len += VLAN_HLEN;
            offload = shift_offload(offload, VLAN_HLEN as u16);
        }
        Some((start, len, len as u32, offload, true))
    }

    /// Frames the kernel dropped before this socket could take them, cumulative: the ring
    /// was full (`tp_drops` from PACKET_STATISTICS, which resets on each read, so it is
    /// summed here), or a frame longer than a slot could not be queued whole.
    pub fn kernel_drops(&mut self) -> u64 {
        if let Ok(k) = self.kernel_stats() {
            self.kernel_drops += k.drops as u64;
        }
        self.kernel_drops + self.stats.rx_lost_big
    }

    /// Sleeps in poll(2) until a frame is waiting or `timeout` passes (`None`: no limit).
    /// Returns true when a frame is waiting. Returns at once, without a system call, when
    /// one already is. An interrupted poll returns `Ok(false)`.
    pub fn poll_rx(&self, timeout: Option<Duration>) -> Result<bool, IoError> {
        if self.rx_ready() {
            return Ok(true);
        }
        poll_rx_any(&[self], timeout).map(|r| r.is_some())
    }
}

/// The offload state a virtio-net header describes (little-endian fields, as packet
/// sockets write them on little-endian machines: `vio_le()`). GSO types linkem cannot cut
/// (legacy UFO, unknown) give no `gso`, so such a frame is judged by its length alone.
pub fn parse_vnet_hdr(h: &[u8; VNET_HDR_LEN]) -> Offload {
    const NEEDS_CSUM: u8 = 1;
    let u16_at = |i: usize| u16::from_le_bytes([h[i], h[i + 1]]);
    let (flags, gso_type, gso_size) = (h[0], h[1], u16_at(4));
    let csum = (flags & NEEDS_CSUM != 0).then(|| CsumPartial {
        start: u16_at(6),
        offset: u16_at(8),
    });
    // VIRTIO_NET_HDR_GSO_*: TCPV4 1, UDP (fragmentation) 3, TCPV6 4, UDP_L4 5; ECN 0x80.
    let kind = match gso_type & !0x80 {
        1 => Some(GsoKind::TcpV4),
        4 => Some(GsoKind::TcpV6),
        5 => Some(GsoKind::Udp),
        _ => None,
    };
    let gso = kind.filter(|_| gso_size > 0).map(|kind| Gso {
        kind,
        size: gso_size,
    });
    Offload { csum, gso }
}

/// The same offload state for a frame that grew `by` bytes at its front (a VLAN tag
/// written back after the MAC addresses).
pub(super) fn shift_offload(mut o: Offload, by: u16) -> Offload {
    if let Some(c) = o.csum.as_mut() {
        c.start = c.start.saturating_add(by);
    }
    o
}

/// Sleeps in one poll(2) until one of `socks` has a received frame waiting or `timeout`
/// passes (`None`: no limit). Returns the index of the first ready socket. Returns at once,
/// without a system call, when one already has a frame. An interrupted poll returns
/// `Ok(None)`.
pub fn poll_rx_any(
    socks: &[&AfPacket],
    timeout: Option<Duration>,
) -> Result<Option<usize>, IoError> {
    if let Some(i) = socks.iter().position(|s| s.rx_ready()) {
        return Ok(Some(i));
    }
    let mut fds: Vec<libc::pollfd> = socks
        .iter()
        .map(|s| libc::pollfd {
            fd: s.fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = match timeout {
        None => -1,
        Some(d) => d.as_millis().min(i32::MAX as u128) as libc::c_int,
    };
    // Safety: `fds` is a valid array of `fds.len()` pollfd structures.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINTR) {
            return Ok(None);
        }
        let name = socks.first().map_or("", |s| s.ifname.as_str());
        return Err(IoError::sys("poll", name, e));
    }
    if let Some(i) = socks.iter().position(|s| s.rx_ready()) {
        return Ok(Some(i));
    }
    for (i, p) in fds.iter().enumerate() {
        if p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
            // Reading SO_ERROR also clears it, so a socket whose interface bounced (ENETDOWN)
            // does not keep failing every later poll.
            let source = socks[i].take_error().unwrap_or_else(|| {
                io::Error::other(format!("socket error (revents {:#x})", p.revents))
            });
            return Err(IoError::Sys {
                call: "poll",
                ifname: socks[i].ifname.clone(),
                source,
            });
        }
    }
    Ok(None)
}
