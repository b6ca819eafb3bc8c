//! Every command README.md and the user guide (docs/guide/*.md) show runs as
//! written, and every relative link of README.md and docs/ reaches its file
//! and heading. Each `linkem ...` command of their code blocks (indented
//! blocks, and fenced blocks of sh/bash/console; a block with `$ ` prompts
//! holds commands on those lines only, the rest is their output) is checked
//! three ways, by what it needs:
//!
//! - **parsed** (every command): the command line exactly as written, split as
//!   sh splits it, is accepted by linkem's own command line (`linkem::cli::Cli`);
//!   its link words (bridge, shell, host, `--pair`) by the link word parser; a
//!   `linkem ctl` request by the control protocol's parser, unless the page shows
//!   it refused: then the refusal the page shows is the parser's.
//! - **run** (the offline blocks: every linkem command in them is `synth`,
//!   `replay` or `plot`, no prompt, no sudo): the whole block runs under `bash -e`
//!   in one scratch directory per page, in the page's order (a block may use
//!   what an earlier one of its page made, so each page stands on its own), with
//!   `testdata/` of the repository beside it; each must succeed.
//! - Synopsis lines (`linkem bridge IF_A IF_B [LINK WORDS...]`) are usage, not
//!   commands, and are recognised by their placeholders; lines whose arguments
//!   the shell expands (`"${args[@]}"`) are listed as such. Both lists are
//!   printed (`--nocapture`) with the commands parsed and the blocks run.
//!
//! Live commands (bridge, shell, host, ctl, probe, bench) need root, interfaces
//! or a running emulator; the live tests run their equivalents.

use linkem::cli::{Cli, Command as Sub};
use linkem_core::LinkSpec;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A code block: its first line's number and its lines.
struct Block {
    line: usize,
    lines: Vec<String>,
    /// A command named in the text: parsed, never run (its files are the reader's).
    inline: bool,
}

/// README's shell code blocks.
fn blocks(readme: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut fence: Option<String> = None;
    let mut current: Option<Block> = None;
    let mut prev_blank = true;
    for (i, raw) in readme.lines().enumerate() {
        let n = i + 1;
        let t = raw.trim_start();
        if let Some(info) = t.strip_prefix("```") {
            match fence.take() {
                Some(kind) => {
                    if let Some(b) = current.take() {
                        if ["", "sh", "bash", "console", "shell"].contains(&kind.as_str()) {
                            out.push(b);
                        }
                    }
                }
                None => {
                    fence = Some(info.trim().to_string());
                    current = Some(Block {
                        line: n + 1,
                        lines: Vec::new(),
                        inline: false,
                    });
                }
            }
            continue;
        }
        if fence.is_some() {
            current.as_mut().unwrap().lines.push(raw.to_string());
            continue;
        }
        // An indented block: 4 columns beyond the text around it (list items
        // indent theirs by 6), after a blank line.
        let indent = raw.len() - t.len();
        let in_block = current.is_some();
        if !t.is_empty() && indent >= 4 && (prev_blank || in_block) {
            current
                .get_or_insert(Block {
                    line: n,
                    lines: Vec::new(),
                    inline: false,
                })
                .lines
                .push(t.to_string());
        } else if !t.is_empty() {
            if let Some(b) = current.take() {
                out.push(b);
            }
        }
        prev_blank = t.is_empty();
    }
    if let Some(b) = current.take() {
        out.push(b);
    }
    out
}

