//! `linkem probe`: precisely paced UDP from a sender to a receiver (each in its
//! own network namespace if asked), and what the path did to it: one-way delay
//! and its deviation from what was configured, loss, duplicates, reordering,
//! and the gaps between packets before and after (MoonEm's measurements,
//! MoonEm §6; docs/model.md).
//!
//! Clock: both ends run in this process and read CLOCK_TAI. The sender stamps
//! each payload just before `sendto`; the receiver takes the kernel's receive
//! timestamp (SO_TIMESTAMPNS, CLOCK_REALTIME) and converts it to TAI with the
//! offset between the two clocks read at start.
//!
//! Payload (big endian, 16 bytes, so that a 64-byte frame carries it):
//! magic `0x4c4b` ("LK"), run id (u16), sequence number (u32), send time (u64 ns).

pub mod stats;

pub use crate::cli::tools::{Pattern, ProbeArgs};
use anyhow::{bail, Context, Result};
use linkem_io::{netns, sys};
use linkem_runtime::clock;
use stats::{Analysis, Series};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const MAGIC: u16 = 0x4c4b;
const PAYLOAD_BYTES: usize = 16;
/// Ethernet + IPv4 + UDP headers and the FCS: a frame of `size` bytes carries
/// `size - 46` bytes of UDP payload.
const FRAME_OVERHEAD_BYTES: u32 = 14 + 20 + 8 + 4;
/// The sender sleeps until this long before a send time, then spins: long
/// enough to absorb a timer wake-up on a loaded VM, short enough not to hold a
/// core that the path under test needs.
const SPIN_NS: u64 = 100_000;
/// Below this mean gap the sender spins most of the time, so it stays at
/// ordinary priority and leaves the cores to the path under test.
const REALTIME_MIN_GAP_NS: u64 = 250_000;
/// Below linkem's own stages (priority 10), so a sender on the same machine
/// never delays the emulator it measures.
const SENDER_PRIORITY: i32 = 5;

/// The fastest a probe sends: 100 Mpps, above what one sender thread can reach and
/// above 100 GbE's 64-byte line rate, so anything higher is a typo.
pub const MAX_RATE_PPS: f64 = 100e6;
/// The slowest: one packet per 100 s (a schedule must end within a day).
pub const MIN_RATE_PPS: f64 = 0.01;
/// Most packets per run: every send and receive time is kept in memory for the
/// percentiles (about 40 bytes a packet).
pub const MAX_PACKETS: u64 = 50_000_000;

/// Parses a packet rate (`10kpps`, `500pps`, `1Mpps`) or a bit rate over the
/// frame bytes (`10mbit`), into packets per second, within
/// [`MIN_RATE_PPS`]..=[`MAX_RATE_PPS`].
pub fn parse_packet_rate(text: &str, size_bytes: u32) -> Result<f64> {
    let lower = text.to_ascii_lowercase();
    let pps = match [("mpps", 1e6), ("kpps", 1e3), ("pps", 1.0)]
        .into_iter()
        .find_map(|(suffix, scale)| lower.strip_suffix(suffix).map(|num| (num, scale)))
    {
        Some((num, scale)) => {
            // Digits and one point only: no exponents, signs, `inf` or `nan`.
            let plain = !num.is_empty()
                && num.chars().all(|c| c.is_ascii_digit() || c == '.')
                && num.matches('.').count() <= 1;
            let v: f64 = num
                .parse()
                .ok()
                .filter(|_| plain)
                .ok_or_else(|| anyhow::anyhow!("'{text}': not a packet rate (e.g. 10kpps)"))?;
            v * scale
        }
        None => {
            let bps = linkem_core::units::parse_rate_bps(text)
                .map_err(|e| anyhow::anyhow!("{e} (or give packets per second, e.g. 10kpps)"))?;
            bps as f64 / (size_bytes.max(1) as f64 * 8.0)
        }
    };
    if !(pps.is_finite() && (MIN_RATE_PPS..=MAX_RATE_PPS).contains(&pps)) {
        bail!(
            "'{text}': a probe sends between {MIN_RATE_PPS} pps and {} Mpps",
            MAX_RATE_PPS / 1e6
        );
    }
    Ok(pps)
}

