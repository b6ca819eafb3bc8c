#!/usr/bin/env bash
# The control plane's speed, and forwarding beside a change storm, in one run:
#
#   nsA (iperf3 -u) <-veth-> linkem bridge (delay 5ms) <-veth-> nsB (iperf3 -s)
#
# 1. `linkem ctl link both delay ...` as separate processes: time per change.
# 2. One connection (a small Python client): changes per second in lockstep
#    (send, wait for the reply) and pipelined (send all, then read the replies).
# 3. UDP at RATE for SECS seconds three times: without changes, with a lockstep
#    change storm on one connection (at most STORM_RATE changes per second, each
#    sent after the previous reply), and with a paced storm on one connection
#    (STORM_RATE changes per second sent on time, the replies read as they come);
#    counts and lateness of each phase (the counters are zeroed between phases
#    with `linkem ctl zero`).
#
#   sudo scripts/bench-ctl.sh            (RATE=100M SECS=5 N=20000 STORM_RATE=10000 by default)
#
# RULES=1 runs the bridge with a rule set instead (`--rules`: 2 pipes, 10
# rules, the traffic taken by the last one, through pipe 1 with delay 5ms)
# and the changes are `pipe 1 config delay ...` (alternating values; the
# pipe keeps its queued packets at each); drops then include the node's own
# (red-drop, aqm-drop, flow-limit, flushed).
#
#   sudo RULES=1 SECS=3 scripts/bench-ctl.sh
#
# INSIDE=1 adds each change's time inside linkem (read of the request to its
# reply, from kernel tracepoints with perf): median and p99.
#
# Needs root, iproute2, ethtool, iperf3, python3 (installs them if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/topology.sh
need_packages ip:iproute2 ethtool:ethtool iperf3:iperf3 python3:python3

P=${P:-lkCb}
NET=${NET:-10.213.7}
RATE=${RATE:-100M}
SECS=${SECS:-5}
N=${N:-20000}
STORM_RATE=${STORM_RATE:-10000}
RULES=${RULES:-}
LINKEM=${LINKEM:-target/debug/linkem}
[ -x "$LINKEM" ] || cargo build -p linkem-emu
SOCK=/run/linkem/$P.sock
OUT=$(mktemp -d)
LPID=

cleanup() {
  [ -n "$LPID" ] && kill "$LPID" 2>/dev/null && wait "$LPID" 2>/dev/null || true
  ip netns pids "${P}b" 2>/dev/null | xargs -r kill 2>/dev/null || true
  topo_down "$P"
  rm -rf "$OUT"
}
trap cleanup EXIT
topo_down "$P"
topo_up "$P" "$NET"

if [ -n "$RULES" ]; then
  {
    echo "pipe 1 config delay 5ms"
    echo "pipe 2 config delay 50ms"
    # Nine rules this traffic never matches (every packet is tried against them), then its own.
    for i in $(seq 1 9); do
      echo "add $((i * 10)) pipe 2 udp from 10.$((i + 100)).0.0/16 to any dst-port $((1000 + i))"
    done
    echo "add 1000 pipe 1 ip from any to any"
  } >"$OUT/rules"
  export CHANGE="pipe 1 config delay %dus"
  LINK=(--rules "$OUT/rules")
  WHAT="a rule set (2 pipes, 10 rules; pipe 1 delay 5ms)"
else
  export CHANGE="link both delay %dus"
  LINK=(delay 5ms)
  WHAT="delay 5ms"
fi
"$LINKEM" bridge "${P}ea" "${P}eb" "${LINK[@]}" --name "$P" --stats json >"$OUT/stats" 2>"$OUT/err" &
LPID=$!
for _ in $(seq 100); do
  "$LINKEM" ctl --socket "$SOCK" ping >/dev/null 2>&1 && break
  sleep 0.1
done

# A client on one connection: lockstep or pipelined, N changes or for SECS seconds.
client() {
  python3 - "$SOCK" "$@" <<'EOF'
import os, socket, sys, time
path, mode, arg = sys.argv[1], sys.argv[2], float(sys.argv[3])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(path)
f = s.makefile("rwb", buffering=0)
r = s.makefile("rb")
r.readline()  # banner
change = os.environ["CHANGE"].encode() + b"\n"
def line(i):
    return change % (5000 + (i % 7) * 100)
bad = 0
t0 = time.perf_counter()
if mode == "pipelined":
    n = int(arg)
    # A writer thread: the replies must be read while the requests go out.
    import threading
    w = threading.Thread(target=lambda: s.sendall(b"".join(line(i) for i in range(n))))
    w.start()
    for _ in range(n):
        bad += b'"ok":true' not in r.readline()
    w.join()
elif mode == "lockstep":
    n = int(arg)
    for i in range(n):
        s.sendall(line(i))
        bad += b'"ok":true' not in r.readline()
else:  # arg seconds at STORM_RATE changes per second: "storm" waits for each
    # reply before the next change, "paced" sends each on time and a thread
    # reads the replies as they come
    rate = float(sys.argv[4])
    paced = mode == "paced"
    import threading
    def reader():
        # Until the server, having answered every change, closes on our EOF.
        global bad
        for l in r:
            bad += b'"ok":true' not in l
    t = threading.Thread(target=reader)
    if paced:
        t.start()
    n = 0
    while True:
        now = time.perf_counter() - t0
        if now >= arg:
            break
        ahead = n / rate - now
        if ahead > 0.0005:
            time.sleep(ahead)
        s.sendall(line(n))
        if not paced:
            bad += b'"ok":true' not in r.readline()
        n += 1
    if paced:
        s.shutdown(socket.SHUT_WR)
        t.join()
dt = time.perf_counter() - t0
print(f"{mode}: {n} changes in {dt:.3f} s = {n/dt:.0f} per second, {bad} refused")
EOF
}

