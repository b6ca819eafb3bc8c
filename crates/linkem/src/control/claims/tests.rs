use super::*;
use crate::control::failure::Failure;
use linkem_ctl::Proto;

fn claim(uid: u32, slot: u32, ports: (u16, u16), held: u64, expires_ns: u64) -> Claim {
    Claim {
        proto: Proto::Udp,
        ports,
        uid,
        pid: 1,
        slot,
        words: Default::default(),
        held_bytes: held,
        created_ns: 0,
        renewed_ns: 0,
        expires_ns,
        changes: 0,
    }
}

fn ask(rate_bps: u64, delay_ns: u64) -> PipeAsk {
    let link = linkem_core::LinkConfig {
        rate_bps: Some(rate_bps),
        delay_ns,
        queue_packets: Some(50),
        ..Default::default()
    };
    PipeAsk::of(&link)
}

#[test]
fn a_port_belongs_to_one_user_and_ranges_overlap() {
    let mut t = Table::default();
    t.put(claim(1001, 0, (5678, 5678), 0, u64::MAX));
    t.put(claim(1002, 1, (6000, 6010), 0, u64::MAX));
    assert_eq!(t.find(1001, Proto::Udp, (5678, 5678)), Ok(Some(0)));
    // The same number over tcp is another port.
    assert_eq!(t.find(1002, Proto::Tcp, (5678, 5678)), Ok(None));
    let e = t.find(1002, Proto::Udp, (5678, 5678)).unwrap_err();
    assert_eq!(
        e,
        Failure::Refused(
            "udp 5678: udp 5678 is claimed by uid 1001 (until it is released or expires)".into()
        )
    );
    // A range reaching into another's claim, at either end.
    for (r, owner) in [
        ((5670, 5678), 1001),
        ((5678, 5690), 1001),
        ((6010, 6020), 1002),
        ((5999, 6000), 1002),
        ((6005, 6005), 1002),
    ] {
        let asker = 3000;
        let e = t.find(asker, Proto::Udp, r).unwrap_err();
        assert!(
            matches!(&e, Failure::Refused(m) if m.contains(&format!("claimed by uid {owner}"))),
            "{r:?}: {e:?}"
        );
    }
    // One's own claim, overlapped but not the same: an error, not a refusal.
    let e = t.find(1002, Proto::Udp, (6010, 6012)).unwrap_err();
    assert_eq!(
        e,
        Failure::Error(
            "udp 6010-6012 overlaps your claim udp 6000-6010: release it first, or name \
         exactly its ports"
                .into()
        )
    );
    assert_eq!(t.find(1001, Proto::Udp, (6011, 7000)), Ok(None));
    assert_eq!(t.free_slot(), Ok(2));
    t.remove(0);
    assert_eq!(t.free_slot(), Ok(0));
    assert_eq!(numbers(0), [40_000, 40_001]);
    assert_eq!(numbers(MAX_CLAIMS - 1), [CLAIM_LAST - 1, CLAIM_LAST]);
    assert!(reserved(CLAIM_FIRST) && reserved(CLAIM_LAST) && !reserved(CLAIM_LAST + 1));
}

#[test]
fn claims_expire_at_their_time_and_renewal_moves_it() {
    let mut t = Table::default();
    t.put(claim(1001, 0, (1, 1), 0, 1_000));
    t.put(claim(1002, 1, (2, 2), 0, 2_000));
    assert_eq!(t.next_expiry_ns(), Some(1_000));
    assert!(t.take_expired(999).is_empty());
    let gone = t.take_expired(1_000);
    assert_eq!(gone.iter().map(|c| c.slot).collect::<Vec<_>>(), [0]);
    // Renewed: the same claim with a later expiry.
    let mut c = t.get(1).unwrap().clone();
    c.expires_ns = 5_000;
    t.put(c);
    assert!(t.take_expired(4_999).is_empty());
    assert_eq!(t.take_expired(5_000).len(), 1);
    assert!(t.is_empty());
}