#[derive(Debug, Clone)]
pub struct ProbeConfig {
    pub dst: SocketAddrV4,
    /// Namespaces of the sender and the receiver (None: this one).
    pub src_ns: Option<String>,
    pub dst_ns: Option<String>,
    pub pattern: Pattern,
    pub rate_pps: f64,
    /// Ethernet frame size including the FCS (64..=1518).
    pub size_bytes: u32,
    pub packets: u64,
    pub expected_delay_ns: u64,
    pub seed: u64,
    /// How long the receiver waits after the last send for late packets.
    pub drain_ns: u64,
    /// The first send time (CLOCK_TAI ns), to run in step with another probe;
    /// None: 50 ms and two expected delays after the sender starts, time for
    /// the neighbour to be resolved through the path.
    pub start_tai_ns: Option<u64>,
}

impl ProbeConfig {
    /// Refuses what cannot be sent: frame sizes outside Ethernet's, no packets or more
    /// than [`MAX_PACKETS`], rates outside the probe's range.
    pub fn check(&self) -> Result<()> {
        if !(64..=1518).contains(&self.size_bytes) {
            bail!(
                "--size {}: a frame is 64 to 1518 bytes (with its FCS)",
                self.size_bytes
            );
        }
        if self.packets == 0 {
            bail!("--packets 0: nothing to send");
        }
        if self.packets > MAX_PACKETS {
            bail!(
                "{} packets: at most {MAX_PACKETS} per run (shorten --duration or lower --packets)",
                self.packets
            );
        }
        if !(self.rate_pps.is_finite() && (MIN_RATE_PPS..=MAX_RATE_PPS).contains(&self.rate_pps)) {
            bail!(
                "rate {} pps: outside {MIN_RATE_PPS}..={MAX_RATE_PPS}",
                self.rate_pps
            );
        }
        Ok(())
    }
}

/// One probe run: the figures, their histograms, and the raw series.
pub struct ProbeRun {
    pub analysis: Analysis,
    pub series: Series,
    pub clock: &'static str,
}

pub fn tai_now_ns() -> u64 {
    clock::now_ns_on(libc::CLOCK_TAI)
}

/// Sets its flag when dropped: a side's thread says it has ended however it ends
/// (returning, failing, or panicking).
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Runs `f` on a new thread inside network namespace `ns` (or this one). `ended` is set
/// when the thread ends, however; `stop` is set as well when it fails (including when
/// the namespace cannot be entered), so that the other side ends too.
fn in_ns<'scope, 'env, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    ns: Option<String>,
    name: &'static str,
    ended: &'scope AtomicBool,
    stop: &'scope AtomicBool,
    f: impl FnOnce() -> Result<T> + Send + 'scope,
) -> std::thread::ScopedJoinHandle<'scope, Result<T>> {
    std::thread::Builder::new()
        .name(format!("linkem-probe-{name}"))
        .spawn_scoped(scope, move || {
            let _ended = SetOnDrop(ended);
            let result = (|| {
                if let Some(ns) = ns {
                    netns::enter(&ns).with_context(|| format!("the {name}"))?;
                }
                f()
            })();
            if result.is_err() {
                stop.store(true, Ordering::Release);
            }
            result
        })
        .expect("a thread starts")
}

/// The send times the pattern asks for, relative to the start.
pub fn schedule(pattern: Pattern, rate_pps: f64, packets: u64, seed: u64) -> Vec<u64> {
    let gap = 1e9 / rate_pps;
    let mut rng = seed ^ 0x9E37_79B9_7F4A_7C15;
    let mut t = 0.0f64;
    (0..packets)
        .map(|k| match pattern {
            Pattern::Constant => (k as f64 * gap) as u64,
            Pattern::Burst(n) => ((k / n as u64) as f64 * n as f64 * gap) as u64,
            Pattern::Poisson => {
                let at = t as u64;
                // SplitMix64: a generator's schedule needs no more than this.
                rng = rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = rng;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^= z >> 31;
                let u = ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
                t += -u.ln() * gap;
                at
            }
        })
        .collect()
}

