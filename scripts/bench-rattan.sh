#!/usr/bin/env bash
# CPU per GB carried by `linkem shell` beside Rattan's `rattan link`, on a
# 100 Mbit/s link with 10 ms each way (issue 38's measure), in the same run,
# alternating (ROUNDS rounds, default 3; the first tool of a round rotates so
# that no tool always runs first), one iperf3 TCP stream for SECONDS per cell
# (default 10) from inside each tool's shell to a server in its parent:
#   linkem   `linkem shell rate 100mbit delay 10ms` (queue: the default 1000
#            packets, both directions)
#   base     the same with BASE, another linkem build (e.g. main's), when set
#   rattan   `rattan link` with 10ms and 100Mbps each way and droptail queues of
#            1000 packets each way (its queues are unlimited unless told), when
#            RATTAN is set
#
#   [LINKEM=path] [BASE=path] [RATTAN=path] [THREADS=1] scripts/bench-rattan.sh [ROUNDS] [SECONDS]   # root
#   LINKEM_ARGS / BASE_ARGS: extra options of that linkem's shell (e.g. --spin-budget 10%)
#
# Per cell: goodput (iperf3's receiver bits_per_second), the bytes the receiver
# got, the emulator process's CPU seconds (utime + stime of /proc/PID/stat,
# which sums every thread of the process, dead ones included) taken just before
# the stream starts and just after it ends (the shell's setup and teardown are
# left out), that per GB carried (cpu_s / (bytes / 1e9)), and the machine's
# busy CPU seconds over the same interval (cores x wall time less the idle and
# iowait time of /proc/stat: those are kept exactly, while its user and system
# fields are sampled at ticks and miss seconds when threads sleep often), per
# GB, and as a share of all cores (near 100 % says the cell competed for CPU).
# The emulator is the process started here: linkem and rattan both run their
# link in threads of that process and CMD (iperf3) as a child, which is not
# counted. Medians per tool follow the per-round tables.
#
# Where it runs: a network namespace made for the run is each tool's "parent"
# (the iperf3 server, linkem's NAT rules and forwarding switch, Rattan's veth
# ends all live there and go with it). Rattan also makes named namespaces
# (ns-left-*, ns-rattan-*, in /var/run/netns) and lock files under
# /tmp/rattan/ip_lock; it removes them when it ends, and this script removes
# any it left (a killed run) and /tmp/rattan if it was not there before.
#
# Things to know when reading the figures: Rattan turns off TSO/GSO/GRO and
# checksum offload on the veths it makes (its link sees 1500-byte frames one
# system call each; linkem's sees the kernel's defaults); Rattan's rate counts
# IP bytes and linkem's counts frames (14 bytes more each), so Rattan's
# goodput ceiling is about 1 % higher at the same words.
# THREADS=1 also prints each cell's CPU seconds per thread name of the
# emulator (threads that ended during the stream are not in it).
# LINKEM defaults to the release build (built if missing). Not part of
# scripts/test.sh: Rattan is not a dependency of linkem.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-common.sh
rounds=${1:-3}
secs=${2:-10}
die() { echo "bench-rattan: $*" >&2; exit 1; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive whole number, not '$rounds'"
[[ $secs =~ ^[1-9][0-9]*$ ]] || die "SECONDS must be a positive whole number, not '$secs'"
[ "$(id -u)" = 0 ] || die "needs root (network namespaces; both tools make veths)"
need_packages ip:iproute2 iperf3:iperf3 python3:python3
bench_linkem
[ -x "$LINKEM" ] || die "LINKEM=$LINKEM is not an executable"
if [ -n "${BASE:-}" ]; then
  [ -x "$BASE" ] || die "BASE=$BASE is not an executable (a linkem build to compare with)"
fi
if [ -n "${RATTAN:-}" ]; then
  [ -x "$RATTAN" ] || die "RATTAN=$RATTAN is not an executable (build it: cargo build --release in Rattan's checkout; target/release/rattan)"
  rattan_help=$("$RATTAN" link --help 2>&1) || die "$RATTAN link --help failed: is RATTAN Rattan's binary?"
  [[ $rattan_help == *--uplink-queue-args* ]] || die "$RATTAN link has no --uplink-queue-args: a Rattan too old for droptail queue limits"
fi
clk_tck=$(getconf CLK_TCK)

NS=lkrt$$
WORK=$(mktemp -d)
chmod 755 "$WORK"
EPID=
SERVER=
rattan_lock_dir_existed=no
[ -e /tmp/rattan ] && rattan_lock_dir_existed=yes

netns_names() {
  local list
  list=$(ip netns list 2>/dev/null) || true
  awk '{print $1}' <<<"$list" | sort
}

# Rattan's named namespaces present now but not in the list BEFORE (a file):
# left by a Rattan that did not end normally.
remove_rattan_leftovers() {
  local before=$1 now name
  now=$(netns_names)
  for name in $(comm -13 "$before" - <<<"$now"); do
    case $name in
      ns-left-* | ns-rattan-* | ns-right-*)
        echo "bench-rattan: removing namespace $name that Rattan left" >&2
        ip netns pids "$name" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns del "$name" 2>/dev/null || true
        ;;
    esac
  done
}

