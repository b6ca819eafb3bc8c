use super::*;
use crate::delay_line::{delay_line, Producer};
use crate::port::memory::{MemoryTx, Sent};

fn frame(id: u32) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[..4].copy_from_slice(&id.to_be_bytes());
    f
}

fn ids(sent: &Sent) -> Vec<u32> {
    let sent = sent.lock().unwrap();
    sent.iter()
        .map(|(_, f)| u32::from_be_bytes([f[0], f[1], f[2], f[3]]))
        .collect()
}

/// An outlet as the live stage builds it (reorder heap over sorted runs),
/// its producer, and what its port sent.
fn outlet(max_lag_ns: Option<u64>) -> (Arc<Outlet>, Producer, Sent) {
    let (tx, sent) = MemoryTx::new();
    let (o, p) = outlet_on(max_lag_ns, tx);
    (o, p, sent)
}

/// [`outlet`] sending through `tx`.
fn outlet_on(max_lag_ns: Option<u64>, tx: MemoryTx) -> (Arc<Outlet>, Producer) {
    let (producer, consumer) = delay_line(2 << 20).unwrap();
    let control = Arc::new(Control::new(
        false,
        0,
        Arc::new(crate::pipeline::waker::Waker::new().unwrap()),
    ));
    let cfg = OutputConfig {
        spin_ns: 200_000,
        spin_always: false,
        spin_budget_ppm: crate::pipeline::DEFAULT_SPIN_BUDGET_PPM,
        max_lag_ns,
        reorders: true,
        sorted_runs: true,
        coalesce_window_ns: None,
    };
    (Outlet::new(control, consumer, Box::new(tx), &cfg), producer)
}

/// Stores frame `id` released at `release_ns`, counting it out of order as
/// the live stage does when it is earlier than `latest`.
fn store(o: &Outlet, p: &mut Producer, latest: &mut u64, id: u32, release_ns: u64) {
    assert!(p.push_with_group(release_ns, 64, false, 0, |s| s.copy_from_slice(&frame(id))));
    if release_ns < *latest {
        o.control.out_of_order.fetch_add(1, Ordering::Release);
    }
    *latest = (*latest).max(release_ns);
}

/// Three TCP/IPv4 wire frames of one flow cut by `segment` from a
/// super-frame (so with complete checksums), 1000 payload bytes each.
fn wire_frames() -> Vec<Vec<u8>> {
    let (f, offload) = tcp_super();
    let mut out = Vec::new();
    linkem_core::wire::segment(&f, offload, 1514, &mut |s| out.push(s.to_vec())).unwrap();
    out
}

/// A TCP/IPv4 super-frame of 3000 payload bytes at MSS 1000, as a host
/// hands it over, and its offload.
fn tcp_super() -> (Vec<u8>, Offload) {
    use linkem_core::wire::{CsumPartial, Gso, GsoKind};
    let mut f = vec![0u8; 54 + 3000];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&3040u16.to_be_bytes());
    f[22] = 64;
    f[23] = 6;
    f[26..34].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    f[46] = 5 << 4;
    f[47] = 0x10; // ACK
    let offload = Offload {
        csum: Some(CsumPartial {
            start: 34,
            offset: 16,
        }),
        gso: Some(Gso {
            kind: GsoKind::TcpV4,
            size: 1000,
        }),
    };
    (f, offload)
}

#[test]
fn a_stage_whose_output_thread_is_parked_sends_one_super_frame_itself() {
    let (o, mut p, sent) = outlet(None);
    let (f, offload) = tcp_super();
    let whole = Whole {
        offload,
        wire_frames: 3,
    };
    assert!(p.push_whole(100, 0, whole, &f));
    assert!(p.push_whole(200, 0, whole, &f));
    // Not yet due: left to the output thread's wait, parked or not.
    assert_eq!(
        o.send_due_with(&mut || 50, 2, true).unwrap(),
        (Left::Bulk(100), 0)
    );
    // Due: one goes (its wire frames counted), the next is bulk.
    assert_eq!(
        o.send_due_with(&mut || 1_000, 2, true).unwrap(),
        (Left::Bulk(200), 3)
    );
    assert_eq!(ids(&sent).len(), 3);
    assert_eq!(
        o.send_due_with(&mut || 1_000, 2, true).unwrap(),
        (Left::Empty, 3)
    );
    assert_eq!(ids(&sent).len(), 6);
}