fn receiver_socket(port: u16) -> Result<UdpSocket> {
    let sock = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))
        .with_context(|| format!("cannot bind UDP port {port} for the receiver"))?;
    sys::enable_rx_timestamps(&sock).context("SO_TIMESTAMPNS")?;
    // Best effort: a smaller buffer only loses more under bursts, which is measured.
    let _ = sys::set_receive_buffer(&sock, 64 << 20);
    sock.set_read_timeout(Some(Duration::from_millis(20)))?;
    Ok(sock)
}

/// How long a run may take beyond its schedule before the side still waiting gives
/// up: a sender that falls this far behind, or a receiver whose sender never says it
/// is done, ends the run with the reason instead of waiting for ever.
fn slack_ns(span_ns: u64) -> u64 {
    5_000_000_000 + span_ns
}

/// What the receiver thread needs.
struct RxSide<'a> {
    cfg: &'a ProbeConfig,
    run_id: u16,
    /// The sender has ended.
    sender_ended: &'a AtomicBool,
    /// Either side failed, or the caller asked to stop.
    stop: &'a AtomicBool,
    /// The receiver gives up at this TAI time even if the sender never ends.
    deadline_ns: u64,
}

impl RxSide<'_> {
    fn receive(&self, ready: std::sync::mpsc::Sender<()>) -> Result<Vec<(u64, u64)>> {
        let cfg = self.cfg;
        let sock = receiver_socket(cfg.dst.port())?;
        let tai_offset = tai_now_ns() as i64 - clock::now_ns() as i64;
        let _ = ready.send(());
        let mut got: Vec<(u64, u64)> = Vec::with_capacity(cfg.packets as usize);
        let mut buf = vec![0u8; 2048];
        let mut drain_until: Option<u64> = None;
        loop {
            let stamped = sys::recv_stamped(&sock, &mut buf).context("receive")?;
            if let Some((n, ts)) = stamped {
                if n >= PAYLOAD_BYTES
                    && u16::from_be_bytes([buf[0], buf[1]]) == MAGIC
                    && u16::from_be_bytes([buf[2], buf[3]]) == self.run_id
                {
                    let seq = u32::from_be_bytes(buf[4..8].try_into().expect("4 bytes"));
                    let rx = if ts != 0 {
                        (ts as i64 + tai_offset) as u64
                    } else {
                        tai_now_ns()
                    };
                    got.push((seq as u64, rx));
                }
            }
            if self.stop.load(Ordering::Acquire) {
                return Ok(got);
            }
            let now = tai_now_ns();
            if self.sender_ended.load(Ordering::Acquire) {
                if now >= *drain_until.get_or_insert(now + cfg.drain_ns) {
                    return Ok(got);
                }
            } else if now >= self.deadline_ns {
                bail!("the sender did not finish in time; the receiver gave up");
            }
        }
    }
}

/// What the sender thread needs.
struct TxSide<'a> {
    cfg: &'a ProbeConfig,
    run_id: u16,
    offsets: &'a [u64],
    stop: &'a AtomicBool,
}

/// Send times: when each packet was due and when it went.
type Sends = (Vec<u64>, Vec<u64>);

