#!/usr/bin/env bash
# Forwarding rate and lateness of `linkem bridge` on veth, beside two baselines
# measured in the same run on the same topology: the Linux bridge and linkem's
# plain forwarder (--forward-only: same sockets, no model, no delay line).
#
#   nsA (trafgen, 64-byte UDP) <-veth-> linkem <-veth-> nsB (counts rx_packets)
#
# Each row: offered = frames trafgen put on the veth per second, processed =
# frames linkem took from its socket per second, delivered = frames nsB
# received per second, all in a steady window after a warm-up. The near-max
# row is paced by trafgen's -b, which sends in bursts: its lateness includes
# draining each burst. Usage (root):
#
#   scripts/bench-bridge.sh [SECONDS]      # default 6 s per row
#
# WEB=1 runs every linkem row twice, alternating: as given, then with
# `--web 127.0.0.1:WEB_PORT` (default 18479) and a client reading its live
# updates (`curl -N /api/events`) for the whole row, as a page left open
# would ("+ web" rows; the events it read are counted); WEB_FIRST=1 runs
# the row with --web first. LINKEM_ARGS adds bridge options to every linkem
# row.
#
# Needs iproute2, ethtool and netsniff-ng (trafgen); installs them if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-6}
WEB=${WEB:-0}
WEB_PORT=${WEB_PORT:-18479}
READER=
. scripts/bench-common.sh
bench_start bench-bridge lkbb
bench_one_topology 10.98.0

stat_of() { ip netns exec "$1" cat "/sys/class/net/$2/statistics/$3"; }

# run LABEL TRAFGEN_RATE(or "max") -- COMMAND...: starts COMMAND (the device
# under test), offers traffic, prints one row of results; with WEB=1 a linkem
# row again with --web (after `linkem bridge IF_A IF_B`) and a reader.
run() {
  if [ "$WEB" != 1 ] || [ "$4" = none ]; then
    measure "$@"
    return
  fi
  local label=$1 tgrate=$2; shift 3
  if [ "${WEB_FIRST:-0}" = 1 ]; then
    measure "$label + web" "$tgrate" -- "${@:1:4}" --web "127.0.0.1:$WEB_PORT" "${@:5}"
    measure "$label" "$tgrate" -- "$@"
  else
    measure "$label" "$tgrate" -- "$@"
    # The rows after take their rates from the run as given.
    cp "$out/stats.json.delivered" "$out/given.delivered"
    measure "$label + web" "$tgrate" -- "${@:1:4}" --web "127.0.0.1:$WEB_PORT" "${@:5}"
    cp "$out/given.delivered" "$out/stats.json.delivered"
  fi
}

# The live updates of the page, read as a browser reads them, until the row ends.
start_reader() {
  curl -sN --max-time "$((SECS + 5))" "http://127.0.0.1:$WEB_PORT/api/events" > "$out/events.txt" 2>&1 &
  READER=$!
}

measure() {
  local label=$1 tgrate=$2; shift 3
  LPID=
  : > "$out/events.txt"
  if [ "$1" != none ]; then
    "$@" > "$out/stats.json" 2> "$out/err.txt" &
    LPID=$!
    sleep 1
    kill -0 "$LPID" 2>/dev/null || { cat "$out/err.txt"; exit 1; }
    case " $* " in *" --web "*) start_reader ;; esac
  fi
  local rate_arg=()
  # trafgen's -b paces by sleeping and then sending a batch back to back (2 us
  # apart on veth); -t sleeps before each frame, so it gives evenly spaced frames
  # at low rates.
  case $tgrate in
    max) ;;
    gap:*) rate_arg=(-t "${tgrate#gap:}") ;;
    *) rate_arg=(-b "$tgrate") ;;
  esac
  ip netns exec "${P}a" timeout -s INT "$((SECS + 1))" trafgen -C -P 1 -Q \
    --dev "${P}ha" --conf "$out/udp64.cfg" "${rate_arg[@]}" >/dev/null 2>&1 &
  local TG=$!
  sleep 1.5
  local w=$((SECS - 2))
  local tx0 rx0 tx1 rx1
  tx0=$(stat_of "${P}a" "${P}ha" tx_packets); rx0=$(stat_of "${P}b" "${P}hb" rx_packets)
  local t0; t0=$(date +%s.%N)
  sleep "$w"
  tx1=$(stat_of "${P}a" "${P}ha" tx_packets); rx1=$(stat_of "${P}b" "${P}hb" rx_packets)
  local t1; t1=$(date +%s.%N)
  wait "$TG" || true
  sleep 0.2
  if [ -n "$LPID" ]; then
    kill -INT "$LPID"; wait "$LPID" || true; LPID=
  else
    echo '{}' > "$out/stats.json"
  fi
  if [ -n "$READER" ]; then
    kill "$READER" 2>/dev/null || true; wait "$READER" 2>/dev/null || true; READER=
  fi
  python3 - "$label" "$tx0" "$tx1" "$rx0" "$rx1" "$t0" "$t1" "$out/stats.json" "$out/events.txt" <<'EOF'
