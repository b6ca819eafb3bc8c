//! The few bpf(2) calls the AF_XDP backend needs, and its XDP program,
//! assembled by hand.
//!
//! Why by hand: the program is seventeen instructions. Compiling it from C
//! would put clang, libbpf and libelf on every machine that builds linkem,
//! and loading it through a crate would pull in either a copyleft licence or
//! a rustc newer than this project's (see the [`crate::afxdp`] module doc).
//! Five commands of the bpf(2) syscall, `BPF_MAP_CREATE`,
//! `BPF_MAP_UPDATE_ELEM`, `BPF_MAP_DELETE_ELEM`, `BPF_PROG_LOAD` and
//! `BPF_LINK_CREATE`, are all it takes.
//!
//! The program ([`xdp_redirect_program`]) stamps each frame with the time
//! the XDP hook saw it, in the 8 bytes of XDP metadata just in front of the
//! frame, then redirects it to the AF_XDP socket registered for its receive
//! queue in an `XSKMAP`, or passes it to the kernel stack if there is none.
//!
//! Every syscall goes through [`sys_bpf`]; errors name the command, the
//! object and the errno, and say what to do about the usual ones.

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

// ---------------------------------------------------------------------------
// Instruction encoding (include/uapi/linux/bpf.h, bpf_common.h)
// ---------------------------------------------------------------------------

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
    /// Class `BPF_STX`: store `src` to memory at `dst + off`.
    pub const STX: u8 = 0x03;
    /// Class `BPF_JMP`: 64-bit compares and jumps, helper calls, exit.
    pub const JMP: u8 = 0x05;
    /// Class `BPF_ALU64`: 64-bit arithmetic on `dst`.
    pub const ALU64: u8 = 0x07;
    // Load and store sizes.
    /// Size `BPF_W`: 4 bytes.
    pub const W: u8 = 0x00;
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
    /// `BPF_MOV`: `dst = operand`.
    pub const MOV: u8 = 0xb0;
    // Jump operations.
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
    /// `u64 bpf_ktime_get_ns(void)`: CLOCK_MONOTONIC.
    pub const KTIME_GET_NS: i32 = 5;
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

    /// `*(u64 *)(dst + off) = src`.
    pub const fn stx_dw(dst: u8, src: u8, off: i16) -> Self {
        Self::new(op::STX | op::MEM | op::DW, dst, src, off, 0)
    }

    /// `if dst != imm goto pc + 1 + off`.
    pub const fn jne_imm(dst: u8, imm: i32, off: i16) -> Self {
        Self::new(op::JMP | op::JNE | op::K, dst, 0, off, imm)
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

/// Which clock the XDP program stamps frames with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxClock {
    /// `bpf_ktime_get_tai_ns()` (Linux 6.1+): CLOCK_TAI, which differs from
    /// CLOCK_REALTIME by a whole number of seconds, so the conversion is exact.
    Tai,
    /// `bpf_ktime_get_ns()`: CLOCK_MONOTONIC, converted with a measured offset.
    Monotonic,
}

