//! Schedulers and AQMs against references written from their papers and
//! RFCs (not from linkem's code): each reference below is a direct, plain
//! transcription (linear scans instead of heaps, the RFC pseudocode line by
//! line). Both run the same random arrivals through the same link (a packet
//! of L bytes occupies it L·8/rate); every send, mark and drop must agree,
//! packet by packet.

use linkem_core::aqm::{AqmConfig, CoDelConfig, PieConfig, RedConfig};
use linkem_core::rng::{Stream, StreamId};
use linkem_core::sched::{Dropped, Pkt, QueueParams, Sched, SchedKind, SchedParams};
use proptest::prelude::*;
use std::collections::VecDeque;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    Send { id: u32, ce: bool },
    Drop { id: u32 },
    Mark { id: u32 },
}

trait Model {
    fn enq(
        &mut self,
        now: u64,
        class: usize,
        id: u32,
        len: u32,
        ect: bool,
        ev: &mut Vec<(u64, Ev)>,
    );
    fn deq(&mut self, now: u64, ev: &mut Vec<(u64, Ev)>) -> Option<u32>;
}

/// Arrivals (time, class, len, ect) through a link of `rate_bps`: arrivals at
/// t come before the service instant t.
fn simulate(
    m: &mut dyn Model,
    arrivals: &[(u64, usize, u32, bool)],
    rate_bps: u64,
) -> Vec<(u64, Ev)> {
    let mut ev = Vec::new();
    let lens: Vec<u32> = arrivals.iter().map(|a| a.2).collect();
    let mut free_at: Option<u64> = None; // busy until
    let mut i = 0;
    loop {
        let next_arr = arrivals.get(i).map(|a| a.0);
        match (next_arr, free_at) {
            (Some(ta), Some(tf)) if ta <= tf => {
                let a = arrivals[i];
                m.enq(ta, a.1, i as u32, a.2, a.3, &mut ev);
                i += 1;
            }
            (Some(ta), None) => {
                let a = arrivals[i];
                m.enq(ta, a.1, i as u32, a.2, a.3, &mut ev);
                i += 1;
                free_at = Some(ta);
            }
            (_, Some(tf)) => match m.deq(tf, &mut ev) {
                Some(id) => {
                    free_at = Some(tf + lens[id as usize] as u64 * 8_000_000_000 / rate_bps)
                }
                None => free_at = None,
            },
            (None, None) => break,
        }
    }
    ev
}

/// linkem's scheduler in the harness.
struct Impl {
    s: Sched,
    rng: Stream,
}

impl Impl {
    fn new(p: SchedParams, classes: &[QueueParams]) -> Self {
        let mut s = Sched::new(p);
        for (i, q) in classes.iter().enumerate() {
            s.add_class(Arc::new(q.clone()), i as u32, 0);
        }
        Impl {
            s,
            rng: Stream::new(9, 0, StreamId::Loss),
        }
    }
}

impl Model for Impl {
    fn enq(
        &mut self,
        now: u64,
        class: usize,
        id: u32,
        len: u32,
        ect: bool,
        ev: &mut Vec<(u64, Ev)>,
    ) {
        let mut drops: Vec<Dropped> = Vec::new();
        let rng = &mut self.rng;
        let pkt = Pkt {
            handle: id,
            len_bytes: len,
            enq_ns: now,
            ect,
            ce: false,
        };
        match self.s.enqueue(
            now,
            class as u32,
            pkt,
            (0, 0),
            &mut || rng.unit(),
            &mut drops,
        ) {
            Ok(true) => ev.push((now, Ev::Mark { id })),
            Ok(false) => {}
            Err(_) => ev.push((now, Ev::Drop { id })),
        }
        for d in drops {
            ev.push((now, Ev::Drop { id: d.pkt.handle }));
        }
    }
    fn deq(&mut self, now: u64, ev: &mut Vec<(u64, Ev)>) -> Option<u32> {
        let mut drops = Vec::new();
        let got = self.s.dequeue(now, &mut drops);
        for d in drops {
            ev.push((now, Ev::Drop { id: d.pkt.handle }));
        }
        let (_, p, ce) = got?;
        ev.push((now, Ev::Send { id: p.handle, ce }));
        Some(p.handle)
    }
}

#[derive(Debug, Clone, Copy)]
struct RP {
    id: u32,
    len: u32,
    t: u64,
    ect: bool,
    ce: bool,
}

fn droptail(limit: usize, q: &VecDeque<RP>) -> bool {
    q.len() >= limit
}

