#!/bin/bash
# Start-up time, idle resident memory and stop time of `linkem bridge --pair`
# with N pairs of veths (root namespace, every end up), each pair `delay 5ms`
# (docs/numbers.md, "Idle memory and start-up of many pairs").
#
#   sudo scripts/bench-pairs-memory.sh N BACKEND [LINKEM]
#
# Start-up: from the launch to linkem's "N pairs in one process" line. RSS:
# VmRSS 2 s later, with no traffic but what the kernel sends on a fresh
# interface. Stop: from SIGTERM to the exit. The veths are named
# ${PREFIX:-lkmem}-aI/-bI (peers -paI/-pbI) and deleted at the end.
set -u
N=$1; BK=$2; BIN=${3:-target/debug/linkem}; P=${PREFIX:-lkmem}
ERR=$(mktemp)
cleanup() {
  for i in $(seq 1 "$N"); do ip link del "$P-a$i" 2>/dev/null; ip link del "$P-b$i" 2>/dev/null; done
  rm -f "$ERR"
}
trap cleanup EXIT
for i in $(seq 1 "$N"); do
  for s in a b; do
    ip link add "$P-$s$i" type veth peer name "$P-p$s$i"
    ip link set "$P-$s$i" up; ip link set "$P-p$s$i" up
  done
done
args=(); for i in $(seq 1 "$N"); do args+=(--pair "$P-a$i" "$P-b$i" delay 5ms); done
t0=$(date +%s.%N)
"$BIN" bridge --backend "$BK" --control none "${args[@]}" >/dev/null 2>"$ERR" & PID=$!
until grep -q "pairs in one process" "$ERR"; do
  kill -0 $PID 2>/dev/null || { echo "linkem ended:"; tail -3 "$ERR"; exit 1; }
  sleep 0.02
done
t1=$(date +%s.%N)
sleep 2
rss_kb=$(awk '/VmRSS/{print $2}' /proc/$PID/status)
t2=$(date +%s.%N); kill -TERM $PID; wait $PID; t3=$(date +%s.%N)
echo "$BK, $N pairs: start-up $(echo "$t1 - $t0" | bc) s, idle RSS $rss_kb kB ($((rss_kb / N)) kB per pair), stop $(echo "$t3 - $t2" | bc) s after SIGTERM"
