//! The programs linkem loads: the XDP one that stamps and redirects each frame
//! (and, gated, passes it on to the kernel path), the one that passes
//! everything, and the kernel path's two: the tc program that forwards a frame
//! to the other port and counts it, and the socket filter that keeps such
//! frames from an AF_PACKET socket.
//!
//! The kernel path's gate is an array map of two u32 entries per port
//! ([`GATE_SKIP`], [`GATE_TARGET`]), read by the programs at every frame and
//! written only by user space; its counts are a per-CPU array of one
//! [`KERNEL_COUNTS_BYTES`] value (no atomics: each CPU adds to its own copy).

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

/// Key of the gate entry that is non-zero while user space skips the port's
/// frames: the XDP program passes them to the stack (where the tc program
/// forwards them) and the socket filter keeps them from the AF_PACKET socket.
pub const GATE_SKIP: u32 = 0;
/// Key of the gate entry holding the ifindex the tc program forwards to
/// (its egress); 0: the tc program forwards nothing.
pub const GATE_TARGET: u32 = 1;

/// `TCX_NEXT`: a tcx program's verdict that leaves the packet to the next
/// program or the stack, as if it had not run.
const TCX_NEXT: i32 = -1;
/// `TC_ACT_SHOT`: drop the packet.
const TC_ACT_SHOT: i32 = 2;

/// Bytes of one CPU's copy in the kernel path's counts map: the four u64
/// fields of [`linkem_core::port::KernelCounts`] in their order (frames,
/// wire frames, wire bytes, too big). Wire bytes are a super-frame's
/// `len + (gso_segs - 1) × header length`, the header length read from its
/// IPv4 or IPv6 and TCP or UDP headers (only its length when it is neither).
pub const KERNEL_COUNTS_BYTES: u32 = 32;

/// The lookup `r0 = &map[key]`, `key` written at `fp - 4`: clobbers r1-r5.
fn lookup(map_fd: RawFd, key: u32) -> [BpfInsn; 6] {
    let [lo, hi] = BpfInsn::ld_map_fd(1, map_fd);
    [
        BpfInsn::st_w(10, -4, key as i32),
        lo,
        hi,
        BpfInsn::mov64_reg(2, 10),
        BpfInsn::add64_imm(2, -4),
        BpfInsn::call(helper::MAP_LOOKUP_ELEM),
    ]
}

/// `reg = gate[key]`, going to `if_zero` when the entry is missing or 0
/// (the lookup clobbers r0-r5).
fn gate_entry(a: &mut Asm, gate_fd: RawFd, key: u32, reg: u8, if_zero: &'static str) {
    a.ops(lookup(gate_fd, key))
        .jump(BpfInsn::jeq_imm(0, 0, 0), if_zero)
        .ops([BpfInsn::ldx_w(reg, 0, 0)])
        .jump(BpfInsn::jeq_imm(reg, 0, 0), if_zero);
}

/// [`xdp_redirect_program`] behind the gate: while `gate[GATE_SKIP]` is
/// non-zero every frame is passed to the kernel stack (`XDP_PASS`), where
/// the tc program of [`tc_forward_program`] forwards it.
///
/// ```text
/// __u32 *skip = bpf_map_lookup_elem(&gate, &GATE_SKIP);
/// if (skip && *skip) return XDP_PASS;
/// ... xdp_redirect_program
/// ```
pub fn xdp_gated_program(map_fd: RawFd, clock: RxClock, gate_fd: RawFd) -> Vec<BpfInsn> {
    let mut a = Asm::new();
    a.ops([BpfInsn::mov64_reg(6, 1)]);
    gate_entry(&mut a, gate_fd, GATE_SKIP, 1, "socket");
    a.ops([BpfInsn::mov64_imm(0, XDP_PASS), BpfInsn::exit()])
        .label("socket")
        // The redirect program starts from r1 = ctx.
        .ops([BpfInsn::mov64_reg(1, 6)])
        .ops(xdp_redirect_program(map_fd, clock));
    a.finish()
}

