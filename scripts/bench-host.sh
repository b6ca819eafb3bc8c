#!/usr/bin/env bash
# linkem host's cost and its TCP fidelity, as root, in two namespaces joined by
# a veth pair (stock offloads), torn down at exit:
#   - ping RTT (median of 200, user-to-user `ping -U`) and iperf3 TCP goodput
#     from s to r: no linkem; linkem host in s with a rule set that matches
#     nothing; the same with 100 rules;
#   - TCP through `delay 20ms rate 100mbit` with linkem host on the sender (its
#     data held at OUTPUT: TCP small queues) and on the receiver (INPUT).
#   SECS=5 scripts/bench-host.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/packages.sh
need_packages ip:iproute2 ping:iputils-ping iperf3:iperf3
secs=${SECS:-5}
bin=${LINKEM:-target/release/linkem}
[ -x "$bin" ] || cargo build --release -p linkem-emu
p=bh$$
s=${p}s r=${p}r
cleanup() {
    [ -n "${pid:-}" ] && kill -INT "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
    ip netns del "$s" 2>/dev/null || true
    ip netns del "$r" 2>/dev/null || true
    rm -f "/tmp/$p.rules" "/tmp/$p.100.rules"
}
trap cleanup EXIT
ip netns add "$s"; ip netns add "$r"
ip link add "${p}x" type veth peer name "${p}y"
ip link set "${p}x" netns "$s"; ip link set "${p}y" netns "$r"
ip -n "$s" addr add 10.80.1.1/24 dev "${p}x"; ip -n "$r" addr add 10.80.1.2/24 dev "${p}y"
for ns in "$s" "$r"; do ip -n "$ns" link set lo up; done
ip -n "$s" link set "${p}x" up; ip -n "$r" link set "${p}y" up
printf 'pipe 1 config delay 10ms\nadd 100 pipe 1 udp dst-port 9 in\n' > "/tmp/$p.rules"
{
    echo 'pipe 1 config delay 10ms'
    for i in $(seq 1 100); do echo "add $((i * 10)) pipe 1 udp dst-port $((20000 + i)) in"; done
} > "/tmp/$p.100.rules"

start() { # NS ARGS...
    local ns=$1; shift
    ip netns exec "$ns" "$bin" host --control none --realtime off --max-lag off --stats json "$@" \
        > /dev/null 2>&1 &
    pid=$!
    sleep 1.5
}
stop() { kill -INT "$pid"; wait "$pid" || true; pid=; }
ping_ms() {
    ip netns exec "$s" ping -U -c 200 -i 0.01 -q 10.80.1.2 | awk -F/ '/rtt/ {print $5}'
}
tcp_mbit() {
    ip netns exec "$r" iperf3 -s -1 -p 5311 > /dev/null 2>&1 &
    sleep 0.3
    ip netns exec "$s" iperf3 -c 10.80.1.2 -p 5311 -t "$secs" -O 1 -J \
        | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e6,1))'
}
row() { printf '%-44s %10s %12s\n' "$1" "$2" "$3"; }
row "case" "ping avg ms" "TCP Mbit/s"
row "no linkem" "$(ping_ms)" "$(tcp_mbit)"
start "$s" --rules "/tmp/$p.rules"
row "linkem host, 1 rule matching nothing" "$(ping_ms)" "$(tcp_mbit)"
stop
start "$s" --rules "/tmp/$p.100.rules"
row "linkem host, 100 rules matching nothing" "$(ping_ms)" "$(tcp_mbit)"
stop
start "$s" --dev "${p}x" delay 20ms rate 100mbit
row "delay 20ms rate 100mbit on the sender" "-" "$(tcp_mbit)"
stop
start "$r" --dev "${p}y" delay 20ms rate 100mbit
row "delay 20ms rate 100mbit on the receiver" "-" "$(tcp_mbit)"
stop
