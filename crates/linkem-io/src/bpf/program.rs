//! The XDP programs linkem loads: the one that stamps and redirects each frame, and
//! the one that passes everything.

use super::*;
use std::os::fd::RawFd;

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
