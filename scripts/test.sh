#!/usr/bin/env bash
# Every test linkem has: formatting, lints, unit, property, statistical and
# integration tests, then a short run of each fuzz target.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
./scripts/check-msrv.sh
cargo clippy --workspace --all-targets -q -- -D warnings
cargo test --workspace
# Benchmarks must at least build (they run with scripts/bench.sh).
cargo bench --workspace --no-run
FUZZ_SECONDS="${FUZZ_SECONDS:-10}" ./fuzz/run.sh