/// The program AF_XDP sockets are fed by, for the XSKMAP `map_fd`.
///
/// In C it would read:
///
/// ```text
/// int prog(struct xdp_md *ctx) {
///     if (bpf_xdp_adjust_meta(ctx, -8) == 0) {
///         __u64 *meta = (void *)(long)ctx->data_meta;
///         if ((void *)(meta + 1) <= (void *)(long)ctx->data)
///             *meta = bpf_ktime_get_tai_ns();
///     }
///     return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
/// }
/// ```
///
/// The stamp is the 8 bytes just before `ctx->data` (the XDP metadata),
/// a u64 in host byte order: nanoseconds on the `clock` given, as read when
/// the hook ran. A frame for which the metadata cannot be grown is still
/// redirected, without a stamp. `XDP_PASS` in the flags of `bpf_redirect_map` is the
/// verdict when the queue has no socket in the map.
pub fn xdp_redirect_program(map_fd: RawFd, clock: RxClock) -> Vec<BpfInsn> {
    let now = match clock {
        RxClock::Tai => helper::KTIME_GET_TAI_NS,
        RxClock::Monotonic => helper::KTIME_GET_NS,
    };
    let [map_lo, map_hi] = BpfInsn::ld_map_fd(1, map_fd);
    vec![
        // 0: r6 = ctx; r1 is clobbered by calls, r6 survives them.
        BpfInsn::mov64_reg(6, 1),
        // 1: r2 = -8: grow the metadata area by 8 bytes (r1 is still ctx).
        BpfInsn::mov64_imm(2, -8),
        // 2: r0 = bpf_xdp_adjust_meta(ctx, -8); invalidates packet pointers.
        BpfInsn::call(helper::XDP_ADJUST_META),
        // 3: no room for metadata (r0 != 0): skip the stamp, goto 11.
        BpfInsn::jne_imm(0, 0, 7),
        // 4: r7 = ctx->data (loaded after the adjustment, as the verifier requires).
        BpfInsn::ldx_w(7, 6, xdp_md::DATA),
        // 5: r8 = ctx->data_meta.
        BpfInsn::ldx_w(8, 6, xdp_md::DATA_META),
        // 6: r1 = data_meta
        BpfInsn::mov64_reg(1, 8),
        // 7: r1 = data_meta + 8, the end of the stamp.
        BpfInsn::add64_imm(1, 8),
        // 8: bounds check the verifier needs: if data_meta + 8 > data goto 11.
        BpfInsn::jgt_reg(1, 7, 2),
        // 9: r0 = now (TAI or MONOTONIC ns).
        BpfInsn::call(now),
        // 10: *(u64 *)data_meta = r0; r8 was kept across the call.
        BpfInsn::stx_dw(8, 0, 0),
        // 11: r2 = ctx->rx_queue_index, the key into the XSKMAP.
        BpfInsn::ldx_w(2, 6, xdp_md::RX_QUEUE_INDEX),
        // 12: r1 = &xskmap (low half of the 64-bit immediate: the map fd)
        map_lo,
        // 13: (high half of the immediate: zero)
        map_hi,
        // 14: r3 = XDP_PASS, the verdict if the map has no socket at that key.
        BpfInsn::mov64_imm(3, XDP_PASS),
        // 15: r0 = bpf_redirect_map(&xskmap, rx_queue_index, XDP_PASS)
        BpfInsn::call(helper::REDIRECT_MAP),
        // 16: return r0 (XDP_REDIRECT or XDP_PASS)
        BpfInsn::exit(),
    ]
}

/// `return XDP_PASS;`: a program that only switches a veth into XDP mode.
pub fn xdp_pass_program() -> Vec<BpfInsn> {
    vec![
        // 0: r0 = XDP_PASS
        BpfInsn::mov64_imm(0, XDP_PASS),
        // 1: return r0
        BpfInsn::exit(),
    ]
}

// ---------------------------------------------------------------------------
// The syscall
// ---------------------------------------------------------------------------

/// bpf(2) commands (`enum bpf_cmd`), the first argument of [`sys_bpf`].
pub mod cmd {
    /// `BPF_MAP_CREATE`: create a map, returns its fd ([`super::create_xskmap`]).
    pub const MAP_CREATE: u32 = 0;
    /// `BPF_MAP_UPDATE_ELEM`: set one entry ([`super::map_update_u32`]).
    pub const MAP_UPDATE_ELEM: u32 = 2;
    /// `BPF_MAP_DELETE_ELEM`: remove one entry ([`super::map_delete_u32`]).
    pub const MAP_DELETE_ELEM: u32 = 3;
    /// `BPF_PROG_LOAD`: verify and load a program, returns its fd
    /// ([`super::load_xdp_program`]).
    pub const PROG_LOAD: u32 = 5;
    /// `BPF_LINK_CREATE`: attach a program through a link, returns the link's
    /// fd ([`super::link_xdp`]).
    pub const LINK_CREATE: u32 = 28;
}

/// `enum bpf_map_type`: a map from u32 keys to AF_XDP sockets, the target of
/// `bpf_redirect_map` in an XDP program.
pub const BPF_MAP_TYPE_XSKMAP: u32 = 17;
/// `enum bpf_prog_type`: a program run at a network device's XDP hook.
pub const BPF_PROG_TYPE_XDP: u32 = 6;
/// `enum bpf_attach_type`: attach to a network device's XDP hook.
pub const BPF_XDP: u32 = 37;
/// `XDP_FLAGS_SKB_MODE` (include/uapi/linux/if_link.h): generic XDP.
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: the driver runs the program (native XDP).
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// The `union bpf_attr` member for `BPF_MAP_CREATE` (first 44 bytes).
#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// The member for `BPF_MAP_UPDATE_ELEM`.
#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// The member for `BPF_PROG_LOAD`, up to `expected_attach_type`.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// The member for `BPF_LINK_CREATE`, up to `flags`.
#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