/// Issue 34, item 2: `slot 600s` held packets in the kernel's queue for
/// ten minutes under a `delay` limit of 5 s, which looked at `delay` only.
#[test]
fn the_delay_limit_bounds_delay_jitter_reach_and_slot_waits() {
    let limit = Limit {
        delay_ns: Some(5_000_000_000),
        ..Limit::NONE
    };
    let t = Table::default();
    let slotted = linkem_core::LinkConfig {
        rate_bps: Some(1_000_000),
        delay_ns: 1_000_000,
        queue_packets: Some(50),
        slot: Some(linkem_core::config::SlotConfig {
            min_ns: 600_000_000_000,
            max_ns: 600_000_000_000,
            distribution: None,
            packets: None,
            bytes: None,
        }),
        ..Default::default()
    };
    let a = PipeAsk::of(&slotted);
    assert_eq!(a.delay_ns, 600_001_000_000);
    let m = match t.check_limits(1001, &limit, None, (1, 1), &[a, a]) {
        Err(Failure::Refused(m)) => m,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        m,
        "limit delay=5s for uid 1001: the a-to-b pipe asks delay 600.001s at most \
     (delay 1ms + the jitter's reach 0ns + slot waits 600s)"
    );
    // A slot carrying 5 packets needs 10 slots for a queue of 50.
    let mut five = slotted.clone();
    if let Some(s) = five.slot.as_mut() {
        s.min_ns = 100_000_000;
        s.max_ns = 100_000_000;
        s.packets = Some(5);
    }
    assert_eq!(largest_delay_ns(&five).1, [1_000_000, 0, 1_000_000_000]);
    // Normal jitter of 100 ms reaches about 8.3 × 100 ms.
    let jittery = linkem_core::LinkConfig {
        rate_bps: Some(1_000_000),
        delay_ns: 100_000_000,
        jitter_ns: 100_000_000,
        distribution: std::sync::Arc::new(linkem_core::dist::Distribution::Normal),
        ..Default::default()
    };
    let a = PipeAsk::of(&jittery);
    assert!((900_000_000..1_000_000_000).contains(&a.delay_ns), "{a:?}");
    assert_eq!(t.check_limits(1001, &limit, None, (1, 1), &[a, a]), Ok(()));
}

#[test]
fn each_limit_refuses_naming_itself_and_the_value() {
    let limit = Limit {
        claims: Some(2),
        ports: Some(10),
        rate_bps: Some(10_000_000),
        delay_ns: Some(1_000_000_000),
        queue_bytes: Some(3 << 20),
    };
    let mut t = Table::default();
    let ok = [ask(1_000_000, 10_000_000); 2];
    assert_eq!(t.check_limits(1001, &limit, None, (1, 1), &ok), Ok(()));
    let refused = |r: Result<(), Failure>| match r {
        Err(Failure::Refused(m)) => m,
        other => panic!("{other:?}"),
    };
    let m = refused(t.check_limits(1001, &limit, None, (1, 1), &[ok[0], ask(20_000_000, 0)]));
    assert_eq!(
        m,
        "limit rate=10mbit for uid 1001: the b-to-a pipe asks bw 20mbit"
    );
    let m = refused(t.check_limits(
        1001,
        &limit,
        None,
        (1, 1),
        &[ask(1_000, 2_000_000_000), ok[1]],
    ));
    assert_eq!(
        m,
        "limit delay=1s for uid 1001: the a-to-b pipe asks delay 2s"
    );
    let m = refused(t.check_limits(1001, &limit, None, (1, 11), &ok));
    assert!(
        m.starts_with("limit ports=10 for uid 1001: the claim asks 11 ports"),
        "{m}"
    );
    // 10 Mbit/s for 1 s is 1.25 MB in flight on each pipe, plus its 50 slots.
    let big = [ask(10_000_000, 1_000_000_000); 2];
    let m = refused(t.check_limits(1001, &limit, None, (1, 1), &big));
    assert!(
        m.starts_with("limit queue=3MiB for uid 1001: the claim's pipes may hold 3.3MiB"),
        "{m}"
    );
    t.put(claim(1001, 0, (1, 1), 3 << 20, u64::MAX));
    let m = refused(t.check_limits(1001, &limit, None, (2, 2), &ok));
    assert!(m.contains("its other claims 3MiB"), "{m}");
    // The claim held is not counted twice when it changes.
    assert_eq!(t.check_limits(1001, &limit, Some(0), (1, 1), &ok), Ok(()));
    t.put(claim(1001, 1, (2, 2), 0, u64::MAX));
    let m = refused(t.check_limits(1001, &limit, None, (3, 3), &[ask(1, 0); 2]));
    assert_eq!(
        m,
        "limit claims=2 for uid 1001: it holds 2 claims (release one first)"
    );
    // Another user's claims count for it alone.
    assert_eq!(t.check_limits(1002, &limit, None, (3, 3), &ok), Ok(()));
    // No bw under a rate limit: refused (the server gives such a pipe the limit's rate).
    let unshaped = PipeAsk::of(&linkem_core::LinkConfig::default());
    let m = refused(t.check_limits(1002, &limit, None, (3, 3), &[unshaped; 2]));
    assert_eq!(
        m,
        "limit rate=10mbit for uid 1002: the a-to-b pipe has no bw"
    );
    assert_eq!(
        t.check_limits(0, &Limit::NONE, None, (1, 65535), &[unshaped; 2]),
        Ok(())
    );
}

