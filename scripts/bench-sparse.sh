#!/usr/bin/env bash
# Sparse traffic: median ping RTT between two namespaces through the Linux
# bridge and through `linkem bridge` (`delay 0` and `delay 50us`), at 2 ms,
# 5 ms and 100 ms between pings, beside another linkem binary (BASE, e.g.
# main's), in rounds that alternate the devices; static neighbours (no ARP in
# the measured path). For each linkem cell also the wake-ups per packet of its
# stages, from `--stats json` (`rx_wakeups`: the live stage's poll returns,
# `tx_wakeups`: the output threads' timed sleeps and parks that ended).
#
#   BASE=/path/to/linkem LINKEM=/path/to/linkem scripts/bench-sparse.sh [PINGS] [ROUNDS]   (root)
#
# Defaults: 200 pings per cell, 2 rounds. Without BASE the BASE rows are left out.
# DELAYS (default "0 50us") are the delays of the linkem columns, e.g. "50us 200us".
# LINKEM_ARGS (e.g. "--backend xdp --coalesce off") go to every linkem bridge.
# BESIDE (seconds, e.g. 0.03): a UDP datagram from a to b that often, on a schedule,
# beside every ping cell (bridge and linkem alike): a second flow with a beat of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-common.sh
pings=${1:-200}
rounds=${2:-2}
BASE=${BASE:-}
delays=${DELAYS:-0 50us}
bench_start bench-sparse lksp
trap bench_cleanup EXIT
topo_up "$P" 10.96.0
MAC_A=$(ip netns exec "${P}a" cat "/sys/class/net/${P}ha/address")
MAC_B=$(ip netns exec "${P}b" cat "/sys/class/net/${P}hb/address")
ip -n "${P}a" neigh replace 10.96.0.2 lladdr "$MAC_B" dev "${P}ha" nud permanent
ip -n "${P}b" neigh replace 10.96.0.1 lladdr "$MAC_A" dev "${P}hb" nud permanent

# ping_median INTERVAL_S: median RTT in µs of $pings pings (after 5 unmeasured).
ping_median() {
  local beside=
  if [ -n "${BESIDE:-}" ]; then
    ip netns exec "${P}a" python3 -c '
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
gap = float(sys.argv[1]); t0 = time.monotonic(); k = 0
while True:
    k += 1
    time.sleep(max(0.0, t0 + k * gap - time.monotonic()))
    s.sendto(b"beside", ("10.96.0.2", 9))' "$BESIDE" &
    beside=$!
  fi
  ip netns exec "${P}a" ping -q -c 5 -i "$1" 10.96.0.2 >/dev/null 2>&1 || true
  ip netns exec "${P}a" ping -n -c "$pings" -i "$1" 10.96.0.2 2>/dev/null |
    python3 -c '
import re, statistics, sys
v = [float(m.group(1)) for m in re.finditer(r"time=([0-9.]+) ms", sys.stdin.read())]
print("%.0f" % (statistics.median(v) * 1000) if v else "?")'
  [ -z "$beside" ] || { kill "$beside"; wait "$beside" 2>/dev/null || true; }
}

through_bridge() {
  ip link add "${P}br" type bridge
  ip link set "${P}ea" master "${P}br"; ip link set "${P}eb" master "${P}br"
  ip link set "${P}br" up
  ping_median "$1"
  ip link del "${P}br"
}

# through_linkem BIN INTERVAL WORDS...: "median wakeups-per-packet" (rx+tx per
# packet received, both directions).
through_linkem() {
  local bin=$1 interval=$2; shift 2
  # shellcheck disable=SC2086
  "$bin" bridge "${P}ea" "${P}eb" --control none --stats json ${LINKEM_ARGS:-} "$@" >"$out/stats" 2>/dev/null &
  LPID=$!
  sleep 1
  local med
  med=$(ping_median "$interval")
  kill -INT "$LPID"; wait "$LPID" || true; LPID=
  local wpp
  wpp=$(python3 - "$out/stats" <<'PY'
import json, sys
last = None
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("{"):
        try:
            last = json.loads(line)
        except ValueError:
            pass
dirs = (last or {}).get("directions") or []
rx = sum(d.get("received", 0) for d in dirs)
print("rx %.2f tx %.2f" % (
    sum(d.get("rx_wakeups", 0) for d in dirs[:1]) / max(rx, 1),
    sum(d.get("tx_wakeups", 0) for d in dirs) / max(rx, 1)) if dirs else "?")
PY
)
  echo "$med ($wpp)"
}

echo "# ping RTT median µs ($pings pings per cell; wake-ups per packet received: live stage rx, output threads tx)${BESIDE:+; a UDP datagram every ${BESIDE} s beside}"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
head="| round | interval | Linux bridge"
rule="|---|---|---"
for d in $delays; do head="$head | BASE delay $d | LINKEM delay $d"; rule="$rule|---|---"; done
echo "$head |"
echo "$rule|"
for r in $(seq "$rounds"); do
  for interval in 0.002 0.005 0.1; do
    row="| $r | ${interval}s | $(through_bridge "$interval")"
    for d in $delays; do
      words="delay $d"
      [ -n "$BASE" ] || row="$row | -"
      for bin in ${BASE:+"$BASE"} "$LINKEM"; do
        # shellcheck disable=SC2086
        row="$row | $(through_linkem "$bin" "$interval" $words)"
      done
    done
    echo "$row |"
  done
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
