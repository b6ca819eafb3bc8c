#!/usr/bin/env bash
# Every test linkem has: formatting, lints, unit, property, statistical and
# integration tests, the Python package's tests, the Debian package's, then a short
# run of each fuzz target.
#
# As root it first installs the Debian packages the tests use (scripts/packages.sh);
# without root it names the missing ones and carries on: the unit tests run, and a
# live test that needs a missing tool fails naming its package.
#
# CI (.ci/run) runs exactly this on a fresh clone and must finish inside 30 minutes,
# so the order is chosen for time:
#  - the live tests use about a quarter of two cores (they wait on links, timers and
#    peers), so the fuzz workspace, a build of its own, and the lints (clippy, in a
#    target directory of their own: 4 minutes of a fresh clone's CI when they ran
#    first) run while they do, at idle priority (SCHED_IDLE: they only get a core no
#    test wants, and give it up at once when one does); the tests' binaries are all
#    built before that starts;
#  - the plain build of linkem is the tests' own build (crates/linkem/Cargo.toml turns
#    on the features the dev-dependencies add), checked below: a second copy of every
#    crate cost minutes;
#  - the fuzz targets' smoke runs follow their build there, two at a time, each for
#    its full seconds;
#  - kube-apiserver and etcd, which linkem-operator's tests run (a real control
#    plane), are built by scripts/k8s.sh from the start, beside the checks and the
#    build, and waited for just before the tests; with its caches (kept between runs
#    on one machine) that is seconds, on a fresh machine about ten minutes of Go.
#
# A failing test does not stop the run: every test binary runs (`--no-fail-fast`),
# then the Python and package stages, the lints and fuzz runs are waited for, and
# the script exits non-zero at the end naming each stage that failed, so one flaky
# test hides nothing behind it. The checks before the tests (format, build) still
# stop at once: nothing after them can run without a build. Each stage prints its
# wall time ("test: STAGE: N s").
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/packages.sh
command -v cargo >/dev/null || { echo "test: cargo is missing (install Rust with rustup)" >&2; exit 1; }
need_test_packages || [ "$(id -u)" != 0 ]
# kube-apiserver and etcd for linkem-operator's tests, built (or found in the cache)
# beside everything below, in a session of its own; its output waits in a file.
k8s_log=$(mktemp)
setsid nice -n 19 ./scripts/k8s.sh build >"$k8s_log" 2>&1 &
k8s_build=$!
fuzz_build=
fuzz_log=
test_log=
clippy_job=
clippy_log=
cleanup() {
  kill -- -"$k8s_build" 2>/dev/null || true
  [ -z "$fuzz_build" ] || kill -- -"$fuzz_build" 2>/dev/null || true
  [ -z "$clippy_job" ] || kill -- -"$clippy_job" 2>/dev/null || true
  rm -f "$k8s_log" "$fuzz_log" "$test_log" "$clippy_log"
}
trap cleanup EXIT
# Each stage's wall time, for the 30-minute budget: "test: <stage>: N s (at M s)".
stage_start=$SECONDS
took() {
  echo "test: $1: $((SECONDS - stage_start)) s (at $SECONDS s)" >&2
  stage_start=$SECONDS
}
cargo fmt --all -- --check
./scripts/check-msrv.sh
took "format and MSRV checks"
# cnitool for linkem-cni's test (built once into target/cnitool/; without Go the test skips).
./scripts/cnitool.sh >/dev/null || echo "test: cnitool not built: linkem-cni's cnitool test will skip" >&2
cargo test --workspace --no-run
took "cnitool and the tests' build"
# The fuzz workspace builds beside the live tests, then each target has a smoke run
# (5 s, unoptimised: building the fuzz workspace optimised with its sanitizer took
# minutes of a fresh clone's CI; for a longer look: FUZZ_SECONDS=60 fuzz/run.sh,
# optimised), two at a time; in a session of its own so that a failing test stops it
# too. Its output waits in a file, printed at the end.
fuzz_log=$(mktemp)
idle=(nice -n 19)
if command -v chrt >/dev/null && chrt --idle 0 true 2>/dev/null; then
  idle=(chrt --idle 0)
fi
# A target directory given for the build is not the fuzz workspace's: the tests' cargo
# would wait for its lock.
fuzz_target=()
[ -z "${CARGO_TARGET_DIR:-}" ] || fuzz_target=(CARGO_TARGET_DIR="$CARGO_TARGET_DIR/fuzz")
setsid "${idle[@]}" env "${fuzz_target[@]}" FUZZ_PROFILE="${FUZZ_PROFILE:-dev}" \
  FUZZ_SECONDS="${FUZZ_SECONDS:-5}" FUZZ_JOBS="${FUZZ_JOBS:-2}" \
  bash -c './fuzz/run.sh --build || exit 3; ./fuzz/run.sh' >"$fuzz_log" 2>&1 &
