//! `linkem plot LOG`: throughput and delay over time from a link log in
//! mahimahi's format (ours, `--log-a-to-b`, or mahimahi's own), drawn as
//! mahimahi's `mm-throughput-graph` and `mm-delay-graph` draw them:
//!
//! - throughput: per bin of `--ms-per-bin` ms, the capacity (`#` lines:
//!   delivery opportunities, when the log has them), the ingress (`+`) and
//!   the throughput (`-`), each bits in the bin / bin length, in Mbit/s,
//!   against the time since the base timestamp;
//! - delay: each departure's delay (ms) at its arrival time (T − DELAY), and
//!   its 95th percentile.
//!
//! Times are the log's ms minus `# base timestamp`, as both scripts do; a
//! log without that line is refused, as they refuse it. `d` lines (drops,
//! mahimahi's AQM) are counted, not drawn.

pub use crate::cli::tools::PlotArgs;
use crate::render::figures::{
    draw_lines_with_legend, register_font, render_png, render_svg, write_both, COLORS,
};
use anyhow::{anyhow, bail, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// Largest log `linkem plot` reads (256 MiB, some 15 million events): the
/// log is read whole and each event kept.
pub const MAX_LOG_BYTES: u64 = 256 << 20;

/// Most throughput bins a plot draws: each of the three series holds one
/// point per bin, so a log whose events span more bins than this (a stray
/// large timestamp) is refused with the `--ms-per-bin` that would fit.
pub const MAX_BINS: u64 = 1_000_000;

/// A log, read.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Log {
    /// (ms since the base timestamp, bytes) per event kind.
    pub arrivals: Vec<(u64, u64)>,
    pub opportunities: Vec<(u64, u64)>,
    /// (ms, bytes, delay ms).
    pub departures: Vec<(u64, u64, u64)>,
    pub drops: u64,
}

impl Log {
    /// Reads a log's text; `name` names it in errors.
    pub fn parse(text: &str, name: &str) -> Result<Log> {
        let mut base: Option<u64> = None;
        let mut log = Log::default();
        for (n, line) in text.lines().enumerate() {
            let at = || format!("{name} line {}", n + 1);
            if let Some(b) = line.strip_prefix("# base timestamp:") {
                if base.is_some() {
                    bail!("{}: a second '# base timestamp' line", at());
                }
                base = Some(
                    b.trim()
                        .parse()
                        .with_context(|| format!("{}: bad base timestamp", at()))?,
                );
                continue;
            }
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let w: Vec<&str> = line.split_whitespace().collect();
            let num = |i: usize, what: &str| -> Result<u64> {
                let s = w
                    .get(i)
                    .ok_or_else(|| anyhow!("{}: word {} missing: expected {what}", at(), i + 1))?;
                s.parse().map_err(|_| {
                    anyhow!("{}, word {}: expected {what}, a whole number", at(), i + 1)
                })
            };
            let Some(b) = base else {
                bail!(
                    "{}: the log has no '# base timestamp' line before its events",
                    at()
                );
            };
            let t = num(0, "a time")?;
            let t = t
                .checked_sub(b)
                .ok_or_else(|| anyhow!("{}: the time is before the base timestamp", at()))?;
            match w.get(1).copied() {
                Some("+") => log.arrivals.push((t, num(2, "a byte count")?)),
                Some("#") => log.opportunities.push((t, num(2, "a byte count")?)),
                Some("-") => {
                    let delay = num(3, "a delay")?;
                    if delay > t {
                        bail!("{}: the delay is longer than the time since the base", at());
                    }
                    log.departures.push((t, num(2, "a byte count")?, delay));
                }
                Some("d") => log.drops = log.drops.saturating_add(num(2, "a packet count")?),
                _ => bail!(
                    "{}, word 2: expected an event: '+', '-', '#' or 'd' (a log line is 'MS + BYTES', 'MS - BYTES DELAY', 'MS # BYTES' or 'MS d PACKETS BYTES')",
                    at(),
                ),
            }
        }
        if base.is_none() {
            bail!("{name}: the log has no '# base timestamp' line: not a mahimahi link log");
        }
        Ok(log)
    }

    /// The time of the first and last event, ms.
    fn span_ms(&self) -> Option<(u64, u64)> {
        let times = self
            .arrivals
            .iter()
            .chain(&self.opportunities)
            .map(|e| e.0)
            .chain(self.departures.iter().map(|e| e.0));
        let (mut lo, mut hi) = (u64::MAX, 0);
        for t in times {
            lo = lo.min(t);
            hi = hi.max(t);
        }
        (lo <= hi).then_some((lo, hi))
    }

