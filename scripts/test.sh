#!/usr/bin/env bash
# Every test linkem has: formatting, lints, unit, property, statistical and
# integration tests, the Python package's tests, the Debian package's, then a short
# run of each fuzz target.
#
# As root it first installs the Debian packages the tests use (scripts/packages.sh);
# without root it names the missing ones and carries on: the unit tests run, and a
# live test that needs a missing tool fails naming its package.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/packages.sh
command -v cargo >/dev/null || { echo "test: cargo is missing (install Rust with rustup)" >&2; exit 1; }
need_test_packages || [ "$(id -u)" != 0 ]
cargo fmt --all -- --check
./scripts/check-msrv.sh
cargo clippy --workspace --all-targets -q -- -D warnings
# cnitool for linkem-cni's test (built once into target/cnitool/; without Go the test skips).
./scripts/cnitool.sh >/dev/null || echo "test: cnitool not built: linkem-cni's cnitool test will skip" >&2
cargo test --workspace
# The Python package (python/): client, Mininet link and offline install. The live
# tests (a bridge between namespaces, Mininet) need root and skip without it, saying so.
if /usr/bin/python3 -c 'import pytest' 2>/dev/null; then
  cargo build -q -p linkem
  /usr/bin/python3 -m pytest -q -rs -p no:cacheprovider python/tests
else
  echo "test: python/tests not run: pytest is missing (apt-get install python3-pytest)" >&2
fi
# Benchmarks must at least build (they run optimised with scripts/bench.sh). Built in the
# test profile, whose dependencies the tests have already built: the bench profile would
# build every dependency again, minutes of CI for no check the build here does not make.
cargo build -q --workspace --benches
# The Debian package of the dev binary the tests built, installed into a throwaway root
# and used (version, examples, man pages, completions, postinst); cargo install.
./scripts/package-test.sh
# A smoke run of each target: 5 s, unoptimised (building the fuzz workspace optimised with
# its sanitizer took minutes of a fresh clone's CI). For a longer look:
# FUZZ_SECONDS=60 fuzz/run.sh (optimised).
FUZZ_SECONDS="${FUZZ_SECONDS:-5}" FUZZ_PROFILE="${FUZZ_PROFILE:-dev}" ./fuzz/run.sh
