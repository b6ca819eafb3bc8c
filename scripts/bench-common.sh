# shellcheck shell=bash
# The start shared by the forwarding benches (bench-bridge.sh,
# bench-bridge-rules.sh, bench-pairs.sh); source it after `cd` to the checkout.
#
#   bench_start NAME PREFIX   root or exit; topology.sh's helpers; the packages;
#                             LINKEM (a release build unless set), BACKENDS
#                             (default: packet xdp); P=PREFIX$$ (the names of
#                             this run) and out (a temporary folder)
#   bench_one_topology NET    one topology P with NET.1 <-> NET.2, removed with
#                             out at exit (LPID, the linkem running, is killed);
#                             MAC_A, MAC_B and $out/udp64.cfg, trafgen's 64-byte
#                             UDP frame from a to b (60 bytes on the veth: a
#                             64-byte Ethernet frame with its FCS)

. "$(dirname "${BASH_SOURCE[0]}")/topology.sh"

bench_start() {
  [ "$(id -u)" = 0 ] || { echo "$1: needs root"; exit 1; }
  need_packages ip:iproute2 ethtool:ethtool trafgen:netsniff-ng python3:python3
  # LINKEM=path runs that binary instead of building one (e.g. to compare two
  # builds in one session).
  if [ -z "${LINKEM:-}" ]; then
    cargo build --release -q -p linkem
    LINKEM=${CARGO_TARGET_DIR:-$PWD/target}/release/linkem
  fi
  BACKENDS=${BACKENDS:-packet xdp}
  P=$2$$
  out=$(mktemp -d)
}

# shellcheck disable=SC2317  # run by the trap
bench_cleanup() {
  if [ -n "${LPID:-}" ]; then kill "$LPID" 2>/dev/null || true; fi
  topo_down "$P"
  rm -rf "$out"
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