/// The complete commands README names in its text (`` `linkem ctl --name X
/// link delay 20ms` ``), as one-line blocks: a span of three words or more
/// that is no synopsis nor an option's name (`linkem plot --ms-per-bin`);
/// outside code blocks, read by paragraph (a span may break across lines;
/// its line is the paragraph's first).
fn inline_commands(readme: &str) -> Vec<Block> {
    // Spans of README's text that show linkem's output, not a command.
    const OUTPUT: &[&str] = &["linkem bridge after 4.0 s"];
    // Paragraphs of text (a span may break across lines), with the line each starts at.
    let mut paragraphs: Vec<(usize, String)> = Vec::new();
    let mut fenced = false;
    let mut open = false;
    for (i, l) in readme.lines().enumerate() {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            open = false;
            continue;
        }
        if fenced || l.starts_with("    ") || l.trim().is_empty() {
            open = false;
            continue;
        }
        match (open, paragraphs.last_mut()) {
            (true, Some((_, text))) => {
                text.push(' ');
                text.push_str(l.trim());
            }
            _ => paragraphs.push((i + 1, l.trim().to_string())),
        }
        open = true;
    }
    let mut out = Vec::new();
    for (line, text) in paragraphs {
        for (k, span) in text.split('`').enumerate() {
            let command = span.strip_prefix("sudo ").unwrap_or(span);
            if k % 2 == 1
                && command.starts_with("linkem ")
                && command.split_whitespace().count() >= 3
                && !command
                    .split_whitespace()
                    .last()
                    .unwrap_or("")
                    .starts_with("--")
                && !is_synopsis(command)
                && !OUTPUT.contains(&command)
            {
                out.push(Block {
                    line,
                    lines: vec![span.to_string()],
                    inline: true,
                });
            }
        }
    }
    out
}

/// Splits a line as sh does (quotes, backslashes, comments), with the
/// operators `; & && || | > >> <` as tokens of their own (`None` words).
fn shell_split(line: &str) -> Vec<Option<String>> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        _ => word.push(q),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            '#' if !in_word => break,
            ' ' | '\t' => {
                if in_word {
                    out.push(Some(std::mem::take(&mut word)));
                    in_word = false;
                }
            }
            ';' | '&' | '|' | '>' | '<' => {
                if in_word {
                    out.push(Some(std::mem::take(&mut word)));
                    in_word = false;
                }
                if matches!(chars.peek(), Some(&n) if n == c) {
                    chars.next();
                }
                out.push(None);
                // A redirection's target is no argument.
                if c == '>' || c == '<' {
                    while chars.peek() == Some(&' ') {
                        chars.next();
                    }
                    while chars.peek().is_some_and(|&n| n != ' ' && n != ';') {
                        chars.next();
                    }
                }
            }
            _ => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        out.push(Some(word));
    }
    out
}

/// A usage line, not a command: it shows placeholders.
fn is_synopsis(line: &str) -> bool {
    line.contains(" [") || line.contains("...") || line.contains("IF_A") || {
        let upper = |w: &str| {
            w.len() > 1
                && w.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                && !["NAME"].contains(&w)
        };
        line.split_whitespace().any(upper)
    }
}

/// One `linkem` command of README.
struct Found {
    line: usize,
    text: String,
    args: Vec<String>,
    /// README's output under it, when it shows one (`$ ` blocks).
    shown: String,
}

/// The logical lines (backslash continuations joined) of a block that are
/// commands, with their README line numbers and the output shown after each.
fn command_lines(b: &Block) -> Vec<(usize, String, String)> {
    let prompted = b.lines.iter().any(|l| l.trim_start().starts_with("$ "));
    let mut out: Vec<(usize, String, String)> = Vec::new();
    let mut i = 0;
    while i < b.lines.len() {
        let at = b.line + i;
        let mut l = b.lines[i].trim().to_string();
        while l.ends_with('\\') && i + 1 < b.lines.len() {
            l.pop();
            i += 1;
            l.push(' ');
            l.push_str(b.lines[i].trim());
        }
        i += 1;
        match (prompted, l.strip_prefix("$ ")) {
            (true, Some(cmd)) => out.push((at, cmd.to_string(), String::new())),
            (true, None) => {
                if let Some(last) = out.last_mut() {
                    last.2.push_str(&l);
                    last.2.push('\n');
                }
            }
            (false, _) => out.push((at, l, String::new())),
        }
    }
    out
}

