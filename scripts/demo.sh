#!/usr/bin/env bash
# linkem demo.
#  1. Offline: replays the bundled capture (testdata/demo.pcap, 12 Mbit/s of
#     Poisson UDP traffic) through the bundled link (testdata/dsl.toml, an 8 Mbit/s
#     DSL line with a 50-packet queue) and prints what the link did to it.
#  2. Live (as root): builds two network namespaces joined through linkem
#     (nsA <-veth-> linkem <-veth-> nsB; the hosts keep their offloads, as
#     containers do), measures ping RTT and iperf3 throughput
#     without and with 'delay 20ms rate 20mbit', and prints linkem's counts.
# Installs what it needs (iproute2, iputils-ping, iperf3) when run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "demo: cargo is missing (install Rust with rustup)"; exit 1; }
cargo build --release -q -p linkem-emu
LINKEM=${CARGO_TARGET_DIR:-$PWD/target}/release/linkem
out=$(mktemp -d)
P=lkdemo$$
. scripts/topology.sh
cleanup() {
  [ -n "${LPID:-}" ] && kill "$LPID" 2>/dev/null || true
  topo_down "$P"
  rm -rf "$out"
}
trap cleanup EXIT

echo "== 1. linkem replay testdata/demo.pcap through testdata/dsl.toml"
"$LINKEM" replay testdata/demo.pcap "$out/out.pcap" --config testdata/dsl.toml --events "$out/events.tsv"
echo "-- first packets (one line each with --events):"
head -5 "$out/events.tsv" | column -t
echo "-- packets that found the queue full:"
grep -m3 queue-full "$out/events.tsv" | column -t || true

if [ "$(id -u)" != 0 ]; then
  echo; echo "== 2. live demo skipped: it needs root (namespaces and raw sockets)"; exit 0
fi
need_packages ip:iproute2 ping:iputils-ping iperf3:iperf3 ethtool:ethtool

echo; echo "== 2. live: ${P}a (10.99.0.1) <-> linkem <-> ${P}b (10.99.0.2)"
topo_up "$P" 10.99.0

measure() {
  local label=$1; shift
  "$LINKEM" bridge "${P}ea" "${P}eb" "$@" > "$out/bridge.txt" 2> "$out/bridge.err" &
  LPID=$!
  sleep 1
  local rtt
  rtt=$(ip netns exec "${P}a" ping -c 20 -i 0.05 -q 10.99.0.2 | awk -F/ '/rtt/ {print $5}')
  ip netns exec "${P}b" iperf3 -s -1 -D -p 5201 >/dev/null 2>&1; sleep 0.3
  local tput
  tput=$(ip netns exec "${P}a" iperf3 -c 10.99.0.2 -p 5201 -t 3 -J 2>/dev/null \
    | python3 -c 'import json,sys; print("%.1f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e6))' || echo "?")
  kill -INT "$LPID"; wait "$LPID" || true; LPID=
  printf '%-28s ping RTT %8s ms   TCP throughput %6s Mbit/s\n' "$label" "$rtt" "$tput"
}
measure "linkem, no impairment:"
measure "linkem, delay 20ms rate 20mbit:" delay 20ms rate 20mbit
echo "-- linkem's counts for the last run (printed when it stops):"
cat "$out/bridge.txt"
