//! Opening the socket and its rings, the interface's state as the socket sees it, and
//! closing.

use super::*;
use crate::sys::getsockopt;

impl AfPacket {
    /// Opens an AF_PACKET socket on `ifname` with RX and TX rings; see the module docs.
    pub fn open(ifname: &str, cfg: AfPacketConfig) -> Result<AfPacket, IoError> {
        let ifindex = index_of(ifname)?;
        let page = page_size();
        let rx = RingGeometry::compute(cfg.frame_size, cfg.rx_frames, page)?;
        let tx = RingGeometry::compute(cfg.frame_size, cfg.tx_frames, page)?;

        // Protocol 0: the socket receives nothing until it is bound with ETH_P_ALL below,
        // after the ring exists, so no frame of another interface slips in.
        // Safety: plain system call with constant arguments.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(IoError::last("socket(AF_PACKET, SOCK_RAW)", ifname));
        }
        let guard = FdGuard(fd);

        let mtu = up_interface_mtu(fd, ifname)?;
        check_mtu(ifname, mtu, cfg.frame_size)?;

        let offload = cfg.offload && cfg.receive;
        set_options(fd, ifname, &cfg, offload)?;
        set_rings(fd, ifname, &rx, &tx)?;

        let map_len = rx.total_bytes() + tx.total_bytes();
        // Safety: maps the socket's rings (RX then TX, as the kernel lays them out) into fresh
        // address space chosen by the kernel; no existing memory is affected.
        let map = unsafe {
            libc::mmap(
                ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(IoError::last("mmap(PACKET_RX_RING+PACKET_TX_RING)", ifname));
        }
        let map = NonNull::new(map.cast::<u8>()).expect("mmap returned NULL without MAP_FAILED");

        // From here on `sock` owns the fd and the mapping; its Drop releases both.
        let sock = AfPacket {
            fd: guard.0,
            ifname: ifname.to_string(),
            ifindex,
            mtu,
            map,
            map_len,
            rx,
            tx,
            rx_head: 0,
            tx_head: 0,
            tx_tail: 0,
            tx_unflushed: 0,
            reinsert_vlan: cfg.reinsert_vlan,
            offload,
            stats: AfPacketStats::default(),
            kernel_drops: 0,
            big: Vec::new(),
            lead: Default::default(),
            lead_sample: None,
        };
        std::mem::forget(guard);
        sock.bind(cfg.receive)?;
        if cfg.promiscuous && cfg.receive {
            sock.set_promiscuous()?;
        }
        Ok(sock)
    }

