#!/usr/bin/env bash
# Forwarding rate of `linkem bridge --rules` beside the same bridge without
# rules, in one run on one topology (the machine is shared and noisy: only
# rows of one run compare):
#
#   nsA (trafgen, 64-byte UDP at full speed) <-veth-> linkem <-veth-> nsB
#
# Rows per backend: `delay 10ms` as link words, and the same delay as one pipe
# behind 1 rule and behind 100 rules (99 that never match this traffic, then the
# one that does: every packet is tried against all of them); then a pipe with
# `bw 1Gbit/s delay 10ms` beside the same pipe under an fq_codel scheduler. Each configuration is offered traffic at full
# speed ("max") and at a paced rate (RATE, default 100000pps), and the rounds
# repeat (ROUNDS, default 2) so that rows of one configuration can be compared
# with each other for noise. Columns: offered and delivered frames per second
# in a steady window, frames linkem took per second over its run, and linkem's
# CPU time (all threads, user + system) per delivered frame in that window.
#
#   scripts/bench-bridge-rules.sh [SECONDS]      # default 6 s per row (root)
#
# LINKEM=path runs that binary (default: a release build); BACKENDS limits the backends.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-6}
. scripts/bench-common.sh
bench_start bench-bridge-rules lkrb
RATE=${RATE:-100000pps}
ROUNDS=${ROUNDS:-2}
TICK=$(getconf CLK_TCK)
bench_one_topology 10.97.0
printf 'pipe 1 config delay 10ms\nadd 100 pipe 1 ip from any to any\n' > "$out/1.rules"
{
  echo "pipe 1 config delay 10ms"
  echo "pipe 2 config delay 50ms"
  for i in $(seq 1 99); do
    echo "add $((i * 10)) pipe 2 udp from 10.$((i % 200)).$i.0/24 to any dst-port $((1000 + i))-$((1100 + i)) in"
  done
  echo "add 5000 pipe 1 ip from any to any"
} > "$out/100.rules"
# A pipe with a rate (1 Gbit/s: above what this path forwards, so the link never
# limits and the row shows the cost of the pipe's machinery), alone and under
# fq_codel (sched 1 serves pipe 1's link; the queue of each flow is one of 1024).
# Both hold 10240 packets (fq_codel's default limit): with the default 50 slots
# (25 us at 1 Gbit/s) the plain pipe drops the receive batches' bursts as
# queue-full, and the row would show its queue instead of its cost.
printf 'pipe 1 config bw 1Gbit/s delay 10ms queue 10240\nadd 100 pipe 1 ip from any to any\n' > "$out/rate.rules"
printf 'pipe 1 config bw 1Gbit/s delay 10ms\nsched 1 config type fq_codel\nadd 100 pipe 1 ip from any to any\n' > "$out/fq_codel.rules"

stat_of() { ip netns exec "$1" cat "/sys/class/net/$2/statistics/$3"; }

cpu_of() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# run LABEL RATE -- COMMAND...: starts linkem, offers traffic ("max": full
# speed), prints a row.
run() {
  local label=$1 rate=$2; shift 3
  "$@" > "$out/stats.json" 2> "$out/err.txt" &
  LPID=$!
  sleep 1
  kill -0 "$LPID" 2>/dev/null || { cat "$out/err.txt"; exit 1; }
  ip netns exec "${P}a" timeout -s INT "$((SECS + 1))" trafgen -C -P 1 -Q \
    --dev "${P}ha" --conf "$out/udp64.cfg" $([ "$rate" = max ] || echo "-b $rate") >/dev/null 2>&1 &
  local TG=$!
  sleep 1.5
  local w=$((SECS - 2)) tx0 rx0 tx1 rx1 t0 t1 c0 c1
  tx0=$(stat_of "${P}a" "${P}ha" tx_packets); rx0=$(stat_of "${P}b" "${P}hb" rx_packets)
  c0=$(cpu_of "$LPID"); t0=$(date +%s.%N)
  sleep "$w"
  tx1=$(stat_of "${P}a" "${P}ha" tx_packets); rx1=$(stat_of "${P}b" "${P}hb" rx_packets)
  c1=$(cpu_of "$LPID"); t1=$(date +%s.%N)
  wait "$TG" || true
  sleep 0.2
  kill -INT "$LPID"; wait "$LPID" || true; LPID=
  python3 - "$label ($rate)" "$tx0" "$tx1" "$rx0" "$rx1" "$t0" "$t1" "$out/stats.json" "$c0" "$c1" "$TICK" <<'EOF'
import json, sys
label, tx0, tx1, rx0, rx1, t0, t1, path, c0, c1, tick = sys.argv[1:]
cpu_s = (int(c1) - int(c0)) / int(tick)
dt = float(t1) - float(t0)
off = (int(tx1) - int(tx0)) / dt
dlv = (int(rx1) - int(rx0)) / dt
lines = [l for l in open(path) if l.startswith("{")]
d = json.loads(lines[-1]) if lines else {}
ab = d["directions"][0]
f = ab["fates"]
drops = ", ".join("%s %d" % (k, v) for k, v in sorted(f.items()) if k != "delivered" and v)
ns_per = cpu_s * 1e9 / max(int(rx1) - int(rx0), 1)
print("| %-52s | %9.0f | %9.0f | %9.0f | %7.0f | %s |" % (
    label, off, ab["received"] / d["elapsed_s"], dlv, ns_per, drops or "-"))
EOF
}

echo "| configuration | offered pps | linkem received pps (avg) | delivered pps | CPU ns / delivered | drops a->b |"
echo "|---|---|---|---|---|---|"
for round in $(seq 1 "$ROUNDS"); do
  for be in $BACKENDS; do
    for rate in max "$RATE"; do
      common=(bridge "${P}ea" "${P}eb" --backend "$be" --stats json)
      run "$be: delay 10ms (link words, no rules)" "$rate" -- "$LINKEM" "${common[@]}" delay 10ms
      run "$be: --rules, 1 rule, pipe delay 10ms" "$rate" -- "$LINKEM" "${common[@]}" --rules "$out/1.rules"
      run "$be: --rules, 100 rules, pipe delay 10ms" "$rate" -- "$LINKEM" "${common[@]}" --rules "$out/100.rules"
      run "$be: --rules, pipe bw 1Gbit/s delay 10ms" "$rate" -- "$LINKEM" "${common[@]}" --rules "$out/rate.rules"
      run "$be: --rules, same pipe under fq_codel" "$rate" -- "$LINKEM" "${common[@]}" --rules "$out/fq_codel.rules"
    done
  done
done
