//! Memory shared with the kernel: the UMEM (the frames) and the ring
//! mappings, each an `mmap` region unmapped on drop.
//!
//! Layout of one socket's UMEM: `rx_frames` receive frames at offsets
//! `0 .. rx_frames * frame_size`, then `tx_frames` transmit frames. Each
//! frame ("chunk") is `frame_size` bytes, a power of two, so the frame an
//! address lies in is `addr & !(frame_size - 1)`. The kernel leaves
//! `XDP_PACKET_HEADROOM` (256) bytes in front of each received frame, of
//! which the XDP program uses the last 8 for its stamp. When the UMEM has
//! TX metadata (queue 0 on a veth, for the send lead), a transmit frame's
//! first 24 bytes are its `struct xsk_tx_metadata` and its data follows.

use std::io;
use std::ptr::{self, NonNull};

/// An mmap'd region, unmapped on drop.
pub(super) struct Mmap {
    pub(super) ptr: NonNull<u8>,
    pub(super) len: usize,
}

impl Mmap {
    pub(super) fn new(
        len: usize,
        fd: libc::c_int,
        offset: u64,
        flags: libc::c_int,
    ) -> io::Result<Mmap> {
        // Safety: a fresh mapping chosen by the kernel; nothing is overwritten.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mmap {
            ptr: NonNull::new(p as *mut u8).expect("mmap never returns NULL on success"),
            len,
        })
    }

    /// Anonymous, populated memory for a UMEM of `frames` frames.
    pub(super) fn umem(frames: u32, frame_size: u32) -> io::Result<Mmap> {
        Mmap::new(
            frames as usize * frame_size as usize,
            -1,
            0,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
        )
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // Safety: ptr/len describe a mapping made by Mmap::new that nothing
        // uses any more (the rings and halves that pointed into it are gone).
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len) };
    }
}

/// Where one socket's frames lie, for the half that uses them.
#[derive(Clone, Copy, Debug)]
pub(super) struct Frames {
    pub(super) base: NonNull<u8>,
    pub(super) len: usize,
    pub(super) frame_size: u32,
}

impl Frames {
    pub(super) fn of(m: &Mmap, frame_size: u32) -> Frames {
        Frames {
            base: m.ptr,
            len: m.len,
            frame_size,
        }
    }

    /// The frame `addr` lies in.
    pub(super) fn frame_of(&self, addr: u64) -> u64 {
        addr & !(self.frame_size as u64 - 1)
    }

    /// `addr .. addr + len` lies inside one frame of the UMEM.
    pub(super) fn holds(&self, addr: u64, len: u64) -> bool {
        addr.checked_add(len).is_some_and(|end| {
            end <= self.len as u64 && end <= self.frame_of(addr) + self.frame_size as u64
        })
    }
}