/// Link words of a command, by direction.
fn word_lists(sub: &Sub) -> Vec<Vec<String>> {
    match sub {
        Sub::Bridge(b) => {
            let mut v = vec![b.words.clone(), b.a_to_b.clone(), b.b_to_a.clone()];
            // `--pair IF_A IF_B WORDS`, grouped by [`parse`]; a pair's
            // `rules FILE` is the pair's rule file, not a link word.
            v.extend(b.pairs.iter().map(|p| {
                let mut words = Vec::new();
                let mut it = p[2..].iter();
                while let Some(w) = it.next() {
                    if w == "rules" {
                        it.next();
                    } else {
                        words.push(w.clone());
                    }
                }
                words
            }));
            v
        }
        Sub::Shell(s) => vec![s.words.clone(), s.a_to_b.clone(), s.b_to_a.clone()],
        Sub::Host(h) => vec![h.words.clone(), h.a_to_b.clone(), h.b_to_a.clone()],
        _ => Vec::new(),
    }
}

/// Reads a file a word names, from the repository; a file README expects the
/// reader to have is refused as missing (and accepted below).
fn repo_files(name: &str) -> Result<String, String> {
    std::fs::read_to_string(repo().join(name)).map_err(|_| format!("'{name}': no such file"))
}

/// Parses `linkem ARGS` as the binary does, `--pair` groups included.
fn parse(args: &[String]) -> Result<Sub, String> {
    let mut argv = vec!["linkem".to_string()];
    argv.extend(args.iter().cloned());
    let matches = <Cli as clap::CommandFactory>::command()
        .try_get_matches_from(&argv)
        .map_err(|e| e.to_string())?;
    let cli =
        <Cli as clap::FromArgMatches>::from_arg_matches(&matches).map_err(|e| e.to_string())?;
    let mut sub = cli.command;
    if let (Sub::Bridge(b), Some(m)) = (&mut sub, matches.subcommand_matches("bridge")) {
        b.group_pairs(m);
    }
    Ok(sub)
}

/// What of an offline block runs: all of it when it is a script (each line a
/// `linkem`, `echo` or comment line, or inside a quote an earlier line
/// opened), else its `linkem` lines alone (a block that shows rule lines
/// beside the commands that use them).
fn script_of(b: &Block) -> String {
    let mut open_quote = false;
    let mut script_like = true;
    for l in &b.lines {
        let first = l.split_whitespace().next().unwrap_or("#");
        if !open_quote && !first.starts_with('#') && !["linkem", "echo"].contains(&first) {
            script_like = false;
        }
        if l.matches('"').count() % 2 == 1 {
            open_quote = !open_quote;
        }
    }
    if script_like {
        return b.lines.join("\n");
    }
    b.lines
        .iter()
        .filter(|l| l.starts_with("linkem "))
        .cloned()
        .collect::<Vec<_>>()
        .join("\n")
}

/// The documents whose commands are checked, README.md first, then the
/// guide's index and its pages in the order the index lists them.
fn documents() -> Vec<PathBuf> {
    let index = repo().join("docs/guide/README.md");
    let text = std::fs::read_to_string(&index).expect("docs/guide/README.md readable");
    let mut docs = vec![repo().join("README.md"), index.clone()];
    for link in links(&text) {
        let target = link.target.split('#').next().unwrap_or_default();
        let path = repo().join("docs/guide").join(target);
        if target.ends_with(".md") && !target.contains('/') && !docs.contains(&path) {
            docs.push(path);
        }
    }
    // Every page of the guide is in its index.
    let mut pages: Vec<PathBuf> = std::fs::read_dir(repo().join("docs/guide"))
        .expect("docs/guide/ readable")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    let unlisted: Vec<_> = pages.iter().filter(|p| !docs.contains(p)).collect();
    assert!(
        unlisted.is_empty(),
        "pages of docs/guide/ that its README.md does not list: {unlisted:?}"
    );
    docs
}

/// What the documents' commands came to, over every document.
#[derive(Default)]
struct Tally {
    parsed: Vec<String>,
    synopses: Vec<String>,
    expanded: Vec<String>,
    failures: Vec<String>,
    ran: Vec<String>,
}

