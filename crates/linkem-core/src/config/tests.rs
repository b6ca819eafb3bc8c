//! Tests of the words, dialects, layers and TOML.

use super::*;
use crate::loss::LossConfig;

fn parse(s: &str) -> Result<LinkConfig, ConfigError> {
    LinkSpec::parse(s).map(|s| s.link)
}

#[test]
fn defaults() {
    let c = parse("").unwrap();
    assert_eq!(c, LinkConfig::default());
    assert_eq!(c.queue_packets, Some(1000));
}

#[test]
fn netem_words() {
    let c =
        parse("delay 10ms 1ms 25% rate 10mbit limit 50 loss 1% duplicate 2% corrupt 0.1%").unwrap();
    assert_eq!(c.delay_ns, 10_000_000);
    assert_eq!(c.jitter_ns, 1_000_000);
    assert_eq!(c.delay_correlation, 0.25);
    assert_eq!(c.rate_bps, Some(10_000_000));
    assert_eq!(c.queue_packets, Some(50));
    assert_eq!(
        c.loss,
        LossConfig::Random {
            p: 0.01,
            correlation: 0.0
        }
    );
    assert_eq!(c.duplicate, 0.02);
    assert!((c.corrupt - 0.001).abs() < 1e-15);
    let pasted = LinkSpec::parse("netem delay 10ms").unwrap();
    assert_eq!(pasted.link.delay_ns, 10_000_000);
}

#[test]
fn dummynet_words() {
    let c = parse("pipe 1 config bw 3Mbit/s delay 32ms queue 50 plr 0.01").unwrap();
    assert_eq!(c.rate_bps, Some(3_000_000));
    assert_eq!(c.delay_ns, 32_000_000);
    assert_eq!(c.queue_packets, Some(50));
    assert_eq!(
        c.loss,
        LossConfig::Random {
            p: 0.01,
            correlation: 0.0
        }
    );
}

#[test]
fn queue_forms() {
    let c = parse("queue 64KiB").unwrap();
    assert_eq!((c.queue_packets, c.queue_bytes), (None, Some(65536)));
    let c = parse("queue unlimited").unwrap();
    assert_eq!((c.queue_packets, c.queue_bytes), (None, None));
    let c = parse("limit 10 queue 100kB").unwrap();
    assert_eq!((c.queue_packets, c.queue_bytes), (Some(10), Some(100_000)));
    let e = parse("queue 0").unwrap_err();
    assert!(e.message.contains("at least one packet"), "{e}");
}

#[test]
fn loss_models_with_netem_defaults() {
    assert_eq!(
        parse("loss gemodel 1%").unwrap().loss,
        LossConfig::GilbertElliott {
            p: 0.01,
            r: 0.99,
            loss_bad: 1.0,
            loss_good: 0.0
        }
    );
    assert_eq!(
        parse("loss gemodel 1% 10% 70% 0.1%").unwrap().loss,
        LossConfig::GilbertElliott {
            p: 0.01,
            r: 0.1,
            loss_bad: 0.7,
            loss_good: 0.001
        }
    );
    assert_eq!(
        parse("loss state 1%").unwrap().loss,
        LossConfig::FourState {
            p13: 0.01,
            p31: 0.99,
            p32: 0.0,
            p23: 1.0,
            p14: 0.0
        }
    );
    assert_eq!(
        parse("loss ber 1e-6").unwrap().loss,
        LossConfig::Ber { ber: 1e-6 }
    );
    assert_eq!(
        parse("loss random 2% 50%").unwrap().loss,
        LossConfig::Random {
            p: 0.02,
            correlation: 0.5
        }
    );
}

