//! The rule for errors about a file's content (`linkem_core::filetext`): an
//! error names the file and the line and says what was expected, and never
//! quotes the file, whoever may read it. Each kind of file linkem parses is
//! given a first line holding a secret (as `/etc/shadow` does, which a root
//! linkem reads when told to) in the shapes its parser quotes back, and no
//! message may contain any of it.

use std::path::Path;
use std::process::Command;

/// Pieces of the secrets below: none may appear in any message.
const LEAKS: &[&str] = &["s3cr3t", "S3CR3T", "Zx9", "19000", "99999", "root:"];

/// First lines as the parsers would quote them: a shadow entry (one long
/// word), a word where a keyword goes, a word where a number goes.
const SHADOW: &str = "root:$6$Zx9s3cr3tHASH$abcdefgh:19000:0:99999:7:::";

fn linkem(args: &[&str]) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(args)
        .env_remove("SUDO_UID")
        .env_remove("SUDO_GID")
        .output()
        .expect("linkem runs");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), all)
}

fn assert_says_where_not_what(kind: &str, text: &str, args: &[&str], wants: &[&str]) {
    let (ok, out) = linkem(args);
    assert!(!ok, "{kind} {text:?}: accepted: {out}");
    for leak in LEAKS {
        assert!(
            !out.contains(leak),
            "{kind} {text:?}: the error quotes the file ({leak}): {out}"
        );
    }
    for want in wants {
        assert!(out.contains(want), "{kind} {text:?}: no {want:?} in: {out}");
    }
}

#[test]
fn no_error_quotes_a_file_of_any_kind() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let input = dir.join("in.pcap");
    let output = dir.join("out.pcap");
    let (ok, out) = linkem(&["synth", input.to_str().unwrap(), "--packets", "2"]);
    assert!(ok, "{out}");
    let file = dir.join("f");
    let f = file.to_str().unwrap();
    let write = |text: &str| std::fs::write(&file, text).unwrap();
    let replay = |words: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = ["replay", input.to_str().unwrap(), output.to_str().unwrap()]
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.extend(words.iter().map(|s| s.to_string()));
        v
    };
    let run = |kind: &str, text: &str, args: &[String], wants: &[&str]| {
        write(text);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_says_where_not_what(kind, text, &args, wants);
    };
    let secrets = [
        format!("{SHADOW}\n"),
        "1 s3cr3tWORD\n".to_string(),
        "5\n1s3cr3t\n".to_string(),
        "S3CR3T 99999\n".to_string(),
    ];
    for text in &secrets {
        for word in ["trace", "trace-once", "schedule", "distribution"] {
            let words: Vec<&str> = match word {
                "distribution" => vec!["delay", "10ms", "1ms", "distribution", f],
                _ => vec![word, f],
            };
            run(word, text, &replay(&words), &[f, "line"]);
        }
        // A profile named by a rule file, and the rule file itself.
        let rules = dir.join("p.rules");
        std::fs::write(
            &rules,
            format!("pipe 1 config profile {f}\nadd pipe 1 ip\n"),
        )
        .unwrap();
        run(
            "profile",
            text,
            &replay(&["--rules", rules.to_str().unwrap()]),
            &["line"],
        );
        run("--rules", text, &replay(&["--rules", f]), &["line"]);
        run("--config", text, &replay(&["--config", f]), &[f, "line"]);
        run("plot", text, &["plot".into(), f.into()], &[f, "line"]);
    }
    // The shapes that used to be quoted, each where its parser quotes.
    for (kind, text, words, wants) in [
        (
            "--config",
            "delay = \"s3cr3tWORD\"\n",
            replay(&["--config", f]),
            vec!["s3cr3t"],
        ),
        (
            "--config",
            "s3cr3tKEY = 1\n",
            replay(&["--config", f]),
            vec![],
        ),
        (
            "schedule",
            "0s delay 1ms\n1s delay s3cr3tWORD\n",
            replay(&["schedule", f]),
            vec![],
        ),
        (
            "--rules",
            "pipe 1 config s3cr3tWORD\n",
            replay(&["--rules", f]),
            vec![],
        ),
        (
            "--rules",
            "add s3cr3tWORD\n",
            replay(&["--rules", f]),
            vec![],
        ),
        (
            "plot",
            "# base timestamp: 0\n5 s3cr3t 100\n",
            vec!["plot".into(), f.into()],
            vec![],
        ),
    ] {
        // The first case also checks the word is what was wrong: the
        // message must not contain it, so its want is a leak.
        let wants: Vec<&str> = wants.into_iter().filter(|w| !LEAKS.contains(w)).collect();
        run(kind, text, &words, &wants);
    }
    // A recording's metadata whose fields hold a secret.
    let rec = dir.join("rec");
    std::fs::create_dir(&rec).unwrap();
    for text in [
        "{\"format\":\"s3cr3tFORMAT\"}",
        "{\"format\":\"linkem-recording\",\"version\":\"s3cr3tV\"}",
        "{\"format\":\"linkem-recording\",\"version\":3,\"s3cr3tFIELD\":1}",
    ] {
        std::fs::write(rec.join("recording.json"), text).unwrap();
        let args = [
            "replay".to_string(),
            rec.display().to_string(),
            output.display().to_string(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_says_where_not_what("recording.json", text, &args, &["recording.json"]);
    }
    assert!(Path::new(&file).exists());
}

/// `--limits FILE` (root's per-user claim limits): the same rule, and the
/// same bounded read (a FIFO is refused at once).
#[test]
fn limits_errors_do_not_quote_the_file() {
    use linkem::control::claims::ClaimArgs;
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("limits");
    let args = ClaimArgs {
        claims: true,
        claim_ttl: None,
        limits: Some(file.clone()),
    };
    for text in [
        format!("{SHADOW}\n"),
        "1000 S3CR3T=1\n".to_string(),
        "1000 rate=s3cr3tRATE\n".to_string(),
        "default claims=5\ns3cr3tUSER ports=3\n".to_string(),
    ] {
        std::fs::write(&file, &text).unwrap();
        let e = format!("{:#}", args.build().unwrap_err());
        for leak in LEAKS {
            assert!(!e.contains(leak), "{text:?}: quotes the file ({leak}): {e}");
        }
        assert!(
            e.contains("--limits") && e.contains("line"),
            "{text:?}: {e}"
        );
    }
    std::fs::remove_file(&file).unwrap();
    let made = Command::new("mkfifo").arg(&file).status().unwrap();
    assert!(made.success());
    let e = format!("{:#}", args.build().unwrap_err());
    assert!(e.contains("FIFO"), "{e}");
}
