//! `linkem generate`: the man pages and shell completions, made from the
//! command line's own definition (clap) so they cannot drift from `--help`.
//!
//! A hidden subcommand of the binary rather than a separate tool: whoever
//! installs linkem by any route (`cargo install`, a copied binary) can make the
//! completions and pages of exactly the binary they run, and packaging needs no
//! second build. It costs the binary clap_mangen and clap_complete (tens of KB
//! in a binary of megabytes).

use anyhow::{Context, Result};
use clap_complete::Shell;
use linkem_io::outfile;
use std::io::Write;
use std::path::{Path, PathBuf};

/// `linkem generate`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct GenerateArgs {
    #[command(subcommand)]
    pub what: What,
}

/// What to generate.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum What {
    /// Man pages into DIR (made if missing): linkem.1 and one per command
    /// (linkem-replay.1, linkem-bridge.1, ...), replacing pages of those names.
    Man { dir: PathBuf },
    /// The bash completion script, on stdout.
    Bash,
    /// The zsh completion function (`_linkem`), on stdout.
    Zsh,
    /// The fish completions, on stdout.
    Fish,
}

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

/// `line` as unfilled roff text: backslashes escaped, and a leading `.` or
/// `'` (which would start a request) made literal.
fn roff_line(line: &str) -> String {
    let escaped = line.replace('\\', "\\e");
    match escaped.chars().next() {
        Some('.' | '\'') => format!("\\&{escaped}"),
        _ => escaped,
    }
}

fn man_pages(cmd: clap::Command, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot make the directory {}", dir.display()))?;
    for (name, roff) in man_pages_of(cmd)? {
        outfile::write_all(&dir.join(name), &roff)?;
    }
    Ok(())
}
