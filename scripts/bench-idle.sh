#!/usr/bin/env bash
# What an idle `linkem bridge` of many pairs costs (issue 21 items 2 and 3):
# N pairs (`--pair`, each with WORDS, default `delay 5ms`), no traffic (IPv6
# off on every end, no address on linkem's); the process's CPU over SECS
# seconds from /proc/PID/stat (user + system), with each thread's share, and
# the time from SIGINT to the process's end. Usage (root):
#
#   scripts/bench-idle.sh [PAIRS] [SECS] [ROUNDS]   # default 20 pairs, 20 s, 2 rounds
#
# LINKEM=path runs that binary; OLD=path adds the same row for a second binary,
# alternated with the first (before/after a change); BACKENDS (default "packet
# xdp").
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20}
SECS=${2:-20}
ROUNDS=${3:-2}
[ "$(id -u)" = 0 ] || { echo "bench-idle: needs root"; exit 1; }
. scripts/topology.sh
need_packages ip:iproute2 ethtool:ethtool python3:python3
if [ -z "${LINKEM:-}" ]; then
  cargo build --release -q -p linkem-emu
  LINKEM=${CARGO_TARGET_DIR:-$PWD/target}/release/linkem
fi
BACKENDS=${BACKENDS:-packet xdp}
WORDS=${WORDS:-delay 5ms}
bins=("new=$LINKEM")
[ -n "${OLD:-}" ] && bins+=("old=$OLD")
P=lkbi$$
LPID=
out=$(mktemp -d)
cleanup() {
  [ -n "$LPID" ] && kill "$LPID" 2>/dev/null || true
  for k in $(seq 0 $((N - 1))); do topo_down "${P}$k"; done
  rm -rf "$out"
}
trap cleanup EXIT
for k in $(seq 0 $((N - 1))); do topo_up "${P}$k" "10.98.$k"; done

# ticks PID: user + system clock ticks of the process so far.
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# threads PID: "name ticks" per thread.
threads() {
  local t
  for t in /proc/"$1"/task/*; do
    printf '%s %s\n' "$(cat "$t/comm")" "$(awk '{ print $14 + $15 }' "$t/stat")"
  done
}

run() {
  local label=$1 bin=$2 be=$3 args=() k
  for k in $(seq 0 $((N - 1))); do
    # shellcheck disable=SC2206
    args+=(--pair "${P}${k}ea" "${P}${k}eb" $WORDS)
  done
  "$bin" bridge --backend "$be" --stats json --control none "${args[@]}" \
    > /dev/null 2> "$out/err.txt" &
  LPID=$!
  local waited=0
  until grep -q 'in one process' "$out/err.txt" 2>/dev/null; do
    kill -0 "$LPID" 2>/dev/null || { cat "$out/err.txt"; exit 1; }
    sleep 0.2; waited=$((waited + 1))
    [ "$waited" -lt 300 ] || { echo "bench-idle: linkem did not start"; cat "$out/err.txt"; exit 1; }
  done
  sleep 1
  local t0 t1 s0 s1 hz stop_ms
  threads "$LPID" > "$out/th0"
  t0=$(ticks "$LPID"); s0=$(date +%s.%N)
  sleep "$SECS"
  t1=$(ticks "$LPID"); s1=$(date +%s.%N)
  threads "$LPID" > "$out/th1"
  s0=$(python3 -c "print($s1 - $s0)")
  s1=$(date +%s%N)
  kill -INT "$LPID"; wait "$LPID" || true; LPID=
  stop_ms=$(( ($(date +%s%N) - s1) / 1000000 ))
  hz=$(getconf CLK_TCK)
  python3 - "$label" "$t0" "$t1" "$s0" "$hz" "$stop_ms" "$out/th0" "$out/th1" <<'EOF'
import sys
label, t0, t1, secs, hz, stop_ms, th0, th1 = sys.argv[1:]
secs, hz = float(secs), int(hz)
def load(p):
    d = {}
    for line in open(p):
        name, t = line.rsplit(" ", 1)
        d[name] = d.get(name, 0) + int(t)
    return d
a, b = load(th0), load(th1)
per = ", ".join("%s %.2f" % (n, (b[n] - a.get(n, 0)) / hz / secs * 100)
                for n in sorted(b) if b[n] - a.get(n, 0) > 0)
cpu = (int(t1) - int(t0)) / hz / secs * 100
print("| %-20s | %6.2f | %s | %s |" % (label, cpu, stop_ms, per or "-"))
EOF
}

echo "| binary, backend | idle CPU, % of one core | SIGINT to exit, ms | per thread, % of one core |"
echo "|---|---|---|---|"
for round in $(seq 1 "$ROUNDS"); do
  for b in "${bins[@]}"; do
    for be in $BACKENDS; do
      run "${b%%=*} $be" "${b#*=}" "$be"
    done
  done
done