// ---------------------------------------------------------------- WF2Q+
/// Bennett & Zhang's WF²Q+ as Dummynet's `dn_sched_wf2q.c` runs it, by
/// linear scans. A flow is fresh (not in the weight sum W), busy, or idle
/// (emptied, still in W). Becoming busy with head L: fresh → S = V, W += w;
/// idle → S = max(F, V); F = S + L·inv_w; if no other flow is busy, V =
/// max(V, S). Dequeue: nothing busy → idle flows fresh, V = 0, W = 0; else
/// the idle flow of least (F, flow) turns fresh if F < V (one per dequeue);
/// then V = max(V, min S) if no busy flow has S ≤ V; the busy flow of least
/// (F, flow) among S ≤ V sends: V += L·⌊2^28/W⌋, S = F, F += L'·inv_w if it
/// still holds a packet, else idle; then the same V catch-up again.
/// inv_w = ⌊2^28/w⌋, Dummynet's fixed point.
struct RefWf2q {
    w: Vec<u64>,
    s: Vec<u128>,
    f: Vec<u128>,
    /// 0 fresh, 1 busy, 2 idle.
    state: Vec<u8>,
    q: Vec<VecDeque<RP>>,
    v: u128,
    wsum: u64,
    limit: usize,
}
impl RefWf2q {
    fn new(w: &[u32], limit: usize) -> Self {
        let n = w.len();
        RefWf2q {
            w: w.iter().map(|&x| x as u64).collect(),
            s: vec![0; n],
            f: vec![0; n],
            state: vec![0; n],
            q: vec![VecDeque::new(); n],
            v: 0,
            wsum: 0,
            limit,
        }
    }
    fn inv(x: u64) -> u128 {
        ((1u64 << 28) / x) as u128
    }
    fn catch_up(&mut self) {
        let busy: Vec<usize> = (0..self.q.len()).filter(|&c| self.state[c] == 1).collect();
        if !busy.is_empty() && busy.iter().all(|&c| self.s[c] > self.v) {
            self.v = self.v.max(busy.iter().map(|&c| self.s[c]).min().unwrap());
        }
    }
}
impl Model for RefWf2q {
    fn enq(&mut self, now: u64, c: usize, id: u32, len: u32, ect: bool, ev: &mut Vec<(u64, Ev)>) {
        if droptail(self.limit, &self.q[c]) {
            ev.push((now, Ev::Drop { id }));
            return;
        }
        self.q[c].push_back(RP {
            id,
            len,
            t: now,
            ect,
            ce: false,
        });
        if self.state[c] == 1 {
            return;
        }
        if self.state[c] == 0 {
            self.s[c] = self.v;
            self.wsum += self.w[c];
        } else {
            self.s[c] = self.f[c].max(self.v);
        }
        self.f[c] = self.s[c] + len as u128 * Self::inv(self.w[c]);
        if (0..self.q.len()).all(|o| self.state[o] != 1) {
            self.v = self.v.max(self.s[c]);
        }
        self.state[c] = 1;
    }
    fn deq(&mut self, now: u64, ev: &mut Vec<(u64, Ev)>) -> Option<u32> {
        let n = self.q.len();
        if (0..n).all(|c| self.state[c] != 1) {
            for c in 0..n {
                self.state[c] = 0;
            }
            self.v = 0;
            self.wsum = 0;
            return None;
        }
        if let Some(c) = (0..n)
            .filter(|&c| self.state[c] == 2)
            .min_by_key(|&c| (self.f[c], c))
        {
            if self.f[c] < self.v {
                self.state[c] = 0;
                self.wsum -= self.w[c];
            }
        }
        self.catch_up();
        let c = (0..n)
            .filter(|&c| self.state[c] == 1 && self.s[c] <= self.v)
            .min_by_key(|&c| (self.f[c], c))
            .unwrap();
        let p = self.q[c].pop_front().unwrap();
        self.v += p.len as u128 * Self::inv(self.wsum);
        self.s[c] = self.f[c];
        match self.q[c].front() {
            Some(h) => self.f[c] += h.len as u128 * Self::inv(self.w[c]),
            None => self.state[c] = 2,
        }
        self.catch_up();
        ev.push((
            now,
            Ev::Send {
                id: p.id,
                ce: false,
            },
        ));
        Some(p.id)
    }
}

// ---------------------------------------------------------------- DRR
/// Deficit Round Robin as Dummynet's `dn_sched_rr.c` runs it: each queue's
/// quantum is weight × lmax; a queue joins the tail of the ring with credit
/// = quantum; the head queue, if empty, leaves the ring (only then); if its
/// head packet exceeds the credit, credit += quantum and the ring turns;
/// else credit −= len and the packet is sent, the queue staying at the head.
struct RefDrr {
    quantum: Vec<u64>,
    credit: Vec<u64>,
    in_ring: Vec<bool>,
    ring: VecDeque<usize>,
    q: Vec<VecDeque<RP>>,
    limit: usize,
}
impl Model for RefDrr {
    fn enq(&mut self, now: u64, c: usize, id: u32, len: u32, ect: bool, ev: &mut Vec<(u64, Ev)>) {
        if droptail(self.limit, &self.q[c]) {
            ev.push((now, Ev::Drop { id }));
            return;
        }
        if !self.in_ring[c] {
            self.in_ring[c] = true;
            self.credit[c] = self.quantum[c];
            self.ring.push_back(c);
        }
        self.q[c].push_back(RP {
            id,
            len,
            t: now,
            ect,
            ce: false,
        });
    }
    fn deq(&mut self, now: u64, ev: &mut Vec<(u64, Ev)>) -> Option<u32> {
        loop {
            let c = *self.ring.front()?;
            let Some(head) = self.q[c].front() else {
                self.ring.pop_front();
                self.in_ring[c] = false;
                continue;
            };
            if head.len as u64 > self.credit[c] {
                self.credit[c] += self.quantum[c];
                let c = self.ring.pop_front().unwrap();
                self.ring.push_back(c);
                continue;
            }
            let p = self.q[c].pop_front().unwrap();
            self.credit[c] -= p.len as u64;
            ev.push((
                now,
                Ev::Send {
                    id: p.id,
                    ce: false,
                },
            ));
            return Some(p.id);
        }
    }
}

// ---------------------------------------------------------------- PRIO
/// Strict priority as Dummynet's `dn_sched_prio.c` runs it: one FIFO per
/// level, owned by the queue that was first backlogged at that level (its
/// limit applies to every packet of the level); the lowest non-empty level
/// sends; an emptied level has no owner until its next packet.
struct RefPrio {
    level: Vec<u32>,
    limit: Vec<usize>,
    fifo: Vec<VecDeque<RP>>,
    owner: Vec<usize>,
}
impl Model for RefPrio {
    fn enq(&mut self, now: u64, c: usize, id: u32, len: u32, ect: bool, ev: &mut Vec<(u64, Ev)>) {
        let l = self.level[c] as usize;
        if self.fifo[l].is_empty() {
            self.owner[l] = c;
        }
        if droptail(self.limit[self.owner[l]], &self.fifo[l]) {
            ev.push((now, Ev::Drop { id }));
            return;
        }
        self.fifo[l].push_back(RP {
            id,
            len,
            t: now,
            ect,
            ce: false,
        });
    }
    fn deq(&mut self, now: u64, ev: &mut Vec<(u64, Ev)>) -> Option<u32> {
        let l = (0..self.fifo.len()).find(|&l| !self.fifo[l].is_empty())?;
        let p = self.fifo[l].pop_front().unwrap();
        ev.push((
            now,
            Ev::Send {
                id: p.id,
                ce: false,
            },
        ));
        Some(p.id)
    }
}