/// The kernel path's forwarder, a tcx ingress program: while
/// `gate[GATE_TARGET]` holds an ifindex, each packet is counted and sent out
/// of that interface (`bpf_redirect`, as the Linux bridge would forward it,
/// offload metadata kept), or counted and dropped if it is longer than that
/// interface's MTU allows (linkem's `too-big`); else it goes on as if the
/// program were not there.
///
/// A packet that [`socket_gate_program`] with the same `token` already saw
/// carries its decision in `cb[0..2]` (the taps run before tc, on the same
/// `sk_buff`): the tc program follows it instead of reading the gate again,
/// so a frame that crosses a switch of the gate goes one way only. The mark
/// is cleared here, so it never leaves the interface; the token (random per
/// port) keeps a mark some other interface's filter wrote from being read
/// as this one's.
///
/// ```text
/// __u32 mark = skb->cb[0], target; skb->cb[0] = 0;
/// if (mark == token) {
///     target = skb->cb[1];               /* 0: the socket took it */
///     if (!target) return TCX_NEXT;
/// } else {
///     __u32 *t = bpf_map_lookup_elem(&gate, &GATE_TARGET);
///     if (!t || !*t) return TCX_NEXT;
///     target = *t;
/// }
/// __u32 mtu = 0;
/// long fits = bpf_check_mtu(skb, target, &mtu, 0, 0) == 0;
/// struct counts *c = bpf_map_lookup_elem(&counts, &0);   /* this CPU's */
/// if (!fits) { if (c) c->too_big += 1; return TC_ACT_SHOT; }
/// if (c) {
///     __u64 segs = skb->gso_segs ? skb->gso_segs : 1;
///     c->frames += 1; c->wire_frames += segs; c->wire_bytes += skb->len;
///     if (segs > 1) c->wire_bytes += (segs - 1) * header_length(skb);
/// }
/// return bpf_redirect(target, 0);
/// ```
///
/// `header_length`: Ethernet, then IPv4 (`ihl`) or IPv6 (40 bytes, no
/// extension headers), then TCP (`doff`) or UDP (8), read with
/// `bpf_skb_load_bytes`; a super-frame of another kind adds nothing.
pub fn tc_forward_program(gate_fd: RawFd, counts_fd: RawFd, token: u32) -> Vec<BpfInsn> {
    // r6 = skb, r7 = target ifindex (first the mark), r8 = this CPU's
    // counts, r9 = segments (first the MTU check's verdict); fp-24: the MTU
    // check's out value.
    let mut a = Asm::new();
    a.ops([
        BpfInsn::mov64_reg(6, 1),
        BpfInsn::ldx_w(7, 6, sk_buff::CB0),
        BpfInsn::mov64_imm(1, 0),
        BpfInsn::stx_w(6, 1, sk_buff::CB0),
    ])
    .jump(BpfInsn::jne_imm(7, mark_imm(token), 0), "gate")
    .ops([BpfInsn::ldx_w(7, 6, sk_buff::CB1)])
    .jump(BpfInsn::jeq_imm(7, 0, 0), "next")
    .jump(BpfInsn::ja(0), "forward")
    .label("gate");
    gate_entry(&mut a, gate_fd, GATE_TARGET, 7, "next");
    a.label("forward")
        .ops([
            BpfInsn::st_w(10, -24, 0),
            BpfInsn::mov64_reg(1, 6),
            BpfInsn::mov64_reg(2, 7),
            BpfInsn::mov64_reg(3, 10),
            BpfInsn::add64_imm(3, -24),
            BpfInsn::mov64_imm(4, 0),
            BpfInsn::mov64_imm(5, 0),
            BpfInsn::call(helper::CHECK_MTU),
            BpfInsn::mov64_reg(9, 0),
        ])
        .ops(lookup(counts_fd, 0))
        .jump(BpfInsn::jne_imm(9, 0, 0), "too_big")
        .jump(BpfInsn::jeq_imm(0, 0, 0), "redirect")
        .ops([
            BpfInsn::mov64_reg(8, 0),
            // frames += 1
            BpfInsn::ldx_dw(1, 8, 0),
            BpfInsn::add64_imm(1, 1),
            BpfInsn::stx_dw(8, 1, 0),
            // segs = gso_segs ? gso_segs : 1
            BpfInsn::ldx_w(9, 6, sk_buff::GSO_SEGS),
        ])
        .jump(BpfInsn::jne_imm(9, 0, 0), "segs")
        .ops([BpfInsn::mov64_imm(9, 1)])
        .label("segs")
        .ops([
            BpfInsn::ldx_dw(1, 8, 8),
            BpfInsn::add64_reg(1, 9),
            BpfInsn::stx_dw(8, 1, 8),
            BpfInsn::ldx_w(1, 6, sk_buff::LEN),
            BpfInsn::ldx_dw(2, 8, 16),
            BpfInsn::add64_reg(2, 1),
            BpfInsn::stx_dw(8, 2, 16),
        ])
        .jump(BpfInsn::jeq_imm(9, 1, 0), "redirect");
    super_frame_headers(&mut a);
    a.label("redirect")
        .ops([
            BpfInsn::mov64_reg(1, 7),
            BpfInsn::mov64_imm(2, 0),
            BpfInsn::call(helper::REDIRECT),
            BpfInsn::exit(),
        ])
        .label("too_big")
        .jump(BpfInsn::jeq_imm(0, 0, 0), "shot")
        .ops([
            BpfInsn::ldx_dw(1, 0, 24),
            BpfInsn::add64_imm(1, 1),
            BpfInsn::stx_dw(0, 1, 24),
        ])
        .label("shot")
        .ops([BpfInsn::mov64_imm(0, TC_ACT_SHOT), BpfInsn::exit()])
        .label("next")
        .ops([BpfInsn::mov64_imm(0, TCX_NEXT), BpfInsn::exit()]);
    a.finish()
}