#[test]
fn errors_name_the_word() {
    let e = parse("delay 10ms rate 10mbps").unwrap_err();
    assert_eq!(e.position, 4);
    assert_eq!(e.word, "10mbps");
    assert!(e.to_string().contains("tc reads"), "{e}");
    let e = parse("delay 10").unwrap_err();
    assert_eq!(e.word, "10");
    let e = parse("dealy 10ms").unwrap_err();
    assert_eq!((e.position, e.word.as_str()), (1, "dealy"));
    assert!(e.message.contains("unknown word"));
    let e = parse("rate").unwrap_err();
    assert!(e.message.contains("needs a rate"), "{e}");
    assert!(parse("reorder 10%").unwrap_err().message.contains("delay"));
    assert!(parse("delay 10ms gap 5")
        .unwrap_err()
        .message
        .contains("reorder"));
    assert!(parse("delay 10ms distribution normal")
        .unwrap_err()
        .message
        .contains("jitter"));
    assert!(parse("delay 10ms 1ms distribution nosuch")
        .unwrap_err()
        .message
        .contains("nosuch"));
    assert!(parse("loss 1").unwrap_err().message.contains("%"));
    assert!(parse("policer 1mbit 10kB")
        .unwrap_err()
        .message
        .contains("burst"));
    assert!(parse("loss state 60% 10% 0% 100% 50%").is_err());
}

#[test]
fn gap_out_of_range_names_both_bounds() {
    // 2^32 said "at least 1".
    for v in ["0", "4294967296"] {
        let e = parse(&format!("delay 10ms reorder 25% gap {v}")).unwrap_err();
        assert_eq!(e.word, v);
        assert_eq!(e.message, "gap is a packet count 1..4294967295");
    }
    assert_eq!(
        parse("delay 10ms reorder 25% gap 4294967295")
            .unwrap()
            .reorder_gap,
        u32::MAX
    );
}

#[test]
fn display_round_trips() {
    for s in [
        "rate 10mbit overhead 24 queue 50 delay 10ms 1ms 25% distribution normal loss gemodel 1% 10% 70% 0.1%",
        "queue unlimited delay 5ms reorder 25% 50% gap 5 loss 7% 20% loss-at link duplicate 1% corrupt 2% 3%",
        "queue 65536B reorder allow loss state 1% 30% 5% 20% 0.5% policer 2mbit burst 15000B",
        "queue 1000 loss ber 1e-6",
    ] {
        let c = parse(s).unwrap();
        assert_eq!(c.to_string(), s);
        assert_eq!(parse(&c.to_string()).unwrap(), c);
    }
}

#[test]
fn files_come_from_the_loader() {
    let words = ["delay", "10ms", "2ms", "distribution", "my.dist"];
    let spec = LinkSpec::parse_words(&words, &mut |name: &str| {
        assert_eq!(name, "my.dist");
        Ok("-8192 8192".to_string())
    })
    .unwrap();
    assert_eq!(spec.link.distribution.name(), "my.dist");
}

#[test]
fn toml_keys_are_words() {
    let t = TomlWords::parse(
        "rate = \"10mbit\"\ndelay = \"20ms 2ms\"\nqueue = 100\nseed = 7\n[b-to-a]\nrate = \"1mbit\"\n",
    )
    .unwrap();
    let both: Vec<&str> = t.both.iter().map(String::as_str).collect();
    let spec = LinkSpec::parse_words(&both, &mut no_files).unwrap();
    assert_eq!(spec.link.rate_bps, Some(10_000_000));
    assert_eq!(spec.link.jitter_ns, 2_000_000);
    assert_eq!(spec.link.queue_packets, Some(100));
    assert_eq!(spec.seed, Some(7));
    assert_eq!(t.b_to_a, vec!["rate", "1mbit"]);
    assert!(TomlWords::parse("rate = true")
        .unwrap_err()
        .contains("rate"));
    assert!(TomlWords::parse("rate = ").is_err());
    // A file that is not TOML is never echoed back.
    let e = TomlWords::parse("ok = 1\nroot:$6$s3cr3t:19000:0:99999:7:::\n").unwrap_err();
    assert!(
        e.starts_with("line 2, column 5") && !e.contains("s3cr3t"),
        "{e}"
    );
}

fn dummynet(s: &str) -> Result<LinkSpec, ConfigError> {
    let words: Vec<&str> = s.split_whitespace().collect();
    LinkSpec::parse_dialect(&words, Dialect::Dummynet)
}