// ---------------------------------------------------------------- CoDel
/// RFC 8289 §5, transcribed (times in ns, maxpacket = largest packet seen).
#[derive(Default)]
struct RefCodelState {
    first_above_time: u64,
    drop_next: u64,
    count: u32,
    lastcount: u32,
    dropping: bool,
    maxpacket: u32,
}
struct CQ {
    q: VecDeque<RP>,
    bytes: u64,
}
impl RefCodelState {
    fn control_law(&self, t: u64, interval: u64) -> u64 {
        t + (interval as f64 / (self.count as f64).sqrt()) as u64
    }
    fn dodequeue(&mut self, cfg: &CoDelConfig, now: u64, q: &mut CQ) -> (Option<RP>, bool) {
        let Some(p) = q.q.pop_front() else {
            self.first_above_time = 0;
            return (None, false);
        };
        q.bytes -= p.len as u64;
        let sojourn = now - p.t;
        if sojourn < cfg.target_ns || q.bytes <= self.maxpacket as u64 {
            self.first_above_time = 0;
            return (Some(p), false);
        }
        let mut ok = false;
        if self.first_above_time == 0 {
            self.first_above_time = now + cfg.interval_ns;
        } else if now >= self.first_above_time {
            ok = true;
        }
        (Some(p), ok)
    }
    fn dequeue(
        &mut self,
        cfg: &CoDelConfig,
        now: u64,
        q: &mut CQ,
        ev: &mut Vec<(u64, Ev)>,
    ) -> Option<(RP, bool)> {
        let (mut p, ok) = self.dodequeue(cfg, now, q);
        if p.is_none() {
            self.dropping = false;
            return None;
        }
        let mut mark = false;
        if self.dropping {
            if !ok {
                self.dropping = false;
            }
            while now >= self.drop_next && self.dropping {
                self.count += 1;
                if cfg.ecn && p.unwrap().ect {
                    mark = true;
                    self.drop_next = self.control_law(self.drop_next, cfg.interval_ns);
                    break;
                }
                ev.push((now, Ev::Drop { id: p.unwrap().id }));
                let (np, ok) = self.dodequeue(cfg, now, q);
                p = np;
                if !ok {
                    self.dropping = false;
                } else {
                    self.drop_next = self.control_law(self.drop_next, cfg.interval_ns);
                }
            }
        } else if ok {
            if cfg.ecn && p.unwrap().ect {
                mark = true;
            } else {
                ev.push((now, Ev::Drop { id: p.unwrap().id }));
                p = self.dodequeue(cfg, now, q).0;
            }
            self.dropping = true;
            let delta = self.count as i64 - self.lastcount as i64;
            self.count = 1;
            if delta > 1 && (now as i128 - self.drop_next as i128) < 16 * cfg.interval_ns as i128 {
                self.count = delta as u32;
            }
            self.drop_next = self.control_law(now, cfg.interval_ns);
            self.lastcount = self.count;
        }
        p.map(|p| (p, mark))
    }
}

struct RefCodel {
    cfg: CoDelConfig,
    st: RefCodelState,
    q: CQ,
    limit: usize,
}
impl Model for RefCodel {
    fn enq(&mut self, now: u64, _c: usize, id: u32, len: u32, ect: bool, ev: &mut Vec<(u64, Ev)>) {
        if self.q.q.len() >= self.limit {
            ev.push((now, Ev::Drop { id }));
            return;
        }
        self.st.maxpacket = self.st.maxpacket.max(len);
        self.q.q.push_back(RP {
            id,
            len,
            t: now,
            ect,
            ce: false,
        });
        self.q.bytes += len as u64;
    }
    fn deq(&mut self, now: u64, ev: &mut Vec<(u64, Ev)>) -> Option<u32> {
        let (p, mark) = self.st.dequeue(&self.cfg, now, &mut self.q, ev)?;
        ev.push((now, Ev::Send { id: p.id, ce: mark }));
        Some(p.id)
    }
}

