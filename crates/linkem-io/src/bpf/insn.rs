//! Instruction encoding (include/uapi/linux/bpf.h, bpf_common.h): opcodes, helpers,
//! the `xdp_md` context and one eBPF instruction.

use std::fmt;

/// Opcode fields: class, size, mode, operation and source. An opcode is
/// the bitwise OR of one constant of each field its class uses: the class in
/// the low 3 bits; for loads and stores the size (bits 3-4) and mode (bits
/// 5-7); for ALU and jumps the source (bit 3) and operation (bits 4-7).
pub mod op {
    // Instruction classes.
    /// Class `BPF_LD`: loads not from a register; here only the 64-bit
    /// immediate load (two slots).
    pub const LD: u8 = 0x00;
    /// Class `BPF_LDX`: load into `dst` from memory at `src + off`.
    pub const LDX: u8 = 0x01;
    /// Class `BPF_ST`: store the immediate to memory at `dst + off`.
    pub const ST: u8 = 0x02;
    /// Class `BPF_STX`: store `src` to memory at `dst + off`.
    pub const STX: u8 = 0x03;
    /// Class `BPF_JMP`: 64-bit compares and jumps, helper calls, exit.
    pub const JMP: u8 = 0x05;
    /// Class `BPF_ALU64`: 64-bit arithmetic on `dst`.
    pub const ALU64: u8 = 0x07;
    // Load and store sizes.
    /// Size `BPF_W`: 4 bytes.
    pub const W: u8 = 0x00;
    /// Size `BPF_B`: 1 byte.
    pub const B: u8 = 0x10;
    /// Size `BPF_DW`: 8 bytes.
    pub const DW: u8 = 0x18;
    // Load and store modes.
    /// Mode `BPF_IMM`: the value is the immediate (with [`LD`] and [`DW`], a
    /// 64-bit immediate spread over two instructions).
    pub const IMM: u8 = 0x00;
    /// Mode `BPF_MEM`: the value is in memory at register + `off`.
    pub const MEM: u8 = 0x60;
    // ALU operations.
    /// `BPF_ADD`: `dst += operand`.
    pub const ADD: u8 = 0x00;
    /// `BPF_SUB`: `dst -= operand`.
    pub const SUB: u8 = 0x10;
    /// `BPF_MUL`: `dst *= operand`.
    pub const MUL: u8 = 0x20;
    /// `BPF_AND`: `dst &= operand`.
    pub const AND: u8 = 0x50;
    /// `BPF_LSH`: `dst <<= operand`.
    pub const LSH: u8 = 0x60;
    /// `BPF_RSH`: `dst >>= operand`, logical.
    pub const RSH: u8 = 0x70;
    /// `BPF_MOV`: `dst = operand`.
    pub const MOV: u8 = 0xb0;
    // Jump operations.
    /// `BPF_JA`: jump by `off` always.
    pub const JA: u8 = 0x00;
    /// `BPF_JEQ`: jump by `off` if `dst == operand`.
    pub const JEQ: u8 = 0x10;
    /// `BPF_JGT`: jump by `off` if `dst > operand`, unsigned.
    pub const JGT: u8 = 0x20;
    /// `BPF_JNE`: jump by `off` if `dst != operand`.
    pub const JNE: u8 = 0x50;
    /// `BPF_CALL`: call the helper whose id is the immediate ([`super::helper`]).
    pub const CALL: u8 = 0x80;
    /// `BPF_EXIT`: return `r0`.
    pub const EXIT: u8 = 0x90;
    // Operand source: the immediate (K) or the source register (X).
    /// `BPF_K`: the operand is the 32-bit immediate.
    pub const K: u8 = 0x00;
    /// `BPF_X`: the operand is the source register.
    pub const X: u8 = 0x08;
}

/// `src_reg` of a 64-bit immediate load whose immediate is a map fd.
pub const BPF_PSEUDO_MAP_FD: u8 = 1;

/// Helper ids (`enum bpf_func_id` in include/uapi/linux/bpf.h).
pub mod helper {
    /// `void *bpf_map_lookup_elem(void *map, const void *key)`: the value's
    /// address, or NULL.
    pub const MAP_LOOKUP_ELEM: i32 = 1;
    /// `u64 bpf_ktime_get_ns(void)`: CLOCK_MONOTONIC.
    pub const KTIME_GET_NS: i32 = 5;
    /// `long bpf_redirect(u32 ifindex, u64 flags)`: from a tc program, send
    /// the packet out of `ifindex` (flags 0: its egress).
    pub const REDIRECT: i32 = 23;
    /// `long bpf_skb_load_bytes(const void *skb, u32 offset, void *to, u32 len)`.
    pub const SKB_LOAD_BYTES: i32 = 26;
    /// `long bpf_check_mtu(void *ctx, u32 ifindex, u32 *mtu_len, s32 len_diff,
    /// u64 flags)` (Linux 5.12+): 0 when the packet fits the MTU of `ifindex`
    /// (a super-frame fits: its segments are checked only on request).
    pub const CHECK_MTU: i32 = 163;
    /// `long bpf_redirect_map(void *map, u64 key, u64 flags)`.
    pub const REDIRECT_MAP: i32 = 51;
    /// `long bpf_xdp_adjust_meta(struct xdp_md *ctx, int delta)`.
    pub const XDP_ADJUST_META: i32 = 54;
    /// `u64 bpf_ktime_get_tai_ns(void)`: CLOCK_TAI, since Linux 6.1.
    pub const KTIME_GET_TAI_NS: i32 = 208;
}