    /// Mbit/s per bin of `ms_per_bin` for `events` (time, bytes), at each
    /// bin's start (s), every bin from the first event's to the last's.
    pub fn binned_mbps(
        events: &[(u64, u64)],
        span: (u64, u64),
        ms_per_bin: u64,
    ) -> Vec<(f64, f64)> {
        let first = span.0 / ms_per_bin;
        let last = span.1 / ms_per_bin;
        let mut bits = vec![0u64; (last - first + 1) as usize];
        for &(t, bytes) in events {
            let bin = &mut bits[(t / ms_per_bin - first) as usize];
            *bin = bin.saturating_add(bytes.saturating_mul(8));
        }
        bits.iter()
            .enumerate()
            .map(|(i, &b)| {
                let start_s = ((first + i as u64) * ms_per_bin) as f64 / 1000.0;
                (start_s, b as f64 / (ms_per_bin as f64 / 1000.0) / 1e6)
            })
            .collect()
    }
}

/// The 95th percentile of `v` as mm-delay-graph takes it (element ⌊0.95 n⌋ of the sorted values).
fn p95(v: &[u64]) -> u64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    s.get(s.len() * 95 / 100).or(s.last()).copied().unwrap_or(0)
}

/// The throughput graph's series: (label, points).
pub fn throughput_series(log: &Log, ms_per_bin: u64) -> Vec<(String, Vec<(f64, f64)>)> {
    let Some(span) = log.span_ms() else {
        return Vec::new();
    };
    let secs = ((span.1 - span.0) as f64 / 1000.0).max(1e-3);
    let avg =
        |events: &[(u64, u64)]| events.iter().map(|e| e.1 as f64 * 8.0).sum::<f64>() / secs / 1e6;
    let departures: Vec<(u64, u64)> = log.departures.iter().map(|d| (d.0, d.1)).collect();
    let mut out = Vec::new();
    if !log.opportunities.is_empty() {
        out.push((
            format!("Capacity ({:.2} Mbits/s)", avg(&log.opportunities)),
            Log::binned_mbps(&log.opportunities, span, ms_per_bin),
        ));
    }
    out.push((
        format!("Traffic ingress ({:.2} Mbits/s)", avg(&log.arrivals)),
        Log::binned_mbps(&log.arrivals, span, ms_per_bin),
    ));
    out.push((
        format!("Throughput ({:.2} Mbits/s)", avg(&departures)),
        Log::binned_mbps(&departures, span, ms_per_bin),
    ));
    out
}

fn draw_lines<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    y_desc: &str,
    lines: &[(String, Vec<(f64, f64)>)],
    points: Option<(&str, &[(f64, f64)])>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let all = lines
        .iter()
        .flat_map(|l| l.1.iter())
        .chain(points.iter().flat_map(|p| p.1.iter()));
    let (mut x1, mut y1) = (0f64, 0f64);
    for p in all {
        x1 = x1.max(p.0);
        y1 = y1.max(p.1);
    }
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x1.max(1e-3) * 1.02, 0f64..(y1 * 1.1).max(1e-3))
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc(y_desc)
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    if let Some((label, pts)) = points {
        let color = COLORS[1];
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 1, color.filled())))
            .map_err(|e| anyhow!("{e}"))?
            .label(label)
            .legend(move |(x, y)| Circle::new((x + 10, y), 3, color.filled()));
    }
    let labelled = lines.iter().map(|(label, pts)| (label.clone(), pts));
    draw_lines_with_legend(&mut chart, labelled, 2, SeriesLabelPosition::UpperRight)?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// Writes STEM-throughput.{png,svg} and STEM-delay.{png,svg} for `log`.