# shellcheck disable=SC2317  # run by the trap
cleanup() {
  if [ -n "$EPID" ]; then
    # SIGINT first: both tools end their command and remove what they made.
    kill -INT "$EPID" 2>/dev/null || true
    for _ in $(seq 30); do
      kill -0 "$EPID" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$EPID" 2>/dev/null || true
  fi
  if [ -n "$SERVER" ]; then kill "$SERVER" 2>/dev/null || true; fi
  ip netns pids "$NS" 2>/dev/null | xargs -r kill 2>/dev/null || true
  ip netns del "$NS" 2>/dev/null || true
  if [ -f "$WORK/netns.start" ]; then remove_rattan_leftovers "$WORK/netns.start"; fi
  if [ "$rattan_lock_dir_existed" = no ] && [ -d /tmp/rattan ]; then
    # Empty lock folders only: a lock file there is another Rattan's.
    rmdir /tmp/rattan/ip_lock /tmp/rattan 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
netns_names >"$WORK/netns.start"
ip netns add "$NS"
ip -n "$NS" link set lo up

# The command run inside each shell: says it is ready, waits for go (so the
# CPU reading before the stream is taken while the link is idle), runs the
# stream, says done, and waits for end (so the reading after it is taken
# before the emulator starts tearing down). $1 is the directory of these
# marks, $2 the name of the variable holding the parent's address, $3 the
# stream's seconds.
cat >"$WORK/inner.sh" <<'INNER'
#!/bin/sh
d=$1
eval "parent=\$$2"
wait_for() {
  n=0
  while [ ! -e "$d/$1" ]; do
    n=$((n + 1))
    [ "$n" -lt 1200 ] || exit 3
    sleep 0.05
  done
}
touch "$d/ready"
wait_for go
# In the background so that a shell ended early (the bench interrupted) ends
# the stream too instead of leaving it orphaned.
iperf3 -c "$parent" -p 5201 -t "$3" -J >"$d/iperf.json" 2>"$d/iperf.err" &
client=$!
trap 'kill "$client" 2>/dev/null; exit 143' TERM INT HUP
wait "$client" || true
trap - TERM INT HUP
touch "$d/done"
wait_for end
INNER
chmod 755 "$WORK/inner.sh"

# utime + stime of PID in clock ticks (every thread of the process).
proc_ticks() {
  local line rest
  read -r line <"/proc/$1/stat" || return 1
  rest=${line##*) }
  # shellcheck disable=SC2086  # split the fields on purpose
  set -- $rest
  echo $((${12} + ${13}))
}

# "name ticks" per live thread of PID (for THREADS=1).
thread_ticks() {
  local t line rest
  for t in /proc/"$1"/task/*; do
    read -r line <"$t/stat" 2>/dev/null || continue
    rest=${line##*) }
    # shellcheck disable=SC2086  # split the fields on purpose
    set -- $rest
    echo "${t##*/} $(tr ' ' _ <"$t/comm" 2>/dev/null) $((${12} + ${13}))"
  done
}

# Idle and iowait clock ticks of the whole machine (all cores).
machine_idle_ticks() {
  local idle iowait
  read -r _ _ _ _ idle iowait _ </proc/stat
  echo $((idle + iowait))
}

# wait_mark DIR NAME SECONDS: 0 once DIR/NAME exists; 1 if EPID ended or
# SECONDS passed first.
wait_mark() {
  local n=0 limit=$(($3 * 20))
  while [ ! -e "$1/$2" ]; do
    kill -0 "$EPID" 2>/dev/null || return 1
    n=$((n + 1))
    [ "$n" -lt "$limit" ] || return 1
    sleep 0.05
  done
}

# run_cell TOOL ROUND PARENT_VAR CMD...: one stream through the shell that
# CMD... starts (inner.sh and its arguments are appended); appends a line to
# $WORK/results: tool round mbit bytes cpu_ticks machine_idle_ticks wall_ms
# (? when unknown).
run_cell() {
  local tool=$1 round=$2 var=$3 d before_ns t0 t1 m0 m1 w0 w1 ok=yes
  shift 3
  d=$WORK/cell
  rm -rf "$d"
  mkdir "$d"
  before_ns=$WORK/netns.cell
  netns_names >"$before_ns"
  # Not through a function: $! must be iperf3's pid (ip netns exec execs it).
  ip netns exec "$NS" iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
  SERVER=$!
  sleep 0.3
  ip netns exec "$NS" "$@" /bin/sh "$WORK/inner.sh" "$d" "$var" "$secs" >"$d/emulator.out" 2>&1 &
  EPID=$!
  if wait_mark "$d" ready 30; then
    t0=$(proc_ticks "$EPID") || ok=no
    [ "${THREADS:-0}" = 1 ] && thread_ticks "$EPID" >"$d/threads.0"
    m0=$(machine_idle_ticks)
    w0=$(date +%s%N)
    touch "$d/go"
    if wait_mark "$d" "done" $((secs + 30)); then
      t1=$(proc_ticks "$EPID") || ok=no
      [ "${THREADS:-0}" = 1 ] && thread_ticks "$EPID" >"$d/threads.1"
      m1=$(machine_idle_ticks)
      w1=$(date +%s%N)
    else
      ok=no
    fi
  else
    ok=no
  fi
  touch "$d/end"
  wait "$EPID" 2>/dev/null || true
  EPID=
  kill "$SERVER" 2>/dev/null || true
  wait "$SERVER" 2>/dev/null || true
  SERVER=
  remove_rattan_leftovers "$before_ns"
  local figures
  figures=$(python3 -c '
import json, sys
try:
    s = json.load(open(sys.argv[1]))["end"]["sum_received"]
    print("%.1f %d" % (s["bits_per_second"] / 1e6, s["bytes"]))
except Exception:
    print("? ?")' "$d/iperf.json" 2>/dev/null) || figures="? ?"
  if [ "$ok" = yes ] && [ -f "$d/threads.1" ]; then
    python3 - "$d/threads.0" "$d/threads.1" "$clk_tck" "$tool" "$round" >>"$WORK/threads" <<'PY'
import collections, sys
before = {l.split()[0]: int(l.split()[2]) for l in open(sys.argv[1])}
by_name = collections.Counter()
for line in open(sys.argv[2]):
    tid, name, ticks = line.split()
    by_name[name] += int(ticks) - before.get(tid, 0)
parts = ", ".join("%s %.2f s" % (n, t / int(sys.argv[3])) for n, t in by_name.most_common() if t > 0)
print("%s round %s threads: %s" % (sys.argv[4], sys.argv[5], parts))
PY
  fi
  if [ "$ok" = yes ]; then
    echo "$tool $round $figures $((t1 - t0)) $((m1 - m0)) $(((w1 - w0) / 1000000))" >>"$WORK/results"
  else
    echo "bench-rattan: $tool, round $round: no figures; the emulator said:" >&2
    tail -5 "$d/emulator.out" >&2 || true
    echo "$tool $round $figures ? ? ?" >>"$WORK/results"
  fi
}

tools=(linkem)
[ -n "${BASE:-}" ] && tools+=(base)
[ -n "${RATTAN:-}" ] && tools+=(rattan)
cell() {
  local tool=$1 round=$2
  case $tool in
    linkem | base)
      local bin=$LINKEM extra=${LINKEM_ARGS:-}
      [ "$tool" = base ] && bin=$BASE extra=${BASE_ARGS:-}
      # shellcheck disable=SC2086 # extra options, split on spaces
      run_cell "$tool" "$round" LINKEM_SHELL_PARENT \
        "$bin" shell --control none $extra rate 100mbit delay 10ms --
      ;;
    rattan)
      run_cell rattan "$round" RATTAN_BASE \
        "$RATTAN" link --uplink-delay 10ms --downlink-delay 10ms \
        --uplink-bandwidth 100Mbps --downlink-bandwidth 100Mbps \
        --uplink-queue droptail --uplink-queue-args '{"packet_limit":1000}' \
        --downlink-queue droptail --downlink-queue-args '{"packet_limit":1000}' --
      ;;
  esac
}

