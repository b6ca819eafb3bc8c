//! The link words are listed once (linkem_core::config::WORDS): `--help` and
//! the guide's page of link words (docs/guide/link-words.md) must show exactly
//! the list generated from that table.

use linkem_core::config::link_words_help;
use std::process::Command;

#[test]
fn the_guide_lists_the_words_of_the_table() {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/guide/link-words.md"
    ))
    .expect("docs/guide/link-words.md readable");
    let block = format!("```text\n{}\n```", link_words_help());
    assert!(
        page.contains(&block),
        "docs/guide/link-words.md's list of link words differs from the table; replace its block with:\n{block}"
    );
}

#[test]
fn help_lists_the_words_of_the_table() {
    for sub in [
        &["--help"][..],
        &["replay", "--help"],
        &["bridge", "--help"],
        &["shell", "--help"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_linkem"))
            .args(sub)
            .output()
            .expect("linkem runs");
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&link_words_help()),
            "linkem {sub:?} does not show the table's words:\n{text}"
        );
    }
}

/// Every option that takes a time reads the link words' syntax (units up to
/// `h`, decimals), and those once given in plain seconds still read them so.
#[test]
fn every_time_option_reads_one_syntax() {
    use clap::Parser;
    use linkem::cli::{Cli, Command as Sub};
    let parse = |line: &str| {
        Cli::try_parse_from(line.split_whitespace())
            .unwrap_or_else(|e| panic!("`{line}` refused:\n{e}"))
    };
    for (text, secs) in [
        ("1s", 1.0),
        ("1.5s", 1.5),
        ("2min", 120.0),
        ("1h", 3600.0),
        ("30", 30.0),
        ("250ms", 0.25),
    ] {
        let Sub::Bridge(b) = parse(&format!(
            "linkem bridge a b --stats-interval {text} --duration {text}"
        ))
        .command
        else {
            panic!("not a bridge")
        };
        assert_eq!(b.run.stats_interval, Some(secs), "--stats-interval {text}");
        assert_eq!(b.run.duration, Some(secs), "--duration {text}");
        let Sub::Shell(s) = parse(&format!("linkem shell --stats-interval {text} -- true")).command
        else {
            panic!("not a shell")
        };
        assert_eq!(
            s.stats_interval,
            Some(secs),
            "shell --stats-interval {text}"
        );
        let Sub::Probe(p) = parse(&format!("linkem probe 10.0.0.2 --duration {text}")).command
        else {
            panic!("not a probe")
        };
        assert_eq!(p.duration, Some(secs), "probe --duration {text}");
    }
    for text in ["1s", "1.5s", "2min", "1h", "500us", "0"] {
        for opt in ["--spin-threshold", "--max-lag", "--linger"] {
            parse(&format!("linkem bridge a b {opt} {text}"));
            parse(&format!("linkem host {opt} {text}"));
        }
        parse(&format!("linkem bridge a b --coalesce-window {text}"));
        parse(&format!("linkem shell --max-lag {text} -- true"));
        parse(&format!("linkem probe 10.0.0.2 --expect-delay {text}"));
    }
    parse("linkem bridge a b --claims --claim-ttl 1h");
    parse("linkem host --claims --claim-ttl 30min");
    let Sub::Plot(p) = parse("linkem plot x.log --ms-per-bin 1s").command else {
        panic!("not a plot")
    };
    assert_eq!(p.ms_per_bin, 1000);
    // A wrong time is refused by the option's name, before anything starts.
    for (line, opt) in [
        ("linkem bridge a b --max-lag 10m", "--max-lag"),
        ("linkem bridge a b --stats-interval 0", "--stats-interval"),
        ("linkem bridge a b --claims --claim-ttl 25h", "--claim-ttl"),
        ("linkem shell --max-lag soon -- true", "--max-lag"),
    ] {
        let e = Cli::try_parse_from(line.split_whitespace())
            .err()
            .unwrap_or_else(|| panic!("`{line}` accepted"))
            .to_string();
        assert!(e.contains(opt), "`{line}`: {e}");
    }
}

/// `--spin-budget` reads a percentage with its sign, as parts per million of
/// a core, and names itself and the problem when refused.
#[test]
fn the_spin_budget_is_a_percentage_of_a_core() {
    use clap::Parser;
    use linkem::cli::{Cli, Command as Sub};
    for (text, ppm) in [
        ("25%", 250_000),
        ("0%", 0),
        ("100%", 1_000_000),
        ("2.5%", 25_000),
    ] {
        for line in [
            format!("linkem bridge a b --spin-budget {text}"),
            format!("linkem host --spin-budget {text}"),
        ] {
            let cli = Cli::try_parse_from(line.split_whitespace())
                .unwrap_or_else(|e| panic!("`{line}` refused: {e}"));
            let run = match cli.command {
                Sub::Bridge(b) => b.run,
                Sub::Host(h) => h.run,
                _ => panic!("`{line}`: not a bridge or host"),
            };
            assert_eq!(run.spin_budget, Some(ppm), "`{line}`");
        }
    }
    for (text, why) in [
        ("25", "with its sign"),
        ("150%", "at most 100%"),
        ("lots%", "expected a number"),
    ] {
        let line = format!("linkem bridge a b --spin-budget {text}");
        let e = Cli::try_parse_from(line.split_whitespace())
            .err()
            .unwrap_or_else(|| panic!("`{line}` accepted"))
            .to_string();
        assert!(
            e.contains("--spin-budget") && e.contains(why),
            "`{line}`: {e}"
        );
    }
}