// ---------------------------------------------------------------- FQ-CoDel
/// RFC 8290 §4: new and old flow lists, deficit per flow, CoDel per flow,
/// overflow drops the head of the fattest flow.
struct RefFqCodel {
    cfg: CoDelConfig,
    quantum: i64,
    limit: usize,
    flows: Vec<(RefCodelState, CQ)>,
    deficit: Vec<i64>,
    new_flows: VecDeque<usize>,
    old_flows: VecDeque<usize>,
    total: usize,
}
impl Model for RefFqCodel {
    fn enq(&mut self, now: u64, c: usize, id: u32, len: u32, ect: bool, ev: &mut Vec<(u64, Ev)>) {
        let f = &mut self.flows[c];
        f.0.maxpacket = f.0.maxpacket.max(len);
        f.1.q.push_back(RP {
            id,
            len,
            t: now,
            ect,
            ce: false,
        });
        f.1.bytes += len as u64;
        self.total += 1;
        if !self.new_flows.contains(&c) && !self.old_flows.contains(&c) {
            self.new_flows.push_back(c);
            self.deficit[c] = self.quantum;
        }
        if self.total > self.limit {
            let fat = (0..self.flows.len())
                .rev()
                .max_by_key(|&i| self.flows[i].1.bytes)
                .unwrap();
            let p = self.flows[fat].1.q.pop_front().unwrap();
            self.flows[fat].1.bytes -= p.len as u64;
            self.total -= 1;
            ev.push((now, Ev::Drop { id: p.id }));
        }
    }
    fn deq(&mut self, now: u64, ev: &mut Vec<(u64, Ev)>) -> Option<u32> {
        loop {
            let from_new = !self.new_flows.is_empty();
            let c = if from_new {
                *self.new_flows.front()?
            } else {
                *self.old_flows.front()?
            };
            if self.deficit[c] <= 0 {
                self.deficit[c] += self.quantum;
                if from_new {
                    self.new_flows.pop_front();
                } else {
                    self.old_flows.pop_front();
                }
                self.old_flows.push_back(c);
                continue;
            }
            let before = self.flows[c].1.q.len();
            let (st, q) = &mut self.flows[c];
            let got = st.dequeue(&self.cfg, now, q, ev);
            self.total -= before - self.flows[c].1.q.len();
            match got {
                None => {
                    if from_new {
                        self.new_flows.pop_front();
                        self.old_flows.push_back(c);
                    } else {
                        self.old_flows.pop_front();
                    }
                }
                Some((p, mark)) => {
                    self.deficit[c] -= p.len as i64;
                    ev.push((now, Ev::Send { id: p.id, ce: mark }));
                    return Some(p.id);
                }
            }
        }
    }
}

// ---------------------------------------------------------------- RED
/// Floyd & Jacobson, Figure 2 (+ gentle): avg by EWMA on arrival (decayed
/// over idle time in units of a 1500-byte transmission), count-based p_a.
struct RefRed {
    cfg: RedConfig,
    avg: f64,
    count: i64,
    q_time: Option<u64>,
    s_ns: u64,
    q: VecDeque<RP>,
    limit: usize,
    rng: Stream,
}
impl Model for RefRed {
    fn enq(&mut self, now: u64, _c: usize, id: u32, len: u32, ect: bool, ev: &mut Vec<(u64, Ev)>) {
        if self.q.len() >= self.limit {
            ev.push((now, Ev::Drop { id }));
            return;
        }
        let qlen = self.q.len() as f64;
        let wq = self.cfg.w_q;
        if !self.q.is_empty() {
            self.avg = (1.0 - wq) * self.avg + wq * qlen;
        } else {
            let m = ((now - self.q_time.unwrap_or(now)) / self.s_ns) as f64;
            self.avg *= (1.0 - wq).powf(m);
        }
        let (minth, maxth, maxp) = (
            self.cfg.min_th as f64,
            self.cfg.max_th as f64,
            self.cfg.max_p,
        );
        let mut outcome = 0; // 0 accept, 1 mark-or-drop, 2 forced drop
        if self.avg >= minth && (self.avg < maxth || (self.cfg.gentle && self.avg < 2.0 * maxth)) {
            self.count += 1;
            let pb = if self.avg < maxth {
                maxp * (self.avg - minth) / (maxth - minth)
            } else {
                maxp + (1.0 - maxp) * (self.avg - maxth) / maxth
            };
            let pa = if self.count as f64 * pb >= 1.0 {
                1.0
            } else {
                (pb / (1.0 - self.count as f64 * pb)).min(1.0)
            };
            if self.rng.unit() < pa {
                self.count = 0;
                outcome = 1;
            }
        } else if self.avg >= minth {
            self.count = 0;
            outcome = 2;
        } else {
            self.count = -1;
        }
        if outcome == 2 || (outcome == 1 && !(self.cfg.ecn && ect)) {
            ev.push((now, Ev::Drop { id }));
            return;
        }
        if outcome == 1 {
            ev.push((now, Ev::Mark { id }));
        }
        self.q.push_back(RP {
            id,
            len,
            t: now,
            ect,
            ce: outcome == 1,
        });
    }
    fn deq(&mut self, now: u64, ev: &mut Vec<(u64, Ev)>) -> Option<u32> {
        let p = self.q.pop_front()?;
        if self.q.is_empty() {
            self.q_time = Some(now);
        }
        ev.push((now, Ev::Send { id: p.id, ce: p.ce }));
        Some(p.id)
    }
}