fuzz_build=$!
# The lints too, in a target directory of their own (cargo locks a target directory
# for a whole build: the tests' cargo would wait for this one).
clippy_log=$(mktemp)
setsid "${idle[@]}" env CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/clippy" \
  cargo clippy --workspace --all-targets -q -- -D warnings >"$clippy_log" 2>&1 &
clippy_job=$!
failed=()
# The test output is kept so that the summary at the end repeats each failure: a CI log
# shown by its tail (the fuzz stages print a lot) still names the failing test.
test_log=$(mktemp)
# Without the control plane linkem-operator's API tests fail saying so; the rest run.
k8s_failed=
if ! wait "$k8s_build"; then
  k8s_failed=1
  cat "$k8s_log" >&2
  failed+=("building kube-apiserver and etcd (scripts/k8s.sh build; its output is above)")
fi
took "waiting for kube-apiserver and etcd"
cargo test --workspace --no-fail-fast 2>&1 | tee "$test_log" ||
  failed+=("cargo test (the failing tests are listed above, under 'failures:', and again below)")
took "cargo test"
# Nothing may compile here: this is the binary the tests ran (see crates/linkem/Cargo.toml).
rebuilt=$(cargo build -p linkem-emu 2>&1 | sed -n 's/^ *Compiling //p')
if [ -n "$rebuilt" ]; then
  echo "test: 'cargo build -p linkem-emu' compiled again what the tests built: $(echo $rebuilt)." >&2
  echo "test: its features differ from the tests' ones; turn on in crates/linkem/Cargo.toml what the" >&2
  echo "test: dev-dependencies turn on (compare 'cargo tree -e features -i CRATE' with and without -e no-dev)." >&2
  exit 1
fi
# The Python package (python/): client, Mininet link and offline install, and the web
# page in headless Chromium. The live tests (a bridge between namespaces, Mininet, a lab
# with --web) need root and skip without it, saying so.
if /usr/bin/python3 -c 'import pytest' 2>/dev/null; then
  /usr/bin/python3 -m pytest -q -rs -p no:cacheprovider python/tests || failed+=("python/tests (pytest)")
else
  echo "test: python/tests not run: pytest is missing (apt-get install python3-pytest)" >&2
fi
took "python/tests"
# Benchmarks must at least build (they run optimised with scripts/bench.sh). Built in the
# test profile, whose dependencies the tests have already built: the bench profile would
# build every dependency again, minutes of CI for no check the build here does not make.
cargo build -q --workspace --benches
took "the benchmarks' build"
if ! wait "$clippy_job"; then
  cat "$clippy_log" >&2
  failed+=("cargo clippy --workspace --all-targets -- -D warnings (its output is above)")
fi
took "cargo clippy (run beside the tests, waited for)"
# The Debian package of the dev binary the tests built, installed into a throwaway root
# and used (version, examples, man pages, completions, postinst); cargo install.
./scripts/package-test.sh || failed+=("scripts/package-test.sh")
took "scripts/package-test.sh"
# The fuzz targets' build and smoke runs, beside the tests (above).
fuzz_rc=0
wait "$fuzz_build" || fuzz_rc=$?
cat "$fuzz_log"
case $fuzz_rc in
  0) ;;
  3) failed+=("building the fuzz targets (fuzz/run.sh --build; its output is above)") ;;
  *) failed+=("fuzz/run.sh (a crashing input is in fuzz/artifacts/; its output is above)") ;;
esac
took "the fuzz targets (built and run beside the tests, waited for)"
if [ ${#failed[@]} -gt 0 ]; then
  # Each test binary's 'failures:' section (the panic messages, then the names), 200
  # lines at most.
  if grep -q '^failures:' "$test_log"; then
    echo "test: the failing tests, again:" >&2
    awk '/^failures:$/ {on = 1} on {print} /^test result:/ {on = 0}' "$test_log" | head -n 200 >&2 || true
  fi
  # The control plane's build printed before the tests, far above this tail.
  if [ -n "$k8s_failed" ]; then
    echo "test: scripts/k8s.sh build's last lines, again:" >&2
    tail -n 40 "$k8s_log" >&2
  fi
  echo "test: FAILED: ${#failed[@]} stage(s):" >&2
  printf 'test:   %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "test: every stage passed"
