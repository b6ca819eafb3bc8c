//! A replay's outputs as tests read them: `--events` files by column name
//! (from the header line), so a column added later breaks no test, and
//! captures as one line per frame for golden files.

#![allow(dead_code)] // each test file uses its own share of the helpers

use std::collections::HashMap;

/// One decision's line: its values by column name.
pub struct Row {
    values: HashMap<String, String>,
    line: String,
}

impl Row {
    /// The value in column `name`; panics naming the column and the line when
    /// there is none.
    pub fn get(&self, name: &str) -> &str {
        self.values
            .get(name)
            .unwrap_or_else(|| panic!("no column {name} in events line {:?}", self.line))
    }

    /// The value in column `name` as a number.
    pub fn num(&self, name: &str) -> u64 {
        let v = self.get(name);
        v.parse()
            .unwrap_or_else(|_| panic!("column {name} is {v:?}, not a number: {:?}", self.line))
    }

    /// The line as written.
    pub fn line(&self) -> &str {
        &self.line
    }
}

/// The lines of an events file after its `# `-header, by column name.
pub fn rows(text: &str) -> Vec<Row> {
    let mut lines = text.lines();
    let header = lines.next().expect("an events file starts with its header");
    let columns: Vec<&str> = header
        .strip_prefix("# ")
        .unwrap_or_else(|| panic!("header line {header:?} starts with '# '"))
        .split('\t')
        .collect();
    lines
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let fields: Vec<&str> = l.split('\t').collect();
            assert_eq!(fields.len(), columns.len(), "{l:?} under {header:?}");
            Row {
                values: columns
                    .iter()
                    .zip(fields)
                    .map(|(c, f)| (c.to_string(), f.to_string()))
                    .collect(),
                line: l.to_string(),
            }
        })
        .collect()
}

/// A capture as golden files keep it: the header line, then per frame its
/// timestamp (ns), wire length and the FNV-1a 64 hash of its bytes.
pub fn capture_digest(path: &std::path::Path) -> String {
    let bytes = std::fs::read(path).expect("the capture exists");
    let (_, packets) =
        linkem_io::capture::read_capture_bytes("out", &bytes).expect("a valid capture");
    let mut s = String::from("# release_ns\torig_len\tfnv1a64\n");
    for p in packets {
        let hash = p.data.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        s.push_str(&format!("{}\t{}\t{hash:016x}\n", p.ts_ns, p.orig_len));
    }
    s
}

/// The golden file testdata/replay/NAME.
pub fn golden(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/replay")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs `linkem ARGS` in `dir`; its stdout (it must succeed).
pub fn linkem_in(dir: &std::path::Path, args: &[&str]) -> String {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_linkem"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// The capture the golden files were made from: `in.pcap` in `dir`, 1000
/// frames of 400 bytes at 9 Mbit/s, Poisson, 5 flows, seed 4.
pub fn synth_golden_input(dir: &std::path::Path) {
    linkem_in(
        dir,
        &[
            "synth",
            "in.pcap",
            "--packets",
            "1000",
            "--size",
            "400",
            "--rate",
            "9mbit",
            "--poisson",
            "--flows",
            "5",
            "--seed",
            "4",
        ],
    );
}
