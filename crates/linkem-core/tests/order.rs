//! ReleaseQueue against an independent reference: a list kept in push order and
//! stable-sorted by release time, whose first element is the next to leave
//! (a stable sort keeps equal release times in push order, which is the
//! queue's promise).

use linkem_core::order::ReleaseQueue;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Push(u64),
    Pop,
    PopDue(u64),
}

fn op() -> impl Strategy<Value = Op> {
    // Few distinct times, so that ties are common.
    prop_oneof![
        3 => (0u64..20).prop_map(Op::Push),
        1 => Just(Op::Pop),
        1 => (0u64..20).prop_map(Op::PopDue),
    ]
}

fn reference_take(list: &mut Vec<(u64, usize)>, now: Option<u64>) -> Option<(u64, usize)> {
    list.sort_by_key(|&(release, _)| release);
    let first = *list.first()?;
    if now.is_some_and(|now| first.0 > now) {
        return None;
    }
    Some(list.remove(0))
}

proptest! {
    #[test]
    fn matches_a_stable_sort(ops in proptest::collection::vec(op(), 0..400)) {
        let mut q = ReleaseQueue::new();
        let mut reference: Vec<(u64, usize)> = Vec::new();
        for (id, op) in ops.into_iter().enumerate() {
            match op {
                Op::Push(release) => {
                    q.push(release, id);
                    reference.push((release, id));
                }
                Op::Pop => prop_assert_eq!(q.pop(), reference_take(&mut reference, None)),
                Op::PopDue(now) => {
                    prop_assert_eq!(q.pop_due(now), reference_take(&mut reference, Some(now)))
                }
            }
            prop_assert_eq!(q.len(), reference.len());
            prop_assert_eq!(q.is_empty(), reference.is_empty());
            let next = reference.iter().map(|&(r, _)| r).min();
            prop_assert_eq!(q.peek_release_ns(), next);
        }
        while let Some(got) = q.pop() {
            prop_assert_eq!(Some(got), reference_take(&mut reference, None));
        }
        prop_assert!(reference.is_empty());
    }
}
