# shellcheck shell=bash
# The start shared by the benches (bench-bridge.sh, bench-bridge-rules.sh,
# bench-pairs.sh, bench-tcp.sh, bench-coalesce.sh); source it after `cd` to the
# checkout.
#
#   bench_start NAME PREFIX   root or exit; topology.sh's helpers; the packages;
#                             LINKEM (a release build unless set), BACKENDS
#                             (default: packet xdp); P=PREFIX$$ (the names of
#                             this run) and out (a temporary folder)
#   bench_linkem              LINKEM: a release build unless set
#   bench_plain_forward       PLAIN: the plain forwarder (a release build of
#                             linkem-io's example plain_forward unless set), the
#                             baseline of what any user-space forwarder pays here
#   bench_cleanup             the trap's: kills LPID, removes P's topology and out
#   tcp_goodput ADDR SECS [W] one iperf3 TCP stream from P's a to b: Mbit/s or ?
#   bench_one_topology NET    one topology P with NET.1 <-> NET.2, removed with
#                             out at exit (LPID, the linkem running, is killed);
#                             MAC_A, MAC_B and $out/udp64.cfg, trafgen's 64-byte
#                             UDP frame from a to b (60 bytes on the veth: a
#                             64-byte Ethernet frame with its FCS)

. "$(dirname "${BASH_SOURCE[0]}")/topology.sh"

bench_start() {
  [ "$(id -u)" = 0 ] || { echo "$1: needs root"; exit 1; }
  need_packages ip:iproute2 ethtool:ethtool trafgen:netsniff-ng python3:python3
  bench_linkem
  BACKENDS=${BACKENDS:-packet xdp}
  P=$2$$
  out=$(mktemp -d)
}

# LINKEM=path runs that binary instead of building one (e.g. to compare two
# builds in one session).
bench_linkem() {
  if [ -z "${LINKEM:-}" ]; then
    cargo build --release -q -p linkem-emu
    LINKEM=${CARGO_TARGET_DIR:-$PWD/target}/release/linkem
  fi
}

# PLAIN=path runs that plain forwarder instead of building one.
bench_plain_forward() {
  if [ -z "${PLAIN:-}" ]; then
    cargo build --release -q -p linkem-io --example plain_forward
    PLAIN=${CARGO_TARGET_DIR:-$PWD/target}/release/examples/plain_forward
  fi
}

# shellcheck disable=SC2317  # run by the trap
bench_cleanup() {
  if [ -n "${LPID:-}" ]; then kill "$LPID" 2>/dev/null || true; fi
  topo_down "$P"
  if [ -n "${out:-}" ]; then rm -rf "$out"; fi
}

# tcp_goodput ADDR SECS [WINDOW]: one iperf3 TCP stream from ${P}a to ADDR in
# ${P}b (socket buffers WINDOW if given); prints the Mbit/s received, or "?"
# when iperf3 gave no figure (its exit status is not trusted alone: a run
# that ends in an error still prints JSON).
tcp_goodput() {
  local addr=$1 secs=$2 w=${3:-} mbit pid
  # A server left by a cell whose client gave up would answer this cell's
  # client (and fail it): end it first.
  for pid in $(ip netns pids "${P}b" 2>/dev/null); do
    if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = iperf3 ]; then
      kill "$pid" 2>/dev/null && sleep 0.3
    fi
  done
  ip netns exec "${P}b" iperf3 -s -1 -D -p 5201 >/dev/null 2>&1
  sleep 0.3
  mbit=$(ip netns exec "${P}a" timeout $((secs + 15)) iperf3 -c "$addr" -p 5201 -t "$secs" -O 1 \
    ${w:+-w "$w"} -J 2>/dev/null |
    python3 -c 'import json,sys; print("%.0f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e6))' \
    2>/dev/null) || true
  echo "${mbit:-?}"
}

bench_one_topology() {
  local net=$1
  trap bench_cleanup EXIT
  topo_up "$P" "$net"
  MAC_B=$(ip netns exec "${P}b" cat "/sys/class/net/${P}hb/address")
  MAC_A=$(ip netns exec "${P}a" cat "/sys/class/net/${P}ha/address")
  cat > "$out/udp64.cfg" <<CFG
{ eth(da=${MAC_B}, sa=${MAC_A}), ipv4(saddr=$net.1, daddr=$net.2, ttl=64), udp(sp=4000, dp=9), fill(0x00, 18) }
CFG
}