// ---------------------------------------------------------------- PIE
/// RFC 8033 §4-5 basic PIE with timestamps: the drop probability is updated
/// every tupdate from the head packet's queueing delay.
struct RefPie {
    cfg: PieConfig,
    drop_prob: f64,
    qdelay_old: f64,
    burst_allowance_ns: u64,
    next_update: u64,
    q: VecDeque<RP>,
    bytes: u64,
    limit: usize,
    rng: Stream,
}
impl RefPie {
    fn run_updates(&mut self, now: u64) {
        while self.next_update <= now {
            let t = self.next_update;
            let qdelay = self.q.front().map_or(0.0, |h| (t - h.t) as f64 * 1e-9);
            let refd = self.cfg.target_ns as f64 * 1e-9;
            let mut p =
                self.cfg.alpha * (qdelay - refd) + self.cfg.beta * (qdelay - self.qdelay_old);
            let dp = self.drop_prob;
            p /= if dp < 1e-6 {
                2048.0
            } else if dp < 1e-5 {
                512.0
            } else if dp < 1e-4 {
                128.0
            } else if dp < 1e-3 {
                32.0
            } else if dp < 1e-2 {
                8.0
            } else if dp < 0.1 {
                2.0
            } else {
                1.0
            };
            if dp >= 0.1 && p > 0.02 {
                p = 0.02;
            }
            self.drop_prob += p;
            if qdelay == 0.0 && self.qdelay_old == 0.0 {
                self.drop_prob *= 0.98;
            }
            self.drop_prob = self.drop_prob.clamp(0.0, 1.0);
            self.burst_allowance_ns = self.burst_allowance_ns.saturating_sub(self.cfg.tupdate_ns);
            if self.drop_prob == 0.0 && qdelay < refd / 2.0 && self.qdelay_old < refd / 2.0 {
                self.burst_allowance_ns = self.cfg.max_burst_ns;
            }
            self.qdelay_old = qdelay;
            self.next_update = t + self.cfg.tupdate_ns;
        }
    }
}
impl Model for RefPie {
    fn enq(&mut self, now: u64, _c: usize, id: u32, len: u32, ect: bool, ev: &mut Vec<(u64, Ev)>) {
        if self.q.len() >= self.limit {
            ev.push((now, Ev::Drop { id }));
            return;
        }
        self.run_updates(now);
        let refd = self.cfg.target_ns as f64 * 1e-9;
        let early = if self.burst_allowance_ns > 0
            || (self.qdelay_old < refd / 2.0 && self.drop_prob < 0.2)
            || self.bytes <= 2 * 1500
        {
            false
        } else {
            self.rng.unit() < self.drop_prob
        };
        let mut ce = false;
        if early {
            if self.cfg.ecn && ect && self.drop_prob <= self.cfg.max_ecnth {
                ce = true;
                ev.push((now, Ev::Mark { id }));
            } else {
                ev.push((now, Ev::Drop { id }));
                return;
            }
        }
        self.q.push_back(RP {
            id,
            len,
            t: now,
            ect,
            ce,
        });
        self.bytes += len as u64;
    }
    fn deq(&mut self, now: u64, ev: &mut Vec<(u64, Ev)>) -> Option<u32> {
        self.run_updates(now);
        let p = self.q.pop_front()?;
        self.bytes -= p.len as u64;
        ev.push((now, Ev::Send { id: p.id, ce: p.ce }));
        Some(p.id)
    }
}

// ---------------------------------------------------------------- arrivals

/// Random arrivals: bursts and gaps over `classes` classes, sizes 40..1500.
fn arrivals_strategy(
    classes: usize,
    max: usize,
) -> impl Strategy<Value = Vec<(u64, usize, u32, bool)>> {
    prop::collection::vec(
        (
            0u64..400_000,
            0..classes,
            40u32..1500,
            any::<bool>(),
            0u8..10,
        ),
        1..max,
    )
    .prop_map(|v| {
        let mut t = 0;
        v.into_iter()
            .map(|(g, c, l, ect, burst)| {
                // Mostly back to back (overload), sometimes a pause.
                t += if burst < 8 { g / 20 } else { g * 20 };
                (t, c, l, ect)
            })
            .collect()
    })
}

fn qp(weight: u32, limit: u32, aqm: AqmConfig) -> QueueParams {
    QueueParams {
        weight,
        pri: weight,
        limit_packets: Some(limit),
        aqm,
        ..Default::default()
    }
}

