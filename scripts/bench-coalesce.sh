#!/usr/bin/env bash
# TCP goodput host to host (stock hosts: checksum offload, TSO/GSO on) through
# the Linux bridge and through linkem with coalescing on transmit on and off,
# beside another linkem binary (BASE, e.g. main's), for four links: none,
# `delay 10ms`, `rate 5gbit`, and `--rules` with one pipe of `delay 10ms`
# (`rules 10ms`; the bridge's column is netem's `delay 10ms`). Both hosts may grow their TCP buffers to
# 64 MiB (net.ipv4.tcp_[rw]mem in their namespaces, autotuned, for every
# column alike): 10 Gbit/s over a 20 ms RTT needs 25 MB in flight, and an
# explicit `-w` is capped by net.core.[rw]mem_max (16 MiB here, global). The Linux bridge gets the same link from netem on
# both of its ports' egress (delay 10ms; rate 5gbit), limit 200000 packets.
# Where the kernel has no sch_netem, `rate 5gbit` comes from TBF instead
# (`tbf rate 5gbit burst 128kb limit 1514000`, the cell marked "tbf"): a limit
# of 1000 full frames, as linkem's default queue, and a bucket that holds a
# whole 64 KiB TSO/GSO packet, so that TBF paces it whole rather than cutting
# it into wire frames (as linkem's super-frames leave whole; a 16 KiB bucket
# cost the bridge 30 %). The delay rows have no such stand-in: n/a.
# The plain forwarder's column (linkem-io's example plain_forward: two
# AF_PACKET sockets with the offload header, recv and send, nothing else) is
# what any user-space forwarder reaches here; it has no link to emulate, so
# only the unimpaired row has it.
# Every column of a row in the same round, rounds alternating; Mbit/s.
#
#   BASE=/path/to/linkem scripts/bench-coalesce.sh [SECONDS] [ROUNDS]   (root)
#
# Defaults: 5 s per cell, 2 rounds. Without BASE the BASE columns are left out.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-coalesce: needs root"; exit 1; }
secs=${1:-5}
rounds=${2:-2}
. scripts/bench-common.sh
need_packages ip:iproute2 ethtool:ethtool iperf3:iperf3 python3:python3 tc:iproute2
bench_linkem
bench_plain_forward
BASE=${BASE:-}
P=lkco$$
LPID=
trap bench_cleanup EXIT

goodput() { tcp_goodput 10.97.0.2 "$secs" "${1:-}"; }

# linkem BIN BACKEND [OPTIONS...] -- WORDS...: one cell through that linkem.
through_linkem() {
  local bin=$1 backend=$2 w=$3; shift 3
  "$bin" bridge "${P}ea" "${P}eb" --backend "$backend" --control none --stats none "$@" \
    >/dev/null 2>&1 &
  LPID=$!
  sleep 1
  goodput "$w"
  kill -INT "$LPID"; wait "$LPID" || true; LPID=
}

through_plain() {
  "$PLAIN" "${P}ea" "${P}eb" >/dev/null 2>&1 &
  LPID=$!
  sleep 1
  goodput ""
  kill -INT "$LPID"; wait "$LPID" || true; LPID=
}

through_bridge() {
  local w=$1 netem=$2 dev cell=""
  ip link add "${P}br" type bridge
  ip link set "${P}ea" master "${P}br"; ip link set "${P}eb" master "${P}br"
  ip link set "${P}br" up
  local mark=""
  if [ -n "$netem" ]; then
    for dev in "${P}ea" "${P}eb"; do
      # shellcheck disable=SC2086
      if tc qdisc add dev "$dev" root netem $netem limit 200000 2>/dev/null; then
        continue
      fi
      # No sch_netem in this kernel: a rate has TBF's stand-in, a delay none.
      if [ "$netem" = "rate 5gbit" ] &&
        tc qdisc add dev "$dev" root tbf rate 5gbit burst 128kb limit 1514000; then
        mark=" (tbf)"
        continue
      fi
      cell="n/a (no netem)"
      break
    done
  fi
  if [ -z "$cell" ]; then
    sleep 1
    cell="$(goodput "$w")$mark"
  fi
  for dev in "${P}ea" "${P}eb"; do tc qdisc del dev "$dev" root 2>/dev/null || true; done
  ip link del "${P}br"
  echo "$cell"
}

head='| round | link | Linux bridge | plain forwarder'
sep='|---|---|---|---'
[ -n "$BASE" ] && { head+=' | BASE AF_XDP | BASE AF_PACKET'; sep+='|---|---'; }
head+=' | AF_PACKET coalesce on | AF_PACKET coalesce off | AF_XDP |'
sep+='|---|---|---|'
echo "$head"; echo "$sep"
topo_up "$P" 10.97.0
rules_file=$(mktemp /tmp/bench-coalesce.XXXXXX.rules)
printf 'pipe 1 config delay 10ms\nadd 100 pipe 1 ip from any to any\n' > "$rules_file"
for s in a b; do
  ip netns exec "${P}$s" sysctl -qw net.ipv4.tcp_rmem="4096 131072 67108864" \
    net.ipv4.tcp_wmem="4096 16384 67108864"
done
for round in $(seq 1 "$rounds"); do
  for link in none "delay 10ms" "rate 5gbit" "rules 10ms"; do
    case $link in
      none) words=(); netem=""; w="" ;;
      "delay 10ms") words=(delay 10ms); netem="delay 10ms"; w="" ;;
      "rate 5gbit") words=(rate 5gbit); netem="rate 5gbit"; w="" ;;
      "rules 10ms") words=(--rules "$rules_file"); netem="delay 10ms"; w="" ;;
    esac
    row=("$(through_bridge "$w" "$netem")")
    if [ "$link" = none ]; then row+=("$(through_plain)"); else row+=(-); fi
    if [ -n "$BASE" ]; then
      row+=("$(through_linkem "$BASE" xdp "$w" "${words[@]}")")
      row+=("$(through_linkem "$BASE" packet "$w" "${words[@]}")")
    fi
    row+=("$(through_linkem "$LINKEM" packet "$w" --coalesce on "${words[@]}")")
    row+=("$(through_linkem "$LINKEM" packet "$w" --coalesce off "${words[@]}")")
    row+=("$(through_linkem "$LINKEM" xdp "$w" --coalesce off "${words[@]}")")
    line="| $round | $link"
    for c in "${row[@]}"; do line+=" | $c"; done
    echo "$line |"
  done
done
rm -f "$rules_file"