#[test]
fn dummynet_dialect_reads_lines_as_ipfw_does() {
    let c = dummynet("bw 3Mbit/s delay 20 plr 0.01").unwrap().link;
    assert_eq!(c.rate_bps, Some(3_000_000));
    assert_eq!(c.delay_ns, 20_000_000);
    assert_eq!(c.queue_packets, Some(DUMMYNET_DEFAULT_QUEUE_PACKETS));
    assert_eq!(c.queue_bytes, None);
    assert_eq!(
        c.loss,
        LossConfig::Random {
            p: 0.01,
            correlation: 0.0
        }
    );
    assert_eq!(
        dummynet("bw 100Kbit/s").unwrap().link.rate_bps,
        Some(100_000)
    );
    assert_eq!(
        dummynet("bw 1MByte/s").unwrap().link.rate_bps,
        Some(8_000_000)
    );
    assert_eq!(dummynet("bw 64000").unwrap().link.rate_bps, Some(64_000));
    assert_eq!(dummynet("bw 0").unwrap().link.rate_bps, None);
    let q = dummynet("queue 20").unwrap().link;
    assert_eq!((q.queue_packets, q.queue_bytes), (Some(20), None));
    let q = dummynet("queue 64KBytes").unwrap().link;
    assert_eq!((q.queue_packets, q.queue_bytes), (None, Some(65_536)));
    // Every linkem word is accepted too, with linkem's units.
    let c = dummynet("bw 1M delay 10ms 2ms 25% loss gemodel 1% seed 3").unwrap();
    assert_eq!((c.link.jitter_ns, c.seed), (2_000_000, Some(3)));
    assert!(dummynet("droptail noerror").is_ok());
}

#[test]
fn linkem_dialect_keeps_refusing_bare_times_and_pipe_lines_switch_dialect() {
    assert!(parse("delay 20").unwrap_err().message.contains("unit"));
    assert!(parse("bw 3000000").unwrap_err().message.contains("unit"));
    let e = parse("droptail").unwrap_err();
    assert!(e.message.contains("pipe N config"), "{e}");
    // A pasted ipfw/dnctl line means what it means there.
    let c = parse("pipe 3 config bw 2M delay 20").unwrap();
    assert_eq!((c.rate_bps, c.delay_ns), (Some(2_000_000), 20_000_000));
    assert_eq!(c.queue_packets, Some(50));
    let c = parse("dnctl pipe 1 config delay 5").unwrap();
    assert_eq!(c.delay_ns, 5_000_000);
    // The canonical words of a Dummynet link are linkem words.
    assert_eq!(parse(&c.to_string()).unwrap(), c);
}

#[test]
fn a_thing_set_twice_is_an_error_naming_both_words() {
    for dialect in [Dialect::Linkem, Dialect::Dummynet] {
        let p = |s: &str| {
            let words: Vec<&str> = s.split_whitespace().collect();
            LinkSpec::parse_dialect(&words, dialect).unwrap_err()
        };
        let e = p("loss 1% plr 0.5");
        assert_eq!((e.position, e.word.as_str()), (3, "plr"));
        assert!(e.message.contains("'loss' (word 1)"), "{e}");
        let e = p("rate 1mbit delay 1ms bw 2mbit");
        assert_eq!(e.word, "bw");
        assert!(
            e.message.contains("'rate' (word 1)") && e.message.contains("rate"),
            "{e}"
        );
        let e = p("delay 10ms delay 20ms");
        assert!(e.message.contains("given twice"), "{e}");
        assert!(p("delay 10ms 1ms jitter 2ms").message.contains("'delay'"));
        assert!(p("queue 10 limit 20").message.contains("'queue'"));
        assert!(p("queue unlimited queue 5").message.contains("given twice"));
        assert!(p("seed 1 seed 2").message.contains("given twice"));
        assert!(p("loss 1% loss gemodel 1%").message.contains("given twice"));
        assert!(p("policer 1mbit burst 2kB police 2mbit burst 2kB")
            .message
            .contains("'policer'"));
    }
    // Different things set by one word twice are fine.
    let c = parse("limit 10 queue 100kB delay 5ms reorder allow reorder 10%").unwrap();
    assert_eq!(c.queue_packets, Some(10));
    assert!(c.reorder_allow);
}