const RATE: u64 = 10_000_000;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn wf2q_equals_dummynet(arr in arrivals_strategy(5, 400), w in prop::collection::vec(1u32..=100, 5), limit in 2u32..60) {
        let classes: Vec<_> = w.iter().map(|&w| qp(w, limit, AqmConfig::DropTail)).collect();
        let a = simulate(&mut Impl::new(SchedParams::new(SchedKind::Wf2q), &classes), &arr, RATE);
        prop_assert_eq!(a, simulate(&mut RefWf2q::new(&w, limit as usize), &arr, RATE));
    }

    #[test]
    fn drr_equals_dummynet(arr in arrivals_strategy(6, 400), w in prop::collection::vec(1u32..4, 6), lmax in prop::collection::vec(prop::option::of(64u32..=2048), 6), quantum in 64u32..=2048, limit in 2u32..60) {
        let classes: Vec<_> = w.iter().zip(&lmax).map(|(&w, &l)| QueueParams { lmax_bytes: l, ..qp(w, limit, AqmConfig::DropTail) }).collect();
        let mut p = SchedParams::new(SchedKind::Rr);
        p.quantum_bytes = quantum;
        let a = simulate(&mut Impl::new(p, &classes), &arr, RATE);
        let mut r = RefDrr {
            quantum: w.iter().zip(&lmax).map(|(&w, l)| w as u64 * l.unwrap_or(quantum) as u64).collect(),
            credit: vec![0; 6], in_ring: vec![false; 6], ring: VecDeque::new(), q: vec![VecDeque::new(); 6], limit: limit as usize,
        };
        prop_assert_eq!(a, simulate(&mut r, &arr, RATE));
    }

    #[test]
    fn prio_equals_dummynet(arr in arrivals_strategy(6, 300), pri in prop::collection::vec(0u32..4, 6), limit in prop::collection::vec(2u32..60, 6)) {
        let classes: Vec<_> = pri.iter().zip(&limit).map(|(&p, &l)| qp(p, l, AqmConfig::DropTail)).collect();
        let a = simulate(&mut Impl::new(SchedParams::new(SchedKind::Prio), &classes), &arr, RATE);
        let mut r = RefPrio { level: pri.clone(), limit: limit.iter().map(|&l| l as usize).collect(), fifo: vec![VecDeque::new(); 32], owner: vec![0; 32] };
        prop_assert_eq!(a, simulate(&mut r, &arr, RATE));
    }

    #[test]
    fn codel_equals_rfc8289(arr in arrivals_strategy(1, 1500), target_ms in 1u64..10, interval_ms in 20u64..150, ecn in any::<bool>()) {
        let cfg = CoDelConfig { target_ns: target_ms * 1_000_000, interval_ns: interval_ms * 1_000_000, ecn };
        let classes = vec![qp(1, 1000, AqmConfig::CoDel(cfg))];
        let a = simulate(&mut Impl::new(SchedParams::new(SchedKind::Fifo), &classes), &arr, RATE / 4);
        let mut r = RefCodel { cfg, st: RefCodelState::default(), q: CQ { q: VecDeque::new(), bytes: 0 }, limit: 1000 };
        let b = simulate(&mut r, &arr, RATE / 4);
        prop_assert_eq!(a, b);
    }

    #[test]
    fn fq_codel_equals_rfc8290(arr in arrivals_strategy(8, 1500), limit in 20u32..300, quantum in 300u32..3000, ecn in any::<bool>()) {
        let cfg = CoDelConfig { target_ns: 2_000_000, interval_ns: 30_000_000, ecn };
        let mut p = SchedParams::new(SchedKind::FqCodel);
        p.limit_packets = limit;
        p.quantum_bytes = quantum;
        p.flow_aqm = AqmConfig::CoDel(cfg);
        let classes: Vec<_> = (0..8).map(|_| QueueParams { limit_packets: None, aqm: AqmConfig::CoDel(cfg), ..Default::default() }).collect();
        let a = simulate(&mut Impl::new(p, &classes), &arr, RATE / 4);
        let mut r = RefFqCodel {
            cfg, quantum: quantum as i64, limit: limit as usize,
            flows: (0..8).map(|_| (RefCodelState::default(), CQ { q: VecDeque::new(), bytes: 0 })).collect(),
            deficit: vec![0; 8], new_flows: VecDeque::new(), old_flows: VecDeque::new(), total: 0,
        };
        prop_assert_eq!(a, simulate(&mut r, &arr, RATE / 4));
    }

    #[test]
    fn red_and_gred_equal_floyd_jacobson(arr in arrivals_strategy(1, 1500), gentle in any::<bool>(), ecn in any::<bool>(), min_th in 1u64..10, span in 1u64..20, max_p in 0.02f64..0.5) {
        let cfg = RedConfig { w_q: 0.02, min_th, max_th: min_th + span, max_p, gentle, ecn };
        let classes = vec![qp(1, 60, AqmConfig::Red(cfg))];
        let mut imp = Impl::new(SchedParams::new(SchedKind::Fifo), &classes);
        let s_ns = 1500 * 8 * 1_000_000_000 / (RATE / 4);
        imp.s.qs.red_s_ns = s_ns;
        let a = simulate(&mut imp, &arr, RATE / 4);
        let mut r = RefRed { cfg, avg: 0.0, count: -1, q_time: Some(0), s_ns, q: VecDeque::new(), limit: 60, rng: Stream::new(9, 0, StreamId::Loss) };
        prop_assert_eq!(a, simulate(&mut r, &arr, RATE / 4));
    }

    #[test]
    fn pie_equals_rfc8033(arr in arrivals_strategy(1, 2500), ecn in any::<bool>(), target_ms in 2u64..20, tupdate_ms in 2u64..30) {
        let cfg = PieConfig { target_ns: target_ms * 1_000_000, tupdate_ns: tupdate_ms * 1_000_000, max_burst_ns: 30_000_000, ecn, ..Default::default() };
        let classes = vec![qp(1, 500, AqmConfig::Pie(cfg))];
        let a = simulate(&mut Impl::new(SchedParams::new(SchedKind::Fifo), &classes), &arr, RATE / 8);
        let mut r = RefPie { cfg, drop_prob: 0.0, qdelay_old: 0.0, burst_allowance_ns: cfg.max_burst_ns, next_update: cfg.tupdate_ns, q: VecDeque::new(), bytes: 0, limit: 500, rng: Stream::new(9, 0, StreamId::Loss) };
        prop_assert_eq!(a, simulate(&mut r, &arr, RATE / 8));
    }
}

/// The references must see real AQM activity, or the comparisons above
/// would pass vacuously: check that overload makes each of them act.
#[test]
fn references_are_exercised() {
    let arr: Vec<_> = (0..3000u64)
        .map(|i| {
            (
                i * 300_000,
                (i % 8) as usize,
                1000 + (i % 5) as u32 * 100,
                i % 2 == 0,
            )
        })
        .collect();
    let count = |ev: &[(u64, Ev)]| {
        let d = ev.iter().filter(|e| matches!(e.1, Ev::Drop { .. })).count();
        let m = ev
            .iter()
            .filter(|e| matches!(e.1, Ev::Mark { .. } | Ev::Send { ce: true, .. }))
            .count();
        (d, m)
    };
    let cfg = CoDelConfig {
        ecn: true,
        ..Default::default()
    };
    let mut r = RefCodel {
        cfg,
        st: RefCodelState::default(),
        q: CQ {
            q: VecDeque::new(),
            bytes: 0,
        },
        limit: 1000,
    };
    let (d, m) = count(&simulate(&mut r, &arr, RATE / 4));
    assert!(d > 10 && m > 10, "codel drops {d} marks {m}");
    let pcfg = PieConfig {
        ecn: true,
        ..Default::default()
    };
    let mut r = RefPie {
        cfg: pcfg,
        drop_prob: 0.0,
        qdelay_old: 0.0,
        burst_allowance_ns: 150_000_000,
        next_update: pcfg.tupdate_ns,
        q: VecDeque::new(),
        bytes: 0,
        limit: 500,
        rng: Stream::new(9, 0, StreamId::Loss),
    };
    let (d, m) = count(&simulate(&mut r, &arr, RATE / 4));
    assert!(d + m > 10, "pie drops {d} marks {m}");
    let rcfg = RedConfig {
        w_q: 0.02,
        min_th: 5,
        max_th: 15,
        max_p: 0.1,
        gentle: true,
        ecn: true,
    };
    let mut r = RefRed {
        cfg: rcfg,
        avg: 0.0,
        count: -1,
        q_time: Some(0),
        s_ns: 4_800_000,
        q: VecDeque::new(),
        limit: 60,
        rng: Stream::new(9, 0, StreamId::Loss),
    };
    let (d, m) = count(&simulate(&mut r, &arr, RATE / 4));
    assert!(d > 10 && m > 10, "red drops {d} marks {m}");
}

