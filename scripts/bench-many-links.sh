#!/usr/bin/env bash
# What N idle links cost in one `linkem bridge --pair ...` (issue 36's "100
# links in one lab"): start to forwarding, idle CPU, resident memory, stop.
#
#   for each pair k: netns ${P}${k}a (10.98.k.1) <-veth-> ${P}${k}ea | linkem |
#                    ${P}${k}eb <-veth-> netns ${P}${k}b (10.98.k.2)
#
# Each binary given runs the same N pairs with default options (`linkem bridge
# --backend B --pair ...`), the binaries alternating within each round:
#   start   launch until a ping crosses the last pair (the group starts its
#           stages once every pair is open, so then every pair forwards; the
#           script checks that every pair answers a ping, one of three)
#   cpu     utime+stime of the process (/proc/PID/stat) over IDLE seconds
#           with no traffic but the hosts' own (IPv6 on, as in a lab: router
#           solicitations, MLD), as % of one core
#   rss     VmRSS at the end of that window, and per pair
#   stop    SIGINT until the exit
# Usage (root):
#
#   scripts/bench-many-links.sh N ROUNDS BIN [BIN ...]   # e.g. 100 2 old/linkem new/linkem
#
# BACKENDS (default: packet xdp), IDLE (default 10 s). Names ${P}* with
# P=lkml<pid>; every namespace and veth is removed at the end, also on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-many-links: needs root"; exit 1; }
N=${1:?N pairs}
ROUNDS=${2:?rounds}
shift 2
BINS=("$@")
[ ${#BINS[@]} -gt 0 ] || { echo "bench-many-links: give one linkem binary or more"; exit 1; }
[ "$N" -ge 1 ] && [ "$N" -le 250 ] || { echo "bench-many-links: N from 1 to 250"; exit 1; }
BACKENDS=${BACKENDS:-packet xdp}
IDLE=${IDLE:-10}
P=lkml$(($$ % 100000))
out=$(mktemp -d)
LPID=
cleanup() {
  if [ -n "$LPID" ]; then kill "$LPID" 2>/dev/null || true; wait "$LPID" 2>/dev/null || true; fi
  for k in $(seq 0 $((N - 1))); do
    ip netns del "${P}${k}a" 2>/dev/null || true
    ip netns del "${P}${k}b" 2>/dev/null || true
    ip link del "${P}${k}ea" 2>/dev/null || true
    ip link del "${P}${k}eb" 2>/dev/null || true
  done
  rm -rf "$out"
}
trap cleanup EXIT

t_setup=$(date +%s.%N)
for k in $(seq 0 $((N - 1))); do
  for s in a b; do
    ip netns add "${P}${k}$s"
    ip link add "${P}${k}e$s" type veth peer name "${P}${k}h$s" netns "${P}${k}$s"
    ip link set "${P}${k}e$s" up
    ip -n "${P}${k}$s" link set lo up
    ip -n "${P}${k}$s" link set "${P}${k}h$s" up
  done
  ip -n "${P}${k}a" addr add "10.98.$k.1/24" dev "${P}${k}ha"
  ip -n "${P}${k}b" addr add "10.98.$k.2/24" dev "${P}${k}hb"
done
echo "bench-many-links: $N pairs of namespaces set up in $(echo "$(date +%s.%N) - $t_setup" | bc) s"

# Waits for the pings in the background (every job but linkem).
wait_pings() {
  local j
  for j in $(jobs -p); do
    if [ "$j" != "$LPID" ]; then wait "$j" || true; fi
  done
}

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)

# run BIN BACKEND: one row
run() {
  local bin=$1 be=$2 args=() k t0 t1 c0 c1 rss stop0 stop1 ok=0 last=$((N - 1))
  for k in $(seq 0 $last); do args+=(--pair "${P}${k}ea" "${P}${k}eb"); done
  t0=$(date +%s.%N)
  "$bin" bridge --backend "$be" "${args[@]}" > /dev/null 2> "$out/err.txt" &
  LPID=$!
  until ip netns exec "${P}${last}a" ping -c 1 -W 0.2 -q "10.98.$last.2" > /dev/null 2>&1; do
    kill -0 "$LPID" 2>/dev/null || { echo "linkem ended:"; tail -5 "$out/err.txt"; exit 1; }
    [ "$(echo "$(date +%s.%N) - $t0 < 120" | bc)" = 1 ] || { echo "no ping in 120 s"; exit 1; }
  done
  t1=$(date +%s.%N)
  # Every pair's ping, 25 at a time; each answered one leaves a file.
  rm -f "$out"/ok.*
  for k in $(seq 0 $last); do
    (ip netns exec "${P}${k}a" ping -c 3 -i 0.2 -W 2 -q "10.98.$k.2" > /dev/null 2>&1 &&
      touch "$out/ok.$k") &
    if [ $(((k + 1) % 25)) = 0 ]; then wait_pings; fi
  done
  wait_pings
  ok=$(find "$out" -name 'ok.*' | wc -l)
  sleep 2
  c0=$(ticks "$LPID")
  sleep "$IDLE"
  c1=$(ticks "$LPID")
  rss=$(awk '/^VmRSS/{print $2}' "/proc/$LPID/status")
  stop0=$(date +%s.%N)
  kill -INT "$LPID"; wait "$LPID" || true; LPID=
  stop1=$(date +%s.%N)
  printf '| %-28s | %-6s | %4d | %6.2f s | %3d/%-3d | %5.2f %% | %7.1f MiB | %6.2f MiB | %5.2f s |\n' \
    "$bin" "$be" "$N" "$(echo "$t1 - $t0" | bc)" "$ok" "$N" \
    "$(echo "($c1 - $c0) * 100 / $HZ / $IDLE" | bc -l)" \
    "$(echo "$rss / 1024" | bc -l)" "$(echo "$rss / 1024 / $N" | bc -l)" \
    "$(echo "$stop1 - $stop0" | bc)"
}

echo "| binary | backend | pairs | start to forwarding | pairs answering | idle CPU (${IDLE} s) | RSS | per pair | stop |"
echo "|---|---|---|---|---|---|---|---|---|"
for round in $(seq 1 "$ROUNDS"); do
  for be in $BACKENDS; do
    for bin in "${BINS[@]}"; do
      run "$bin" "$be"
    done
  done
done