    /// Binds the socket to its interface: with `ETH_P_ALL` when it receives, with
    /// protocol 0 (nothing received) when it only sends.
    fn bind(&self, receive: bool) -> Result<(), IoError> {
        // Safety: sockaddr_ll is plain old data; all-zero is valid.
        let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = if receive {
            (libc::ETH_P_ALL as u16).to_be()
        } else {
            0
        };
        sll.sll_ifindex = self.ifindex as libc::c_int;
        // Safety: `sll` is a valid sockaddr_ll and the length passed is its size.
        let rc = unsafe {
            libc::bind(
                self.fd,
                (&sll as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(IoError::last("bind(AF_PACKET)", &self.ifname));
        }
        Ok(())
    }

    /// Puts the interface in promiscuous mode for as long as the socket lives
    /// (`PACKET_ADD_MEMBERSHIP`: the kernel drops it when the socket closes).
    fn set_promiscuous(&self) -> Result<(), IoError> {
        // Safety: packet_mreq is plain old data; all-zero is valid.
        let mut mreq: libc::packet_mreq = unsafe { zeroed() };
        mreq.mr_ifindex = self.ifindex as libc::c_int;
        mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
        setsockopt(
            self.fd,
            libc::SOL_PACKET,
            libc::PACKET_ADD_MEMBERSHIP,
            &mreq,
        )
        .map_err(|e| {
            IoError::sys(
                "setsockopt(PACKET_ADD_MEMBERSHIP, PACKET_MR_PROMISC)",
                &self.ifname,
                e,
            )
        })?;
        Ok(())
    }

    /// The interface name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// The interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The interface MTU when the socket was opened, or at the last
    /// [`AfPacket::refresh_mtu`].
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// The receive ring's layout.
    pub fn rx_geometry(&self) -> RingGeometry {
        self.rx
    }

    /// The transmit ring's layout.
    pub fn tx_geometry(&self) -> RingGeometry {
        self.tx
    }

    /// User-space counters.
    pub fn stats(&self) -> AfPacketStats {
        self.stats
    }

    /// The socket's file descriptor, for poll/epoll (readable: RX frames waiting; writable:
    /// a TX slot free). The socket keeps ownership.
    pub fn rx_fd(&self) -> RawFd {
        self.fd
    }

    pub(super) fn rx_frame_ptr(&self, i: u32) -> *mut u8 {
        // Safety: frame_offset(i) < rx.total_bytes() for i < rx.frame_nr, inside the mapping.
        unsafe { self.map.as_ptr().add(self.rx.frame_offset(i)) }
    }

    pub(super) fn tx_frame_ptr(&self, i: u32) -> *mut u8 {
        // Safety: the TX ring follows the RX ring in the mapping; the offset is in bounds for
        // i < tx.frame_nr.
        unsafe {
            self.map
                .as_ptr()
                .add(self.rx.total_bytes() + self.tx.frame_offset(i))
        }
    }

    /// The shared status word at the start of a ring frame.
    ///
    /// # Safety
    /// `frame` must point at a frame of this socket's mapping, and the reference must not
    /// outlive the mapping.
    pub(super) unsafe fn status<'a>(frame: *mut u8) -> &'a AtomicU32 {
        // Safety: every frame starts 16-byte aligned with `tp_status: u32`, the word the kernel
        // and we share; accessing it atomically is how the ring protocol synchronises.
        unsafe { AtomicU32::from_ptr(frame.cast::<u32>()) }
    }

    /// The socket, for a poll(2) over several sockets at once.
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// Whether the socket's interface is gone for good (deleted, moved to another
    /// namespace, or taken with its veth peer or namespace): the kernel then unbinds the
    /// socket (`sll_ifindex` -1, what `getsockname` reports), and a new interface of the
    /// same name is another device, which this socket never reaches. An interface that
    /// is only down keeps its binding, and its frames flow again once it is up.
    pub fn interface_gone(&self) -> bool {
        // Safety: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
        let mut len = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // Safety: `sll` and `len` are valid and writable; the kernel writes at most `len`.
        let rc = unsafe {
            libc::getsockname(
                self.fd,
                (&mut sll as *mut libc::sockaddr_ll).cast(),
                &mut len,
            )
        };
        rc == 0 && sll.sll_ifindex <= 0
    }

    /// Whether the interface is up (`IFF_UP`, `SIOCGIFFLAGS` by name); false when it
    /// cannot be asked.
    pub fn is_up(&self) -> bool {
        let mut ifr = ifreq_for(&self.ifname);
        // Safety: SIOCGIFFLAGS reads the name and writes the flags inside `ifr`, a valid ifreq.
        if unsafe { libc::ioctl(self.fd, libc::SIOCGIFFLAGS, &mut ifr) } < 0 {
            return false;
        }
        // Safety: SIOCGIFFLAGS filled the `ifru_flags` member of the union.
        let flags = unsafe { ifr.ifr_ifru.ifru_flags } as libc::c_int;
        flags & libc::IFF_UP != 0
    }

    /// Reads the interface's MTU again (`SIOCGIFMTU`), so that frames longer than a
    /// lowered MTU are refused by [`AfPacket::tx_push`] as too big rather than dropped by
    /// the kernel unseen; a raised MTU counts up to what a ring slot holds. Returns the
    /// MTU now; the one known stays when the interface cannot be asked (gone).
    pub fn refresh_mtu(&mut self) -> u32 {
        let mut ifr = ifreq_for(&self.ifname);
        // Safety: SIOCGIFMTU reads the name and writes the MTU inside `ifr`, a valid ifreq.
        if unsafe { libc::ioctl(self.fd, libc::SIOCGIFMTU, &mut ifr) } == 0 {
            // Safety: SIOCGIFMTU filled the `ifru_mtu` member of the union.
            let mtu = unsafe { ifr.ifr_ifru.ifru_mtu };
            if mtu > 0 {
                self.mtu = mtu as u32;
            }
        }
        self.mtu
    }

    /// Reads and clears the socket's pending error (`SO_ERROR`), e.g. ENETDOWN after the
    /// interface went down.
    pub fn take_error(&self) -> Option<io::Error> {
        let mut err: libc::c_int = 0;
        // Safety: any bytes are a valid c_int.
        let read = unsafe { getsockopt(self.fd, libc::SOL_SOCKET, libc::SO_ERROR, &mut err) };
        (read.is_ok() && err != 0).then(|| io::Error::from_raw_os_error(err))
    }

    /// Reads (and resets) the kernel's receive counters.
    pub fn kernel_stats(&self) -> Result<KernelStats, IoError> {
        // Safety: tpacket_stats is plain old data; all-zero is valid.
        let mut st: libc::tpacket_stats = unsafe { zeroed() };
        // Safety: tpacket_stats is plain integers: any bytes are a valid one.
        unsafe { getsockopt(self.fd, libc::SOL_PACKET, libc::PACKET_STATISTICS, &mut st) }
            .map_err(|e| IoError::sys("getsockopt(PACKET_STATISTICS)", &self.ifname, e))?;
        Ok(KernelStats {
            packets: st.tp_packets,
            drops: st.tp_drops,
        })
    }
}

impl Drop for AfPacket {
    fn drop(&mut self) {
        // Safety: `map`/`map_len` describe the mapping created in `open`, unmapped exactly
        // once here; no RxFrame can outlive `&mut self` borrows, so nothing points into it.
        unsafe { libc::munmap(self.map.as_ptr().cast(), self.map_len) };
        // Safety: the socket owns `fd` and closes it exactly once.
        unsafe { libc::close(self.fd) };
    }
}

/// The MTU of `ifname`, asked through `fd`; an error if the interface is down.
fn up_interface_mtu(fd: RawFd, ifname: &str) -> Result<u32, IoError> {
    let mut ifr = ifreq_for(ifname);
    // Safety: SIOCGIFFLAGS reads the name and writes the flags inside `ifr`, a valid ifreq.
    if unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut ifr) } < 0 {
        return Err(IoError::last("ioctl(SIOCGIFFLAGS)", ifname));
    }
    // Safety: SIOCGIFFLAGS filled the `ifru_flags` member of the union.
    let flags = unsafe { ifr.ifr_ifru.ifru_flags } as libc::c_int;
    if flags & libc::IFF_UP == 0 {
        return Err(IoError::InterfaceDown {
            ifname: ifname.to_string(),
        });
    }
    let mut ifr = ifreq_for(ifname);
    // Safety: SIOCGIFMTU reads the name and writes the MTU inside `ifr`, a valid ifreq.
    if unsafe { libc::ioctl(fd, libc::SIOCGIFMTU, &mut ifr) } < 0 {
        return Err(IoError::last("ioctl(SIOCGIFMTU)", ifname));
    }
    // Safety: SIOCGIFMTU filled the `ifru_mtu` member of the union.
    let mtu = unsafe { ifr.ifr_ifru.ifru_mtu } as u32;
    Ok(mtu)
}