#[test]
fn the_stage_leaves_a_super_frame_stored_whole_to_the_output_thread() {
    let (o, mut p, sent) = outlet(None);
    let mut latest = 0;
    store(&o, &mut p, &mut latest, 1, 100);
    let (f, offload) = tcp_super();
    let whole = Whole {
        offload,
        wire_frames: 3,
    };
    assert!(p.push_whole(200, 0, whole, &f));
    store(&o, &mut p, &mut latest, 2, 300);
    // A share of 2 wire frames: the single frame goes, the super-frame
    // of 3 is bulk and waits (for the output thread), and so does what
    // follows it.
    let (left, n) = o.send_due(&mut || 1_000, 2).unwrap();
    assert_eq!((left, n), (Left::Bulk(200), 1));
    assert_eq!(ids(&sent), [1]);
    // A share that holds it: sent, counted as its wire frames (this port
    // takes no super-frame: they leave one by one, cut as they would
    // have been, not counted `whole`).
    let (left, n) = o.send_due(&mut || 1_000, 64).unwrap();
    assert_eq!((left, n), (Left::Empty, 4));
    let sent = sent.lock().unwrap();
    assert_eq!(sent.len(), 5);
    assert_eq!(
        &sent[1..4]
            .iter()
            .map(|(_, f)| f.clone())
            .collect::<Vec<_>>(),
        &wire_frames()
    );
    let g = o.lock();
    assert_eq!((g.st.local_sent, g.st.local_whole), (5, 0));
}

#[test]
fn coalescing_trusts_the_checksum_only_of_frames_stored_as_checksummed() {
    // The middle frame's payload differs from what its checksum covers:
    // stored as the stage's own checksummed cut, it is not verified
    // again and joins; stored as it came, it is verified and leaves alone.
    for checksummed in [true, false] {
        let (producer, consumer) = delay_line(2 << 20).unwrap();
        let mut p = producer;
        let control = Arc::new(Control::new(
            false,
            0,
            Arc::new(crate::pipeline::waker::Waker::new().unwrap()),
        ));
        let (mut tx, sent) = MemoryTx::new();
        let supers = crate::port::memory::Supers::default();
        tx.supers = Some(supers.clone());
        let cfg = OutputConfig {
            spin_ns: 200_000,
            spin_always: false,
            spin_budget_ppm: crate::pipeline::DEFAULT_SPIN_BUDGET_PPM,
            max_lag_ns: None,
            reorders: true,
            sorted_runs: true,
            coalesce_window_ns: Some(1_000),
        };
        let o = Outlet::new(control, consumer, Box::new(tx), &cfg);
        let mut frames = wire_frames();
        frames[1][200] ^= 1;
        for f in &frames {
            let fill = |s: &mut [u8]| s.copy_from_slice(f);
            assert!(if checksummed {
                p.push_checksummed(100, f.len(), 0, fill)
            } else {
                p.push_with_group(100, f.len(), false, 0, fill)
            });
        }
        assert_eq!(o.send_due(&mut || 1_000, 64).unwrap().0, Left::Empty);
        let supers = supers.lock().unwrap();
        let in_supers: usize = supers.iter().map(|(_, s)| s.len()).sum();
        assert_eq!(sent.lock().unwrap().len(), 3);
        if checksummed {
            assert_eq!(
                (supers.len(), in_supers),
                (1, 3),
                "trusted: one super-frame"
            );
        } else {
            assert_eq!(
                in_supers, 0,
                "verified: it cannot join, nor can what follows it"
            );
        }
    }
}

#[test]
fn the_stage_sends_what_is_due_in_release_order_and_leaves_the_rest() {
    let (o, mut p, sent) = outlet(None);
    let mut latest = 0;
    // Stored out of release order: 3 (due at 200) after 2 (due at 300).
    for (id, release) in [(1, 100), (2, 300), (3, 200), (4, 1_000)] {
        store(&o, &mut p, &mut latest, id, release);
    }
    let left = o.send_due(&mut || 250, 64).unwrap().0;
    assert_eq!(left, Left::Next(300));
    assert_eq!(ids(&sent), [1, 3], "only frames due by 250, earliest first");
    assert_eq!(o.control.output_at_ns.load(Ordering::Relaxed), 300);
    // Frame 2 (due at 300) must not leave before 3 (due at 200), nor 4 before 2.
    assert_eq!(o.send_due(&mut || 999, 64).unwrap().0, Left::Next(1_000));
    assert_eq!(o.send_due(&mut || 1_000, 64).unwrap().0, Left::Empty);
    assert_eq!(ids(&sent), [1, 3, 2, 4]);
    assert_eq!(o.control.output_at_ns.load(Ordering::Relaxed), u64::MAX);
}