/// Parses every `linkem` command of one document (`name` is its path in the
/// repository), then runs its offline blocks in a scratch directory of its own.
fn check_document(name: &str, text: &str, tally: &mut Tally) {
    let mut blocks = blocks(text);
    blocks.extend(inline_commands(text));
    let mut offline_blocks = Vec::new();
    for b in &blocks {
        let mut found: Vec<Found> = Vec::new();
        let mut only_offline = true;
        let mut any_linkem = false;
        for (line, text, shown) in command_lines(b) {
            if text.starts_with('#') {
                continue;
            }
            let code = text.split(" #").next().unwrap_or_default();
            if !text.split_whitespace().any(|w| w == "linkem") {
                if text.starts_with("sudo ") {
                    only_offline = false;
                }
                continue;
            }
            if is_synopsis(code) {
                tally.synopses.push(format!("{name}:{line}: {text}"));
                only_offline = false;
                continue;
            }
            if code.contains('$') {
                tally.expanded.push(format!("{name}:{line}: {text}"));
                only_offline = false;
                continue;
            }
            // Each simple command of the line: `a; b`, `a | b`, `a > f`.
            let mut segment: Vec<String> = Vec::new();
            let mut tokens = shell_split(&text);
            tokens.push(None);
            for t in tokens {
                match t {
                    Some(w) => segment.push(w),
                    None => {
                        let mut words: &[String] = &segment;
                        if words.first().is_some_and(|w| w == "sudo") {
                            words = &words[1..];
                            only_offline = false;
                        }
                        if words.first().is_some_and(|w| w == "linkem") {
                            any_linkem = true;
                            found.push(Found {
                                line,
                                text: text.clone(),
                                args: words[1..].to_vec(),
                                shown: shown.clone(),
                            });
                        }
                        segment.clear();
                    }
                }
            }
        }
        if b.lines.iter().any(|l| l.trim_start().starts_with("$ ")) {
            only_offline = false;
        }
        for f in &found {
            let sub = match parse(&f.args) {
                Ok(sub) => sub,
                Err(e) => {
                    tally
                        .failures
                        .push(format!("{name}:{}: `{}`: refused:\n{e}", f.line, f.text));
                    continue;
                }
            };
            if !matches!(sub, Sub::Replay(_) | Sub::Synth(_) | Sub::Plot(_)) {
                only_offline = false;
            }
            for words in word_lists(&sub) {
                if words.is_empty() {
                    continue;
                }
                let refs: Vec<&str> = words.iter().map(String::as_str).collect();
                if let Err(e) = LinkSpec::parse_words(&refs, &mut repo_files) {
                    if !e.to_string().contains("no such file") {
                        tally.failures.push(format!(
                            "{name}:{}: `{}`: words {words:?}: {e}",
                            f.line, f.text
                        ));
                    }
                }
            }
            if let Sub::Ctl(c) = &sub {
                // `list-emulators` is the client's own, not a request.
                if !c.command.is_empty() && c.command != ["list-emulators"] {
                    let request = c.command.join(" ");
                    let refused_in_doc = f.shown.starts_with("linkem ctl:");
                    // A request to a socket of several links names its link
                    // first: read as that socket reads it, the name known.
                    let named = |request: &str| {
                        let w: Vec<&str> = request.split_whitespace().collect();
                        match w.as_slice() {
                            ["link" | "replace" | "show" | "stats", name, ..] => {
                                linkem_ctl::parse_line_named(request, &mut repo_files, &[name])
                                    .is_ok()
                            }
                            _ => false,
                        }
                    };
                    match linkem_ctl::parse_line(&request, &mut repo_files) {
                        Ok(_) => {}
                        Err(_) if named(&request) => {}
                        Err(e) if refused_in_doc => {
                            // As the client prints a refusal (its print_reply).
                            let at = match (e.position, &e.word) {
                                (Some(p), Some(w)) => format!(" (word {p} '{w}')"),
                                _ => String::new(),
                            };
                            let said = format!("linkem ctl: {}{at}", e.message);
                            if !f.shown.contains(&said) {
                                tally.failures.push(format!(
                                    "{name}:{}: `{}`: {name} shows\n{}but linkem says\n{said}",
                                    f.line, f.text, f.shown
                                ));
                            }
                        }
                        Err(e) => tally.failures.push(format!(
                            "{name}:{}: `{}`: request '{request}' refused: {e}",
                            f.line, f.text
                        )),
                    }
                }
            }
            tally
                .parsed
                .push(format!("{name}:{}: linkem {}", f.line, f.args.join(" ")));
        }
        if any_linkem && only_offline && !b.inline {
            offline_blocks.push(b);
        }
    }

    // The offline blocks, for real, in order, in one directory per document.
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(repo().join("testdata"), dir.path().join("testdata")).unwrap();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_linkem")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for b in &offline_blocks {
        let script = script_of(b);
        let o = Command::new("bash")
            .args(["-e", "-c", &script])
            .current_dir(dir.path())
            .env("PATH", &path)
            .output()
            .expect("bash runs");
        if !o.status.success() {
            tally.failures.push(format!(
                "{name}: the block at line {} failed ({}):\n{script}\nstderr:\n{}",
                b.line,
                o.status,
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        tally.ran.push(format!(
            "{name}:{}: {}",
            b.line,
            script.replace('\n', " / ")
        ));
    }
}

#[test]
fn every_linkem_command_of_readme_and_the_guide_parses_and_the_offline_ones_run() {
    let mut tally = Tally::default();
    let mut per_document = Vec::new();
    for doc in documents() {
        let name = doc
            .strip_prefix(repo())
            .unwrap_or(&doc)
            .display()
            .to_string();
        let name = name.trim_start_matches('/').to_string();
        let text = std::fs::read_to_string(&doc).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (parsed, ran) = (tally.parsed.len(), tally.ran.len());
        check_document(&name, &text, &mut tally);
        per_document.push(format!(
            "{name}: {} commands parsed, {} blocks run",
            tally.parsed.len() - parsed,
            tally.ran.len() - ran
        ));
    }
    let Tally {
        parsed,
        synopses,
        expanded,
        failures,
        ran,
    } = tally;
    println!("parsed ({}):\n  {}", parsed.len(), parsed.join("\n  "));
    println!(
        "run for real ({} blocks):\n  {}",
        ran.len(),
        ran.join("\n  ")
    );
    println!(
        "synopses, not run ({}):\n  {}",
        synopses.len(),
        synopses.join("\n  ")
    );
    println!(
        "expanded by the shell, not parsed ({}):\n  {}",
        expanded.len(),
        expanded.join("\n  ")
    );
    println!("per document:\n  {}", per_document.join("\n  "));
    println!(
        "total: {} commands parsed, {} offline blocks run",
        parsed.len(),
        ran.len()
    );
    assert!(
        failures.is_empty(),
        "commands that fail as written:\n\n{}",
        failures.join("\n\n")
    );
    // The test is only as good as what it finds: README alone showed 80
    // commands and ran 4 offline blocks before the guide took its reference
    // (every one of them is still shown); README and the guide show 100 and
    // run 7.
    assert!(
        parsed.len() >= 100,
        "only {} commands found in README and the guide: {parsed:#?}",
        parsed.len()
    );
    assert!(
        ran.len() >= 7,
        "only {} offline blocks ran: {ran:#?}",
        ran.len()
    );
}

/// A Markdown link of a document: its line and target (`path#anchor`).
struct Link {
    line: usize,
    target: String,
}

/// The inline links (`[text](target)`) and reference definitions
/// (`[name]: target`) of a Markdown text, outside code blocks and code spans.
fn links(text: &str) -> Vec<Link> {
    let mut out = Vec::new();
    let mut fenced = false;
    let mut prev_blank = true;
    let mut in_indented = false;
    for (i, raw) in text.lines().enumerate() {
        let t = raw.trim_start();
        if t.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let indented = raw.starts_with("    ") && (prev_blank || in_indented);
        in_indented = indented || (in_indented && raw.trim().is_empty());
        prev_blank = raw.trim().is_empty();
        if fenced || indented {
            continue;
        }
        if let Some(rest) = t.strip_prefix('[') {
            if let Some((_, def)) = rest.split_once("]: ") {
                if !rest.starts_with('^') {
                    out.push(Link {
                        line: i + 1,
                        target: def.split_whitespace().next().unwrap_or("").to_string(),
                    });
                    continue;
                }
            }
        }
        // Outside code spans (the odd pieces between backticks).
        for (k, piece) in raw.split('`').enumerate() {
            if k % 2 == 1 {
                continue;
            }
            let mut rest = piece;
            while let Some(at) = rest.find("](") {
                let after = &rest[at + 2..];
                let mut depth = 0;
                let end = after.char_indices().find(|&(_, c)| match c {
                    '(' => {
                        depth += 1;
                        false
                    }
                    ')' if depth == 0 => true,
                    ')' => {
                        depth -= 1;
                        false
                    }
                    _ => false,
                });
                let Some((end, _)) = end else { break };
                let target = after[..end].split_whitespace().next().unwrap_or("");
                out.push(Link {
                    line: i + 1,
                    target: target.trim_matches(['<', '>']).to_string(),
                });
                rest = &after[end..];
            }
        }
    }
    out
}

/// The anchors GitHub gives a Markdown text's headings: the heading's text
/// without its markup, lower case, spaces as `-`, other punctuation dropped,
/// a repeated anchor suffixed `-1`, `-2`, ...
fn anchors(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut fenced = false;
    for l in text.lines() {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let hashes = l.chars().take_while(|&c| c == '#').count();
        if fenced || hashes == 0 || hashes > 6 || !l[hashes..].starts_with(' ') {
            continue;
        }
        let mut slug = String::new();
        for c in l[hashes..].trim().chars() {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                slug.extend(c.to_lowercase());
            } else if c == ' ' {
                slug.push('-');
            }
        }
        let base = slug.clone();
        let mut n = 0;
        while out.contains(&slug) {
            n += 1;
            slug = format!("{base}-{n}");
        }
        out.push(slug);
    }
    out
}

/// README.md and every Markdown file under docs/.
fn markdown_files() -> Vec<PathBuf> {
    let mut out = vec![repo().join("README.md")];
    let mut dirs = vec![repo().join("docs")];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|e| e == "md") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_relative_link_of_readme_and_docs_reaches_its_file_and_heading() {
    let mut checked = 0;
    let mut broken = Vec::new();
    for file in markdown_files() {
        let name = file
            .strip_prefix(repo())
            .unwrap_or(&file)
            .display()
            .to_string();
        let text = std::fs::read_to_string(&file).unwrap();
        for link in links(&text) {
            let target = link.target.as_str();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target, None),
            };
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !resolved.exists() {
                broken.push(format!("{name}:{}: {target}: no such file", link.line));
                continue;
            }
            if let Some(anchor) = anchor {
                let heads = if resolved.is_file() {
                    anchors(&std::fs::read_to_string(&resolved).unwrap_or_default())
                } else {
                    Vec::new()
                };
                if !heads.iter().any(|h| h == anchor) {
                    broken.push(format!(
                        "{name}:{}: {target}: no heading '#{anchor}' there (it has: {})",
                        link.line,
                        heads.join(", ")
                    ));
                }
            }
        }
    }
    println!("relative links checked: {checked}");
    assert!(
        broken.is_empty(),
        "links that lead nowhere:\n{}",
        broken.join("\n")
    );
    // README's map and the guide's index alone hold more than this.
    assert!(checked >= 60, "only {checked} relative links found");
}

/// README's two commands are there as commands of their own, name scripts of
/// the tree that can run, and CI runs the second.
#[test]
fn readme_shows_the_two_commands() {
    use std::os::unix::fs::PermissionsExt;
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let lines: Vec<String> = blocks(&readme)
        .iter()
        .flat_map(|b| b.lines.iter().map(|l| l.trim().to_string()))
        .collect();
    for command in ["./scripts/demo.sh", "./scripts/test.sh"] {
        assert!(
            lines.iter().any(|l| l == command),
            "README shows no block line `{command}`"
        );
        let mode = std::fs::metadata(repo().join(command))
            .unwrap_or_else(|e| panic!("{command}: {e}"))
            .permissions()
            .mode();
        assert!(mode & 0o111 != 0, "{command} is not executable");
    }
    let ci = std::fs::read_to_string(repo().join(".ci/run")).expect(".ci/run readable");
    assert!(
        ci.lines().any(|l| l.trim() == "./scripts/test.sh"),
        ".ci/run does not run ./scripts/test.sh:\n{ci}"
    );
}
