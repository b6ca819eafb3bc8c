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
. scripts/bench-common.sh
need_packages ip:iproute2 ethtool:ethtool iperf3:iperf3 python3:python3
bench_linkem
P=lktcp$$
LPID=
trap bench_cleanup EXIT

goodput() { tcp_goodput 10.96.0.2 "$secs"; }

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
