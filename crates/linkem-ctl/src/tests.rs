use super::*;
use linkem_core::config::no_files;
use proptest::prelude::*;
use std::time::Duration;

fn parse(line: &str) -> Result<Line, ParseError> {
    parse_line(line, &mut no_files)
}

#[test]
fn replace_words_become_a_whole_config() {
    let l = parse("replace a-to-b delay 20ms loss 1%").unwrap();
    match l.request {
        Request::Link {
            dir,
            link,
            words,
            replace,
            target,
            first,
        } => {
            assert_eq!(dir, Dir::AToB);
            assert!(replace && target.is_none());
            assert_eq!(link.unwrap().delay_ns, 20_000_000);
            assert_eq!(words, vec!["delay", "20ms", "loss", "1%"]);
            assert_eq!(first, 3);
        }
        other => panic!("{other:?}"),
    }
    // No words: the defaults (a replace of nothing clears the link).
    assert!(matches!(
        parse("replace both").unwrap().request,
        Request::Link { dir: Dir::Both, replace: true, link: Some(l), .. } if *l == LinkConfig::default()
    ));
}

#[test]
fn link_words_are_a_patch_checked_word_by_word() {
    match parse("link delay 20ms").unwrap().request {
        Request::Link {
            dir,
            replace,
            words,
            first,
            ..
        } => {
            assert_eq!(dir, Dir::Both);
            assert!(!replace);
            assert_eq!(words, vec!["delay", "20ms"]);
            assert_eq!(first, 2);
        }
        other => panic!("{other:?}"),
    }
    // Complete only over a running link with a jitter: parsed, no link alone.
    match parse("link b-to-a distribution normal").unwrap().request {
        Request::Link {
            dir: Dir::BToA,
            link: None,
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    for bad in ["link", "link both", "replace"] {
        let e = parse(bad).unwrap_err();
        assert!(e.message.contains("needs words"), "{bad}: {e:?}");
    }
    let e = parse("link sideways delay 1ms").unwrap_err();
    assert_eq!(e.word.as_deref(), Some("sideways"), "{e:?}");
    let e = parse("link both delay 20xs").unwrap_err();
    assert_eq!((e.position, e.word.as_deref()), (Some(4), Some("20xs")));
}

fn named(line: &str) -> Result<Line, ParseError> {
    parse_line_named(
        line,
        &mut no_files,
        &["r1:eth1--r2:eth1", "v1-v2", "a", "b", "c", "d", "e"],
    )
}

#[test]
fn a_socket_of_several_links_names_the_link_first() {
    match named("@x link r1:eth1--r2:eth1 a-to-b delay 30ms")
        .unwrap()
        .request
    {
        Request::Link {
            target, dir, first, ..
        } => {
            assert_eq!(target.as_deref(), Some("r1:eth1--r2:eth1"));
            assert_eq!((dir, first), (Dir::AToB, 5));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        named("replace v1-v2 delay 1ms").unwrap().request,
        Request::Link { target: Some(t), replace: true, dir: Dir::Both, .. } if t == "v1-v2"
    ));
    assert_eq!(
        named("show v1-v2 --json").unwrap().request,
        Request::Show {
            target: Some("v1-v2".into())
        }
    );
    assert_eq!(
        named("show").unwrap().request,
        Request::Show { target: None }
    );
    assert_eq!(
        named("show --json").unwrap().request,
        Request::Show { target: None }
    );
    assert_eq!(
        named("stats a").unwrap().request,
        Request::Stats {
            target: Some("a".into())
        }
    );
    assert_eq!(named("list").unwrap().request, Request::List);
    // An unknown name is refused naming it and a few known ones.
    let e = named("link r9:eth1--r2:eth1 delay 1ms").unwrap_err();
    assert_eq!(
        (e.position, e.word.as_deref()),
        (Some(2), Some("r9:eth1--r2:eth1"))
    );
    assert!(
        e.message.contains("no link 'r9:eth1--r2:eth1'")
            && e.message.contains("r1:eth1--r2:eth1, v1-v2")
            && e.message.contains("2 more"),
        "{e:?}"
    );
    // Words without a name: told to name one.
    let e = named("link a-to-b delay 1ms").unwrap_err();
    assert!(e.message.contains("name one first"), "{e:?}");
    let e = named("show nosuch").unwrap_err();
    assert!(e.message.contains("no link 'nosuch'"), "{e:?}");
    // In a socket of one link a name is an error as before.
    assert!(parse("show v1-v2").is_err());
}

#[test]
fn errors_name_the_word_and_its_position() {
    let e = parse("link both delay 20xs").unwrap_err();
    assert_eq!(e.position, Some(4));
    assert_eq!(e.word.as_deref(), Some("20xs"));
    // The id and the ipfw prefix count as words.
    let e = parse("@7 ipfw link a-to-b rate 10mbit bogus").unwrap_err();
    assert_eq!((e.position, e.word.as_deref()), (Some(7), Some("bogus")));
    let e = parse("link sideways delay 1ms").unwrap_err();
    assert_eq!(e.position, Some(2));
    let e = parse("frobnicate").unwrap_err();
    assert_eq!(
        (e.position, e.word.as_deref()),
        (Some(1), Some("frobnicate"))
    );
    let e = parse("replace both seed 4").unwrap_err();
    assert_eq!(e.position, Some(3));
    let e = parse("link both seed 4").unwrap_err();
    assert_eq!(e.position, Some(3));
    let e = parse("ping pong").unwrap_err();
    assert_eq!(e.position, Some(2));
    let v = e.reply(Some("x"));
    assert_eq!(v["ok"], false);
    assert_eq!(v["position"], 2);
    assert_eq!(v["id"], "x");
}

#[test]
fn ids_are_echoed_and_checked() {
    let l = parse("@req-1 ping").unwrap();
    assert_eq!(l.id.as_deref(), Some("req-1"));
    assert!(parse("@ ping").is_err());
    assert!(parse("@a/b ping").is_err());
    assert!(parse(&format!("@{} ping", "x".repeat(33))).is_err());
}

#[test]
fn dummynet_and_ipfw_words() {
    match parse("pipe 1 config bw 10Mbit/s delay 20").unwrap().request {
        Request::Rule(RuleRequest::Config {
            kind: Kind::Pipe,
            number: 1,
            def,
        }) => {
            assert_eq!(def.words(), "bw 10Mbit/s delay 20");
            let linkem_core::rules::ObjectDef::Pipe { def, .. } = *def else {
                panic!("a pipe")
            };
            assert_eq!(def.link.delay_ns, 20_000_000);
            assert_eq!(def.link.rate_bps, Some(10_000_000));
        }
        r => panic!("{r:?}"),
    }
    assert_eq!(
        parse("dnctl queue show").unwrap().request,
        Request::Rule(RuleRequest::Show {
            kind: Kind::Queue,
            number: None
        })
    );
    assert_eq!(
        parse("sched 3 show").unwrap().request,
        Request::Rule(RuleRequest::Show {
            kind: Kind::Sched,
            number: Some(3)
        })
    );
    for l in ["pipe 2 delete", "pipe delete 2"] {
        assert_eq!(
            parse(l).unwrap().request,
            Request::Rule(RuleRequest::Delete {
                kind: Kind::Pipe,
                number: 2
            })
        );
    }
    match parse("add 100 pipe 1 ip from 10.0.0.1 to any")
        .unwrap()
        .request
    {
        Request::Rule(RuleRequest::Add {
            number: Some(100),
            rule,
        }) => {
            assert_eq!(rule.number, 100);
            assert_eq!(rule.action, linkem_core::rules::Action::Pipe(1));
            assert_eq!(rule.body(), "pipe 1 ip from 10.0.0.1 to any");
        }
        r => panic!("{r:?}"),
    }
    assert!(parse("add prob 0.5 deny ip from any to any").is_ok());
    let e = parse("add 100 frob ip from any to any").unwrap_err();
    assert_eq!(e.position, Some(3));
    assert_eq!(
        parse("delete 100 200").unwrap().request,
        Request::Rule(RuleRequest::DeleteRules {
            numbers: vec![100, 200]
        })
    );
    assert!(parse("delete").is_err());
    assert_eq!(parse("delete 100 0").unwrap_err().position, Some(3));
    assert_eq!(parse("pipe 65536 config").unwrap_err().position, Some(2));
    assert_eq!(
        parse("set one-pass off").unwrap().request,
        Request::Rule(RuleRequest::OnePass(false))
    );
    assert!(parse("set one-pass maybe").is_err());
    assert!(parse("pipe 1 frob").is_err());
    assert!(parse("pipe").is_err());
}

#[test]
fn watch_intervals() {
    assert_eq!(
        parse("watch").unwrap().request,
        Request::Watch {
            interval_ns: 1_000_000_000
        }
    );
    assert_eq!(
        parse("watch 250ms").unwrap().request,
        Request::Watch {
            interval_ns: 250_000_000
        }
    );
    assert_eq!(
        parse("watch 0.5").unwrap().request,
        Request::Watch {
            interval_ns: 500_000_000
        }
    );
    // The one time syntax: minutes and hours too.
    assert_eq!(
        parse("watch 1min").unwrap().request,
        Request::Watch {
            interval_ns: 60_000_000_000
        }
    );
    assert!(parse("watch 1h").is_ok());
    for bad in [
        "watch 1us",
        "watch 0",
        "watch 1e3",
        "watch -1",
        "watch NaN",
        "watch 2h",
        "watch 1 2",
    ] {
        assert!(parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn which_requests_change_state() {
    for l in [
        "link both delay 1ms",
        "zero",
        "pipe 1 config",
        "flush",
        "delete 3",
        "commit",
    ] {
        assert!(parse(l).unwrap().request.is_change(), "{l}");
    }
    for l in [
        "ping",
        "show --json",
        "stats",
        "list",
        "watch",
        "pipe show",
        "help",
    ] {
        assert!(!parse(l).unwrap().request.is_change(), "{l}");
    }
}

#[test]
fn over_long_and_empty_lines_are_refused() {
    assert!(parse(&"x".repeat(MAX_LINE_BYTES)).is_err());
    assert!(parse("").is_err());
    assert!(parse("   ").is_err());
}

#[test]
fn distribution_files_are_limited_to_system_tables() {
    assert!(system_tables("../../etc/passwd").is_err());
    assert!(system_tables("/etc/passwd").is_err());
    let e = parse_line(
        "link both delay 10ms 2ms distribution /etc/shadow",
        &mut system_tables,
    )
    .unwrap_err();
    assert_eq!(e.position, Some(7));
}

proptest! {
    // Any text: an answer (request or error naming a word inside the line), never a panic.
    #[test]
    fn never_panics_and_positions_are_inside(line in "[ -~]{0,200}") {
        if let Err(e) = parse(&line) {
            if let Some(p) = e.position {
                let n = line.split_whitespace().count();
                prop_assert!(p >= 1 && p <= n.max(1), "position {} of {} words", p, n);
            }
        }
    }

    #[test]
    fn numbers_in_range_parse(n in 1u32..=65535) {
        let pipe_config = format!("pipe {n} config");
        prop_assert!(parse(&pipe_config).is_ok());
        let delete = format!("delete {n}");
        prop_assert!(parse(&delete).is_ok());
    }
}

#[test]
fn object_shows_take_json() {
    use crate::{Kind, Request, RuleRequest};
    for (l, kind, number) in [
        ("pipe show --json", Kind::Pipe, None),
        ("pipe 2 show --json", Kind::Pipe, Some(2)),
        ("queue show 3 --json", Kind::Queue, Some(3)),
        ("sched 4 list", Kind::Sched, Some(4)),
    ] {
        assert_eq!(
            parse(l).unwrap().request,
            Request::Rule(RuleRequest::Show { kind, number }),
            "{l}"
        );
    }
    assert_eq!(parse("pipe show --json x").unwrap_err().position, Some(4));
}

#[test]
fn config_and_rule_errors_name_the_word_the_parse_refused() {
    // A search for the word would find the first `5` (word 5, the queue's).
    let e = parse("pipe 1 config queue 5 delay 5 plr 5").unwrap_err();
    assert_eq!((e.position, e.word.as_deref()), (Some(9), Some("5")), "{e}");
    // The id and `ipfw` count; so does a part of a word (one port of a list).
    let e = parse("@x ipfw add 10 pipe 1 udp dst-port 80,http,9x").unwrap_err();
    assert_eq!(
        (e.position, e.word.as_deref()),
        (Some(9), Some("80,http,9x")),
        "{e}"
    );
    let e = parse("queue 3 config pipe 2 weight 2 weight 3").unwrap_err();
    assert_eq!(e.position, Some(8), "{e}");
    let e = parse("add 100 skipto 50 ip").unwrap_err();
    assert_eq!(
        (e.position, e.word.as_deref()),
        (Some(4), Some("50")),
        "{e}"
    );
}

/// Lines of changes, each parsed to a typed change.
const CHANGE_LINES: &[&str] = &[
    "pipe {n} config",
    "pipe {n} config bw 10Mbit/s delay 20 queue 50",
    "pipe {n} config delay 5ms plr 0.01 mask src-ip 0xffffff00 dst-port 0xffff buckets 128",
    "pipe {n} config bw 2Mbit/s type qfq codel ecn",
    "pipe {n} config bw 1Mbit/s burst 64k red 0.002/30/60/0.1",
    "queue {n} config pipe 3 weight 7 mask src-port 0xffff",
    "queue {n} config sched 2 weight 3 pie",
    "sched {n} config type wf2q+ mask dst-ip 0xffffffff",
    "sched {n} config type prio",
    "pipe {n} delete",
    "queue {n} delete",
    "sched {n} delete",
    "add {n} pipe 3 udp from 10.0.0.0/8 to any dst-port 53,80-90",
    "add {n} prob 0.25 deny tcp from any to 192.0.2.1 tcpflags syn,!ack",
    "add {n} count ip6 from 2001:db8::/32 to any recv a",
    "add {n} queue 7 ip dscp ef,af11 iplen 100-200",
    "add {n} allow log icmp",
    "add {n} skipto 65535 ip from not 10.1.2.3 to any",
    "delete {n}",
    "delete {n} 17 {n}",
    "flush",
    "set one-pass on",
    "set one-pass off",
];

proptest! {
    /// parse(display(change)) == change: a change renders as the one
    /// control line that carries it (what a recording keeps).
    #[test]
    fn a_change_renders_as_the_line_that_parses_back_to_it(
        pick in 0..CHANGE_LINES.len(),
        n in 1u32..65535,
    ) {
        let line = CHANGE_LINES[pick].replace("{n}", &n.to_string());
        let Ok(parsed) = parse(&line) else {
            // `skipto 65535` from rule 65535 does not jump forward.
            prop_assert!(line.contains("skipto") && n == 65535, "{}", line);
            return Ok(());
        };
        let Request::Rule(r) = parsed.request else { panic!("{line}") };
        let change = r.change().expect("a numbered change");
        let shown = change.to_string();
        let again = match parse(&shown) {
            Ok(l) => l.request,
            Err(e) => panic!("{line} -> {shown}: {e}"),
        };
        let Request::Rule(again) = again else { panic!("{shown}") };
        let back = again.change().expect("a numbered change");
        prop_assert_eq!(&back, &change, "{} -> {}", line, shown);
        prop_assert_eq!(back.to_string(), shown);
    }
}

fn claim(line: &str) -> ClaimRequest {
    match parse(line).unwrap().request {
        Request::Claim(c) => c,
        other => panic!("{line}: {other:?}"),
    }
}

fn words(w: &str) -> Option<Vec<String>> {
    Some(w.split_whitespace().map(String::from).collect())
}

#[test]
fn claim_words_go_to_both_directions_or_to_one() {
    let c = claim("claim udp 5678 -- delay 50ms");
    assert_eq!((c.proto, c.ports), (Proto::Udp, (5678, 5678)));
    assert_eq!(
        c.action,
        ClaimAction::Set {
            words: [words("delay 50ms"), words("delay 50ms")]
        }
    );
    // Without `--` too; a direction's own words replace the common ones.
    let c = claim("claim tcp 8000-8010 delay 5ms --out bw 1Mbit/s");
    assert_eq!(c.ports, (8000, 8010));
    assert_eq!(
        c.action,
        ClaimAction::Set {
            words: [words("delay 5ms"), words("bw 1Mbit/s")]
        }
    );
    let c = claim("claim udp 1 --a-to-b delay 1ms");
    assert_eq!(
        c.action,
        ClaimAction::Set {
            words: [words("delay 1ms"), None]
        }
    );
    // A mark with nothing after it: that direction's pipe takes no words.
    let c = claim("claim udp 1 --in --b-to-a delay 2");
    assert_eq!(
        c.action,
        ClaimAction::Set {
            words: [Some(vec![]), words("delay 2")]
        }
    );
    assert_eq!(
        claim("claim udp 7").action,
        ClaimAction::Set {
            words: [None, None]
        }
    );
    for line in ["claim udp 5678 release", "release udp 5678"] {
        assert_eq!(claim(line).action, ClaimAction::Release, "{line}");
    }
    assert_eq!(parse("claims").unwrap().request, Request::Claims);
}

#[test]
fn a_bad_claim_names_its_word() {
    for (line, pos, word) in [
        ("claim icmp 5", 2, "icmp"),
        ("claim udp 0", 3, "0"),
        ("claim udp 70000", 3, "70000"),
        ("claim udp 9-3", 3, "9-3"),
        ("claim udp 5678 -- delay 5xs", 6, "5xs"),
        ("claim udp 5678 --in delay 1 --in delay 2", 7, "--in"),
        ("claim udp 5678 delay 1 -- delay 2", 6, "--"),
        ("claim udp 5678 release now", 5, "now"),
        ("release udp 5678 -- delay 1", 4, "--"),
    ] {
        let e = parse(line).unwrap_err();
        assert_eq!(
            (e.position, e.word.as_deref()),
            (Some(pos), Some(word)),
            "{line}: {e}"
        );
    }
    assert!(parse("claim").is_err());
    assert!(parse("claim udp").is_err());
    assert!(parse("claims all").is_err());
}

#[test]
fn a_reply_line_is_read_up_to_its_cap_and_no_further() {
    let mut r = std::io::BufReader::new(&b"{\"ok\":true}\r\nnext\n"[..]);
    assert_eq!(
        read_line_capped(&mut r, 64).unwrap().unwrap(),
        "{\"ok\":true}"
    );
    assert_eq!(read_line_capped(&mut r, 64).unwrap().unwrap(), "next");
    assert!(read_line_capped(&mut r, 64).unwrap().is_none());
    // An endless line: the read stops at the cap, with an error.
    let mut endless = std::io::BufReader::new(std::io::repeat(b'a'));
    let e = read_line_capped(&mut endless, 1 << 20).unwrap_err();
    assert!(e.to_string().contains("longer than 1048576 bytes"), "{e}");
    // A line of exactly the cap, newline included, is whole.
    let mut r = std::io::BufReader::new(&b"abc\n"[..]);
    assert_eq!(read_line_capped(&mut r, 4).unwrap().unwrap(), "abc");
}

/// A fake emulator's side of one connection: accepts it, sends a banner
/// naming `name`, and reads the first request line.
fn greet_and_read(
    listener: &std::os::unix::net::UnixListener,
    name: &str,
) -> (std::os::unix::net::UnixStream, String) {
    use std::io::{BufRead, Write};
    let (mut conn, _) = listener.accept().unwrap();
    let banner = serde_json::json!({"linkem": "ctl", "protocol": 1, "name": name});
    conn.write_all(format!("{banner}\n").as_bytes()).unwrap();
    let mut request = String::new();
    std::io::BufReader::new(conn.try_clone().unwrap())
        .read_line(&mut request)
        .unwrap();
    (conn, request)
}

/// A peer that trickles a reply one byte every 20 ms never lets one read wait
/// the 300 ms timeout; the client still gives up on the reply after 300 ms in
/// all, where it used to wait as long as the peer went on.
#[test]
fn the_timeout_bounds_a_whole_trickled_reply() {
    use std::io::Write;
    use std::os::unix::net::UnixListener;
    use std::time::{Duration, Instant};
    let dir = std::env::temp_dir().join(format!("lkc-ctl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let server = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut conn, _) = greet_and_read(&listener, "fake");
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if conn.write_all(b" ").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let p = path.clone();
    std::thread::spawn(move || {
        let mut c = Client::connect(&p, Duration::from_millis(300)).unwrap();
        let t = Instant::now();
        let r = c.request("ping");
        let _ = tx.send((r.map_err(|e| e.to_string()), t.elapsed()));
    });
    let got = rx.recv_timeout(Duration::from_secs(20));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (reply, took) = got.expect("the client still waits after 20 s");
    let e = reply.unwrap_err();
    assert!(e.contains("no whole reply within 300ms"), "{e}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    server.join().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bridges_socket_is_read_from_its_options_as_the_bridge_reads_them() {
    let at = |args: &[&str]| bridge_socket_path(args, "veth0", "veth1");
    assert_eq!(at(&[]), Some(default_socket_path("veth0-veth1")));
    assert_eq!(
        at(&["delay", "10ms", "--name", "sat"]),
        Some(default_socket_path("sat"))
    );
    assert_eq!(at(&["--name=sat"]), Some(default_socket_path("sat")));
    // --control wins over --name, and the last of each counts.
    assert_eq!(
        at(&[
            "--control",
            "/tmp/a.sock",
            "--name",
            "sat",
            "--control=/tmp/b.sock"
        ]),
        Some(PathBuf::from("/tmp/b.sock"))
    );
    assert_eq!(at(&["--control", "none"]), None);
    // A flag's look-alike is no flag; a flag without its value names nothing.
    assert_eq!(
        at(&["--names", "x"]),
        Some(default_socket_path("veth0-veth1"))
    );
    assert_eq!(at(&["--name"]), Some(default_socket_path("veth0-veth1")));
}

#[test]
fn waiting_for_an_emulator_ends_when_it_is_gone_or_the_limit_passes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("none.sock");
    let t = std::time::Instant::now();
    let e = Client::connect_when_serving(&path, Duration::from_secs(10), || false)
        .err()
        .unwrap();
    assert!(e.to_string().contains("exited"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(1));
    // A stale socket file (bound, then dropped) refuses until the limit.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let e = Client::connect_when_serving(&path, Duration::from_millis(100), || true)
        .err()
        .unwrap();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
    assert!(e.to_string().contains("none.sock"), "{e}");
    // One that starts serving 200 ms later is connected to then.
    let p = path.clone();
    let server = std::thread::spawn(move || {
        use std::io::Write;
        std::thread::sleep(Duration::from_millis(200));
        let _ = std::fs::remove_file(&p);
        let listener = std::os::unix::net::UnixListener::bind(&p).unwrap();
        let (mut conn, request) = greet_and_read(&listener, "late");
        conn.write_all(b"{\"ok\":true}\n").unwrap();
        request
    });
    let c = Client::connect_when_serving(&path, Duration::from_secs(10), || true).unwrap();
    assert_eq!(c.banner["name"], "late");
    assert_eq!(server.join().unwrap().trim(), "ping");
}