/// Byte offsets of the fields of `struct xdp_md`, the XDP program's context.
/// Each is a 32-bit field the program reads with [`BpfInsn::ldx_w`]; the
/// verifier rewrites the loads of `data` and `data_meta` into real pointers.
pub mod xdp_md {
    /// `data`: the first byte of the frame (its Ethernet header).
    pub const DATA: i16 = 0;
    /// `data_meta`: the start of the metadata area in front of the frame;
    /// equal to `data` until `bpf_xdp_adjust_meta` grows it. linkem's program
    /// puts its 8-byte receive stamp there.
    pub const DATA_META: i16 = 8;
    /// `rx_queue_index`: the receive queue the frame arrived on, the key into
    /// the XSKMAP.
    pub const RX_QUEUE_INDEX: i16 = 16;
}

/// Byte offsets of the fields of `struct __sk_buff` that linkem's tc program
/// reads (include/uapi/linux/bpf.h, checked with offsetof on Linux 6.1 headers).
pub mod sk_buff {
    /// `len`: bytes of the packet from its Ethernet header (a super-frame's
    /// whole length).
    pub const LEN: i16 = 0;
    /// `protocol`: the EtherType, in network byte order in the low 16 bits.
    pub const PROTOCOL: i16 = 16;
    /// `gso_segs`: wire frames a super-frame becomes (0 or 1 for a frame).
    pub const GSO_SEGS: i16 = 164;
    /// `cb[0]`, the first of five u32 words a socket filter and a tc program
    /// may write; they stay with the packet from the packet taps to tc
    /// ingress (both run on the same `sk_buff`, the taps first).
    pub const CB0: i16 = 48;
    /// `cb[1]`.
    pub const CB1: i16 = 52;
}

/// The XDP verdict (`enum xdp_action`) that hands the frame on to the kernel
/// stack as if no program had run.
pub const XDP_PASS: i32 = 2;

/// One eBPF instruction, `struct bpf_insn`: opcode, the two 4-bit register
/// numbers in one byte, a signed 16-bit offset and a signed 32-bit
/// immediate; 8 bytes, in host byte order.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct BpfInsn {
    /// The opcode: an OR of [`op`] constants.
    pub code: u8,
    /// `dst_reg:4, src_reg:4` as a C bitfield: on a little-endian machine
    /// the first-declared field (dst) takes the low nibble.
    pub regs: u8,
    /// Memory offset in bytes for loads and stores; jump distance in
    /// instructions, counted from the next one, for jumps.
    pub off: i16,
    /// Immediate operand; for [`op::CALL`] the helper id, for the first half of
    /// a map load the map's fd.
    pub imm: i32,
}

const _: () = assert!(std::mem::size_of::<BpfInsn>() == 8);

impl BpfInsn {
    /// An instruction from its fields, packing the register numbers `dst` and
    /// `src` (0-10: r0-r10) as the kernel's bitfield does on this machine.
    ///
    /// # Panics
    /// If a register number does not fit 4 bits (at compile time in a const).
    pub const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Self {
        assert!(dst < 16 && src < 16, "eBPF has 11 registers");
        #[cfg(target_endian = "little")]
        let regs = (src << 4) | dst;
        #[cfg(target_endian = "big")]
        let regs = (dst << 4) | src;
        BpfInsn {
            code,
            regs,
            off,
            imm,
        }
    }

    /// The destination register number.
    pub const fn dst(&self) -> u8 {
        #[cfg(target_endian = "little")]
        return self.regs & 0x0f;
        #[cfg(target_endian = "big")]
        return self.regs >> 4;
    }

    /// The source register number.
    pub const fn src(&self) -> u8 {
        #[cfg(target_endian = "little")]
        return self.regs >> 4;
        #[cfg(target_endian = "big")]
        return self.regs & 0x0f;
    }

