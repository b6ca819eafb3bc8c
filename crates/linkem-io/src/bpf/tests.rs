use super::*;
use syscall::object_name;

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

#[test]
fn jumps_land_on_their_labels() {
    let mut a = Asm::new();
    a.jump(BpfInsn::jeq_imm(1, 0, 0), "end")
        .ops([BpfInsn::mov64_imm(0, 1)])
        .label("back")
        .ops([BpfInsn::mov64_imm(0, 2)])
        .jump(BpfInsn::ja(0), "back")
        .label("end")
        .ops([BpfInsn::exit()]);
    let p = a.finish();
    assert_eq!(p[0].off, 3, "0 -> 4");
    assert_eq!(p[3].off, -2, "3 -> 2");
    assert_eq!(p[4], BpfInsn::exit());
}

#[test]
#[should_panic(expected = "exactly once")]
fn a_jump_to_a_missing_label_is_caught() {
    let mut a = Asm::new();
    a.jump(BpfInsn::ja(0), "nowhere");
    a.finish();
}

/// Every jump of `p` lands inside it, and it ends in `exit`.
fn assert_well_formed(p: &[BpfInsn]) {
    for (pc, insn) in p.iter().enumerate() {
        let class = insn.code & 0x07;
        let opn = insn.code & 0xf0;
        if class == op::JMP && opn != op::CALL && opn != op::EXIT {
            let to = pc as i64 + 1 + insn.off as i64;
            assert!((0..p.len() as i64).contains(&to), "jump at {pc} to {to}");
        }
    }
    assert_eq!(*p.last().unwrap(), BpfInsn::exit());
}

#[test]
fn kernel_path_programs_are_well_formed() {
    assert_well_formed(&tc_forward_program(3, 4, 0x5eed));
    assert_well_formed(&socket_gate_program(3, 0x5eed));
    for clock in [RxClock::Tai, RxClock::Monotonic] {
        let p = xdp_gated_program(7, clock, 3);
        assert_well_formed(&p);
        // The redirect program follows the gate whole.
        assert!(p.ends_with(&xdp_redirect_program(7, clock)));
    }
    // The EtherTypes are compared as the context holds them: network order.
    let p = tc_forward_program(3, 4, 0x5eed);
    let ipv4 = u16::from_ne_bytes([0x08, 0x00]) as i32;
    assert!(p
        .iter()
        .any(|i| i.imm == ipv4 && i.code == op::JMP | op::JEQ));
}

/// Loads the kernel path's programs through the verifier (root only): a
/// program the verifier refuses fails here with its log, not at a user's.
#[test]
fn kernel_path_programs_pass_the_verifier() {
    if !crate::netns::is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    use std::os::fd::{AsFd, AsRawFd};
    let gate = create_array("t_gate", 4, 2, false).expect("gate map");
    let counts = create_array("t_counts", KERNEL_COUNTS_BYTES, 1, true).expect("counts map");
    let xsks = create_xskmap("t_xsks", 4).expect("xskmap");
    let (g, c) = (gate.as_raw_fd(), counts.as_raw_fd());
    let show = |e: BpfError| panic!("{e}");
    load_program(
        ProgKind::TcxIngress,
        "t_tc",
        &tc_forward_program(g, c, 0xfeed_f00d),
        0,
    )
    .unwrap_or_else(show);
    load_program(
        ProgKind::SocketFilter,
        "t_sock",
        &socket_gate_program(g, 0xfeed_f00d),
        0,
    )
    .unwrap_or_else(show);
    let xdp = xdp_gated_program(xsks.as_raw_fd(), RxClock::Monotonic, g);
    load_program(ProgKind::Xdp, "t_xdp", &xdp, 0).unwrap_or_else(show);
    // A fresh per-CPU map reads as zero on every CPU.
    let raw = map_lookup_percpu(counts.as_fd(), 0, KERNEL_COUNTS_BYTES).expect("lookup");
    assert_eq!(raw.len(), KERNEL_COUNTS_BYTES as usize * possible_cpus());
    assert!(raw.iter().all(|&b| b == 0));
}

