//! Plots of probe results as PNG and SVG, drawn without a display or system
//! fonts (the font is built in): a latency-deviation percentile plot (an HDR
//! plot, as MoonEm's figure 7) and inter-packet-gap histograms before and
//! after the path (its figures 9 and 10).

use crate::tools::probe::stats::quantile;
use anyhow::{anyhow, Result};
use linkem_io::outfile;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
static REGISTER: Once = Once::new();

pub(crate) fn register_font() {
    REGISTER.call_once(|| {
        // The bundled font is a valid TrueType file; failing here is a build defect.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

pub(crate) const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(90, 90, 90),
];

/// One line of a latency plot: a label and the sorted one-way delays, shown
/// minus `expected_ns`.
pub struct LatencySeries<'a> {
    pub label: String,
    pub delay_ns: &'a [i64],
    pub expected_ns: i64,
}

/// Percentile levels of the x axis, as 1/(1-q) so that 99.99 % sits as far
/// from 99.9 % as 99.9 % from 99 %.
fn hdr_points(sorted: &[i64], expected_ns: i64) -> Vec<(f64, f64)> {
    let mut pts = Vec::new();
    if sorted.is_empty() {
        return pts;
    }
    let mut x = 1.0f64;
    while x <= 1e5 {
        let q = 1.0 - 1.0 / x;
        pts.push((x, (quantile(sorted, q) - expected_ns) as f64 / 1e3));
        x *= 1.1;
    }
    pts.push((1e5, (sorted[sorted.len() - 1] - expected_ns) as f64 / 1e3));
    pts
}

fn draw_latency<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    series: &[LatencySeries<'_>],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let lines: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| hdr_points(s.delay_ns, s.expected_ns))
        .collect();
    let (mut lo, mut hi) = (f64::MAX, f64::MIN);
    for p in lines.iter().flatten() {
        lo = lo.min(p.1);
        hi = hi.max(p.1);
    }
    if lo > hi {
        (lo, hi) = (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.05).max(1.0);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((1f64..1e5f64).log_scale(), (lo - pad)..(hi + pad))
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("deviation from expected delay (µs)")
        .x_label_formatter(&|x| {
            let q = 100.0 * (1.0 - 1.0 / x);
            if q < 1.0 {
                "0%".into()
            } else {
                let digits = format!("{q:.4}");
                format!("{}%", digits.trim_end_matches('0').trim_end_matches('.'))
            }
        })
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    let labelled = series.iter().map(|s| s.label.clone()).zip(&lines);
    draw_lines_with_legend(&mut chart, labelled, 0, SeriesLabelPosition::UpperLeft)?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// Draws each labelled line, the n-th in `COLORS[first_color + n]` (wrapping),
/// then the legend box of every series drawn so far at `legend`.
pub(crate) fn draw_lines_with_legend<'a, 'p, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    lines: impl IntoIterator<Item = (String, &'p Vec<(f64, f64)>)>,
    first_color: usize,
    legend: SeriesLabelPosition,
) -> Result<()>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    CT: CoordTranslate<From = (f64, f64)>,
{
    for (i, (label, pts)) in lines.into_iter().enumerate() {
        let color = COLORS[(first_color + i) % COLORS.len()];
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|e| anyhow!("{e}"))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(legend)
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// Plot size in pixels.
pub(crate) const SIZE: (u32, u32) = (900, 560);

/// Draws with `draw` into an RGB buffer and encodes it as PNG.
pub(crate) fn render_png(
    draw: impl FnOnce(DrawingArea<BitMapBackend<'_>, Shift>) -> Result<()>,
) -> Result<Vec<u8>> {
    let mut rgb = vec![0u8; SIZE.0 as usize * SIZE.1 as usize * 3];
    draw(BitMapBackend::with_buffer(&mut rgb, SIZE).into_drawing_area())?;
    let mut png = Vec::new();
    image::ImageEncoder::write_image(
        image::codecs::png::PngEncoder::new(&mut png),
        &rgb,
        SIZE.0,
        SIZE.1,
        image::ColorType::Rgb8,
    )
    .map_err(|e| anyhow!("cannot encode the PNG: {e}"))?;
    Ok(png)
}

/// Draws with `draw` into an SVG document.
pub(crate) fn render_svg(
    draw: impl FnOnce(DrawingArea<SVGBackend<'_>, Shift>) -> Result<()>,
) -> Result<String> {
    let mut svg = String::new();
    draw(SVGBackend::with_string(&mut svg, SIZE).into_drawing_area())?;
    Ok(svg)
}

/// Refuses a `--json` FILE that would be one of the images `--plot DIR` writes
/// (`is_image` says which names those are): both are written only at the end of
/// the run, and the later would replace the other. The directory is compared by
/// device and inode (through links), the name as it will be written. Call after
/// DIR exists; a `--json` in a directory that does not exist is no image of DIR.
pub fn refuse_json_among_plots(
    json: &Path,
    dir: &Path,
    is_image: impl Fn(&str) -> bool,
) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let real = outfile::resolve(json).unwrap_or_else(|_| json.to_path_buf());
    let (Some(parent), Some(name)) = (real.parent(), real.file_name()) else {
        return Ok(());
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let same_dir = match (std::fs::metadata(parent), std::fs::metadata(dir)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    };
    if same_dir && is_image(&name.to_string_lossy()) {
        anyhow::bail!(
            "--json {} is the same file as a --plot image in {}: refusing to overwrite it \
             (choose another --json file)",
            json.display(),
            dir.display()
        );
    }
    Ok(())
}

/// Whether `name` is a file `write_both` writes: `STEM.png` or `STEM.svg` with a
/// stem `stem_ok` accepts.
pub fn is_plot_file(name: &str, stem_ok: impl Fn(&str) -> bool) -> bool {
    [".png", ".svg"]
        .iter()
        .any(|ext| name.strip_suffix(ext).is_some_and(&stem_ok))
}

/// Writes `STEM.png` and `STEM.svg` under linkem's rule for output files
/// (`linkem_io::outfile`): drawn in memory, then each replaced in one step.
pub(crate) fn write_both(stem: &Path, png: &[u8], svg: &str) -> Result<()> {
    outfile::write_all(&stem.with_extension("png"), png)?;
    outfile::write_all(&stem.with_extension("svg"), svg.as_bytes())?;
    Ok(())
}

/// Writes `STEM.png` and `STEM.svg`.
pub fn latency(stem: &Path, title: &str, series: &[LatencySeries<'_>]) -> Result<()> {
    register_font();
    let png = render_png(|area| draw_latency(area, title, series))?;
    let svg = render_svg(|area| draw_latency(area, title, series))?;
    write_both(stem, &png, &svg)
}

/// Counts of `values` in `bins` bins spaced evenly on a log scale over
/// [`lo_ns`, `hi_ns`) (values below `lo_ns` count in the first): gaps of a
/// bursty stream span microseconds to tens of milliseconds. Returns each
/// bin's geometric centre in µs and its count.
fn log_bins(values: &[i64], lo_ns: f64, hi_ns: f64, bins: usize) -> Vec<(f64, f64)> {
    let ratio = (hi_ns / lo_ns).ln() / bins as f64;
    let mut counts = vec![0u64; bins];
    for &x in values {
        let x = (x as f64).max(lo_ns);
        let i = ((x / lo_ns).ln() / ratio) as usize;
        if i < bins {
            counts[i] += 1;
        }
    }
    counts
        .iter()
        .enumerate()
        .map(|(i, &c)| (lo_ns * ((i as f64 + 0.5) * ratio).exp() / 1e3, c as f64))
        .collect()
}

fn draw_gaps<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    before: &[i64],
    after: &[i64],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    // Sorted series: the largest gap bounds the axis.
    let top = before
        .last()
        .copied()
        .max(after.last().copied())
        .unwrap_or(1000)
        .max(1000) as f64
        * 1.5;
    let lo = 100.0;
    let b = log_bins(before, lo, top, 120);
    let a = log_bins(after, lo, top, 120);
    let ymax = b.iter().chain(&a).map(|p| p.1).fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (lo / 1e3..top / 1e3).log_scale(),
            (0.5f64..ymax * 2.0).log_scale(),
        )
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc("gap between consecutive packets (µs)")
        .y_desc("pairs")
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    for (i, (label, pts)) in [("sent (before the path)", b), ("received (after)", a)]
        .into_iter()
        .enumerate()
    {
        let color = COLORS[i];
        let pts: Vec<(f64, f64)> = pts.into_iter().filter(|p| p.1 > 0.0).collect();
        chart
            .draw_series(
                pts.iter()
                    .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
            )
            .map_err(|e| anyhow!("{e}"))?
            .label(label)
            .legend(move |(x, y)| Circle::new((x + 10, y), 3, color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// Writes `STEM.png` and `STEM.svg`: gap histograms before and after.
/// `before` and `after` are sorted gap series in ns.
pub fn gaps(stem: &Path, title: &str, before: &[i64], after: &[i64]) -> Result<()> {
    register_font();
    let png = render_png(|area| draw_gaps(area, title, before, after))?;
    let svg = render_svg(|area| draw_gaps(area, title, before, after))?;
    write_both(stem, &png, &svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_file_that_is_a_plot_image_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let plots = dir.path().join("plots");
        std::fs::create_dir(&plots).unwrap();
        let bench_image = |n: &str| {
            is_plot_file(n, |stem| {
                stem.starts_with("delay-") || stem.starts_with("gaps-")
            })
        };
        let e = refuse_json_among_plots(&plots.join("delay-64B-x.svg"), &plots, bench_image)
            .unwrap_err();
        assert!(e.to_string().contains("--plot image"), "{e}");
        // Through a link to the directory.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&plots, &link).unwrap();
        assert!(refuse_json_among_plots(&link.join("gaps-1.png"), &plots, bench_image).is_err());
        // Other names, other directories, and a directory not made yet are fine.
        refuse_json_among_plots(&plots.join("rows.json"), &plots, bench_image).unwrap();
        refuse_json_among_plots(&dir.path().join("delay-1.svg"), &plots, bench_image).unwrap();
        refuse_json_among_plots(&plots.join("x/delay-1.svg"), &plots, bench_image).unwrap();
        let probe_image = |n: &str| is_plot_file(n, |s| s == "latency" || s == "gaps");
        assert!(refuse_json_among_plots(&plots.join("latency.png"), &plots, probe_image).is_err());
        refuse_json_among_plots(&plots.join("latency.json"), &plots, probe_image).unwrap();
    }

    #[test]
    fn plots_are_written_as_png_and_svg() {
        let dir = tempfile::tempdir().unwrap();
        let (mut d, g1, mut g2) = (Vec::new(), vec![100_000i64; 10_000], Vec::new());
        for i in 0..10_000i64 {
            d.push(10_000_000 + (i * 7919) % 20_000);
            g2.push(95_000 + (i * 31) % 10_000);
        }
        d.sort_unstable();
        g2.sort_unstable();
        let stem = dir.path().join("latency");
        latency(
            &stem,
            "delay 10ms",
            &[LatencySeries {
                label: "linkem".into(),
                delay_ns: &d,
                expected_ns: 10_000_000,
            }],
        )
        .unwrap();
        gaps(&dir.path().join("gaps"), "gaps", &g1, &g2).unwrap();
        for f in ["latency.png", "latency.svg", "gaps.png", "gaps.svg"] {
            let bytes = std::fs::read(dir.path().join(f)).unwrap();
            assert!(bytes.len() > 1000, "{f} has content");
        }
        assert_eq!(
            &std::fs::read(dir.path().join("latency.png")).unwrap()[1..4],
            b"PNG"
        );
        let svg = std::fs::read_to_string(dir.path().join("latency.svg")).unwrap();
        assert!(svg.contains("<svg") && svg.contains("linkem"));
    }

    #[test]
    fn log_bins_put_each_gap_in_its_bin() {
        // Ten bins of a factor 10 each over 100 ns .. 1e12 ns.
        let b = log_bins(&[0, 150, 5_000, 999_999], 100.0, 1e12, 10);
        assert_eq!(b[0].1, 2.0, "0 and 150 ns in the first bin");
        assert_eq!(b[1].1, 1.0);
        assert_eq!(b[3].1, 1.0);
        assert_eq!(b.iter().map(|p| p.1).sum::<f64>(), 4.0);
    }
}