/// Lines as the kernel writes them (Linux 6.x): root's sshd listening
/// on 22 (v4 and v6), a TIME_WAIT leftover (inode 0) on 40000, uid
/// 1001's connection from 41000, uid 107's avahi on udp 5353.
const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 20861 1 0000000000000000 100 0 0 10 0\n   1: 0100007F:9C40 0100007F:0016 06 00000000:00000000 03:00000F9E 00000000     0        0 0 3 0000000000000000\n   2: 0A00020F:A028 5DB8D822:01BB 01 00000000:00000000 02:000004C5 00000000  1001        0 51200 2 0000000000000000 20 4 30 10 -1\n";
const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 20863 1 0000000000000000 100 0 0 10 0\n";
const UDP: &str = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n  300: 00000000:14E9 00000000:0000 07 00000000:00000000 00:00000000 00000000   107        0 18523 2 0000000000000000 0\n";

fn view(start: u32) -> PortView {
    let mut tcp = parse_socket_table(TCP).unwrap();
    tcp.extend(parse_socket_table(TCP6).unwrap());
    PortView {
        unprivileged_start: start,
        tcp,
        udp: parse_socket_table(UDP).unwrap(),
    }
}

#[test]
fn socket_tables_give_each_bound_port_and_its_uid() {
    assert_eq!(
        parse_socket_table(TCP).unwrap(),
        [
            PortHolder { port: 22, uid: 0 },
            PortHolder {
                port: 41000,
                uid: 1001
            }
        ]
    );
    assert_eq!(
        parse_socket_table(TCP6).unwrap(),
        [PortHolder { port: 22, uid: 0 }]
    );
    assert_eq!(
        parse_socket_table(UDP).unwrap(),
        [PortHolder {
            port: 5353,
            uid: 107
        }]
    );
    assert_eq!(parse_socket_table("header only\n").unwrap(), []);
    let e = parse_socket_table("header\n 0: 00000000:zz 0 0 0 0 0 0 0 1\n").unwrap_err();
    assert_eq!(e, "line 2: not a socket table line");
    // This machine's own tables parse (the format is the kernel's).
    PortView::read().unwrap();
}

#[test]
fn a_port_is_claimable_if_bindable_or_allowed_and_a_refusal_names_the_rule() {
    let v = view(1024);
    let refused = |r: Result<(), Failure>| match r {
        Err(Failure::Refused(m)) => m,
        other => panic!("{other:?}"),
    };
    let m = refused(check_ports(1001, Proto::Tcp, (22, 22), &v, &[]));
    assert_eq!(
        m,
        "tcp 22: tcp port 22 is below ip_unprivileged_port_start (1024); uid 1001 may claim \
     only ports it could bind, or those root's --limits allows it (allow=tcp:PORT)"
    );
    let m = refused(check_ports(1001, Proto::Udp, (5353, 5353), &v, &[]));
    assert!(
        m.starts_with("udp 5353: udp port 5353 is held by a socket of uid 107;"),
        "{m}"
    );
    // Port by port: the first one refused is named.
    let m = refused(check_ports(1002, Proto::Tcp, (40990, 41010), &v, &[]));
    assert!(
        m.starts_with("tcp 40990-41010: tcp port 41000 is held by a socket of uid 1001;"),
        "{m}"
    );
    // One's own socket, a TIME_WAIT leftover, the other protocol: free.
    check_ports(1001, Proto::Tcp, (40990, 41010), &v, &[]).unwrap();
    check_ports(1001, Proto::Tcp, (40000, 40000), &v, &[]).unwrap();
    check_ports(1001, Proto::Udp, (41000, 41000), &v, &[]).unwrap();
    check_ports(107, Proto::Udp, (5353, 5353), &v, &[]).unwrap();
    // A sysctl of 0 lets anyone bind any port; sshd still holds 22.
    let m = refused(check_ports(1001, Proto::Tcp, (1, 100), &view(0), &[]));
    assert!(
        m.starts_with("tcp 1-100: tcp port 22 is held by a socket of uid 0;"),
        "{m}"
    );
    // Root's allow overrides both rules, for its protocol and ports only.
    let allow = [
        PortAllow::parse("tcp:22").unwrap(),
        PortAllow::parse("udp:5000-5400").unwrap(),
    ];
    check_ports(1001, Proto::Tcp, (22, 22), &v, &allow).unwrap();
    check_ports(1001, Proto::Udp, (5353, 5353), &v, &allow).unwrap();
    let m = refused(check_ports(1001, Proto::Udp, (22, 22), &v, &allow));
    assert!(m.contains("udp port 22 is below"), "{m}");
    let m = refused(check_ports(1001, Proto::Tcp, (21, 22), &v, &allow));
    assert!(m.contains("tcp port 21 is below"), "{m}");
}

