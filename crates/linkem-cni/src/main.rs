//! The `linkem-cni` binary: the CNI protocol on stdin, stdout and the exit
//! code (see the library's doc).

use linkem_cni::{run, Env};
use std::io::Read;

fn main() {
    let vars = std::env::vars().collect();
    let env = Env::from_map(&vars);
    let mut stdin = Vec::new();
    if env.command != "VERSION" {
        let _ = std::io::stdin().read_to_end(&mut stdin);
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