#[test]
fn unsupported_words_say_so() {
    for (words, word) in [
        ("bw 1mbit red 0.002/10/30/0.1", "red"),
        ("gred 0.002/10/30/0.1", "gred"),
        ("codel", "codel"),
        ("pie", "pie"),
        ("delay 10ms ecn", "ecn"),
        ("burst 10KBytes", "burst"),
    ] {
        for dialect in [Dialect::Linkem, Dialect::Dummynet] {
            let w: Vec<&str> = words.split_whitespace().collect();
            let e = LinkSpec::parse_dialect(&w, dialect).unwrap_err();
            assert_eq!(e.word, word);
            assert!(e.message.contains("not supported"), "{e}");
        }
    }
    let e = dummynet("bw em0").unwrap_err();
    assert!(e.message.contains("not supported"), "{e}");
    assert!(parse("nosuch")
        .unwrap_err()
        .message
        .contains("unknown word"));
}

#[test]
fn later_layers_replace_what_earlier_ones_set() {
    let file = ["rate", "10mbit", "delay", "20ms", "2ms", "queue", "64KiB"];
    let cli = ["rate", "1mbit", "limit", "7"];
    let spec = LinkSpec::parse_layers(&[&file, &cli], Dialect::Linkem, &mut no_files).unwrap();
    let c = spec.link;
    assert_eq!(c.rate_bps, Some(1_000_000));
    assert_eq!((c.delay_ns, c.jitter_ns), (20_000_000, 2_000_000));
    assert_eq!((c.queue_packets, c.queue_bytes), (Some(7), Some(65_536)));
    // Inside a layer the rule still holds, and positions count across layers.
    let bad = ["loss", "1%", "plr", "0.1"];
    let e = LinkSpec::parse_layers(&[&file, &bad], Dialect::Linkem, &mut no_files).unwrap_err();
    assert_eq!((e.position, e.word.as_str()), (10, "plr"));
    assert!(e.message.contains("'loss' (word 8)"), "{e}");
}

#[test]
fn toml_keys_that_set_the_same_thing_conflict() {
    let t = TomlWords::parse("loss = \"1%\"\nplr = 0.5\n").unwrap();
    let both: Vec<&str> = t.both.iter().map(String::as_str).collect();
    let e = LinkSpec::parse_words(&both, &mut no_files).unwrap_err();
    assert!(e.message.contains("'loss'") && e.word == "plr", "{e}");
    let t = TomlWords::parse("delay = \"20ms 2ms\"\njitter = \"1ms\"\n").unwrap();
    let both: Vec<&str> = t.both.iter().map(String::as_str).collect();
    assert!(LinkSpec::parse_words(&both, &mut no_files).is_err());
    let t = TomlWords::parse("red = \"0.002/10/30/0.1\"\n").unwrap();
    let both: Vec<&str> = t.both.iter().map(String::as_str).collect();
    let e = LinkSpec::parse_words(&both, &mut no_files).unwrap_err();
    assert!(e.message.contains("not supported"), "{e}");
}

#[test]
fn every_word_of_the_table_dispatches_in_its_dialects() {
    // Examples name files by their path from the workspace's root.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files =
        |name: &str| std::fs::read_to_string(root.join(name)).map_err(|e| e.to_string());
    for doc in WORDS {
        for dialect in doc.dialects {
            let words: Vec<&str> = doc.example.split_whitespace().collect();
            LinkSpec::parse_layers(&[&words], *dialect, &mut files)
                .unwrap_or_else(|e| panic!("{}: {e}", doc.example));
            for w in doc.words {
                assert!(words::find(w, *dialect).is_some(), "{w}");
            }
        }
    }
    for (word, _, _) in UNSUPPORTED {
        assert!(WORDS.iter().all(|d| !d.words.contains(word)), "{word}");
    }
}

/// The link words and a loader that serves `files` by name.
fn spec_with(words: &[&str], files: &[(&str, &str)]) -> Result<LinkSpec, ConfigError> {
    let files: Vec<(String, String)> = files
        .iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
    LinkSpec::parse_words(words, &mut |name: &str| {
        files
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.clone())
            .ok_or_else(|| format!("'{name}': no such file"))
    })
}