// The layouts of include/uapi/linux/bpf.h (checked against the header with offsetof).
const _: () = assert!(std::mem::size_of::<MapCreateAttr>() == 44);
const _: () = assert!(std::mem::size_of::<MapElemAttr>() == 32);
const _: () = assert!(std::mem::offset_of!(ProgLoadAttr, log_level) == 24);
const _: () = assert!(std::mem::offset_of!(ProgLoadAttr, prog_name) == 48);
const _: () = assert!(std::mem::offset_of!(ProgLoadAttr, expected_attach_type) == 68);
const _: () = assert!(std::mem::size_of::<LinkCreateAttr>() == 16);

/// The one place bpf(2) is called. The kernel reads `size_of::<A>()` bytes
/// of `attr` and treats the rest of its `union bpf_attr` as zero.
///
/// # Safety
/// `A` must be the `union bpf_attr` member of `cmd`, and every pointer in it
/// must be valid for what the kernel does with it during the call.
pub unsafe fn sys_bpf<A>(cmd: u32, attr: &mut A) -> io::Result<RawFd> {
    // Safety: attr is a live, exclusively borrowed buffer of the size passed;
    // the caller vouches for the pointers inside it.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut A,
            std::mem::size_of::<A>() as libc::c_long,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as RawFd)
    }
}

fn object_name(name: &str) -> [u8; 16] {
    // The kernel accepts [A-Za-z0-9_.], at most 15 bytes and a NUL.
    let mut out = [0u8; 16];
    for (o, c) in out.iter_mut().zip(name.bytes().take(15)) {
        *o = if c.is_ascii_alphanumeric() || c == b'.' {
            c
        } else {
            b'_'
        };
    }
    out
}

fn owned(fd: RawFd) -> OwnedFd {
    // Safety: fd was just returned by bpf(2), is open and owned by no one else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Creates a `BPF_MAP_TYPE_XSKMAP` with u32 keys (receive queue) and u32
/// values (AF_XDP socket fd). Key `k` is meant to hold the socket bound to
/// receive queue `k`; the program of [`xdp_redirect_program`] passes frames of
/// a queue whose key is empty to the kernel stack. `max_entries` bounds the
/// keys (the AF_XDP backend uses the queue count, at least 64); `name` is
/// what `bpftool map` shows (at most 15 bytes, other characters become `_`).
///
/// # Errors
/// The errno of `BPF_MAP_CREATE`, e.g. `EPERM` without CAP_BPF.
pub fn create_xskmap(name: &str, max_entries: u32) -> Result<OwnedFd, BpfError> {
    let mut attr = MapCreateAttr {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries,
        map_name: object_name(name),
        ..Default::default()
    };
    // Safety: MapCreateAttr is the BPF_MAP_CREATE member; it holds no pointers.
    match unsafe { sys_bpf(cmd::MAP_CREATE, &mut attr) } {
        Ok(fd) => Ok(owned(fd)),
        Err(e) => Err(BpfError::new("BPF_MAP_CREATE", format!("XSKMAP {name}"), e)),
    }
}

/// `map[key] = value` for a map with u32 keys and values.
pub fn map_update_u32(map: BorrowedFd<'_>, key: u32, value: u32) -> Result<(), BpfError> {
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: &key as *const u32 as u64,
        value: &value as *const u32 as u64,
        flags: 0, // BPF_ANY
        ..Default::default()
    };
    // Safety: key and value are live u32s, the sizes the map was created with.
    match unsafe { sys_bpf(cmd::MAP_UPDATE_ELEM, &mut attr) } {
        Ok(_) => Ok(()),
        Err(e) => Err(BpfError::new(
            "BPF_MAP_UPDATE_ELEM",
            format!("key {key}"),
            e,
        )),
    }
}

/// Deletes `map[key]` for a map with u32 keys.
pub fn map_delete_u32(map: BorrowedFd<'_>, key: u32) -> Result<(), BpfError> {
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: &key as *const u32 as u64,
        ..Default::default()
    };
    // Safety: key is a live u32, the key size the map was created with.
    match unsafe { sys_bpf(cmd::MAP_DELETE_ELEM, &mut attr) } {
        Ok(_) => Ok(()),
        Err(e) => Err(BpfError::new(
            "BPF_MAP_DELETE_ELEM",
            format!("key {key}"),
            e,
        )),
    }
}

