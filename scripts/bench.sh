#!/usr/bin/env bash
# Runs every criterion benchmark of the workspace briefly, then prints the
# figures the notes quote: per benchmark the median time per element (ns per
# packet, or per queue step) and the rate (M elements/s), beside the baseline
# measured in the same group in the same run (rows named baseline-*, plain-* or
# std-*). Usage:
#
#   scripts/bench.sh [FILTER]          # e.g. scripts/bench.sh model
#
# WARMUP and MEASURE (seconds per benchmark, default 1 and 3) trade precision
# for time; the machine is shared, so compare rows of one run only.
set -euo pipefail
cd "$(dirname "$0")/.."
WARMUP=${WARMUP:-1}
MEASURE=${MEASURE:-3}
# Criterion writes under the cargo target directory, which CARGO_TARGET_DIR moves.
criterion="${CARGO_TARGET_DIR:-target}/criterion"
stamp=$(mktemp)
trap 'rm -f "$stamp"' EXIT
# --bench '*': only the bench targets (libtest in lib and bin targets would
# refuse criterion's options).
cargo bench --workspace --bench '*' -- --warm-up-time "$WARMUP" --measurement-time "$MEASURE" "$@"
echo
python3 - "$stamp" "$criterion" <<'PY'
import json, os, sys, glob
stamp = os.path.getmtime(sys.argv[1])
rows = {}
for path in glob.glob(os.path.join(sys.argv[2], "**/new/benchmark.json"), recursive=True):
    if os.path.getmtime(path) < stamp:
        continue
    bench = json.load(open(path))
    est = json.load(open(os.path.join(os.path.dirname(path), "estimates.json")))
    per_iter_ns = est["median"]["point_estimate"]
    elements = (bench.get("throughput") or {}).get("Elements") or 1
    # A benchmark named by its parameter alone (BenchmarkId::from_parameter) has
    # no function_id, one without a parameter no value_str.
    parts = [p for p in (bench.get("function_id"), bench.get("value_str")) if p]
    name = "/".join(parts) or bench.get("full_id") or "?"
    rows.setdefault(bench["group_id"], []).append((name, per_iter_ns / elements))
def is_baseline(name):
    return name.split("/")[0].startswith(("baseline", "plain", "std-"))
print(f"{'group':<14} {'benchmark':<42} {'ns/elem':>9} {'M elem/s':>9}  vs baseline")
for group in sorted(rows):
    entries = sorted(rows[group], key=lambda r: (not is_baseline(r[0]), r[0]))
    bases = {n: v for n, v in entries if is_baseline(n)}
    for name, ns in entries:
        note = "baseline" if name in bases else ""
        if not note and bases:
            # The baseline with the same parameter (e.g. /1000), else the only one.
            same = [v for n, v in bases.items() if n.split("/")[1:] == name.split("/")[1:]]
            base = same[0] if same else (list(bases.values())[0] if len(bases) == 1 else None)
            if base:
                note = f"x{ns / base:.2f} ({ns - base:+.1f} ns)"
        print(f"{group:<14} {name:<42} {ns:>9.1f} {1e3 / ns:>9.2f}  {note}")
PY