# Prints the rows of ROUND (all rounds when "all": the medians per tool).
report() {
  python3 - "$WORK/results" "$clk_tck" "$(grep -c '^cpu[0-9]' /proc/stat)" "$1" "$LINKEM" "${BASE:-}" "${RATTAN:-}" <<'PY'
import statistics, sys
path, tck, cores, which, linkem, base, rattan = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:]
names = {"linkem": "linkem " + linkem, "base": "linkem (BASE) " + base, "rattan": "rattan " + rattan}
rows = []
for line in open(path):
    tool, rnd, mbit, nbytes, cpu, idle, wall_ms = line.split()
    num = lambda v, f=float: None if v == "?" else f(v)
    mbit, nbytes = num(mbit), num(nbytes, int)
    cpu = None if cpu == "?" else int(cpu) / tck
    wall_s = None if wall_ms == "?" else int(wall_ms) / 1e3
    busy = None if idle == "?" or wall_s is None else max(0.0, cores * wall_s - int(idle) / tck)
    per_gb = lambda s: None if s is None or not nbytes else s / (nbytes / 1e9)
    rows.append(dict(tool=tool, round=rnd, mbit=mbit, gb=None if nbytes is None else nbytes / 1e9,
                     cpu=cpu, cpu_gb=per_gb(cpu), busy=busy, busy_gb=per_gb(busy),
                     busy_pct=None if busy is None or not wall_s else 100 * busy / (wall_s * cores)))