    /// The 8 bytes the kernel reads.
    pub fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = self.regs;
        b[2..4].copy_from_slice(&self.off.to_ne_bytes());
        b[4..8].copy_from_slice(&self.imm.to_ne_bytes());
        b
    }

    /// `dst = src` (64 bit).
    pub const fn mov64_reg(dst: u8, src: u8) -> Self {
        Self::new(op::ALU64 | op::MOV | op::X, dst, src, 0, 0)
    }

    /// `dst = imm` (64 bit, sign-extended).
    pub const fn mov64_imm(dst: u8, imm: i32) -> Self {
        Self::new(op::ALU64 | op::MOV | op::K, dst, 0, 0, imm)
    }

    /// `dst += imm` (64 bit).
    pub const fn add64_imm(dst: u8, imm: i32) -> Self {
        Self::new(op::ALU64 | op::ADD | op::K, dst, 0, 0, imm)
    }

    /// `dst = *(u32 *)(src + off)`.
    pub const fn ldx_w(dst: u8, src: u8, off: i16) -> Self {
        Self::new(op::LDX | op::MEM | op::W, dst, src, off, 0)
    }

    /// `dst = *(u8 *)(src + off)`.
    pub const fn ldx_b(dst: u8, src: u8, off: i16) -> Self {
        Self::new(op::LDX | op::MEM | op::B, dst, src, off, 0)
    }

    /// `dst = *(u64 *)(src + off)`.
    pub const fn ldx_dw(dst: u8, src: u8, off: i16) -> Self {
        Self::new(op::LDX | op::MEM | op::DW, dst, src, off, 0)
    }

    /// `*(u32 *)(dst + off) = imm`.
    pub const fn st_w(dst: u8, off: i16, imm: i32) -> Self {
        Self::new(op::ST | op::MEM | op::W, dst, 0, off, imm)
    }

    /// `*(u32 *)(dst + off) = src` (the verifier takes stores into a
    /// program's context only from a register).
    pub const fn stx_w(dst: u8, src: u8, off: i16) -> Self {
        Self::new(op::STX | op::MEM | op::W, dst, src, off, 0)
    }

    /// `dst += src` (64 bit).
    pub const fn add64_reg(dst: u8, src: u8) -> Self {
        Self::new(op::ALU64 | op::ADD | op::X, dst, src, 0, 0)
    }

    /// `dst *= src` (64 bit).
    pub const fn mul64_reg(dst: u8, src: u8) -> Self {
        Self::new(op::ALU64 | op::MUL | op::X, dst, src, 0, 0)
    }

    /// `dst &= imm` (64 bit).
    pub const fn and64_imm(dst: u8, imm: i32) -> Self {
        Self::new(op::ALU64 | op::AND | op::K, dst, 0, 0, imm)
    }

    /// `dst <<= imm` (64 bit).
    pub const fn lsh64_imm(dst: u8, imm: i32) -> Self {
        Self::new(op::ALU64 | op::LSH | op::K, dst, 0, 0, imm)
    }

    /// `dst >>= imm` (64 bit, logical).
    pub const fn rsh64_imm(dst: u8, imm: i32) -> Self {
        Self::new(op::ALU64 | op::RSH | op::K, dst, 0, 0, imm)
    }

    /// `*(u64 *)(dst + off) = src`.
    pub const fn stx_dw(dst: u8, src: u8, off: i16) -> Self {
        Self::new(op::STX | op::MEM | op::DW, dst, src, off, 0)
    }

    /// `if dst != imm goto pc + 1 + off`.
    pub const fn jne_imm(dst: u8, imm: i32, off: i16) -> Self {
        Self::new(op::JMP | op::JNE | op::K, dst, 0, off, imm)
    }

    /// `if dst == imm goto pc + 1 + off`.
    pub const fn jeq_imm(dst: u8, imm: i32, off: i16) -> Self {
        Self::new(op::JMP | op::JEQ | op::K, dst, 0, off, imm)
    }

    /// `goto pc + 1 + off`.
    pub const fn ja(off: i16) -> Self {
        Self::new(op::JMP | op::JA, 0, 0, off, 0)
    }

    /// `if dst > src goto pc + 1 + off` (unsigned).
    pub const fn jgt_reg(dst: u8, src: u8, off: i16) -> Self {
        Self::new(op::JMP | op::JGT | op::X, dst, src, off, 0)
    }

    /// `r0 = helper(r1, ..., r5)`; r1-r5 are clobbered, r6-r9 kept.
    pub const fn call(helper: i32) -> Self {
        Self::new(op::JMP | op::CALL, 0, 0, 0, helper)
    }

    /// `return r0`.
    pub const fn exit() -> Self {
        Self::new(op::JMP | op::EXIT, 0, 0, 0, 0)
    }

    /// `dst = map` (the kernel swaps the fd for the map's address): a 64-bit
    /// immediate load, two instruction slots, the second holding the upper
    /// 32 bits (zero).
    pub const fn ld_map_fd(dst: u8, fd: i32) -> [Self; 2] {
        [
            Self::new(op::LD | op::IMM | op::DW, dst, BPF_PSEUDO_MAP_FD, 0, fd),
            Self::new(0, 0, 0, 0, 0),
        ]
    }
}

impl fmt::Debug for BpfInsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{{code: {:#04x}, dst: r{}, src: r{}, off: {}, imm: {}}}",
            self.code,
            self.dst(),
            self.src(),
            self.off,
            self.imm
        )
    }
}