#[test]
fn frames_are_handed_over_their_ports_send_lead_before_their_release() {
    // A port that learnt that its frames reach the host 50 ns after the send.
    let (mut tx, sent) = MemoryTx::new();
    tx.send_lead_ns = 50;
    let (o, mut p) = outlet_on(Some(1_000), tx);
    let mut latest = 0;
    for (id, release) in [(1, 1_000), (2, 2_000)] {
        store(&o, &mut p, &mut latest, id, release);
    }
    assert_eq!(o.send_due(&mut || 949, 64).unwrap().0, Left::Next(950));
    assert!(
        ids(&sent).is_empty(),
        "nothing before its release less the lead"
    );
    assert_eq!(o.control.output_at_ns.load(Ordering::Relaxed), 950);
    assert_eq!(o.send_due(&mut || 950, 64).unwrap().0, Left::Next(1_950));
    assert_eq!(ids(&sent), [1]);
    // Lateness counts from the estimated arrival: sent on time, 0 (kept as
    // 1 ns); published or not yet.
    let mut lateness = o.control.output.lock().unwrap().lateness.clone();
    lateness.add(&o.lock().st.lateness).unwrap();
    assert_eq!((lateness.len(), lateness.max()), (1, 1));
    // Max-lag, too, counts from the estimated arrival: 1 µs after it is not late.
    assert_eq!(o.send_due(&mut || 2_950, 64).unwrap().0, Left::Empty);
    assert_eq!(ids(&sent), [1, 2]);
    assert_eq!(o.lock().st.local_late, 0);
}

#[test]
fn the_stage_never_sends_while_the_output_thread_holds_the_outlet() {
    let (o, mut p, sent) = outlet(None);
    let mut latest = 0;
    store(&o, &mut p, &mut latest, 1, 100);
    let held = o.lock();
    assert_eq!(o.send_due(&mut || 500, 64).unwrap().0, Left::Busy);
    drop(held);
    assert!(ids(&sent).is_empty());
    assert_eq!(o.send_due(&mut || 500, 64).unwrap().0, Left::Empty);
    assert_eq!(ids(&sent), [1]);
}

#[test]
fn one_call_sends_at_most_max_frames_and_reports_the_next_due() {
    let (o, mut p, sent) = outlet(None);
    let mut latest = 0;
    for id in 0..5 {
        store(&o, &mut p, &mut latest, id, 100 + id as u64);
    }
    assert_eq!(o.send_due(&mut || 1_000, 2).unwrap().0, Left::Next(102));
    assert_eq!(ids(&sent), [0, 1]);
    assert_eq!(o.send_due(&mut || 1_000, 64).unwrap().0, Left::Empty);
    assert_eq!(ids(&sent), [0, 1, 2, 3, 4]);
}

#[test]
fn the_stage_takes_a_release_only_when_the_output_thread_could_not_wake_for_it() {
    let wake = 60_000;
    let now = 1_000_000;
    // Output thread parked (u64::MAX): due now, or within its wake-up.
    assert!(stage_sends(now - 5, now, wake, u64::MAX));
    assert!(stage_sends(now + 50_000, now, wake, u64::MAX));
    assert!(stage_sends(now + wake, now, wake, u64::MAX));
    // Further than a wake-up: the output thread is woken for it.
    assert!(!stage_sends(now + wake + 1, now, wake, u64::MAX));
    // Awake for an earlier or the same release (waiting, or sending):
    // it sends this one too.
    assert!(!stage_sends(now + 50_000, now, wake, now + 20_000));
    assert!(!stage_sends(now + 50_000, now, wake, now + 50_000));
    assert!(!stage_sends(now - 5, now, wake, now - 100));
    // Waiting for a later release (this one came out of order): it would
    // wake too late.
    assert!(stage_sends(now + 50_000, now, wake, now + 900_000));
}

#[test]
fn a_parked_output_thread_is_not_woken_for_a_release_within_the_stage_horizon() {
    let wake = 20_000;
    let horizon = 1_000_000;
    let now = 5_000_000;
    let who = |release, ready| who_sends(release, now, wake, ready, horizon);
    // Parked: a small delay's release (50 us, 200 us) and one at the horizon
    // are the stage's, which wakes for them itself; beyond, the output thread's.
    assert_eq!(who(now + 50_000, u64::MAX), Sender::Stage);
    assert_eq!(who(now + 200_000, u64::MAX), Sender::Stage);
    assert_eq!(who(now + horizon, u64::MAX), Sender::Stage);
    assert_eq!(who(now + horizon + 1, u64::MAX), Sender::Output);
    // Due already: the stage's.
    assert_eq!(who(now - 1, u64::MAX), Sender::Stage);
    // Awake for an earlier release (a queue in that direction): the output
    // thread sends this one after it, whatever the horizon.
    assert_eq!(who(now + 50_000, now + 40_000), Sender::Output);
    // Waiting for a later release: only what it could not wake for in time.
    assert_eq!(who(now + wake, now + 900_000), Sender::Stage);
    assert_eq!(who(now + 200_000, now + 900_000), Sender::Output);
    // A wake-up longer than the horizon still counts.
    assert_eq!(
        who_sends(now + 1_500_000, now, 2_000_000, u64::MAX, horizon),
        Sender::Stage
    );
}

