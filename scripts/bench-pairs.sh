#!/usr/bin/env bash
# Aggregate 64-byte forwarding of one `linkem bridge` serving several pairs
# (`--pair`, issue 21 item 2) against the same process serving one pair,
# measured alternately in one run on the same topologies:
#
#   for each pair k: nsA_k (trafgen, 64-byte UDP, max) <-veth-> linkem <-veth-> nsB_k
#
# Rows: "1 pair" runs linkem with pair 0 only and offers traffic on pair 0;
# "N pairs, 1 loaded" runs linkem with all N pairs and offers traffic on
# pair 0 only (the cost of the idle pairs); "N pairs, all loaded" offers
# traffic on every pair at once (aggregate). Delivered = frames the nsB's
# received per second in a steady window. Usage (root):
#
#   scripts/bench-pairs.sh [PAIRS] [SECONDS] [ROUNDS]   # default 4 pairs, 6 s, 2 rounds
#
# LINKEM=path runs that binary; BACKENDS limits the backends (default packet xdp);
# LINKEM_ARGS adds options (e.g. 'delay 10ms' is given per pair with WORDS='delay 10ms').
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-4}
SECS=${2:-6}
ROUNDS=${3:-2}
[ "$(id -u)" = 0 ] || { echo "bench-pairs: needs root"; exit 1; }
. scripts/topology.sh
need_packages ip:iproute2 ethtool:ethtool trafgen:netsniff-ng python3:python3
if [ -z "${LINKEM:-}" ]; then
  cargo build --release -q -p linkem
  LINKEM=${CARGO_TARGET_DIR:-$PWD/target}/release/linkem
fi
BACKENDS=${BACKENDS:-packet xdp}
WORDS=${WORDS:-}
P=lkbp$$
out=$(mktemp -d)
cleanup() {
  [ -n "${LPID:-}" ] && kill "$LPID" 2>/dev/null || true
  for k in $(seq 0 $((N - 1))); do topo_down "${P}$k"; done
  rm -rf "$out"
}
trap cleanup EXIT

for k in $(seq 0 $((N - 1))); do
  topo_up "${P}$k" "10.97.$k"
  mb=$(ip netns exec "${P}${k}b" cat "/sys/class/net/${P}${k}hb/address")
  ma=$(ip netns exec "${P}${k}a" cat "/sys/class/net/${P}${k}ha/address")
  cat > "$out/udp64-$k.cfg" <<EOF
{ eth(da=${mb}, sa=${ma}), ipv4(saddr=10.97.$k.1, daddr=10.97.$k.2, ttl=64), udp(sp=4000, dp=9), fill(0x00, 18) }
EOF
done

rx_of() { ip netns exec "${P}$1b" cat "/sys/class/net/${P}$1hb/statistics/rx_packets"; }

# run LABEL PAIRS_IN_LINKEM PAIRS_LOADED BACKEND
run() {
  local label=$1 served=$2 loaded=$3 be=$4 args=() k
  for k in $(seq 0 $((served - 1))); do
    # shellcheck disable=SC2206
    args+=(--pair "${P}${k}ea" "${P}${k}eb" $WORDS)
  done
  "$LINKEM" bridge --backend "$be" --stats json --control none "${args[@]}" \
    > "$out/stats.json" 2> "$out/err.txt" &
  LPID=$!
  # Opening the interfaces and making each delay line's first stretch
  # resident takes seconds with many pairs on a loaded machine: measure once
  # linkem says its stages run.
  local waited=0
  until grep -q -e 'in one process' -e '^linkem: a->b' "$out/err.txt" 2>/dev/null; do
    kill -0 "$LPID" 2>/dev/null || { cat "$out/err.txt"; exit 1; }
    sleep 0.2; waited=$((waited + 1))
    [ "$waited" -lt 300 ] || { echo "bench-pairs: linkem did not start"; cat "$out/err.txt"; exit 1; }
  done
  sleep 0.5
  local tgs=()
  for k in $(seq 0 $((loaded - 1))); do
    ip netns exec "${P}${k}a" timeout -s INT "$((SECS + 1))" trafgen -C -P 1 -Q \
      --dev "${P}${k}ha" --conf "$out/udp64-$k.cfg" >/dev/null 2>&1 &
    tgs+=($!)
  done
  sleep 1.5
  local w=$((SECS - 2)) r0=0 r1=0 t0 t1
  for k in $(seq 0 $((loaded - 1))); do r0=$((r0 + $(rx_of "$k"))); done
  t0=$(date +%s.%N)
  sleep "$w"
  for k in $(seq 0 $((loaded - 1))); do r1=$((r1 + $(rx_of "$k"))); done
  t1=$(date +%s.%N)
  for t in "${tgs[@]}"; do wait "$t" || true; done
  kill -INT "$LPID"; wait "$LPID" || true; LPID=
  python3 - "$label" "$r0" "$r1" "$t0" "$t1" "$loaded" "$out/stats.json" <<'EOF'
import json, sys
label, r0, r1, t0, t1, loaded, path = sys.argv[1:]
dlv = (int(r1) - int(r0)) / (float(t1) - float(t0))
lines = [l for l in open(path) if l.startswith("{")]
d = json.loads(lines[-1]) if lines else {}
# a->b of every pair (one pair prints "directions", several "pairs").
dirs = [p["directions"][0] for p in d.get("pairs", [])] or d.get("directions", [])[:1]
tot = {}
for x in dirs:
    tot["received"] = tot.get("received", 0) + x["received"]
    tot["k-drops"] = tot.get("k-drops", 0) + x["rx_kernel_drops"]
    for k, v in x["fates"].items():
        if v:
            tot[k] = tot.get(k, 0) + v
counts = " ".join("%s %d" % kv for kv in tot.items())
print("| %-36s | %10.0f | %10.0f | %s |" % (label, dlv, dlv / int(loaded), counts))
EOF
}

echo "| configuration | delivered pps (all loaded pairs) | per loaded pair | linkem a->b counts, all pairs, whole run |"
echo "|---|---|---|---|"
for round in $(seq 1 "$ROUNDS"); do
  for be in $BACKENDS; do
    run "$be: 1 pair" 1 1 "$be"
    run "$be: $N pairs, 1 loaded" "$N" 1 "$be"
    run "$be: $N pairs, all loaded" "$N" "$N" "$be"
  done
done
