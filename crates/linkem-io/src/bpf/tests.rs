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