/// `--help` names every time option's value TIME and states the syntax once,
/// with minutes and hours.
#[test]
fn help_shows_times_as_time_with_their_units() {
    for sub in ["bridge", "host", "shell", "probe", "plot"] {
        let out = Command::new(env!("CARGO_BIN_EXE_linkem"))
            .args([sub, "--help"])
            .output()
            .expect("linkem runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{sub}: {text}");
        assert!(
            !text.contains("<SECONDS>") && !text.contains("<MS>") && !text.contains("<DURATION>"),
            "linkem {sub} --help names a time otherwise than TIME:\n{text}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(["bridge", "--help"])
        .output()
        .expect("linkem runs");
    let text = String::from_utf8_lossy(&out.stdout);
    for want in ["--stats-interval <TIME>", "--duration <TIME>", "min, h"] {
        assert!(
            text.contains(want),
            "linkem bridge --help lacks '{want}':\n{text}"
        );
    }
}

/// `linkem bridge veth-a delay 10ms`: IF_B forgotten, 'delay' was taken as
/// it. The error says so, not that '10ms' is an unknown word.
#[test]
fn a_link_word_taken_as_an_interface_is_named_as_such() {
    for (args, role) in [
        (
            &["bridge", "lke-nosuch-a", "delay", "10ms"][..],
            "the second interface (IF_B)",
        ),
        (
            &["bridge", "delay", "10ms", "lke-nosuch-b"],
            "the first interface (IF_A)",
        ),
        (
            &["bridge", "--pair", "lke-nosuch-a", "loss", "1%"],
            "the second interface (IF_B) of --pair 1",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_linkem"))
            .args(args)
            .output()
            .expect("linkem runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&format!("was taken as {role}"))
                && err.contains("link word")
                && err.contains("no interface"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("unknown word"), "{args:?}: {err}");
    }
}

/// `linkem-ctl` is `linkem ctl` as a program of its own (the package installs
/// it 0755 without capabilities, for users outside group linkem): same
/// options, same requests, its own name in messages.
#[test]
fn linkem_ctl_is_the_client_on_its_own() {
    let ctl = env!("CARGO_BIN_EXE_linkem-ctl");
    let run = |args: &[&str]| {
        Command::new(ctl)
            .args(args)
            .output()
            .expect("linkem-ctl runs")
    };
    let help = run(&["--help"]);
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(help.status.success(), "{text}");
    for want in ["--name", "--socket", "--json", "claim udp|tcp"] {
        assert!(
            text.contains(want),
            "linkem-ctl --help lacks '{want}':\n{text}"
        );
    }
    let linkem = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .arg("--version")
        .output()
        .unwrap();
    let version = String::from_utf8_lossy(&run(&["--version"]).stdout).to_string();
    assert_eq!(
        version.replace("linkem-ctl", "linkem"),
        String::from_utf8_lossy(&linkem.stdout),
        "linkem-ctl and linkem differ in version"
    );
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("lke-none.sock");
    let o = run(&["--socket", socket.to_str().unwrap(), "ping"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("linkem-ctl: ") && err.contains("lke-none.sock"),
        "{err}"
    );
}

/// Every man page has EXAMPLES, and each example parses as written.
#[test]
fn every_page_has_examples_and_each_parses_as_written() {
    use clap::{CommandFactory, Parser};
    use linkem::cli::Cli;
    use linkem::tools::generate::{man_pages_of, EXAMPLES};
    let cmd = Cli::command();
    let mut names: Vec<String> = vec![cmd.get_name().to_string()];
    names.extend(
        cmd.get_subcommands()
            .filter(|s| !s.is_hide_set())
            .map(|s| s.get_name().to_string()),
    );
    for name in &names {
        assert!(
            EXAMPLES.iter().any(|(n, e)| n == name && !e.is_empty()),
            "no EXAMPLES for the page of '{name}'"
        );
    }
    for (_, examples) in EXAMPLES {
        for (_, line) in *examples {
            // linkem-ctl takes what `linkem ctl` takes.
            let line = line.replacen("linkem-ctl ", "linkem ctl ", 1);
            let argv: Vec<&str> = line.split_whitespace().collect();
            if let Err(e) = Cli::try_parse_from(&argv) {
                panic!("the example '{line}' does not parse:\n{e}");
            }
        }
    }
    for (file, roff) in man_pages_of(Cli::command()).unwrap() {
        let roff = String::from_utf8_lossy(&roff);
        let examples = roff
            .split_once("\n.SH EXAMPLES\n")
            .unwrap_or_else(|| panic!("{file} has no EXAMPLES"))
            .1;
        let examples = examples.split("\n.SH ").next().unwrap_or_default();
        // The command lines (indented blocks): a bare '-' is a hyphen, which
        // groff may print as a character no shell takes for a dash.
        let mut in_block = false;
        for line in examples.lines() {
            match line {
                ".RS 4" => in_block = true,
                ".RE" => in_block = false,
                _ if in_block => {
                    let bare = line
                        .char_indices()
                        .any(|(i, c)| c == '-' && !line[..i].ends_with('\\'));
                    assert!(!bare, "{file}: EXAMPLES line with a bare '-': {line}");
                }
                _ => {}
            }
        }
    }
}
