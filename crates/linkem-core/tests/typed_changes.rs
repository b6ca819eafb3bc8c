//! Typed changes applied in place ([`Node::change`]) against the path they
//! replace: the running rule set kept as text, the change made to the text,
//! the whole text parsed again and handed to [`Node::update`]. For random
//! sequences of changes between the packets of a stream, both nodes must
//! accept and refuse the same changes and decide every packet alike.

mod common;

use common::udp4;
use linkem_core::config::no_files;
use linkem_core::model::Change;
use linkem_core::node::{Decision, Node, NodeConfig, PacketIn};
use linkem_core::rules::{parse_decimal, parse_object, parse_rule, parse_rules, ObjectKind, Side};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// The rule set as the control plane kept it before typed changes: one
/// line per object, one per rule, the one-pass flag.
#[derive(Clone, Default)]
struct Text {
    objects: [BTreeMap<u32, String>; 3],
    rules: Vec<(u32, String)>,
    one_pass_off: bool,
}

const KINDS: [&str; 3] = ["sched", "queue", "pipe"];

fn kind_index(w: &str) -> usize {
    KINDS.iter().position(|k| *k == w).expect("a kind")
}

impl Text {
    fn from_file(text: &str) -> Text {
        let mut t = Text::default();
        for line in text.lines() {
            assert!(t.apply(line), "{line}");
        }
        t
    }

    /// The change a control line makes; false when the control plane
    /// refused it before any parse (deleting what does not exist).
    fn apply(&mut self, line: &str) -> bool {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w[0] {
            "pipe" | "queue" | "sched" => {
                let n = parse_decimal(w[1]).unwrap() as u32;
                let objects = &mut self.objects[kind_index(w[0])];
                if w[2] == "delete" {
                    return objects.remove(&n).is_some();
                }
                objects.insert(n, w[3..].join(" "));
            }
            "add" => {
                let n = parse_decimal(w[1]).unwrap() as u32;
                let at = self.rules.partition_point(|(m, _)| *m <= n);
                self.rules.insert(at, (n, w[2..].join(" ")));
            }
            "delete" => {
                for n in &w[1..] {
                    let n = parse_decimal(n).unwrap() as u32;
                    if !self.rules.iter().any(|(m, _)| *m == n) {
                        return false;
                    }
                    self.rules.retain(|(m, _)| *m != n);
                }
            }
            "flush" => {
                *self = Text {
                    one_pass_off: self.one_pass_off,
                    ..Text::default()
                }
            }
            "set" => self.one_pass_off = w[2] == "off",
            _ => panic!("{line}"),
        }
        true
    }

    fn render(&self) -> String {
        let mut text = String::new();
        for (i, objects) in self.objects.iter().enumerate() {
            for (n, words) in objects {
                text.push_str(&format!("{} {n} config {words}\n", KINDS[i]));
            }
        }
        for (n, body) in &self.rules {
            text.push_str(&format!("add {n} {body}\n"));
        }
        if self.one_pass_off {
            text.push_str("set one-pass off\n");
        }
        text
    }
}

/// A control line as a typed change, parsed once.
fn typed(line: &str) -> Change {
    let w: Vec<&str> = line.split_whitespace().collect();
    let kind = |k: &str| match k {
        "pipe" => ObjectKind::Pipe,
        "queue" => ObjectKind::Queue,
        _ => ObjectKind::Sched,
    };
    match w[0] {
        "pipe" | "queue" | "sched" => {
            let number = parse_decimal(w[1]).unwrap() as u32;
            if w[2] == "delete" {
                return Change::DeleteObject {
                    kind: kind(w[0]),
                    number,
                };
            }
            let def = parse_object(kind(w[0]), number, &w[3..], 1, &mut no_files).unwrap();
            Change::Object(Box::new(def))
        }
        "add" => {
            let n = parse_decimal(w[1]).unwrap() as u32;
            Change::AddRule(Box::new(
                parse_rule(Some(n), &w[2..], 1, ["a", "b"]).unwrap(),
            ))
        }
        "delete" => Change::DeleteRules(
            w[1..]
                .iter()
                .map(|n| parse_decimal(n).unwrap() as u32)
                .collect(),
        ),
        "flush" => Change::Flush,
        _ => Change::OnePass(w[2] == "on"),
    }
}

const START: &str = "pipe 1 config bw 2Mbit/s delay 3 queue 6\n\
     pipe 2 config bw 4Mbit/s delay 1 queue 4 mask src-port 0xffff\n\
     pipe 3 config bw 3Mbit/s delay 2\n\
     pipe 4 config bw 1Mbit/s delay 5 plr 0.1\n\
     sched 3 config type wf2q+\n\
     queue 5 config sched 3 weight 1\n\
     queue 6 config sched 3 weight 3\n\
     add 100 pipe 1 udp dst-port 1-3\n\
     add 150 prob 0.5 count udp\n\
     add 200 pipe 2 udp dst-port 4-6\n\
     add 300 queue 5 udp dst-port 7\n\
     add 310 queue 6 udp dst-port 8\n\
     add 400 skipto 600 udp src-port 9\n\
     add 500 pipe 4 udp\n\
     add 600 deny udp dst-port 9";