impl TxSide<'_> {
    fn send(&self) -> Result<Sends> {
        let cfg = self.cfg;
        let sock = UdpSocket::bind("0.0.0.0:0").context("sender socket")?;
        sock.connect(cfg.dst)
            .with_context(|| format!("no route to {}", cfg.dst))?;
        // Never block in a send: a neighbour that does not answer ARP holds the socket's
        // buffer for seconds at a time; a send that cannot go now is a loss before the path.
        sock.set_nonblocking(true).context("sender socket")?;
        clock::set_timer_slack_ns(1);
        let mean_gap_ns = (1e9 / cfg.rate_pps) as u64;
        if mean_gap_ns >= REALTIME_MIN_GAP_NS {
            // Best effort: without it the sender is only less punctual, and
            // its lateness is measured and reported either way.
            let _ = linkem_runtime::pipeline::set_realtime(SENDER_PRIORITY);
        }
        let payload = (cfg.size_bytes - FRAME_OVERHEAD_BYTES) as usize;
        let mut buf = vec![0u8; payload];
        buf[0..2].copy_from_slice(&MAGIC.to_be_bytes());
        buf[2..4].copy_from_slice(&self.run_id.to_be_bytes());
        // A first datagram outside the run resolves the neighbour (ARP
        // through the path takes two one-way delays); measured packets sent
        // meanwhile would wait in the neighbour queue and leave together.
        buf[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        let _ = sock.send(&buf);
        let start = cfg
            .start_tai_ns
            .unwrap_or_else(|| tai_now_ns() + 2 * cfg.expected_delay_ns + 50_000_000);
        let span_ns = self.offsets.last().copied().unwrap_or(0);
        let deadline = start + span_ns + slack_ns(span_ns);
        let mut sent = Vec::with_capacity(self.offsets.len());
        let mut scheduled = Vec::with_capacity(self.offsets.len());
        let (mut failed, mut last_error) = (0u64, None);
        for (seq, off) in self.offsets.iter().enumerate() {
            if self.stop.load(Ordering::Acquire) {
                bail!("the sender stopped after {seq} packets");
            }
            let due = start + off;
            let now = tai_now_ns();
            if now > deadline {
                bail!(
                    "the sender fell {:.1} s behind its schedule (machine too loaded or rate too high)",
                    (now - due) as f64 / 1e9
                );
            }
            if due > now + SPIN_NS {
                clock::sleep_until_ns_on(libc::CLOCK_TAI, due - SPIN_NS);
            }
            while tai_now_ns() < due {
                std::hint::spin_loop();
            }
            let t = tai_now_ns();
            buf[4..8].copy_from_slice(&(seq as u32).to_be_bytes());
            buf[8..16].copy_from_slice(&t.to_be_bytes());
            // A send that fails (a full buffer, an unreachable neighbour) is a loss
            // before the path: it counts as sent and lost, as the wire would show it.
            if let Err(e) = sock.send(&buf) {
                failed += 1;
                last_error = Some(e);
            }
            sent.push(t);
            scheduled.push(due);
        }
        if let Some(e) = last_error {
            if failed == self.offsets.len() as u64 {
                bail!("every send to {} failed: {e}", cfg.dst);
            }
            eprintln!(
                "linkem probe: {failed} of {} sends failed (counted as lost; last: {e})",
                self.offsets.len()
            );
        }
        Ok((sent, scheduled))
    }
}

/// Runs one probe: sends, receives, analyses.
pub fn run(cfg: &ProbeConfig) -> Result<ProbeRun> {
    run_until(cfg, &AtomicBool::new(false))
}