/// Size of the verifier log requested when a load fails: the log of a
/// program this size is a few kilobytes.
const VERIFIER_LOG_BYTES: usize = 64 * 1024;

/// Loads an XDP program. The licence "Dual MIT/GPL" is GPL-compatible, which
/// none of the helpers used here needs, but keeps the door open. On failure
/// the load is repeated with the verifier log on, and the log is part of
/// the error.
pub fn load_xdp_program(name: &str, insns: &[BpfInsn]) -> Result<OwnedFd, BpfError> {
    load_xdp_program_flags(name, insns, 0)
}

/// `prog_flags` bit: the program handles frames in several buffers
/// (multi-buffer XDP, Linux 5.18+), which lets it run on a veth or a driver
/// whose MTU exceeds a page.
pub const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;

/// [`load_xdp_program`] with `prog_flags` (e.g. [`BPF_F_XDP_HAS_FRAGS`]).
pub fn load_xdp_program_flags(
    name: &str,
    insns: &[BpfInsn],
    prog_flags: u32,
) -> Result<OwnedFd, BpfError> {
    const LICENSE: &[u8] = b"Dual MIT/GPL\0";
    let load = |log: Option<&mut Vec<u8>>| {
        let mut attr = ProgLoadAttr {
            prog_type: BPF_PROG_TYPE_XDP,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: LICENSE.as_ptr() as u64,
            prog_name: object_name(name),
            expected_attach_type: BPF_XDP,
            prog_flags,
            ..Default::default()
        };
        if let Some(buf) = log {
            attr.log_level = 1;
            attr.log_size = buf.len() as u32;
            attr.log_buf = buf.as_mut_ptr() as u64;
        }
        // Safety: insns, the licence and the log buffer outlive the call and
        // have the lengths given; BpfInsn has the kernel's layout.
        unsafe { sys_bpf(cmd::PROG_LOAD, &mut attr) }
    };
    match load(None) {
        Ok(fd) => Ok(owned(fd)),
        Err(first) => {
            let mut buf = vec![0u8; VERIFIER_LOG_BYTES];
            let err = match load(Some(&mut buf)) {
                // Loads with the log on: keep it, it is what we got.
                Ok(fd) => return Ok(owned(fd)),
                Err(e) => e,
            };
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            let log = String::from_utf8_lossy(&buf[..end]).trim_end().to_string();
            let mut e = BpfError::new("BPF_PROG_LOAD", format!("XDP program {name}"), err);
            if first.raw_os_error() == Some(libc::EPERM) {
                e.hint =
                    Some("not root: loading an XDP program needs CAP_BPF and CAP_NET_ADMIN".into());
            }
            e.verifier_log = (!log.is_empty()).then_some(log);
            Err(e)
        }
    }
}

/// Where an XDP program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// In the driver, before an skb exists ("native", `XDP_FLAGS_DRV_MODE`).
    Native,
    /// In the core network stack on skbs ("generic", `XDP_FLAGS_SKB_MODE`):
    /// works on every device, slower.
    Generic,
}

impl XdpMode {
    /// The `XDP_FLAGS_*` bit that requests this mode from `BPF_LINK_CREATE`:
    /// [`XDP_FLAGS_DRV_MODE`] or [`XDP_FLAGS_SKB_MODE`].
    pub fn flags(self) -> u32 {
        match self {
            XdpMode::Native => XDP_FLAGS_DRV_MODE,
            XdpMode::Generic => XDP_FLAGS_SKB_MODE,
        }
    }
}

impl fmt::Display for XdpMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            XdpMode::Native => "native",
            XdpMode::Generic => "generic",
        })
    }
}

