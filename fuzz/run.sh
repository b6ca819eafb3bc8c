#!/usr/bin/env bash
# Runs each fuzz target for ${FUZZ_SECONDS:-15} seconds, starting from its seeds.
#
#   fuzz/run.sh                 all targets
#   fuzz/run.sh capture words   some of them
#   FUZZ_PROFILE=dev fuzz/run.sh
#                               unoptimised build: minutes less to build, fewer
#                               executions a second (the smoke run of scripts/test.sh)
#
# Exits non-zero if any target crashes; the crashing input is then in
# fuzz/artifacts/TARGET/ (replay it with `cargo fuzz run TARGET FILE`).
set -euo pipefail
cd "$(dirname "$0")"

seconds=${FUZZ_SECONDS:-15}
if [ $# -gt 0 ]; then
    targets=("$@")
else
    targets=(words toml capture probe_args wire rules profile ctl claim sched_words recording trace schedule schedule_csv schedule_toml nfqueue)
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

status=0
for target in "${targets[@]}"; do
    if [ ! -d "seeds/$target" ]; then
        echo "run.sh: no seeds/$target: unknown target '$target'" >&2
        exit 2
    fi
    # A scratch corpus (gitignored) so the seeds directory stays hand-made.
    corpus="corpus/$target"
    mkdir -p "$corpus"
    for seed in "seeds/$target"/*; do
        [ -e "$corpus/${seed##*/}" ] || cp "$seed" "$corpus/"
    done
    echo "== $target: ${seconds}s"
    if ! "${fuzz[@]}" run "${profile[@]}" "$target" "$corpus" -- -max_total_time="$seconds" -timeout=10; then
        echo "run.sh: $target failed; the input is in fuzz/artifacts/$target/" >&2
        status=1
    fi
done
exit "$status"