/// `BPF_PROG_TEST_RUN` of an skb program on one frame, with `ctx` (a
/// `struct __sk_buff`, 192 bytes) in and out: its verdict.
fn test_run_skb(prog: std::os::fd::BorrowedFd<'_>, ctx: &mut [u8; 192]) -> u32 {
    use std::os::fd::AsRawFd;
    #[repr(C)]
    #[derive(Default)]
    struct TestRunAttr {
        prog_fd: u32,
        retval: u32,
        data_size_in: u32,
        data_size_out: u32,
        data_in: u64,
        data_out: u64,
        repeat: u32,
        duration: u32,
        ctx_size_in: u32,
        ctx_size_out: u32,
        ctx_in: u64,
        ctx_out: u64,
        flags: u32,
        cpu: u32,
        batch_size: u32,
        // Explicit: the kernel refuses an attr whose bytes past what it
        // knows are not zero, padding included.
        _pad: u32,
    }
    // An IPv4 frame of 60 bytes to a unicast address.
    let mut frame = [0u8; 60];
    frame[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    frame[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    frame[14] = 0x45;
    let ctx_in = *ctx;
    let mut attr = TestRunAttr {
        prog_fd: prog.as_raw_fd() as u32,
        data_size_in: frame.len() as u32,
        data_in: frame.as_ptr() as u64,
        repeat: 1,
        ctx_size_in: ctx_in.len() as u32,
        ctx_in: ctx_in.as_ptr() as u64,
        ctx_size_out: ctx.len() as u32,
        ctx_out: ctx.as_mut_ptr() as u64,
        ..Default::default()
    };
    // Safety: every pointer is to a live buffer of the size given.
    unsafe { sys_bpf(10, &mut attr) }.expect("BPF_PROG_TEST_RUN");
    attr.retval
}

fn cb(ctx: &[u8; 192], i: usize) -> u32 {
    let at = sk_buff::CB0 as usize + 4 * i;
    u32::from_ne_bytes(ctx[at..at + 4].try_into().unwrap())
}

fn set_cb(ctx: &mut [u8; 192], i: usize, v: u32) {
    let at = sk_buff::CB0 as usize + 4 * i;
    ctx[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

/// A context for the next program with only the mark of `ctx` (the kernel
/// fills in fields of a context out that it refuses in a context in).
fn marks_only(ctx: &[u8; 192]) -> [u8; 192] {
    let mut next = [0u8; 192];
    set_cb(&mut next, 0, cb(ctx, 0));
    set_cb(&mut next, 1, cb(ctx, 1));
    next
}

/// The socket filter's decision travels with the frame, and the tc program
/// follows it whatever the gate says by the time it runs: the two halves of
/// a switch can no longer send a frame both ways or neither (root only).
#[test]
fn the_tc_program_follows_the_socket_filters_mark() {
    if !crate::netns::is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    use std::os::fd::{AsFd, AsRawFd};
    const TC_ACT_REDIRECT: u32 = 7;
    const TCX_NEXT: u32 = -1i32 as u32;
    let token = 0x8123_4567;
    let gate = create_array("t_gate", 4, 2, false).expect("gate map");
    let counts = create_array("t_counts", KERNEL_COUNTS_BYTES, 1, true).expect("counts map");
    let (g, c) = (gate.as_raw_fd(), counts.as_raw_fd());
    let show = |e: BpfError| panic!("{e}");
    let tc = load_program(
        ProgKind::TcxIngress,
        "t_tc",
        &tc_forward_program(g, c, token),
        0,
    )
    .unwrap_or_else(show);
    let sock = load_program(
        ProgKind::SocketFilter,
        "t_sock",
        &socket_gate_program(g, token),
        0,
    )
    .unwrap_or_else(show);
    let set = |key, v| map_update_u32(gate.as_fd(), key, v).expect("gate written");
    // The loopback interface: it exists in every namespace, and its MTU
    // passes the tc program's check.
    let lo = 1;

    // Not skipping: the socket takes the frame, and says so.
    let mut ctx = [0u8; 192];
    set(GATE_TARGET, lo);
    assert_eq!(test_run_skb(sock.as_fd(), &mut ctx), u32::MAX, "kept whole");
    assert_ne!(cb(&ctx, 0), 0, "marked");
    assert_eq!(cb(&ctx, 1), 0, "taken by the socket");
    // The gate then switches on: tc still leaves this frame alone (it went
    // to user space), and clears the mark.
    set(GATE_SKIP, 1);
    let mut ctx = marks_only(&ctx);
    assert_eq!(test_run_skb(tc.as_fd(), &mut ctx), TCX_NEXT);
    assert_eq!(cb(&ctx, 0), 0, "the mark does not leave tc");

    // Skipping: the socket leaves the frame, naming the target.
    let mut ctx = [0u8; 192];
    assert_eq!(
        test_run_skb(sock.as_fd(), &mut ctx),
        0,
        "not for the socket"
    );
    assert_eq!(cb(&ctx, 1), lo, "left to be forwarded to the target");
    // The gate then switches off, both writes done before tc runs: the frame
    // is still forwarded, to the target the socket read.
    set(GATE_SKIP, 0);
    set(GATE_TARGET, 0);
    let mut ctx = marks_only(&ctx);
    assert_eq!(test_run_skb(tc.as_fd(), &mut ctx), TC_ACT_REDIRECT);

    // A frame no filter of this port marked (AF_XDP's passes, or a mark
    // another port wrote): the gate decides, as before.
    let mut ctx = [0u8; 192];
    set_cb(&mut ctx, 0, 0x1111_1111);
    set_cb(&mut ctx, 1, lo);
    assert_eq!(test_run_skb(tc.as_fd(), &mut ctx), TCX_NEXT, "no target");
    set(GATE_TARGET, lo);
    let mut ctx = [0u8; 192];
    assert_eq!(test_run_skb(tc.as_fd(), &mut ctx), TC_ACT_REDIRECT);
}