/// Attaches `prog` to the XDP hook of `ifindex` in `mode` through a BPF
/// link: the kernel detaches the program when the returned fd (and every
/// copy of it) is closed, even if the process is killed.
pub fn link_xdp(
    prog: BorrowedFd<'_>,
    ifindex: u32,
    ifname: &str,
    mode: XdpMode,
) -> Result<OwnedFd, BpfError> {
    let mut attr = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type: BPF_XDP,
        flags: mode.flags(),
    };
    // Safety: LinkCreateAttr is the BPF_LINK_CREATE member; no pointers.
    match unsafe { sys_bpf(cmd::LINK_CREATE, &mut attr) } {
        Ok(fd) => Ok(owned(fd)),
        Err(e) => {
            let mut err = BpfError::new("BPF_LINK_CREATE", ifname.to_string(), e);
            err.hint = match err.errno() {
                libc::EBUSY | libc::EEXIST => Some(format!(
                    "an XDP program is already attached; remove it with 'ip link set dev {ifname} xdp off', \
                     or end the process holding its BPF link"
                )),
                libc::EPERM => Some("not root: attaching XDP needs CAP_NET_ADMIN and CAP_BPF".into()),
                libc::ERANGE => Some(format!("the MTU of '{ifname}' (or its veth peer) is too large for XDP")),
                _ => None,
            };
            Err(err)
        }
    }
}

/// Attaches in native mode, or in generic mode if the driver has no native
/// XDP; says which. A busy hook or missing privilege is reported at once.
pub fn attach_xdp(
    prog: BorrowedFd<'_>,
    ifindex: u32,
    ifname: &str,
) -> Result<(OwnedFd, XdpMode), BpfError> {
    match link_xdp(prog, ifindex, ifname, XdpMode::Native) {
        Ok(link) => Ok((link, XdpMode::Native)),
        Err(e)
            if matches!(
                e.errno(),
                libc::EBUSY | libc::EEXIST | libc::EPERM | libc::ENODEV
            ) =>
        {
            Err(e)
        }
        Err(native) => match link_xdp(prog, ifindex, ifname, XdpMode::Generic) {
            Ok(link) => Ok((link, XdpMode::Generic)),
            Err(mut generic) => {
                let note = format!("native mode failed first: {}", native.errno_text());
                generic.hint = Some(match generic.hint.take() {
                    Some(h) => format!("{h}; {note}"),
                    None => note,
                });
                Err(generic)
            }
        },
    }
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// A failed bpf(2) command: which, on what, the errno, and advice.
#[derive(Debug)]
pub struct BpfError {
    /// The command, e.g. `"BPF_LINK_CREATE"`.
    pub call: &'static str,
    /// What it was applied to, e.g. the interface name.
    pub target: String,
    /// The errno the kernel returned, as [`io::Error`]; also the error's
    /// [`source`](std::error::Error::source).
    pub source: io::Error,
    /// What to do about it, when the errno has a usual cause (missing
    /// capability, a program already attached, an MTU too large for XDP), or
    /// what an earlier attempt (native mode, the CLOCK_TAI program) failed with.
    pub hint: Option<String>,
    /// The verifier's explanation, for `BPF_PROG_LOAD`.
    pub verifier_log: Option<String>,
}

impl BpfError {
    fn new(call: &'static str, target: String, source: io::Error) -> Self {
        BpfError {
            call,
            target,
            source,
            hint: None,
            verifier_log: None,
        }
    }

    /// The raw errno (e.g. `libc::EPERM`), or 0 if the error carries none.
    pub fn errno(&self) -> i32 {
        self.source.raw_os_error().unwrap_or(0)
    }

    /// "Device or resource busy", without std's " (os error 16)".
    pub fn errno_text(&self) -> String {
        errno_text(&self.source)
    }
}

/// The strerror text of an io::Error, with the symbolic errno name.
pub(crate) fn errno_text(e: &io::Error) -> String {
    let text = e.to_string();
    let text = match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    };
    match e.raw_os_error().and_then(errno_name) {
        Some(name) => format!("{text} ({name})"),
        None => text,
    }
}

fn errno_name(e: i32) -> Option<&'static str> {
    Some(match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::ENXIO => "ENXIO",
        libc::E2BIG => "E2BIG",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ERANGE => "ERANGE",
        libc::ENOBUFS => "ENOBUFS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::ENETDOWN => "ENETDOWN",
        _ => return None,
    })
}

impl fmt::Display for BpfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} on '{}': {}",
            self.call,
            self.target,
            self.errno_text()
        )?;
        if let Some(h) = &self.hint {
            write!(f, " ({h})")?;
        }
        if let Some(log) = &self.verifier_log {
            write!(f, "\nverifier log:\n{log}")?;
        }
        Ok(())
    }
}