// ---------------------------------------------------------------- QFQ
//
// QFQ approximates WF²Q+ (rounded timestamps, classes grouped by slot size),
// so its order is not WF²Q+'s packet for packet and copying its algorithm
// here would check nothing. The reference checks the kind of guarantee
// Checconi, Rizzo and Valente (ToN 2013) prove for QFQ instead, computed
// from the sends alone: a bit-wise worst-case fair index (B-WFI) of a few
// φ_k·σ_k plus a few L_max. With φ_k = w_k / Σw the share of class k, R the
// link rate:
//
// - B-WFI: over any interval [t1, t2] in which k is continuously backlogged,
//   W_k(t1, t2) ≥ φ_k·W(t1, t2) − B_k, W the bytes the link sent (counted
//   as they go on the wire), here B_k = 3·φ_k·σ_k + 2·L_max, σ_k the slot
//   size of k's group (the power of two at or above lmax_k/φ_k, so
//   φ_k·σ_k < 2·lmax_k; the check uses 2·lmax_k). The largest lag seen in
//   these runs is about a third of B_k; a wrong weight exceeds it.
// - Per packet (the same guarantee read as a rate-latency server): packet p
//   of class k leaves the link by its virtual finish time at rate φ_k·R,
//   F_p = max(a_p, F_{p−1}) + L_p/(φ_k·R), plus B_k/(φ_k·R).
//
// WF²Q+ (checked against its own reference above) must pass the same checks.

/// One packet on the link: class, bytes, arrival, start and end of sending.
#[derive(Debug, Clone, Copy)]
struct Tx {
    class: usize,
    len: u64,
    arr: u64,
    start: u64,
    end: u64,
}

fn on_link(arr: &[(u64, usize, u32, bool)], ev: &[(u64, Ev)], rate_bps: u64) -> Vec<Tx> {
    ev.iter()
        .map(|&(t, e)| match e {
            Ev::Send { id, .. } => {
                let a = arr[id as usize];
                Tx {
                    class: a.1,
                    len: a.2 as u64,
                    arr: a.0,
                    start: t,
                    end: t + a.2 as u64 * 8_000_000_000 / rate_bps,
                }
            }
            other => panic!("no drops expected: {other:?}"),
        })
        .collect()
}

/// Bytes sent by time `t`, counting the packet on the wire in proportion:
/// in all, and of class `k`. `pre` holds the running sums over `tx`.
fn sent_by(tx: &[Tx], pre: &[(f64, f64)], k: usize, t: u64) -> (f64, f64) {
    let j = tx.partition_point(|x| x.start < t);
    let (mut all, mut mine) = pre[j];
    if j > 0 && tx[j - 1].end > t {
        let x = tx[j - 1];
        let unsent = x.len as f64 * (x.end - t) as f64 / (x.end - x.start) as f64;
        all -= unsent;
        if x.class == k {
            mine -= unsent;
        }
    }
    (all, mine)
}

/// For each class: the largest lag φ_k·W − W_k over its backlogged
/// intervals (bytes) and the largest lateness past its rate-φ_k finish
/// time (ns).
fn lags(tx: &[Tx], phi: &[f64], rate_bps: u64) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    for (k, &phi_k) in phi.iter().enumerate() {
        let mut pre = vec![(0.0, 0.0)];
        for x in tx {
            let &(a, m) = pre.last().unwrap();
            let l = x.len as f64;
            pre.push((a + l, m + if x.class == k { l } else { 0.0 }));
        }
        let mut mine: Vec<&Tx> = tx.iter().filter(|x| x.class == k).collect();
        mine.sort_by_key(|x| x.arr);
        let (mut lag, mut late) = (0.0f64, 0.0f64);
        // Rate-φ_k finish times.
        let ns_per_byte = 8e9 / (phi_k * rate_bps as f64);
        let mut f = 0.0f64;
        for x in &mine {
            f = f.max(x.arr as f64) + x.len as f64 * ns_per_byte;
            late = late.max(x.end as f64 - f);
        }
        // Backlogged periods: from an arrival to an idle class until its
        // last packet is off the wire. D = φ_k·W − W_k is linear between
        // the link's packet boundaries, so those points are enough.
        let mut i = 0;
        while i < mine.len() {
            let p0 = mine[i].arr;
            let mut p1 = mine[i].end;
            let mut j = i + 1;
            while j < mine.len() && mine[j].arr < p1 {
                p1 = p1.max(mine[j].end);
                j += 1;
            }
            let mut pts = vec![p0];
            let first = tx.partition_point(|x| x.end <= p0);
            for x in &tx[first..] {
                if x.start >= p1 {
                    break;
                }
                pts.extend([x.start, x.end].into_iter().filter(|&t| t > p0 && t < p1));
            }
            pts.push(p1);
            let d = |t: u64| {
                let (all, mine) = sent_by(tx, &pre, k, t);
                phi_k * all - mine
            };
            let mut low = f64::INFINITY;
            for t in pts {
                let v = d(t);
                low = low.min(v);
                lag = lag.max(v - low);
            }
            i = j;
        }
        out.push((lag, late));
    }
    out
}

