//! The `linkem-cni` binary: the CNI protocol on stdin, stdout and the exit
//! code (see the library's doc).

use linkem_cni::{run, Env};
use std::io::Read;

const HELP: &str = "\
linkem-cni: a CNI plugin that puts a linkem link on a container's interface.
Runtimes run it (CNI_COMMAND=ADD|DEL|CHECK|GC|STATUS|VERSION, the configuration on
stdin); chain it after the network's own plugins:
  {\"type\": \"linkem-cni\", \"link\": \"delay 20ms\", \"a-to-b\": WORDS, \"b-to-a\": WORDS,
   \"rules\": TEXT, \"options\": [\"--max-lag\", \"off\"], \"runDir\": \"/run/linkem\",
   \"capabilities\": {\"linkem\": true}}
Per container: CNI_ARGS LINKEM_LINK, LINKEM_A_TO_B, LINKEM_B_TO_A; runtime config
{\"linkem\": {\"link\": ...}}. Side a is the container. It runs `linkem` from
LINKEM_BIN, beside itself or PATH. See docs/guide/cni.md.";

fn main() {
    if std::env::args().skip(1).any(|a| a == "--help" || a == "-h") {
        println!("{HELP}");
        return;
    }
    let vars = std::env::vars().collect();
    let env = Env::from_map(&vars);
    let mut stdin = Vec::new();
    // Without a command there is nothing to read (and a terminal would wait).
    if !env.command.is_empty() && env.command != "VERSION" {
        // Bounded: a configuration is a few KiB; more is refused, not held.
        let _ = std::io::stdin()
            .take(linkem_cni::MAX_STDIN_BYTES + 1)
            .read_to_end(&mut stdin);
        if stdin.len() as u64 > linkem_cni::MAX_STDIN_BYTES {
            let e = linkem_cni::error::CniError::new(
                linkem_cni::error::DECODE,
                format!(
                    "the configuration on stdin is longer than {} bytes",
                    linkem_cni::MAX_STDIN_BYTES
                ),
            );
            println!("{}", e.to_json("1.1.0"));
            eprintln!("linkem-cni: {e}");
            std::process::exit(1);
        }
    }
    // Errors are answered in the configuration's version when it has one.
    let version = serde_json::from_slice::<serde_json::Value>(&stdin)
        .ok()
        .and_then(|v| v["cniVersion"].as_str().map(str::to_string))
        .unwrap_or_else(|| "1.1.0".to_string());
    match run(&env, &stdin) {
        Ok(Some(out)) => println!("{out}"),
        Ok(None) => {}
        Err(e) => {
            println!("{}", e.to_json(&version));
            eprintln!("linkem-cni: {e}");
            std::process::exit(1);
        }
    }
}