pub fn draw(log: &Log, stem: &Path, title: &str, ms_per_bin: u64) -> Result<()> {
    register_font();
    let lines = throughput_series(log, ms_per_bin);
    let tstem = PathBuf::from(format!("{}-throughput", stem.display()));
    let ttitle = format!("{title}: throughput, {ms_per_bin} ms bins");
    let png = render_png(|a| draw_lines(a, &ttitle, "throughput (Mbit/s)", &lines, None))?;
    let svg = render_svg(|a| draw_lines(a, &ttitle, "throughput (Mbit/s)", &lines, None))?;
    write_both(&tstem, &png, &svg)?;

    let pts: Vec<(f64, f64)> = log
        .departures
        .iter()
        .map(|&(t, _, d)| ((t - d) as f64 / 1000.0, d as f64))
        .collect();
    let delays: Vec<u64> = log.departures.iter().map(|d| d.2).collect();
    let p = p95(&delays);
    let span = pts.iter().map(|p| p.0).fold(0f64, f64::max);
    let p95_line = vec![(0.0, p as f64), (span, p as f64)];
    let dstem = PathBuf::from(format!("{}-delay", stem.display()));
    let dtitle = format!("{title}: per-packet delay");
    let lines = [(
        format!("95th percentile per-packet delay ({p} ms)"),
        p95_line,
    )];
    let points = Some(("Per-packet delay", pts.as_slice()));
    let png = render_png(|a| draw_lines(a, &dtitle, "delay (ms)", &lines, points))?;
    let svg = render_svg(|a| draw_lines(a, &dtitle, "delay (ms)", &lines, points))?;
    write_both(&dstem, &png, &svg)?;
    Ok(())
}