/// [`run`], ending early (with an error) once `stop` is set. Either side sets it when it
/// fails, so a failure on one side ends the other at once with its reason; no wait is
/// without a deadline.
pub fn run_until(cfg: &ProbeConfig, stop: &AtomicBool) -> Result<ProbeRun> {
    cfg.check()?;
    let run_id = (cfg.seed as u16) ^ (std::process::id() as u16);
    let offsets = schedule(cfg.pattern, cfg.rate_pps, cfg.packets, cfg.seed);
    let span_ns = offsets.last().copied().unwrap_or(0);
    let (sender_ended, receiver_ended) = (AtomicBool::new(false), AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let rx = RxSide {
        cfg,
        run_id,
        sender_ended: &sender_ended,
        stop,
        deadline_ns: tai_now_ns()
            + 2 * cfg.expected_delay_ns
            + span_ns
            + slack_ns(span_ns)
            + cfg.drain_ns
            + 5_000_000_000,
    };
    let tx = TxSide {
        cfg,
        run_id,
        offsets: &offsets,
        stop,
    };
    type Series = (Vec<u64>, Vec<u64>, Vec<(u64, u64)>);
    let (sent, scheduled, received) = std::thread::scope(|s| -> Result<Series> {
        let (rx, tx) = (&rx, &tx);
        let receiver = in_ns(
            s,
            cfg.dst_ns.clone(),
            "receiver",
            &receiver_ended,
            stop,
            || rx.receive(ready_tx),
        );
        // The receiver must be listening before the first packet leaves; it drops
        // `ready_tx` (ending this wait at once) if it fails first.
        if ready_rx.recv_timeout(Duration::from_secs(5)).is_err() {
            stop.store(true, Ordering::Release);
            return match receiver.join().expect("receiver thread") {
                Err(e) => Err(e),
                Ok(_) => bail!("the receiver did not start within 5 s"),
            };
        }
        let sender = in_ns(s, cfg.src_ns.clone(), "sender", &sender_ended, stop, || {
            tx.send()
        });
        let sent = sender.join().expect("sender thread");
        let received = receiver.join().expect("receiver thread");
        // The side that failed first gave the reason; the other only stopped.
        let received = received?;
        let (sent, scheduled) = sent?;
        Ok((sent, scheduled, received))
    })?;
    let (analysis, series) = stats::analyse(&scheduled, &sent, &received, cfg.expected_delay_ns);
    Ok(ProbeRun {
        analysis,
        series,
        clock: "CLOCK_TAI",
    })
}

impl ProbeArgs {
    pub fn config(&self) -> Result<ProbeConfig> {
        let rate_pps = parse_packet_rate(&self.rate, self.size)
            .with_context(|| format!("--rate {}", self.rate))?;
        let expected_delay_ns = linkem_core::units::parse_time_ns(&self.expect_delay)
            .map_err(|e| anyhow::anyhow!("--expect-delay {e}"))?;
        let packets = match (&self.packets, &self.duration) {
            (Some(n), _) => *n,
            (None, Some(d)) => {
                // Both factors are bounded, so the product is finite; the cast saturates.
                let n = (d * rate_pps).ceil().max(1.0) as u64;
                if n > MAX_PACKETS {
                    bail!(
                        "--duration {d}s at {rate_pps:.0} pps is {n} packets: at most {MAX_PACKETS} per run"
                    );
                }
                n
            }
            (None, None) => ((2.0 * rate_pps).ceil() as u64).max(1),
        };
        let cfg = ProbeConfig {
            dst: SocketAddrV4::new(self.dst, self.port),
            src_ns: self.src_ns.clone(),
            dst_ns: self.dst_ns.clone(),
            pattern: self.pattern,
            rate_pps,
            size_bytes: self.size,
            packets,
            expected_delay_ns,
            seed: self.seed,
            drain_ns: expected_delay_ns * 2 + 500_000_000,
            start_tai_ns: None,
        };
        cfg.check()?;
        Ok(cfg)
    }
}

/// ns as µs with one decimal, for tables.
pub fn us(ns: i64) -> String {
    format!("{:.1}", ns as f64 / 1e3)
}

/// The text summary of one run.
pub fn summary(cfg: &ProbeConfig, run: &ProbeRun) -> String {
    let a = &run.analysis;
    let row = |name: &str, p: &stats::Percentiles| {
        format!(
            "{name:<26}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}\n",
            us(p.min),
            us(p.p50),
            us(p.p99),
            us(p.p99_9),
            us(p.p99_99),
            us(p.max)
        )
    };
    let mut s = format!(
        "linkem probe: {} packets of {} bytes, {} at {:.0} pps to {} (clock {})\n",
        a.sent, cfg.size_bytes, cfg.pattern, cfg.rate_pps, cfg.dst, run.clock
    );
    s += &format!(
        "received {} (lost {}, {:.4} %), duplicates {}, reordered {}\n",
        a.received,
        a.lost,
        a.loss_ratio * 100.0,
        a.duplicates,
        a.reordered
    );
    s += &format!(
        "{:<26}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}\n",
        "µs", "min", "p50", "p99", "p99.9", "p99.99", "max"
    );
    s += &row("one-way delay", &a.delay_ns);
    s += &row(
        &format!(
            "deviation from {}",
            linkem_core::units::format_time_ns(a.expected_delay_ns)
        ),
        &a.deviation_ns,
    );
    s += &row("sender lateness", &a.send_error_ns);
    s += &row("gap at sender", &a.send_gap_ns);
    s += &row("gap at receiver", &a.recv_gap_ns);
    s += &row("|gap change|", &a.gap_change_ns);
    s += &format!(
        "bursts (gaps < {} µs): {} added, {} split, of {} pairs\n",
        stats::BURST_GAP_NS / 1000,
        a.bursts_added,
        a.bursts_split,
        a.gap_pairs
    );
    s
}

/// `linkem probe`.
pub fn run_cli(args: &ProbeArgs) -> Result<()> {
    let cfg = args.config()?;
    if let (Some(json), Some(dir)) = (&args.json, &args.plot) {
        crate::render::figures::refuse_json_among_plots(json, dir, |name| {
            crate::render::figures::is_plot_file(name, |stem| stem == "latency" || stem == "gaps")
        })?;
    }
    let run = run(&cfg)?;
    print!("{}", summary(&cfg, &run));
    if let Some(path) = &args.json {
        let out = serde_json::json!({
            "clock": run.clock,
            "destination": cfg.dst.to_string(),
            "pattern": cfg.pattern.to_string(),
            "rate_pps": cfg.rate_pps,
            "size_bytes": cfg.size_bytes,
            "analysis": run.analysis,
        });
        linkem_io::outfile::write_all(
            path,
            (serde_json::to_string_pretty(&out)? + "\n").as_bytes(),
        )?;
    }
    if let Some(dir) = &args.plot {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        crate::render::figures::latency(
            &dir.join("latency"),
            &format!("one-way delay, {} at {:.0} pps", cfg.pattern, cfg.rate_pps),
            &[crate::render::figures::LatencySeries {
                label: format!("{} bytes", cfg.size_bytes),
                delay_ns: &run.series.delay_ns,
                expected_ns: cfg.expected_delay_ns as i64,
            }],
        )?;
        crate::render::figures::gaps(
            &dir.join("gaps"),
            "inter-packet gaps before and after the path",
            &run.series.send_gap_ns,
            &run.series.recv_gap_ns,
        )?;
        println!(
            "plots: {0}/latency.png, {0}/latency.svg, {0}/gaps.png, {0}/gaps.svg",
            dir.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        probe: ProbeArgs,
    }

    fn config(args: &[&str]) -> Result<ProbeConfig> {
        let mut all = vec!["probe", "10.0.0.2"];
        all.extend(args);
        Cli::try_parse_from(all)?.probe.config()
    }

    #[test]
    fn packet_rates_in_both_spellings() {
        assert_eq!(parse_packet_rate("10kpps", 64).unwrap(), 10_000.0);
        assert_eq!(parse_packet_rate("1Mpps", 64).unwrap(), 1e6);
        assert_eq!(parse_packet_rate("512kbit", 64).unwrap(), 1000.0);
    }

    #[test]
    fn non_finite_and_absurd_rates_are_refused() {
        let huge = format!("{}pps", "9".repeat(400));
        for r in [
            "1e305Mpps",
            "infpps",
            "inf Mpps",
            "nanpps",
            "-5pps",
            "0pps",
            "0.001pps",
            "101Mpps",
            "1e3kpps",
            huge.as_str(),
            "10tbit",
            "pps",
            "1.2.3pps",
        ] {
            assert!(parse_packet_rate(r, 64).is_err(), "{r} accepted");
        }
    }

    #[test]
    fn sizes_packets_and_durations_are_bounded() {
        assert!(config(&["--size", "63"]).is_err());
        assert!(config(&["--size", "1519"]).is_err());
        assert!(config(&["--packets", "0"]).is_err());
        let e = config(&["--packets", "50000001"]).unwrap_err().to_string();
        assert!(e.contains("at most"), "{e}");
        let e = config(&["--rate", "1Mpps", "--duration", "1000s"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--duration"), "{e}");
        assert!(config(&["--duration", "2d"]).is_err());
        assert!(config(&["--expect-delay", "86401s"]).is_err());
        let c = config(&["--rate", "1kpps", "--duration", "3s"]).unwrap();
        assert_eq!(c.packets, 3000);
    }
}