/// The socket options set before the rings exist (see the module docs); `offload`:
/// the virtio-net header and whole long frames on the socket queue.
fn set_options(
    fd: RawFd,
    ifname: &str,
    cfg: &AfPacketConfig,
    offload: bool,
) -> Result<(), IoError> {
    let version = libc::tpacket_versions::TPACKET_V2 as libc::c_int;
    setsockopt(fd, libc::SOL_PACKET, libc::PACKET_VERSION, &version)
        .map_err(|e| IoError::sys("setsockopt(PACKET_VERSION, TPACKET_V2)", ifname, e))?;
    let one: libc::c_int = 1;
    setsockopt(fd, libc::SOL_PACKET, libc::PACKET_LOSS, &one)
        .map_err(|e| IoError::sys("setsockopt(PACKET_LOSS)", ifname, e))?;
    if cfg.qdisc_bypass {
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &one)
            .map_err(|e| IoError::sys("setsockopt(PACKET_QDISC_BYPASS)", ifname, e))?;
    }
    setsockopt(fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &one)
        .map_err(|e| IoError::sys("setsockopt(PACKET_IGNORE_OUTGOING)", ifname, e))?;
    let ts_flags: libc::c_int =
        (libc::SOF_TIMESTAMPING_SOFTWARE | libc::SOF_TIMESTAMPING_RX_SOFTWARE) as libc::c_int;
    setsockopt(fd, libc::SOL_PACKET, libc::PACKET_TIMESTAMP, &ts_flags)
        .map_err(|e| IoError::sys("setsockopt(PACKET_TIMESTAMP)", ifname, e))?;
    // Turns on the stack's receive time stamping, so the stamp is taken when the device
    // hands the frame over instead of when the ring slot is filled.
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &one)
        .map_err(|e| IoError::sys("setsockopt(SO_TIMESTAMPNS)", ifname, e))?;

    if offload {
        // Before the ring: the kernel refuses to change the header size afterwards.
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &one)
            .map_err(|e| IoError::sys("setsockopt(PACKET_VNET_HDR)", ifname, e))?;
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_COPY_THRESH, &one)
            .map_err(|e| IoError::sys("setsockopt(PACKET_COPY_THRESH)", ifname, e))?;
        // Room for a burst of super-frames on the socket queue (the kernel queues a
        // frame whole only while the queue is under this). FORCE needs CAP_NET_ADMIN;
        // without it the plain option, capped by net.core.rmem_max, is the best we get.
        let _ = crate::sys::set_receive_buffer(&fd, 8 << 20);
    }
    Ok(())
}

/// Asks for the RX and TX rings of the layouts given.
fn set_rings(fd: RawFd, ifname: &str, rx: &RingGeometry, tx: &RingGeometry) -> Result<(), IoError> {
    setsockopt(fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &rx.as_req())
        .map_err(|e| IoError::sys("setsockopt(PACKET_RX_RING)", ifname, e))?;
    setsockopt(fd, libc::SOL_PACKET, libc::PACKET_TX_RING, &tx.as_req())
        .map_err(|e| IoError::sys("setsockopt(PACKET_TX_RING)", ifname, e))?;
    Ok(())
}
