//! `linkem generate`: the man pages and shell completions, made from the
//! command line's own definition (clap) so they cannot drift from `--help`.
//!
//! A hidden subcommand of the binary rather than a separate tool: whoever
//! installs linkem by any route (`cargo install`, a copied binary) can make the
//! completions and pages of exactly the binary they run, and packaging needs no
//! second build. It costs the binary clap_mangen and clap_complete (tens of KB
//! in a binary of megabytes).

pub use crate::cli::tools::{GenerateArgs, What};
use anyhow::{Context, Result};
use clap_complete::Shell;
use linkem_io::outfile;
use std::io::Write;
use std::path::Path;

/// Generates for `cmd`, the whole command line (`Cli::command()`).
pub fn run(cmd: clap::Command, args: &GenerateArgs) -> Result<()> {
    let shell = match &args.what {
        What::Man { dir } => return man_pages(cmd, dir),
        What::Bash => Shell::Bash,
        What::Zsh => Shell::Zsh,
        What::Fish => Shell::Fish,
    };
    let script = completions(cmd, shell);
    let mut out = std::io::stdout().lock();
    out.write_all(&script)
        .and_then(|()| out.flush())
        .context("cannot write the completions to stdout")
}

/// The completion script of `cmd` for `shell`, without its hidden
/// subcommands (`generate` itself), which clap_complete would offer.
pub fn completions(cmd: clap::Command, shell: Shell) -> Vec<u8> {
    let name = cmd.get_name().to_string();
    // clap cannot remove a subcommand: copy the command without them. The top
    // command's own arguments come along; `--help` and `--version` are made
    // by clap when the copy is built. (The copy is named by a `&'static str`:
    // clap takes an owned name only with a feature that rebuilds it.)
    let mut visible = clap::Command::new("linkem").version(crate::build_info::VERSION);
    for arg in cmd.get_arguments() {
        visible = visible.arg(arg.clone());
    }
    visible = visible.subcommands(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    // Rendered into memory: clap_complete panics on a failed write, and stdout
    // may be a closed pipe.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut visible, name, &mut script);
    script
}

/// Every man page of `cmd`: (file name, roff source), the top command first,
/// then each visible subcommand, depth first.
pub fn man_pages_of(cmd: clap::Command) -> Result<Vec<(String, Vec<u8>)>> {
    let mut cmd = cmd.disable_help_subcommand(true);
    // Building names each subcommand for its page: `linkem-bridge`.
    cmd.build();
    let top = cmd.get_name().to_string();
    // Subcommands carry no version of their own; every page's footer names
    // the package and the version it documents.
    let source = format!("{top} {}", cmd.get_version().unwrap_or_default());
    let mut pages = Vec::new();
    page(&cmd, &top, &source, &mut pages)?;
    Ok(pages)
}

fn page(
    cmd: &clap::Command,
    top: &str,
    source: &str,
    pages: &mut Vec<(String, Vec<u8>)>,
) -> Result<()> {
    // The text after `--help` (the table of link words) is laid out in
    // columns: clap_mangen would fill it into paragraphs, so it goes in a
    // section of its own, unfilled.
    let notes = cmd
        .get_after_long_help()
        .or(cmd.get_after_help())
        .map(|t| t.to_string());
    let stripped = cmd
        .clone()
        .after_help(None::<&str>)
        .after_long_help(None::<&str>);
    let man = clap_mangen::Man::new(stripped).source(source.to_string());
    let mut roff = Vec::new();
    man.render(&mut roff)?;
    if let Some(notes) = notes {
        writeln!(roff, ".SH NOTES\n.nf")?;
        for line in notes.lines() {
            writeln!(roff, "{}", roff_line(line))?;
        }
        writeln!(roff, ".fi")?;
    }
    // A page's key in EXAMPLES: its file's name less `linkem-` and `.1`
    // (`bridge`, `lab-netem-show`): nested commands may share a name.
    let file = man.get_filename();
    let stem = file.strip_suffix(".1").unwrap_or(&file);
    let key = stem
        .strip_prefix(&format!("{top}-"))
        .unwrap_or(stem)
        .to_string();
    if let Some((_, examples)) = EXAMPLES.iter().find(|(name, _)| *name == key) {
        writeln!(roff, ".SH EXAMPLES")?;
        for (what, line) in *examples {
            // An empty description continues the example before.
            if !what.is_empty() {
                writeln!(roff, ".PP\n{}", roff_line(what))?;
            }
            writeln!(roff, ".nf\n.RS 4\n{}\n.RE\n.fi", roff_command(line))?;
        }
    }
    if cmd.get_name() != top {
        // clap_mangen links down (SUBCOMMANDS) but not back up.
        writeln!(roff, ".SH \"SEE ALSO\"\n.BR {top} (1)")?;
    }
    pages.push((man.get_filename(), roff));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        page(sub, top, source, pages)?;
    }
    Ok(())
}