#[test]
fn the_stage_publishes_an_asleep_output_threads_counts_at_most_once_per_interval() {
    let (o, mut p, _sent) = outlet(None);
    let mut latest = 0;
    // Nothing sent since the last publication: published already.
    assert!(o.publish_for_asleep(10 * STAGE_PUBLISH_NS));
    store(&o, &mut p, &mut latest, 1, 100);
    let t0 = o.lock().last_publish_ns;
    o.send_due(&mut || t0 + 200, 64).unwrap();
    // Too soon after the last publication: the output thread's to publish.
    assert!(!o.publish_for_asleep(t0 + 300));
    // Later: the stage publishes, and it is not asked again until more is sent.
    assert!(o.publish_for_asleep(t0 + STAGE_PUBLISH_NS + 300));
    assert!(!o.lock().st.changed);
    assert!(o.publish_for_asleep(t0 + STAGE_PUBLISH_NS + 400));
    assert_eq!(o.control.output.lock().unwrap().sent, 1);
}

#[test]
fn a_frame_is_late_only_when_sent_more_than_max_lag_after_its_release() {
    let max_lag = 5_000;
    let (o, mut p, sent) = outlet(Some(max_lag));
    let mut latest = 0;
    // A burst due together (a TSO burst's segments with no rate), then one
    // due later; the clock moves 1 ns per look.
    for id in 0..4 {
        store(&o, &mut p, &mut latest, id, 1_000);
    }
    store(&o, &mut p, &mut latest, 4, 2_000);
    let mut t = 1_000 + max_lag - 1;
    let left = o
        .send_due(
            &mut || {
                t += 1;
                t
            },
            64,
        )
        .unwrap()
        .0;
    assert_eq!(left, Left::Empty);
    // Frame 0 leaves exactly max-lag after its release: not late. Frames 1-3
    // leave 1-3 ns past it: late, counted, not sent. Frame 4 is within its
    // own max-lag, however late the burst before it was.
    assert_eq!(ids(&sent), [0, 4]);
    let g = o.lock();
    assert_eq!(g.st.local_late, 3);
    assert_eq!(g.st.local_sent, 2);
    // Lateness of what was sent (published or not yet).
    let mut lateness = o.control.output.lock().unwrap().lateness.clone();
    lateness.add(&g.st.lateness).unwrap();
    assert_eq!(lateness.len(), 2);
    assert!(lateness.equivalent(lateness.max(), max_lag));
}

#[test]
fn stage_and_output_thread_sending_together_keep_release_order() {
    let (o, mut p, sent) = outlet(None);
    let cfg = OutputConfig {
        spin_ns: 200_000,
        spin_always: false,
        spin_budget_ppm: crate::pipeline::DEFAULT_SPIN_BUDGET_PPM,
        max_lag_ns: None,
        reorders: true,
        sorted_runs: true,
        coalesce_window_ns: None,
    };
    let out = {
        let o = o.clone();
        std::thread::spawn(move || output_stage(o, cfg, None))
    };
    // Releases 0-40 µs ahead, a burst at a time: some due before the
    // output thread can wake, some not; the "stage" sends after each burst.
    let n = 4_000u32;
    let mut latest = 0;
    let mut id = 0;
    while id < n {
        let base = clock::now_ns().max(latest);
        for k in 0..8u64 {
            store(&o, &mut p, &mut latest, id, base + k * 5_000);
            id += 1;
        }
        o.send_due(&mut clock::now_ns, 64).unwrap();
        std::sync::atomic::fence(Ordering::SeqCst);
        if o.control.output_parked.load(Ordering::Acquire) {
            o.control.waker.wake();
        }
        std::thread::sleep(std::time::Duration::from_micros(20));
    }
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while ids(&sent).len() < n as usize && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    o.control.stop.store(true, Ordering::Release);
    o.control.waker.wake();
    out.join().unwrap();
    let got = ids(&sent);
    assert_eq!(got.len(), n as usize, "every frame sent once");
    let first_wrong = got.windows(2).position(|w| w[1] != w[0] + 1);
    assert_eq!(first_wrong, None, "release order kept");
}