/// The part of [`tc_forward_program`] for a super-frame (r9 = its segments,
/// more than 1; r8 = the counts; r6 = skb): `wire_bytes += (segs - 1) ×
/// header length`, the header read with `bpf_skb_load_bytes`; on to the
/// label `redirect` whatever it finds. fp-8: one byte read from the packet;
/// fp-16: the L4 header's offset.
fn super_frame_headers(a: &mut Asm) {
    let load_byte = |off_reg: Option<u8>, off: i32| {
        let mut v = vec![BpfInsn::mov64_reg(1, 6)];
        match off_reg {
            Some(r) => v.extend([BpfInsn::ldx_dw(2, r, -16), BpfInsn::add64_imm(2, off)]),
            None => v.push(BpfInsn::mov64_imm(2, off)),
        }
        v.extend([
            BpfInsn::mov64_reg(3, 10),
            BpfInsn::add64_imm(3, -8),
            BpfInsn::mov64_imm(4, 1),
            BpfInsn::call(helper::SKB_LOAD_BYTES),
        ]);
        v
    };
    let ipv4 = i32::from(u16::from_ne_bytes(0x0800u16.to_be_bytes()));
    let ipv6 = i32::from(u16::from_ne_bytes(0x86ddu16.to_be_bytes()));
    a.ops([BpfInsn::ldx_w(1, 6, sk_buff::PROTOCOL)])
        .jump(BpfInsn::jeq_imm(1, ipv4, 0), "ipv4")
        .jump(BpfInsn::jne_imm(1, ipv6, 0), "redirect")
        // IPv6: L4 at 14 + 40, next header at 14 + 6.
        .ops([BpfInsn::mov64_imm(1, 54), BpfInsn::stx_dw(10, 1, -16)])
        .ops(load_byte(None, 20))
        .jump(BpfInsn::jne_imm(0, 0, 0), "redirect")
        .jump(BpfInsn::ja(0), "l4")
        .label("ipv4")
        // IPv4: L4 at 14 + 4 × ihl, protocol at 14 + 9.
        .ops(load_byte(None, 14))
        .jump(BpfInsn::jne_imm(0, 0, 0), "redirect")
        .ops([
            BpfInsn::ldx_b(1, 10, -8),
            BpfInsn::and64_imm(1, 0x0f),
            BpfInsn::lsh64_imm(1, 2),
            BpfInsn::add64_imm(1, 14),
            BpfInsn::stx_dw(10, 1, -16),
        ])
        .ops(load_byte(None, 23))
        .jump(BpfInsn::jne_imm(0, 0, 0), "redirect")
        .label("l4")
        .ops([BpfInsn::ldx_b(1, 10, -8)])
        .jump(BpfInsn::jeq_imm(1, 17, 0), "udp")
        .jump(BpfInsn::jne_imm(1, 6, 0), "l4_only")
        // TCP: header length 4 × doff, doff the high nibble of byte 12.
        .ops(load_byte(Some(10), 12))
        .jump(BpfInsn::jne_imm(0, 0, 0), "redirect")
        .ops([
            BpfInsn::ldx_b(1, 10, -8),
            BpfInsn::rsh64_imm(1, 4),
            BpfInsn::lsh64_imm(1, 2),
            BpfInsn::ldx_dw(2, 10, -16),
            BpfInsn::add64_reg(2, 1),
        ])
        .jump(BpfInsn::ja(0), "add")
        .label("udp")
        .ops([BpfInsn::ldx_dw(2, 10, -16), BpfInsn::add64_imm(2, 8)])
        .jump(BpfInsn::ja(0), "add")
        .label("l4_only")
        .ops([BpfInsn::ldx_dw(2, 10, -16)])
        .label("add")
        .ops([
            BpfInsn::add64_imm(9, -1),
            BpfInsn::mul64_reg(2, 9),
            BpfInsn::ldx_dw(1, 8, 16),
            BpfInsn::add64_reg(1, 2),
            BpfInsn::stx_dw(8, 1, 16),
        ]);
}