/// The EXAMPLES of each page, by command name: (what it does, the command
/// line). Each parses as written (tests/help.rs) and most are README's or the
/// guide's (docs/guide/), which `tests/readme_commands.rs` checks.
pub const EXAMPLES: &[(&str, &[(&str, &str)])] = &[
    (
        "linkem",
        &[
            ("A capture through 10 Mbit/s and 20 ms, offline:", "linkem replay in.pcap out.pcap rate 10mbit delay 20ms"),
            ("10 ms each way between two interfaces, live:", "linkem bridge veth-a veth-b delay 10ms"),
            ("A command behind a 20 ms link:", "linkem shell delay 20ms -- ping -c 3 example.org"),
        ],
    ),
    (
        "replay",
        &[
            ("Make a capture, then replay it through a link with jitter and bursty loss:", "linkem synth in.pcap --packets 10000 --size 1500 --rate 50mbit --poisson"),
            ("", "linkem replay in.pcap out.pcap rate 10mbit delay 20ms 2ms loss gemodel 1% 30%"),
            ("The same with Dummynet's words:", "linkem replay in.pcap out.pcap pipe 1 config bw 3Mbit/s delay 32ms queue 50 plr 0.01"),
            ("Through ipfw rules and pipes, one side at a time:", "linkem replay in.pcap out.pcap --rules /usr/share/doc/linkem/examples/rules/two-links.rules seed 1"),
        ],
    ),
    (
        "bridge",
        &[
            ("10 ms each way, 50 Mbit/s, 1 % loss, counts every second:", "linkem bridge veth-a veth-b delay 10ms rate 50mbit loss 1% --stats-interval 1s"),
            ("Different links per direction:", "linkem bridge veth-a veth-b --a-to-b delay 300ms --b-to-a delay 20ms"),
            ("Several pairs in one process:", "linkem bridge --pair r1-eth1 r2-eth1 delay 10ms --pair r2-eth2 r3-eth1 delay 40ms loss 1%"),
            ("A rate that follows a mahimahi trace:", "linkem bridge veth-a veth-b trace /usr/share/doc/linkem/examples/traces/12mbit.trace"),
        ],
    ),
    (
        "shell",
        &[
            ("A command whose traffic crosses 20 ms out and 5 ms back:", "linkem shell delay 20ms --b-to-a delay 5ms -- ./client"),
            ("An interactive shell behind a lossy 10 Mbit/s link:", "linkem shell rate 10mbit delay 25ms loss 1% -- bash"),
            ("mahimahi's traces, with the link logs mm-link writes:", "linkem shell --uplink trace up.trace --downlink trace down.trace --uplink-log up.log -- ./client"),
        ],
    ),
    (
        "lab",
        &[
            ("A lab in the background, then a command in one of its nodes:", "linkem lab up --detach examples/labs/line3.clab.yml"),
            ("", "linkem lab exec line3 h1 -- ping -c 3 10.0.2.1"),
            ("One impairment of what node r sends out of eth2, the others kept:", "linkem lab netem set -n r -i eth2 --delay 30ms"),
            ("Everything the lab made, removed:", "linkem lab down line3"),
        ],
    ),
    (
        "lab-up",
        &[
            ("In the foreground until Ctrl-C, then everything removed:", "linkem lab up examples/labs/line3.clab.yml"),
            ("In the background, returning once every link forwards:", "linkem lab up -d examples/labs/line3.clab.yml"),
            ("This machine's part of a lab over two machines:", "linkem lab up examples/labs/two-machines.clab.yml --host m1"),
        ],
    ),
    (
        "lab-down",
        &[("By name or by file; also after a kill -9:", "linkem lab down line3")],
    ),
    ("lab-list", &[("The labs of this machine:", "linkem lab list")]),
    (
        "lab-show",
        &[("Nodes, links, live words and counts:", "linkem lab show line3 --json")],
    ),
    (
        "lab-exec",
        &[("A command in node h1's namespace:", "linkem lab exec line3 h1 -- ip addr")],
    ),
    (
        "lab-netem",
        &[("Containerlab's tools netem, on a lab's links:", "linkem lab netem show -n r")],
    ),
    (
        "lab-netem-set",
        &[
            ("What r sends out of eth2: 30 ms, the rest kept:", "linkem lab netem set -n r -i eth2 --delay 30ms"),
            ("1.5 % loss and 20 Mbit/s:", "linkem lab netem set -n r -i eth2 --loss 1.5 --rate 20000"),
        ],
    ),
    (
        "lab-netem-show",
        &[("Containerlab's fields as JSON:", "linkem lab netem show -n r -f json")],
    ),
    (
        "host",
        &[
            ("Everything this host sends and receives, 20 ms and 100 Mbit/s each way:", "linkem host delay 20ms rate 100mbit"),
            ("Only what eth0 receives:", "linkem host --dev eth0 --a-to-b delay 50ms"),
            ("Ports every local user may claim for themselves:", "linkem host --claims --claim-ttl 1h"),
        ],
    ),
    (
        "ctl",
        &[
            ("Change both directions of the running emulator named lab:", "linkem ctl --name lab link delay 30ms rate 10mbit loss 1%"),
            ("Its counts, then a line every second:", "linkem ctl --name lab show"),
            ("", "linkem ctl --name lab watch 1s"),
            ("As any user, slow down one's own UDP port 5678 (host --claims):", "linkem-ctl claim udp 5678 -- delay 50ms"),
            ("The running emulators:", "linkem ctl list-emulators"),
        ],
    ),
    (
        "probe",
        &[
            ("1000 packets per second for 5 s, from namespace a to b:", "linkem probe 10.0.0.2 --src-ns a --dst-ns b --rate 1kpps --duration 5s --expect-delay 10ms"),
        ],
    ),
    (
        "bench",
        &[
            ("Every scenario at reduced length:", "linkem bench --quick"),
            ("Delay accuracy only, as JSON with plots:", "linkem bench delay --json bench.json --plot plots"),
        ],
    ),
    (
        "plot",
        &[
            ("Throughput and delay graphs of a shell's uplink log, 500 ms bins:", "linkem plot up.log --ms-per-bin 500ms"),
        ],
    ),
    (
        "synth",
        &[
            ("10000 UDP frames of 1500 bytes at 50 Mbit/s, Poisson-spaced:", "linkem synth in.pcap --packets 10000 --size 1500 --rate 50mbit --poisson"),
        ],
    ),
];

/// `line` as unfilled roff text: backslashes escaped, and a leading `.` or
/// `'` (which would start a request) made literal.
fn roff_line(line: &str) -> String {
    let escaped = line.replace('\\', "\\e");
    match escaped.chars().next() {
        Some('.' | '\'') => format!("\\&{escaped}"),
        _ => escaped,
    }
}

/// A command line as roff: every `-` as `\-`, the minus sign, since a bare
/// `-` is a hyphen that groff may render as U+2010, which a shell does not
/// take for an option's dash when the line is copied from `man`.
fn roff_command(line: &str) -> String {
    roff_line(line).replace('-', "\\-")
}

fn man_pages(cmd: clap::Command, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot make the directory {}", dir.display()))?;
    for (name, roff) in man_pages_of(cmd)? {
        outfile::write_all(&dir.join(name), &roff)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_line_writes_each_dash_as_a_minus_sign() {
        assert_eq!(
            roff_command("linkem bridge --a-to-b delay -1 x\\y"),
            "linkem bridge \\-\\-a\\-to\\-b delay \\-1 x\\ey"
        );
        assert_eq!(roff_command(".x -"), "\\&.x \\-");
    }
}
