#!/usr/bin/env bash
# Runs each fuzz target for ${FUZZ_SECONDS:-15} seconds, starting from its seeds.
#
#   fuzz/run.sh                 all targets
#   fuzz/run.sh capture words   some of them
#   fuzz/run.sh --build         only build every target (scripts/test.sh builds them
#                               while the live tests run, and runs them later)
#   FUZZ_PROFILE=dev fuzz/run.sh
#                               unoptimised build: minutes less to build, fewer
#                               executions a second (the smoke run of scripts/test.sh)
#   FUZZ_JOBS=2 fuzz/run.sh     two targets at a time (default 1). Each target still
#                               gets its seconds of wall time, so with a core per job
#                               it executes as many inputs as alone; on a busier
#                               machine fewer.
#
# With no target named, every target is built first by one cargo invocation, which links
# the binaries in parallel; `cargo fuzz run` then finds them fresh (before, each run linked
# its own target in turn: 1-2.5 s of a serial link per target on top of its seconds).
#
# Exits non-zero if any target crashes; the crashing input is then in
# fuzz/artifacts/TARGET/ (replay it with `cargo fuzz run TARGET FILE`).
set -euo pipefail
cd "$(dirname "$0")"

seconds=${FUZZ_SECONDS:-15}
build_only=false
if [ "${1:-}" = --build ]; then
    build_only=true
    shift
    [ $# -eq 0 ] || { echo "run.sh: --build builds every target and takes no target names" >&2; exit 2; }
fi
if [ $# -gt 0 ]; then
    targets=("$@")
else
    targets=(words toml capture probe_args wire rules profile ctl claim sched_words recording trace schedule schedule_csv schedule_toml nfqueue lab linkchaos)
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz
fi

# libFuzzer's instrumentation needs nightly flags; RUSTC_BOOTSTRAP lets stable accept them.
if command -v rustup >/dev/null 2>&1 && rustup toolchain list | grep -q '^nightly'; then
    fuzz=(cargo +nightly fuzz)
else
    export RUSTC_BOOTSTRAP=1
    fuzz=(cargo fuzz)
fi

case "${FUZZ_PROFILE:-release}" in
    release) profile=() ;;
    dev) profile=(--dev) ;;
    *) echo "run.sh: FUZZ_PROFILE is '${FUZZ_PROFILE}': use release or dev" >&2; exit 2 ;;
esac
jobs=${FUZZ_JOBS:-1}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: FUZZ_JOBS is '$jobs': use a whole number of 1 or more" >&2; exit 2; }

for target in "${targets[@]}"; do
    if [ ! -d "seeds/$target" ]; then
        echo "run.sh: no seeds/$target: unknown target '$target'" >&2
        exit 2
    fi
done
if [ $# -eq 0 ]; then
    "${fuzz[@]}" build "${profile[@]}"
fi
if $build_only; then
    exit 0
fi

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# One target: its output goes to its log (printed whole when it ends, so that
# parallel runs do not interleave), its exit status to a file of its own.
run_one() {
    local target=$1
    # A scratch corpus (gitignored) so the seeds directory stays hand-made.
    local corpus="corpus/$target"
    mkdir -p "$corpus"
    for seed in "seeds/$target"/*; do
        [ -e "$corpus/${seed##*/}" ] || cp "$seed" "$corpus/"
    done
    local rc=0
    "${fuzz[@]}" run "${profile[@]}" "$target" "$corpus" -- -max_total_time="$seconds" -timeout=10 \
        >"$logs/$target.log" 2>&1 || rc=$?
    echo "== $target: ${seconds}s"
    cat "$logs/$target.log"
    echo "$rc" >"$logs/$target.rc"
}

running=0
for target in "${targets[@]}"; do
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
    run_one "$target" &
    running=$((running + 1))
done
wait

status=0
for target in "${targets[@]}"; do
    if [ "$(cat "$logs/$target.rc" 2>/dev/null)" != 0 ]; then
        echo "run.sh: $target failed; the input is in fuzz/artifacts/$target/" >&2
        status=1
    fi
done
exit "$status"