#[test]
fn the_limits_file_allows_ports_per_user() {
    let l = Limits::parse(
        "default allow=udp:5353\n1001 allow=tcp:22,tcp:8000-8100 allow=udp:53\n1002 claims=1\n\
     1003 allow=none\n",
    )
    .unwrap();
    let pa = |t: &str| PortAllow::parse(t).unwrap();
    assert_eq!(
        l.allowed(1001),
        [pa("tcp:22"), pa("tcp:8000-8100"), pa("udp:53")]
    );
    // A line without allow takes the default's; 'none' takes it away.
    assert_eq!(l.allowed(1002), [pa("udp:5353")]);
    assert_eq!(l.allowed(1004), [pa("udp:5353")]);
    assert_eq!(l.allowed(1003), []);
    assert_eq!(pa("udp:53").ports, (53, 53));
    for (text, says) in [
        (
            "1001 allow=sctp:1",
            "line 1: 'allow=sctp:1': 'sctp:1': PROTO:PORT",
        ),
        (
            "1001 allow=udp:0",
            "line 1: 'allow=udp:0': 'udp:0': PROTO:PORT",
        ),
        ("1001 allow=udp:70000", "'udp:70000': PROTO:PORT"),
        (
            "1001 allow=udp:9-8",
            "'udp:9-8': the first port is above the last",
        ),
        ("1001 allow=udp", "'udp': PROTO:PORT"),
    ] {
        let e = Limits::parse(text).unwrap_err();
        assert!(e.contains(says), "{text}: {e}");
    }
}

#[test]
fn the_limits_file_names_users_and_defaults() {
    let l = Limits::parse(
        "# root's limits\ndefault claims=4 rate=10Mbit/s\n1001 claims=1 delay=100ms # one\n\
     1002 queue=none rate=none\n\n",
    )
    .unwrap();
    assert_eq!(l.of(1001).claims, Some(1));
    assert_eq!(l.of(1001).rate_bps, Some(10_000_000));
    assert_eq!(l.of(1001).delay_ns, Some(100_000_000));
    assert_eq!(l.of(1002).queue_bytes, None);
    assert_eq!(l.of(1002).rate_bps, None);
    assert_eq!(l.of(1002).claims, Some(4));
    assert_eq!(l.of(1003).claims, Some(4));
    assert_eq!(l.of(1003).queue_bytes, Limit::BUILT_IN.queue_bytes);
    assert_eq!(l.of(0), Limit::NONE);
    assert_eq!(Limits::default().of(1003), Limit::BUILT_IN);
    for (text, says) in [
        ("bob claims=1", "line 1: 'bob': a line starts with a uid"),
        ("1001 claims=x", "line 1: 'claims=x': a count (or none)"),
        ("1001 claims", "line 1: 'claims': KEY=VALUE expected"),
        (
            "default\n1001 speed=1",
            "line 2: 'speed=1': unknown limit 'speed'",
        ),
        ("1001 rate=5", "line 1: 'rate=5': "),
        (
            "1001 claims=1\n1001 claims=2",
            "line 2: '1001' has a line already",
        ),
    ] {
        let e = Limits::parse(text).unwrap_err();
        assert!(e.starts_with(says), "{text}: {e}");
    }
}