/// The same schedule as lines, as a TOML config's `[[schedule]]` rows and
/// as TheaterQ's CSV rows (extended: jitter and duplication) makes the same
/// typed changes at the same instants, looping alike.
#[test]
fn a_schedule_in_lines_toml_and_csv_makes_the_same_changes() {
    let lines = "\
0s     delay 10000000ns 0ns distribution uniform rate 1000000bit loss 0% queue 100 duplicate 0%
1500us delay 20000000ns 2000000ns distribution normal rate 500000bit loss 100% queue 50 duplicate 100%
2s     delay 5000000ns 0ns distribution uniform rate 2000000bit loss 0% queue 10 duplicate 0%
3s     loop
";
    let csv = "\
keep_us,latency_ns,jitter_ns,rate_bps,loss,limit,dup_prob,dup_delay_ns
1500,10000000,0,1000000,0,100,0,0
1998500,20000000,2000000,500000,4294967295,50,4294967295,0
1000000,5000000,0,2000000,0,10,0,0
loop
";
    let toml = r#"
rate = "3mbit"
[[schedule]]
at = "0s"
delay = "10000000ns 0ns"
distribution = "uniform"
rate = "1000000bit"
loss = "0%"
queue = 100
duplicate = "0%"
[[schedule]]
at = "1500us"
delay = "20ms 2ms"
distribution = "normal"
rate = "500kbit"
loss = "100%"
queue = 50
duplicate = "100%"
[[schedule]]
at = "2s"
delay = "5ms 0ns"
distribution = "uniform"
rate = "2mbit"
loss = "0%"
queue = 10
duplicate = "0%"
[[schedule]]
at = "3s"
loop = true
"#;
    let from_lines = spec_with(&["rate", "3mbit", "schedule", "s.txt"], &[("s.txt", lines)])
        .unwrap()
        .link
        .schedule
        .unwrap();
    let from_csv = spec_with(&["rate", "3mbit", "schedule", "s.csv"], &[("s.csv", csv)])
        .unwrap()
        .link
        .schedule
        .unwrap();
    let t = TomlWords::parse(toml).unwrap();
    assert_eq!(t.both[..4], ["rate", "3mbit", "schedule", "[[schedule]]"]);
    let both: Vec<&str> = t.both.iter().map(String::as_str).collect();
    let files: Vec<(&str, &str)> = t
        .files
        .iter()
        .map(|(n, x)| (n.as_str(), x.as_str()))
        .collect();
    let from_toml = spec_with(&both, &files).unwrap().link.schedule.unwrap();
    assert_eq!(from_lines.changes.len(), 3);
    assert_eq!(from_lines.period_ns, Some(3_000_000_000));
    assert_eq!(from_lines.changes[1].0, 1_500_000);
    assert!(matches!(from_lines.changes[1].1.loss, LossConfig::Random { p, .. } if p == 1.0));
    for (form, s) in [("csv", &from_csv), ("toml", &from_toml)] {
        assert_eq!(s.period_ns, from_lines.period_ns, "{form}");
        assert_eq!(s.changes, from_lines.changes, "{form}");
    }
}

