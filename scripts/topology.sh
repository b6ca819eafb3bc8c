# Shell helpers shared by scripts/demo.sh and the benches (through bench-common.sh; source it).
#
#   need_packages CMD:PACKAGE ...   apt-get install the packages whose command is missing
#                                   (from scripts/packages.sh)
#   topo_up P NET [offloads-off]    ${P}a (NET.1) <-veth-> ${P}ea | ${P}eb <-veth-> ${P}b (NET.2)
#                                   hosts keep the kernel's defaults (checksum offload,
#                                   TSO/GSO on), as containers get them, unless offloads-off
#   topo_down P                     removes it again (safe to call twice, or after a failure)
#
# The names and settings match linkem-io's namespace harness (crates/linkem-io/src/netns.rs).

. "$(dirname "${BASH_SOURCE[0]}")/packages.sh"

topo_up() {
  local P=$1 net=$2 tune=${3:-} s
  ip netns add "${P}a"; ip netns add "${P}b"
  ip link add "${P}ea" type veth peer name "${P}ha" netns "${P}a"
  ip link add "${P}eb" type veth peer name "${P}hb" netns "${P}b"
  for s in a b; do
    ip link set "${P}e$s" up
    sysctl -qw "net.ipv6.conf.${P}e$s.disable_ipv6=1"
    ip -n "${P}$s" link set lo up
    ip -n "${P}$s" link set "${P}h$s" up
    ip netns exec "${P}$s" sysctl -qw "net.ipv6.conf.${P}h$s.disable_ipv6=1"
    # linkem carries the hosts' offloaded checksums and super-frames as they are;
    # offloads-off is for measuring the other setting beside it.
    if [ "$tune" = offloads-off ]; then
      ip netns exec "${P}$s" ethtool -K "${P}h$s" tx off tso off gso off gro on >/dev/null
    fi
    ethtool -K "${P}e$s" gro off >/dev/null
  done
  ip -n "${P}a" addr add "$net.1/24" dev "${P}ha"
  ip -n "${P}b" addr add "$net.2/24" dev "${P}hb"
}

topo_down() {
  local P=$1
  ip netns del "${P}a" 2>/dev/null || true
  ip netns del "${P}b" 2>/dev/null || true
  ip link del "${P}ea" 2>/dev/null || true
  ip link del "${P}eb" 2>/dev/null || true
  ip link del "${P}br" 2>/dev/null || true
}