/// Changes a control client might send; some refused (a pipe a rule uses
/// deleted, a queue naming a missing pipe, a rule to a missing pipe).
const CHANGES: &[&str] = &[
    "pipe 1 config bw 1Mbit/s delay 7 queue 3",
    "pipe 1 config bw 1Mbit/s delay 7 queue 3 mask dst-port 0xffff",
    "pipe 2 config bw 8Mbit/s delay 2 queue 9 mask src-port 0xffff",
    "pipe 2 config bw 8Mbit/s delay 2",
    "pipe 3 config bw 6Mbit/s delay 1",
    "pipe 4 config bw 2Mbit/s delay 1 type fifo",
    "pipe 4 config bw 512Kbit/s delay 4",
    "pipe 7 config bw 5Mbit/s delay 2",
    "pipe 7 delete",
    "pipe 4 delete",
    "pipe 2 delete",
    "sched 3 config type qfq",
    "sched 3 delete",
    "queue 5 config sched 3 weight 2",
    "queue 6 delete",
    "queue 8 config pipe 7 weight 2",
    "queue 8 delete",
    "add 250 pipe 7 udp dst-port 4",
    "add 120 pipe 3 udp dst-port 2",
    "add 120 deny udp dst-port 3",
    "add 320 queue 8 udp dst-port 8",
    "add 50 prob 0.3 pipe 4 udp",
    "delete 100",
    "delete 120",
    "delete 200 300",
    "delete 500",
    "set one-pass off",
    "set one-pass on",
    "flush",
];

fn cfg() -> NodeConfig {
    NodeConfig {
        seed: 11,
        ..Default::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn typed_changes_decide_as_the_reparsed_rule_set(
        steps in proptest::collection::vec((0..CHANGES.len(), 1..40usize), 1..12),
        ports in proptest::collection::vec((0u16..11, 0u16..11, 0usize..2), 400),
    ) {
        let parse = |t: &str| parse_rules(t, ["a", "b"], &mut no_files);
        let mut text = Text::from_file(START);
        let mut old = Node::new(parse(&text.render()).unwrap(), cfg());
        let mut new = Node::new(parse(&text.render()).unwrap(), cfg());
        let (mut out_old, mut out_new) = (Vec::<Decision>::new(), Vec::<Decision>::new());
        let mut t = 0u64;
        let mut sent = 0usize;
        let mut log = String::new();
        for &(change, gap) in &steps {
            for &(sport, dport, side) in ports.iter().skip(sent).take(gap) {
                t += 300_000;
                let pkt = PacketIn {
                    len_bytes: 200 + 100 * u32::from(dport),
                    key: udp4(0x0a00_0001, 0x0a00_0002, sport, dport, 0),
                    side: if side == 0 { Side::A } else { Side::B },
                    tag: sent as u64,
                };
                sent += 1;
                old.on_arrival(t, pkt, &mut out_old);
                new.on_arrival(t, pkt, &mut out_new);
            }
            t += 100_000;
            old.poll(t, &mut out_old);
            new.poll(t, &mut out_new);
            let line = CHANGES[change];
            log.push_str(line);
            log.push('\n');
            let mut staged = text.clone();
            let reference = if staged.apply(line) {
                parse(&staged.render()).ok()
            } else {
                None
            };
            let got = new.change(typed(line), t, &mut out_new);
            prop_assert_eq!(got.is_ok(), reference.is_some(), "{}: {:?}\n{}", line, got, log);
            if let Some(set) = reference {
                old.update(set, t, &mut out_old);
                text = staged;
            }
            prop_assert_eq!(&out_new, &out_old, "after\n{}", log);
        }
        old.poll(u64::MAX, &mut out_old);
        new.poll(u64::MAX, &mut out_new);
        prop_assert_eq!(&out_new, &out_old, "after\n{}", log);
        let counts = |n: &Node| (n.classifier().counters.clone(), n.unmatched, n.live_flows());
        prop_assert_eq!(counts(&new), counts(&old));
    }
}

#[test]
fn a_pipe_change_keeps_its_queued_packets_in_place() {
    // Pipe 1 holds packets; reconfigured, they keep their release times.
    let set = parse_rules(START, ["a", "b"], &mut no_files).unwrap();
    let mut node = Node::new(set, cfg());
    let mut out = Vec::new();
    for i in 0..4u64 {
        let pkt = PacketIn {
            len_bytes: 1000,
            key: udp4(1, 2, 1, 1, 0),
            side: Side::A,
            tag: i,
        };
        node.on_arrival(i, pkt, &mut out);
    }
    let before: Vec<u64> = out.iter().map(|d| d.release_ns).collect();
    node.change(
        typed("pipe 1 config bw 1Mbit/s delay 7 queue 30"),
        10,
        &mut out,
    )
    .unwrap();
    assert_eq!(out.len(), 4, "nothing decided again");
    let pkt = PacketIn {
        len_bytes: 1000,
        key: udp4(1, 2, 1, 1, 0),
        side: Side::A,
        tag: 9,
    };
    node.on_arrival(20, pkt, &mut out);
    // Behind the four at 2 Mbit/s, then 8 ms at 1 Mbit/s and 7 ms of delay.
    let last_departure = before[3] - 3_000_000;
    assert_eq!(out[4].release_ns, last_departure + 8_000_000 + 7_000_000);
}