echo "## Control plane (linkem $("$LINKEM" --version | cut -d' ' -f2), $(nproc) cores)"
echo
PN=200
t0=$(date +%s%N)
for i in $(seq "$PN"); do
  # shellcheck disable=SC2046 # CHANGE is words
  "$LINKEM" ctl --socket "$SOCK" $(printf "$CHANGE" "$((5000 + i % 7 * 100))") >/dev/null
done
t1=$(date +%s%N)
t2=$(date +%s%N)
for i in $(seq "$PN"); do "$LINKEM" --version >/dev/null; done
t3=$(date +%s%N)
echo "- \`linkem ctl\` processes: $PN changes, $(( (t1 - t0) / PN / 1000 )) us per process (start, connect, change, reply, exit) = $(( PN * 1000000000 / (t1 - t0) )) per second; beside \`linkem --version\` (start and exit only): $(( (t3 - t2) / PN / 1000 )) us"
echo "- one connection, $(client lockstep "$N")"
echo "- one connection, $(client pipelined "$N")"
# INSIDE=1: what each change costs inside linkem, from the end of the control
# thread's read of the request (exit of recvfrom) to the start of its reply
# (entry of write), per thread, from kernel tracepoints (perf record) over N
# lockstep changes: the time the change is parsed, checked and applied under
# the node's lock, without the round trip between the processes.
if [ -n "${INSIDE:-}" ]; then
  need_packages perf:linux-perf
  # A control thread reads a request with recvfrom or read and replies with write or
  # sendto, depending on the build: all four are traced.
  perf record -q -o "$OUT/perf.data" -e syscalls:sys_exit_recvfrom -e syscalls:sys_exit_read \
    -e syscalls:sys_enter_write -e syscalls:sys_enter_sendto -p "$LPID" >/dev/null 2>&1 &
  PERF=$!
  sleep 1
  client lockstep "$N" >/dev/null
  sleep 0.2
  kill -INT "$PERF"
  wait "$PERF" || true
  perf script -i "$OUT/perf.data" --ns -F tid,time,event,trace 2>/dev/null | python3 -c '
import re, sys
read_at, took = {}, []
for line in sys.stdin:
    m = re.match(r"\s*(\d+)\s+([\d.]+):\s+syscalls:(\w+):\s*(.*)", line)
    if not m:
        continue
    tid, t, ev, rest = m.group(1), float(m.group(2)), m.group(3), m.group(4)
    if ev in ("sys_exit_recvfrom", "sys_exit_read"):
        if int(rest.split()[-1], 16) > 0:
            read_at[tid] = t
    elif ev in ("sys_enter_write", "sys_enter_sendto") and tid in read_at:
        took.append((t - read_at.pop(tid)) * 1e6)
took.sort()
if not took:
    sys.exit("- inside linkem: no request read followed by its reply was traced")
q = lambda p: took[min(len(took) - 1, int(p * len(took)))]
print(f"- inside linkem, {len(took)} lockstep changes: median {q(0.5):.1f} us, p99 {q(0.99):.1f} us, max {took[-1]:.1f} us")
'
fi
echo

ip netns exec "${P}b" iperf3 -s -D -p 5311 >/dev/null
sleep 0.3
phase() {
  local what=$1
  "$LINKEM" ctl --socket "$SOCK" zero >/dev/null
  local storm=
  case $what in
    storm) client storm "$SECS" "$STORM_RATE" >"$OUT/storm" & storm=$! ;;
    paced-storm) client paced "$SECS" "$STORM_RATE" >"$OUT/storm" & storm=$! ;;
  esac
  ip netns exec "${P}a" iperf3 -u -c "$NET.2" -p 5311 -b "$RATE" -l 1000 -t "$SECS" >/dev/null
  [ -n "$storm" ] && wait "$storm"
  sleep 0.2
  "$LINKEM" ctl --socket "$SOCK" --json stats | python3 -c '
import json, sys
v = json.load(sys.stdin)
d = v["directions"][0]
f = d["fates"]
drops = ", ".join(f"{k} {n}" for k, n in f.items() if k != "delivered" and n) or "0"
l = d["lateness_ns"]
secs = float(sys.argv[2])
print(f"| {sys.argv[1]} | {d['"'"'received'"'"']} | {f['"'"'delivered'"'"'] / secs:.0f} | {drops} | {d['"'"'in_flight'"'"']} "
      f"| {l['"'"'p50'"'"']/1e3:.1f} | {l['"'"'p99'"'"']/1e3:.1f} | {l['"'"'p99.9'"'"']/1e3:.1f} | {l['"'"'max'"'"']/1e3:.1f} |")
' "$what" "$SECS"
  [ -n "$storm" ] && echo "  $(cat "$OUT/storm")" >&2
  return 0
}
echo "## Forwarding a->b, UDP 1000 B at $RATE for $SECS s, $WHAT"
echo
echo "| phase | received | delivered/s | drops | in flight | lateness p50 us | p99 us | p99.9 us | max us |"
echo "|---|---|---|---|---|---|---|---|---|"
phase quiet
phase storm
phase paced-storm