#[test]
fn csv_and_toml_schedule_errors_name_the_row_and_the_field() {
    let csv = |text: &str| {
        spec_with(&["schedule", "s.csv"], &[("s.csv", text)])
            .unwrap_err()
            .to_string()
    };
    let e = csv("# TheaterQ trace\n1000,0,1000000,0,10\n1000,5,x,0,10\n");
    assert!(
        e.contains("line 3 (row 2): field 'rate_bps': <3 bytes of the file> is not"),
        "{e}"
    );
    let e = csv("0,0,1000000,0,10\n");
    assert!(e.contains("row 1): field 'keep_us'"), "{e}");
    let e = csv("10,0,0,0,10\n");
    assert!(
        e.contains("field 'rate_bps': 0 (no rate) is not supported"),
        "{e}"
    );
    let e = csv("10,0,1000,4294967296,10\n");
    assert!(
        e.contains("field 'loss': <10 bytes of the file> is above"),
        "{e}"
    );
    let e = csv("10,0,1000,0\n");
    assert!(e.contains("row 1): 4 fields"), "{e}");
    let e = csv("10,0,0,1000,0,10,0,7\n");
    assert!(
        e.contains("field 'dup_delay_ns': 7 is not supported"),
        "{e}"
    );
    let e = csv("header only\n");
    assert!(e.contains("no rows"), "{e}");
    // A word a row's values make that the link refuses: the line and the word.
    let e = csv("10,0,1000,0,0\n");
    assert!(
        e.contains("schedule 's.csv' line 1, link word 8: queue 0"),
        "{e}"
    );
    let toml = |text: &str| TomlWords::parse(text).unwrap_err();
    let e = toml("[[schedule]]\nat = \"0s\"\nrate = \"10xbit\"\n");
    assert!(
        e.starts_with("[[schedule]] row 1: field 'rate': '10xbit'"),
        "{e}"
    );
    let e = toml("[[schedule]]\nat = \"0s\"\nrate = \"1mbit\"\n[[schedule]]\nrate = \"1mbit\"\n");
    assert!(e.starts_with("[[schedule]] row 2: no field 'at'"), "{e}");
    let e = toml("[[schedule]]\nat = \"1x\"\nrate = \"1mbit\"\n");
    assert!(e.starts_with("[[schedule]] row 1: field 'at': '1x'"), "{e}");
    let e = toml("[[schedule]]\nat = \"0s\"\ndelay = true\n");
    assert!(e.contains("row 1: field 'delay': expected a string"), "{e}");
    let e = toml("[a-to-b]\n[[a-to-b.schedule]]\nat = \"0s\"\nloop = 1\n");
    assert!(
        e.starts_with("[[a-to-b.schedule]] row 1: a loop row"),
        "{e}"
    );
    // Order and shapes go through the lines' checks, by row.
    let t = TomlWords::parse(
        "[[schedule]]\nat = \"2s\"\nrate = \"1mbit\"\n[[schedule]]\nat = \"1s\"\nrate = \"2mbit\"\n",
    )
    .unwrap();
    let both: Vec<&str> = t.both.iter().map(String::as_str).collect();
    let e = spec_with(&both, &[("[[schedule]]", &t.files[0].1)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("schedule '[[schedule]]' line 2: 1s is before"),
        "{e}"
    );
    let t = TomlWords::parse("[[schedule]]\nramp = \"0s 2s 1s rate 1mbit 3mbit\"\n").unwrap();
    assert_eq!(t.files[0].1, "ramp 0s 2s 1s rate 1mbit 3mbit\n");
}

/// A schedule whose text holds linkem's own words and quotes (found by the
/// fuzz target schedule_csv): the error still names the file as given, and
/// hides what came from the file.
#[test]
fn a_schedule_file_holding_linkems_own_words_is_still_named_in_its_error() {
    let data: &[u8] = b"\x38\x2c\x30\x2c\x30\x2c\x30\x27\x00\xff\xff\xff\xff\xff\x20\x6c\x69\x6e\x65\x20\x31\x20\x28\x72\x6f\x77\x20\x31\x29\x3a\x20\x66\x69\x65\x6c\x64\x20\xff\xff\x46\x32\x2c\x0a";
    let text = String::from_utf8_lossy(data).to_string();
    let mut files = |name: &str| match name {
        "f.csv" => Ok(text.clone()),
        _ => Err(format!("'{name}': no such file")),
    };
    let e = crate::LinkSpec::parse_words(&["rate", "10mbit", "schedule", "f.csv"], &mut files)
        .expect_err("not a schedule");
    assert!(e.to_string().contains("'f.csv'"), "{e}");
    assert!(!e.message.contains("F2,"), "{e}");
}

#[test]
fn pass_through_is_a_link_that_does_nothing() {
    for words in ["", "delay 0", "delay 0ms limit 10", "overhead 24", "seed 7"] {
        assert!(parse(words).unwrap().is_pass_through(), "{words:?}");
    }
    for words in [
        "delay 1us",
        "delay 0 1ms",
        "rate 1gbit",
        "loss 0.1%",
        "loss gemodel 1% 10%",
        "duplicate 1%",
        "corrupt 1%",
        "reorder 25% gap 5 delay 10ms",
        "slot 1ms 2ms",
    ] {
        assert!(!parse(words).unwrap().is_pass_through(), "{words:?}");
    }
}