/// The kernel path's socket filter for an AF_PACKET receive socket: while
/// `gate[GATE_SKIP]` is non-zero the socket gets no frame (the tc program
/// forwards them), else every frame whole. Its decision goes with the frame
/// to [`tc_forward_program`] of the same `token`, in `cb[0]` (the token)
/// and `cb[1]` (the ifindex to forward to, 0 where the socket took it).
///
/// ```text
/// skb->cb[0] = token; skb->cb[1] = 0;
/// __u32 *skip = bpf_map_lookup_elem(&gate, &GATE_SKIP);
/// if (!skip || !*skip) return 0xffffffff;
/// __u32 *target = bpf_map_lookup_elem(&gate, &GATE_TARGET);
/// if (target && *target) skb->cb[1] = *target; else skb->cb[0] = 0;
/// return 0;
/// ```
///
/// Switching writes `target` before setting `skip` and clears `skip` before
/// `target`, so `skip` is never set without a target: a frame the socket
/// leaves is always forwarded, to the target read here, even if tc runs
/// after the second write.
pub fn socket_gate_program(gate_fd: RawFd, token: u32) -> Vec<BpfInsn> {
    let mut a = Asm::new();
    a.ops([
        BpfInsn::mov64_reg(6, 1),
        BpfInsn::mov64_imm(1, mark_imm(token)),
        BpfInsn::stx_w(6, 1, sk_buff::CB0),
        BpfInsn::mov64_imm(1, 0),
        BpfInsn::stx_w(6, 1, sk_buff::CB1),
    ]);
    gate_entry(&mut a, gate_fd, GATE_SKIP, 1, "keep");
    gate_entry(&mut a, gate_fd, GATE_TARGET, 1, "unmarked");
    a.ops([
        BpfInsn::stx_w(6, 1, sk_buff::CB1),
        BpfInsn::mov64_imm(0, 0),
        BpfInsn::exit(),
    ])
    .label("unmarked")
    .ops([
        BpfInsn::mov64_imm(1, 0),
        BpfInsn::stx_w(6, 1, sk_buff::CB0),
        BpfInsn::mov64_imm(0, 0),
        BpfInsn::exit(),
    ])
    .label("keep")
    .ops([BpfInsn::mov64_imm(0, -1), BpfInsn::exit()]);
    a.finish()
}

/// The token as the immediate the programs compare a u32 load with: the
/// kernel sign-extends an immediate to 64 bits and zero-extends the load,
/// so the top bit is cleared; never 0, which is no mark.
fn mark_imm(token: u32) -> i32 {
    ((token & 0x7fff_ffff) | 1) as i32
}
