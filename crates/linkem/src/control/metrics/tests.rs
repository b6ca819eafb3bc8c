use super::families::{family, histogram_family, HistogramSeries, Kind, Value};
use super::*;

/// Families written through the helpers, as the format wants them.
#[derive(Debug)]
struct Sample;

impl Collector for Sample {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        family(
            &mut enc,
            "x_packets_total",
            Kind::Counter,
            "Packets.",
            [(vec![("direction", "a\"b\\c\nd".to_string())], Value::Int(7))],
        )?;
        family(
            &mut enc,
            "x_delay_seconds",
            Kind::Gauge,
            "Delay.",
            [(Vec::new(), Value::Float(0.003))],
        )?;
        histogram_family(
            &mut enc,
            "x_lateness_seconds",
            "Lateness.",
            [HistogramSeries {
                labels: vec![("direction", "a->b".to_string())],
                buckets: vec![(1e-6, 2), (1e-4, 0), (0.25, 3)],
                sum_s: 0.5,
                count: 6,
            }],
        )
    }
}

#[test]
fn exposition_follows_the_text_format() {
    let mut r = Registry::default();
    r.register_collector(Box::new(Sample));
    assert_eq!(
        render(&r),
        "# HELP x_packets_total Packets.\n\
         # TYPE x_packets_total counter\n\
         x_packets_total{direction=\"a\\\"b\\\\c\\nd\"} 7\n\
         # HELP x_delay_seconds Delay.\n\
         # TYPE x_delay_seconds gauge\n\
         x_delay_seconds 0.003\n\
         # HELP x_lateness_seconds Lateness.\n\
         # TYPE x_lateness_seconds histogram\n\
         x_lateness_seconds_bucket{direction=\"a->b\",le=\"1e-06\"} 2\n\
         x_lateness_seconds_bucket{direction=\"a->b\",le=\"0.0001\"} 2\n\
         x_lateness_seconds_bucket{direction=\"a->b\",le=\"0.25\"} 5\n\
         x_lateness_seconds_bucket{direction=\"a->b\",le=\"+Inf\"} 6\n\
         x_lateness_seconds_sum{direction=\"a->b\"} 0.5\n\
         x_lateness_seconds_count{direction=\"a->b\"} 6\n"
    );
}