impl std::error::Error for BpfError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl From<BpfError> for io::Error {
    fn from(e: BpfError) -> Self {
        io::Error::new(e.source.kind(), e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_endian = "little")]
    fn instructions_encode_as_the_kernel_reads_them() {
        // Vectors as `llvm-objdump -d` prints these instructions on x86-64.
        assert_eq!(
            BpfInsn::mov64_reg(6, 1).to_bytes(),
            [0xbf, 0x16, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            BpfInsn::mov64_imm(2, -8).to_bytes(),
            [0xb7, 0x02, 0, 0, 0xf8, 0xff, 0xff, 0xff]
        );
        assert_eq!(BpfInsn::call(54).to_bytes(), [0x85, 0, 0, 0, 54, 0, 0, 0]);
        assert_eq!(
            BpfInsn::call(208).to_bytes(),
            [0x85, 0, 0, 0, 0xd0, 0, 0, 0]
        );
        assert_eq!(
            BpfInsn::jne_imm(0, 0, 7).to_bytes(),
            [0x55, 0x00, 7, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            BpfInsn::ldx_w(8, 6, 8).to_bytes(),
            [0x61, 0x68, 8, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            BpfInsn::add64_imm(1, 8).to_bytes(),
            [0x07, 0x01, 0, 0, 8, 0, 0, 0]
        );
        assert_eq!(
            BpfInsn::jgt_reg(1, 7, 2).to_bytes(),
            [0x2d, 0x71, 2, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            BpfInsn::stx_dw(8, 0, 0).to_bytes(),
            [0x7b, 0x08, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(BpfInsn::exit().to_bytes(), [0x95, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(BpfInsn::jne_imm(0, 0, -2).to_bytes()[2..4], [0xfe, 0xff]);
        let [lo, hi] = BpfInsn::ld_map_fd(1, 0x1234);
        assert_eq!(lo.to_bytes(), [0x18, 0x11, 0, 0, 0x34, 0x12, 0, 0]);
        assert_eq!(hi.to_bytes(), [0; 8]);
    }

    #[test]
    fn register_fields_round_trip() {
        for dst in 0..11 {
            for src in 0..11 {
                let i = BpfInsn::new(0xbf, dst, src, -1, -1);
                assert_eq!((i.dst(), i.src()), (dst, src));
            }
        }
    }

    #[test]
    fn redirect_program_jumps_land_on_the_redirect() {
        for clock in [RxClock::Tai, RxClock::Monotonic] {
            let p = xdp_redirect_program(7, clock);
            assert_eq!(p.len(), 17);
            let redirect = p
                .iter()
                .position(|i| *i == BpfInsn::ldx_w(2, 6, xdp_md::RX_QUEUE_INDEX))
                .unwrap();
            // Both conditional jumps skip the stamp and land on the map lookup.
            for (pc, insn) in p.iter().enumerate() {
                if insn.code & 0x07 == op::JMP
                    && insn.code & 0xf0 != op::CALL
                    && insn.code & 0xf0 != op::EXIT
                {
                    assert_eq!(
                        pc as i64 + 1 + insn.off as i64,
                        redirect as i64,
                        "jump at {pc}"
                    );
                }
            }
            let helpers: Vec<i32> = p
                .iter()
                .filter(|i| i.code == op::JMP | op::CALL)
                .map(|i| i.imm)
                .collect();
            let now = if clock == RxClock::Tai { 208 } else { 5 };
            assert_eq!(helpers, [54, now, 51]);
            assert_eq!(p[12].imm, 7, "the map fd goes in the immediate");
            assert_eq!(p[12].src(), BPF_PSEUDO_MAP_FD);
            assert_eq!(*p.last().unwrap(), BpfInsn::exit());
        }
    }

    #[test]
    fn object_names_are_truncated_and_sanitised() {
        assert_eq!(&object_name("linkem-xsk")[..11], b"linkem_xsk\0");
        assert_eq!(object_name("a_very_long_program_name")[15], 0);
    }

    #[test]
    fn errors_name_the_call_the_target_and_the_errno() {
        let mut e = BpfError::new(
            "BPF_LINK_CREATE",
            "veth0".into(),
            io::Error::from_raw_os_error(libc::EBUSY),
        );
        e.hint = Some("an XDP program is already attached".into());
        assert_eq!(
            e.to_string(),
            "BPF_LINK_CREATE on 'veth0': Device or resource busy (EBUSY) (an XDP program is already attached)"
        );
    }
}