import json, sys
label, tx0, tx1, rx0, rx1, t0, t1, path, events = sys.argv[1:]
dt = float(t1) - float(t0)
off = (int(tx1) - int(tx0)) / dt
dlv = (int(rx1) - int(rx0)) / dt
lines = [l for l in open(path) if l.startswith("{")]
d = json.loads(lines[-1]) if lines else {}
proc = late = ""
extra = ""
if d.get("directions"):
    ab = d["directions"][0]
    proc = "%.0f" % (ab["received"] / d["elapsed_s"])
    f = ab["fates"]
    l = ab["lateness_ns"]
    extra = "loss %d queue-full %d backpressure %d late %d | lateness p50 %.1f us p99 %.1f us p99.9 %.1f us max %.1f us" % (
        f["loss"], f["queue-full"], f["backpressure"], f.get("late", 0), l["p50"] / 1e3, l["p99"] / 1e3, l["p99.9"] / 1e3, l["max"] / 1e3)
samples = sum(1 for l in open(events) if l.startswith("event: sample"))
if samples:
    extra += " | web: %d samples read" % samples
print("| %-44s | %9.0f | %9s | %9.0f | %s |" % (label, off, proc, dlv, extra))
open(path + ".delivered", "w").write("%.0f" % dlv)
EOF
}

echo "| configuration | offered pps | linkem received pps (avg) | delivered pps | linkem counts a->b |"
echo "|---|---|---|---|---|"
# Baseline 1: the Linux bridge.
ip link add "${P}br" type bridge
ip link set "${P}ea" master "${P}br"; ip link set "${P}eb" master "${P}br"
ip link set "${P}br" up
run "Linux bridge" max -- none
ip link del "${P}br"
for be in $BACKENDS; do
  run "$be: plain forwarder (--forward-only)" max -- \
    "$LINKEM" bridge "${P}ea" "${P}eb" --backend "$be" --forward-only --stats json ${LINKEM_ARGS:-}
  cp "$out/stats.json.delivered" "$out/forwarder.delivered"
  # No words is a pass-through: the kernel path forwards it (`--kernel-path`);
  # the row after it takes every frame through linkem.
  run "$be: linkem, no impairment" max -- \
    "$LINKEM" bridge "${P}ea" "${P}eb" --backend "$be" --stats json ${LINKEM_ARGS:-}
  run "$be: linkem, no impairment, --kernel-path off" max -- \
    "$LINKEM" bridge "${P}ea" "${P}eb" --backend "$be" --stats json --kernel-path off ${LINKEM_ARGS:-}
  run "$be: linkem, delay 10ms" max -- \
    "$LINKEM" bridge "${P}ea" "${P}eb" --backend "$be" --stats json ${LINKEM_ARGS:-} delay 10ms
  # The same link as one Dummynet pipe for both directions (the node's path).
  printf 'pipe 1 config delay 10ms\nadd 100 pipe 1 ip from any to any\n' > "$out/one-pipe.rules"
  run "$be: linkem --rules, one pipe, delay 10ms" max -- \
    "$LINKEM" bridge "${P}ea" "${P}eb" --backend "$be" --stats json ${LINKEM_ARGS:-} \
    --rules "$out/one-pipe.rules"
  # The rate is 90 % of what this backend's forwarder delivered (84 wire bytes
  # per 64-byte frame with 'overhead ethernet').
  rate_kbit=$(( $(cat "$out/forwarder.delivered") * 84 * 8 * 9 / 10 / 1000 ))
  run "$be: linkem, delay 10ms loss 1% rate ${rate_kbit}kbit" max -- \
    "$LINKEM" bridge "${P}ea" "${P}eb" --backend "$be" --stats json ${LINKEM_ARGS:-} \
    delay 10ms loss 1% rate "${rate_kbit}kbit" overhead ethernet
  run "$be: linkem, delay 10ms, low rate (one frame per 100 us)" gap:100us -- \
    "$LINKEM" bridge "${P}ea" "${P}eb" --backend "$be" --stats json ${LINKEM_ARGS:-} delay 10ms
  near=$(( $(cat "$out/forwarder.delivered") * 8 / 10 ))
  run "$be: linkem, delay 10ms, near max ($near pps in bursts)" "${near}pps" -- \
    "$LINKEM" bridge "${P}ea" "${P}eb" --backend "$be" --stats json ${LINKEM_ARGS:-} delay 10ms
done