/// Runs `kind` over the arrivals (no drops: queues of a million packets) and
/// checks both guarantees for every class. Returns the largest lag / B_k.
fn check_qfq_bounds(
    kind: SchedKind,
    arr: &[(u64, usize, u32, bool)],
    w: &[u32],
    lmax: u32,
) -> Result<f64, TestCaseError> {
    let classes: Vec<_> = w
        .iter()
        .map(|&w| QueueParams {
            lmax_bytes: Some(lmax),
            ..qp(w, 1_000_000, AqmConfig::DropTail)
        })
        .collect();
    let ev = simulate(&mut Impl::new(SchedParams::new(kind), &classes), arr, RATE);
    let tx = on_link(arr, &ev, RATE);
    prop_assert_eq!(tx.len(), arr.len());
    let wsum: u32 = w.iter().sum();
    let phi: Vec<f64> = w.iter().map(|&x| x as f64 / wsum as f64).collect();
    let l_max = arr.iter().map(|a| a.2).max().unwrap_or(0) as f64;
    let mut worst = 0.0f64;
    for (k, (lag, late)) in lags(&tx, &phi, RATE).into_iter().enumerate() {
        let b = 3.0 * 2.0 * lmax as f64 + 2.0 * l_max;
        let b_ns = b * 8e9 / (phi[k] * RATE as f64);
        prop_assert!(
            lag <= b,
            "{:?} class {} (w {}): lag {} B {}",
            kind,
            k,
            w[k],
            lag,
            b
        );
        prop_assert!(
            late <= b_ns + 2.0,
            "{:?} class {} (w {}): {} ns late, bound {}",
            kind,
            k,
            w[k],
            late,
            b_ns
        );
        worst = worst.max(lag / b);
    }
    Ok(worst)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn qfq_keeps_the_papers_service_guarantees(arr in arrivals_strategy(6, 2000), w in prop::collection::vec(1u32..200, 6)) {
        check_qfq_bounds(SchedKind::Qfq, &arr, &w, 1500)?;
        check_qfq_bounds(SchedKind::Wf2q, &arr, &w, 1500)?;
    }

    #[test]
    fn qfq_guarantees_hold_across_groups(arr in arrivals_strategy(8, 2000), w in prop::collection::vec(prop::sample::select(vec![1u32, 2, 5, 64, 1000, 65536]), 8)) {
        check_qfq_bounds(SchedKind::Qfq, &arr, &w, 1500)?;
    }
}

/// Every class keeps at least `backlog` packets queued while the first `n`
/// packets are sent: shares over those `n` are the long-run shares.
fn backlogged_shares(kind: SchedKind, w: &[u32], n: usize, seed: u64) -> Vec<f64> {
    let wsum: u32 = w.iter().sum();
    let mut rng = Stream::new(seed, 0, StreamId::Loss);
    let mut arr = Vec::new();
    for (c, &wc) in w.iter().enumerate() {
        let count = (n as f64 * wc as f64 / wsum as f64 * 1.5) as usize + 50;
        for _ in 0..count {
            arr.push((0, c, 64 + (rng.unit() * 1437.0) as u32, false));
        }
    }
    // All at t = 0, classes interleaved (arrival order within a class kept).
    arr.sort_by_key(|a| (a.0, (a.2 as usize * 7919 + a.1) % 1009));
    let classes: Vec<_> = w
        .iter()
        .map(|&w| qp(w, 1_000_000, AqmConfig::DropTail))
        .collect();
    let ev = simulate(&mut Impl::new(SchedParams::new(kind), &classes), &arr, RATE);
    let mut bytes = vec![0u64; w.len()];
    for &(_, e) in ev.iter().take(n) {
        if let Ev::Send { id, .. } = e {
            bytes[arr[id as usize].1] += arr[id as usize].2 as u64;
        }
    }
    for (c, &wc) in w.iter().enumerate() {
        let queued = arr.iter().filter(|a| a.1 == c).count() as f64;
        let sent = ev
            .iter()
            .take(n)
            .filter(|e| matches!(e.1, Ev::Send { id, .. } if arr[id as usize].1 == c))
            .count() as f64;
        assert!(queued - sent > 10.0, "class {c} (w {wc}) ran dry");
    }
    let tot: u64 = bytes.iter().sum();
    bytes.iter().map(|&b| b as f64 / tot as f64).collect()
}

#[test]
fn qfq_long_run_shares_follow_the_weights() {
    let s = backlogged_shares(SchedKind::Qfq, &[1, 3], 40_000, 1);
    assert!((s[0] - 0.25).abs() < 0.01 * 0.25, "1:3 gave {s:?}");
    for seed in 1..4u64 {
        let mut rng = Stream::new(seed, 1, StreamId::Loss);
        let w: Vec<u32> = (0..16).map(|_| 10 + (rng.unit() * 91.0) as u32).collect();
        let wsum: u32 = w.iter().sum();
        let s = backlogged_shares(SchedKind::Qfq, &w, 200_000, seed);
        for (c, &wc) in w.iter().enumerate() {
            let want = wc as f64 / wsum as f64;
            assert!(
                (s[c] - want).abs() < 0.01 * want,
                "seed {seed} class {c} w {wc}: {} vs {want}",
                s[c]
            );
        }
    }
}

/// The bounds are not vacuous: a heavy, mixed load comes close to them.
#[test]
fn qfq_bound_check_is_exercised() {
    let arr: Vec<_> = (0..3000u64)
        .map(|i| {
            (
                i * 100_000,
                (i * 7 % 6) as usize,
                40 + (i * 331 % 1461) as u32,
                false,
            )
        })
        .collect();
    let worst = check_qfq_bounds(SchedKind::Qfq, &arr, &[1, 2, 7, 30, 100, 3], 1500).unwrap();
    assert!(worst > 0.05, "largest lag / B = {worst}");
}
