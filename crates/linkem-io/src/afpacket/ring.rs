//! The ring layout: how TPACKET_V2 frames sit in blocks, and which frame size an MTU needs.

use super::*;

/// Layout of one TPACKET_V2 ring: frames never straddle blocks, so frame `i` lives at
/// `(i / frames_per_block) * block_size + (i % frames_per_block) * frame_size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingGeometry {
    /// Bytes per block (a multiple of the page size).
    pub block_size: u32,
    /// Number of blocks.
    pub block_nr: u32,
    /// Bytes per frame.
    pub frame_size: u32,
    /// Number of frames (`block_nr * frames_per_block`).
    pub frame_nr: u32,
}

/// Largest block we ask for; the kernel needs physically contiguous pages per block unless
/// it falls back to vmalloc, so keep blocks modest.
pub(super) const MAX_BLOCK_SIZE: usize = 1 << 17;

impl RingGeometry {
    /// Computes a ring holding at least `frames` frames of `frame_size` bytes.
    pub fn compute(
        frame_size: u32,
        frames: u32,
        page_size: usize,
    ) -> Result<RingGeometry, IoError> {
        let fs = frame_size as usize;
        if fs < TPACKET2_HDRLEN + ETH_HLEN || !fs.is_multiple_of(TPACKET_ALIGNMENT) {
            return Err(IoError::InvalidConfig(format!(
                "frame size {frame_size} must be a multiple of {TPACKET_ALIGNMENT} and at least {}",
                tpacket_align(TPACKET2_HDRLEN + ETH_HLEN)
            )));
        }
        if frames == 0 {
            return Err(IoError::InvalidConfig(
                "a ring needs at least one frame".into(),
            ));
        }
        if page_size == 0 || !page_size.is_power_of_two() {
            return Err(IoError::InvalidConfig(format!("odd page size {page_size}")));
        }
        let min_block = fs.div_ceil(page_size) * page_size;
        // Grow the block (in pages) while it stays under the cap and is not larger than the
        // whole ring needs.
        let wanted = (fs * frames as usize).div_ceil(page_size) * page_size;
        let mut block = min_block;
        while block * 2 <= MAX_BLOCK_SIZE.max(min_block) && block * 2 <= wanted {
            block *= 2;
        }
        let per_block = block / fs;
        let block_nr = (frames as usize).div_ceil(per_block);
        let frame_nr = block_nr * per_block;
        let total = block_nr * block;
        if frame_nr > u32::MAX as usize || total > (1usize << 32) {
            return Err(IoError::InvalidConfig(format!(
                "{frames} frames of {frame_size} bytes is too large a ring"
            )));
        }
        Ok(RingGeometry {
            block_size: block as u32,
            block_nr: block_nr as u32,
            frame_size,
            frame_nr: frame_nr as u32,
        })
    }

    /// Frames in one block.
    pub fn frames_per_block(&self) -> u32 {
        self.block_size / self.frame_size
    }

    /// Total bytes of the ring in the mapping.
    pub fn total_bytes(&self) -> usize {
        self.block_size as usize * self.block_nr as usize
    }

    /// Offset of frame `i` from the ring's start.
    pub fn frame_offset(&self, i: u32) -> usize {
        let fpb = self.frames_per_block();
        (i / fpb) as usize * self.block_size as usize
            + (i % fpb) as usize * self.frame_size as usize
    }

    /// Largest Ethernet frame (header included) one received frame slot can hold whole.
    pub fn rx_capacity(&self) -> usize {
        self.frame_size as usize - RX_MAC_OFFSET
    }

    /// Largest frame one transmit slot can hold.
    pub fn tx_capacity(&self) -> usize {
        self.frame_size as usize - TX_DATA_OFFSET
    }

    pub(super) fn as_req(&self) -> libc::tpacket_req {
        libc::tpacket_req {
            tp_block_size: self.block_size,
            tp_block_nr: self.block_nr,
            tp_frame_size: self.frame_size,
            tp_frame_nr: self.frame_nr,
        }
    }
}

/// Smallest frame size (rounded to 16) whose slot holds a whole frame of `mtu` bytes plus
/// Ethernet header and one VLAN tag.
pub fn frame_size_for_mtu(mtu: u32) -> u32 {
    tpacket_align(RX_MAC_OFFSET + ETH_HLEN + VLAN_HLEN + mtu as usize) as u32
}

/// Checks that an interface MTU fits the configured frame size.
pub fn check_mtu(ifname: &str, mtu: u32, frame_size: u32) -> Result<(), IoError> {
    let needed = frame_size_for_mtu(mtu);
    if needed > frame_size {
        return Err(IoError::MtuTooLarge {
            ifname: ifname.to_string(),
            mtu,
            frame_size,
            needed,
        });
    }
    Ok(())
}