fmt = lambda v, spec: "?" if v is None else spec % v
cols = [("mbit", "goodput Mbit/s", "%.1f"), ("gb", "GB carried", "%.3f"),
        ("cpu", "emulator CPU s", "%.2f"), ("cpu_gb", "emulator CPU s/GB", "%.1f"),
        ("busy", "machine busy CPU s", "%.2f"), ("busy_gb", "machine busy s/GB", "%.1f"),
        ("busy_pct", "machine busy %", "%.0f")]
head = "| tool | " + " | ".join(c[1] for c in cols) + " |"
rule = "|---" * (len(cols) + 1) + "|"
if which != "all":
    print("\nRound %s:\n" % which)
    print(head); print(rule)
    for r in rows:
        if r["round"] == which:
            print("| %s | " % r["tool"] + " | ".join(fmt(r[k], s) for k, _, s in cols) + " |")
else:
    print("\nMedians over the rounds (each column on its own; rounds without figures left out):\n")
    print(head.replace("| tool |", "| tool | rounds |")); print(rule + "---|")
    for tool in ["linkem", "base", "rattan"]:
        mine = [r for r in rows if r["tool"] == tool]
        if not mine:
            continue
        med = {}
        for k, _, _ in cols:
            vals = [r[k] for r in mine if r[k] is not None]
            med[k] = statistics.median(vals) if vals else None
        print("| %s | %d | " % (tool, sum(r["cpu_gb"] is not None for r in mine)) + " | ".join(fmt(med[k], s) for k, _, s in cols) + " |")
    print()
    for tool in ["linkem", "base", "rattan"]:
        if any(r["tool"] == tool for r in rows):
            print("%s: %s" % (tool, names[tool]))
PY
}

: >"$WORK/results"
echo "bench-rattan: $rounds rounds of ${secs} s per cell; rate 100 Mbit/s, delay 10 ms each way, queues 1000 packets; $(date -u '+%F %T') UTC; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  n=${#tools[@]}
  for i in $(seq 0 $((n - 1))); do
    cell "${tools[$(((r - 1 + i) % n))]}" "$r"
  done
  report "$r"
  if [ -s "$WORK/threads" ]; then
    echo
    grep " round $r threads:" "$WORK/threads" || true
  fi
done
report all