/// Runs `linkem plot`.
pub fn run(args: &PlotArgs) -> Result<()> {
    let name = args.log.display().to_string();
    let text = linkem_io::infile::read_text(&args.log, MAX_LOG_BYTES)
        .map_err(|e| anyhow!("cannot read {e}"))?;
    let log = Log::parse(&text, &name)?;
    let Some((first_ms, last_ms)) = log.span_ms() else {
        bail!("{name}: the log has no events to plot");
    };
    let bins = last_ms / args.ms_per_bin - first_ms / args.ms_per_bin + 1;
    if bins > MAX_BINS {
        bail!(
            "{name}: the events span {} ms, {bins} bins of {} ms, more than the {MAX_BINS} a \
             plot draws: use --ms-per-bin {} or more",
            last_ms - first_ms,
            args.ms_per_bin,
            (last_ms - first_ms) / (MAX_BINS - 1) + 1
        );
    }
    let stem = args
        .out
        .clone()
        .unwrap_or_else(|| args.log.with_extension(""));
    let title = args
        .log
        .file_name()
        .map_or(name.clone(), |n| n.to_string_lossy().into_owned());
    draw(&log, &stem, &title, args.ms_per_bin)?;
    eprintln!(
        "linkem: plot: {}-throughput.png/.svg and {0}-delay.png/.svg ({} arrivals, {} departures, {} opportunities{})",
        stem.display(),
        log.arrivals.len(),
        log.departures.len(),
        log.opportunities.len(),
        if log.drops > 0 { format!(", {} dropped", log.drops) } else { String::new() }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::tools::parse_bin_ms;

    #[test]
    fn bin_width_takes_the_time_syntax_and_a_bare_number_of_ms() {
        assert_eq!(parse_bin_ms("500"), Ok(500));
        assert_eq!(parse_bin_ms("250ms"), Ok(250));
        assert_eq!(parse_bin_ms("1s"), Ok(1000));
        assert_eq!(parse_bin_ms("1min"), Ok(60_000));
        for bad in ["0", "0ms", "500us", "1.5ms", "1m", "x"] {
            assert!(parse_bin_ms(bad).is_err(), "{bad} accepted");
        }
    }

    /// A log as mahimahi's mm-link writes it (header, then `+`, `#`, `-`,
    /// `d` lines, times offset by the base timestamp).
    const MAHIMAHI_LOG: &str = "# mahimahi mm-link (uplink) [12mbps.trace] > up.log
# command line: mm-link 12mbps.trace 12mbps.trace --uplink-log=up.log
# queue: infinite
# init timestamp: 1700000000000
# base timestamp: 100
101 + 1500
101 # 1504
102 - 1500 1
350 + 1000
600 # 1504
600 # 1504
610 - 1000 260
700 d 1 1500
";

    #[test]
    fn a_mahimahi_log_is_read_and_binned_as_mm_throughput_graph_does() {
        let log = Log::parse(MAHIMAHI_LOG, "up.log").unwrap();
        assert_eq!(log.arrivals, [(1, 1500), (250, 1000)]);
        assert_eq!(log.opportunities, [(1, 1504), (500, 1504), (500, 1504)]);
        assert_eq!(log.departures, [(2, 1500, 1), (510, 1000, 260)]);
        assert_eq!(log.drops, 1);
        let s = throughput_series(&log, 500);
        let labels: Vec<&str> = s.iter().map(|l| l.0.split(' ').next().unwrap()).collect();
        assert_eq!(labels, ["Capacity", "Traffic", "Throughput"]);
        // Bins [0, 500) and [500, 1000): 1504 B, then 3008 B of capacity.
        assert_eq!(
            s[0].1,
            [
                (0.0, 1504.0 * 8.0 / 0.5 / 1e6),
                (0.5, 3008.0 * 8.0 / 0.5 / 1e6)
            ]
        );
        assert_eq!(
            s[2].1,
            [
                (0.0, 1500.0 * 8.0 / 0.5 / 1e6),
                (0.5, 1000.0 * 8.0 / 0.5 / 1e6)
            ]
        );
    }

    #[test]
    fn a_large_timestamp_is_refused_with_the_bin_width_that_fits() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("big.log");
        let args = |ms_per_bin| PlotArgs {
            log: log.clone(),
            out: Some(dir.path().join("out")),
            ms_per_bin,
        };
        std::fs::write(
            &log,
            "# base timestamp: 0\n1 + 18446744073709551615\n1000000000000000 + 100\n",
        )
        .unwrap();
        let e = run(&args(500)).unwrap_err().to_string();
        assert!(
            e.contains("more than the 1000000 a plot draws: use --ms-per-bin 1000001001 or more"),
            "{e}"
        );
        // The width it suggests fits, and a byte count near u64::MAX does not overflow.
        let fits = 1_000_001_001;
        let text = std::fs::read_to_string(&log).unwrap();
        let series = throughput_series(&Log::parse(&text, "l").unwrap(), fits);
        assert!(
            series[1].1.len() as u64 <= MAX_BINS,
            "{}",
            series[1].1.len()
        );
        run(&args(fits)).unwrap();
    }

    #[test]
    fn a_fifo_or_device_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        crate::test_mkfifo(&fifo);
        for log in [fifo, PathBuf::from("/dev/zero")] {
            let e = run(&PlotArgs {
                log,
                out: Some(dir.path().join("out")),
                ms_per_bin: 500,
            })
            .unwrap_err()
            .to_string();
            assert!(e.contains("not a regular file"), "{e}");
        }
    }

    #[test]
    fn bad_logs_are_refused_with_the_line() {
        for (text, want) in [
            ("1 + 100\n", "no '# base timestamp' line before its events"),
            ("# x\n", "no '# base timestamp' line"),
            (
                "# base timestamp: 0\n5 + x\n",
                "line 2, word 3: expected a byte count, a whole number",
            ),
            (
                "# base timestamp: 0\n5 - 100\n",
                "line 2: word 4 missing: expected a delay",
            ),
            ("# base timestamp: 0\n5 - 100 9\n", "longer than the time"),
            (
                "# base timestamp: 10\n5 + 100\n",
                "before the base timestamp",
            ),
            (
                "# base timestamp: 0\n5 ? 100\n",
                "word 2: expected an event",
            ),
            ("# base timestamp: 0\n# base timestamp: 0\n", "a second"),
        ] {
            let e = Log::parse(text, "l.log").unwrap_err().to_string();
            assert!(e.contains(want) && e.starts_with("l.log"), "{text:?}: {e}");
        }
    }

    #[test]
    fn both_graphs_are_written_as_png_and_svg_with_their_series() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("up.log");
        std::fs::write(&path, MAHIMAHI_LOG).unwrap();
        run(&PlotArgs {
            log: path,
            out: None,
            ms_per_bin: 100,
        })
        .unwrap();
        for (file, labels) in [
            (
                "up-throughput",
                &["Capacity (", "Traffic ingress (", "Throughput ("][..],
            ),
            (
                "up-delay",
                &[
                    "Per-packet delay",
                    "95th percentile per-packet delay (260 ms)",
                ][..],
            ),
        ] {
            let png = std::fs::read(dir.path().join(format!("{file}.png"))).unwrap();
            assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{file}.png");
            let decoded = image::load_from_memory(&png).unwrap();
            assert_eq!(
                (decoded.width(), decoded.height()),
                crate::render::figures::SIZE
            );
            let svg = std::fs::read_to_string(dir.path().join(format!("{file}.svg"))).unwrap();
            assert!(
                svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
                "{file}.svg"
            );
            for l in labels {
                assert!(svg.contains(l), "{file}.svg lacks {l}");
            }
        }
        let svg = std::fs::read_to_string(dir.path().join("up-delay.svg")).unwrap();
        assert!(
            svg.matches("<circle").count() >= 2,
            "one point per departure"
        );
    }
}
