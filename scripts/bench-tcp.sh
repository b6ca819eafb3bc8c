#!/usr/bin/env bash
# TCP goodput host to host with no impairment, through the Linux bridge and
# through `linkem bridge` on each backend, with the hosts' offloads as the kernel
# sets them (checksum offload, TSO/GSO on, as containers get them) and with them
# switched off: the two settings users run. One table, every row in the same run.
#
#   scripts/bench-tcp.sh [SECONDS]      # default 5 s per row (root)
#
# Needs iproute2, ethtool and iperf3; installs them if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-tcp: needs root"; exit 1; }
secs=${1:-5}
. scripts/topology.sh
need_packages ip:iproute2 ethtool:ethtool iperf3:iperf3 python3:python3
cargo build --release -q -p linkem
LINKEM=${LINKEM:-${CARGO_TARGET_DIR:-$PWD/target}/release/linkem}
P=lktcp$$
LPID=
cleanup() {
  [ -n "$LPID" ] && kill "$LPID" 2>/dev/null || true
  topo_down "$P"
}
trap cleanup EXIT

goodput() {
  ip netns exec "${P}b" iperf3 -s -1 -D -p 5201 >/dev/null 2>&1
  sleep 0.3
  ip netns exec "${P}a" timeout $((secs + 10)) iperf3 -c 10.96.0.2 -p 5201 -t "$secs" -O 1 -J 2>/dev/null |
    python3 -c 'import json,sys; print("%.0f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e6))' ||
    echo "?"
}

printf '| hosts | Linux bridge | linkem AF_XDP | linkem AF_PACKET |\n|---|---|---|---|\n'
for setting in stock offloads-off; do
  topo_up "$P" 10.96.0 "$([ "$setting" = offloads-off ] && echo offloads-off)"
  ip link add "${P}br" type bridge
  ip link set "${P}ea" master "${P}br"; ip link set "${P}eb" master "${P}br"
  ip link set "${P}br" up
  sleep 1
  linux=$(goodput)
  ip link del "${P}br"
  row=()
  for backend in xdp packet; do
    "$LINKEM" bridge "${P}ea" "${P}eb" --backend "$backend" --control none --stats none \
      >/dev/null 2>&1 &
    LPID=$!
    sleep 1
    row+=("$(goodput)")
    kill -INT "$LPID"; wait "$LPID" || true; LPID=
  done
  printf '| %s | %s Mbit/s | %s Mbit/s | %s Mbit/s |\n' "$setting" "$linux" "${row[0]}" "${row[1]}"
  topo_down "$P"
done
