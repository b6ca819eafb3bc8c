use super::*;
use crate::fate::Fate;

/// A model that decides a packet at once unless it is of 0 bytes, which it
/// holds until the next poll, and notes every call.
#[derive(Default)]
struct Toy {
    held: Vec<u64>,
    calls: Vec<String>,
}

fn delivered(tag: u64, at_ns: u64) -> Decision {
    Decision {
        tag,
        fate: Fate::Delivered,
        side: Side::A,
        queue_packets: 0,
        queue_bytes: 0,
        release_ns: at_ns,
        duplicate: false,
        corrupt_bits: Vec::new(),
        rule: None,
        pipe: None,
        flow_id: 0,
        hops: 0,
        queue: None,
        ce: false,
    }
}

impl Model for Toy {
    fn on_arrival(&mut self, now_ns: u64, pkt: PacketIn, out: &mut Vec<Decision>) {
        self.calls.push(format!("arrival {} at {now_ns}", pkt.tag));
        if pkt.len_bytes == 0 {
            self.held.push(pkt.tag);
        } else {
            out.push(delivered(pkt.tag, now_ns));
        }
    }
    fn next_event_ns(&mut self) -> Option<u64> {
        None
    }
    fn poll(&mut self, now_ns: u64, out: &mut Vec<Decision>) {
        self.calls.push(format!("poll at {now_ns}"));
        out.extend(self.held.drain(..).map(|t| delivered(t, now_ns)));
    }
    fn apply(&mut self, now_ns: u64, _: Change, _: &mut Vec<Decision>) -> Result<(), ChangeError> {
        self.calls.push(format!("apply at {now_ns}"));
        Ok(())
    }
    fn reads_headers(&self) -> bool {
        false
    }
    fn holds_packets(&self) -> bool {
        !self.held.is_empty()
    }
}

fn offer(d: &mut Driver<&'static str>, m: &mut Toy, stamp_ns: u64, len: u32) -> u64 {
    let t = d.arrival_ns(stamp_ns);
    d.offer(m, t, Side::A, len, FlowKey::default())
}

#[test]
fn arrivals_are_tagged_in_order() {
    let (mut d, mut m) = (Driver::<&str>::new(0), Toy::default());
    let mut tags = Vec::new();
    for stamp_ns in 0..3 {
        tags.push(offer(&mut d, &mut m, stamp_ns, 1));
        while d.next_decision().is_some() {}
    }
    assert_eq!(tags, [0, 1, 2]);
}

#[test]
fn a_stamp_is_clamped_to_the_last_instant_given() {
    let mut d = Driver::<()>::new(100);
    assert_eq!(d.arrival_ns(50), 100, "never before the start");
    assert_eq!(d.arrival_ns(200), 200);
    assert_eq!(d.arrival_ns(150), 200, "never before an earlier arrival");
    assert_eq!(d.input_ns(180), 200, "a poll or change neither");
    assert_eq!(d.last_ns(), 200);
}

#[test]
fn an_arrival_after_a_poll_at_t_is_given_t_plus_1() {
    let (mut d, mut m) = (Driver::<&str>::new(0), Toy::default());
    let t = d.input_ns(10);
    d.poll(&mut m, t);
    assert_eq!(d.arrival_ns(10), 11);
    // A poll or a change may come again at the instant of a poll.
    let mut d = Driver::<()>::new(0);
    let t = d.input_ns(10);
    d.poll(&mut m, t);
    assert_eq!(d.input_ns(10), 10);
    assert_eq!(d.arrival_ns(5), 11);
}

#[test]
fn a_frame_is_held_until_its_decision() {
    let (mut d, mut m) = (Driver::new(0), Toy::default());
    // Decided at once: the frame stays the caller's, nothing is held.
    let tag = offer(&mut d, &mut m, 1, 1);
    assert_eq!(
        d.next_decision().map(|(d, f)| (d.tag, f)),
        Some((tag, Frame::Offered))
    );
    assert_eq!(d.next_decision(), None);
    assert_eq!(d.undecided(), None);
    // Held by the model: held by the driver until the poll that decides it.
    let tag = offer(&mut d, &mut m, 2, 0);
    assert_eq!(d.next_decision(), None);
    assert_eq!(d.undecided(), Some(tag));
    d.hold(tag, "frame");
    assert_eq!(d.held(), 1);
    let t = d.input_ns(3);
    d.poll(&mut m, t);
    let (decision, frame) = d.next_decision().expect("the poll decides it");
    assert_eq!((decision.tag, frame), (tag, Frame::Held("frame")));
    assert_eq!(d.held(), 0);
}

#[test]
fn a_decision_for_no_packet_is_unknown() {
    let (mut d, mut m) = (Driver::<&str>::new(0), Toy::default());
    m.held.push(7);
    let t = d.input_ns(1);
    d.poll(&mut m, t);
    assert_eq!(d.next_decision().map(|(_, f)| f), Some(Frame::Unknown));
}

#[test]
fn changes_go_in_after_a_poll_at_their_instant() {
    let (mut d, mut m) = (Driver::<&str>::new(0), Toy::default());
    let tag = offer(&mut d, &mut m, 1, 0);
    assert_eq!(d.undecided(), Some(tag));
    d.hold(tag, "frame");
    let t = d.input_ns(5);
    let at = d.begin_changes(&mut m, t);
    assert_eq!(at.at_ns(), 5);
    // The poll's decisions come before any change.
    assert_eq!(
        d.next_decision().map(|(_, f)| f),
        Some(Frame::Held("frame"))
    );
    d.apply(
        &mut m,
        at,
        Change::Link {
            sides: [true, true],
            config: Default::default(),
        },
    )
    .expect("applied");
    assert_eq!(m.calls, ["arrival 0 at 1", "poll at 5", "apply at 5"]);
}
