#!/usr/bin/env bash
# What the hosts see of linkem on a machine they share with it (issue 21 item 3),
# beside the Linux bridge, every row in the same run, settings alternated over
# ROUNDS rounds so that load from elsewhere falls on all of them alike:
#
#   rtt    ping RTT (median, p90 of COUNT pings at -i 0.002) through the Linux
#          bridge, the plain forwarder (linkem-io's example plain_forward
#          --threads 1: one thread polling two AF_PACKET sockets, what any
#          user-space forwarder pays here for a wake-up and two copies) and linkem with `delay 0` and `delay 50us` on each backend:
#          what linkem adds under small delays (a 50us link is due 100 us more
#          than the bridge);
#   flood  a 64-byte UDP flood (iperf3 -u -l 64 -b 0, on the same cores) received
#          through linkem as started by default and with each `--realtime` of RT,
#          and through the bridge: what the real-time policy costs the hosts;
#   late   bulk TCP (iperf3, stock hosts) through the default bridge: goodput and
#          the frames counted `late` and the a->b lateness (p50, p99, max) at
#          the default max-lag, with `--max-lag off`, and with each
#          `--realtime` of RT.
#
#   scripts/bench-hosts.sh [rtt] [flood] [late]     # all three by default (root)
#
# LINKEM=path runs that binary (PLAIN=path that plain forwarder); OLD=path adds the same rows for a second binary,
# alternated with the first (before/after a change). BACKENDS (default "xdp
# packet"), ROUNDS (3), COUNT (300 pings), SECS (5 s per iperf3 run), RT (the
# `--realtime` settings to compare with the default, "off"; the rtt rows take
# each of them but off too, for the first binary).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-hosts: needs root"; exit 1; }
. scripts/bench-common.sh
need_packages ip:iproute2 ethtool:ethtool iperf3:iperf3 python3:python3 ping:iputils-ping
bench_linkem
bench_plain_forward
BACKENDS=${BACKENDS:-xdp packet}
ROUNDS=${ROUNDS:-3}
COUNT=${COUNT:-300}
SECS=${SECS:-5}
PARTS=${*:-rtt flood late}
RT=${RT:-off}
P=lkbh$$
LPID=
out=$(mktemp -d)
cleanup() {
  [ -n "$LPID" ] && kill "$LPID" 2>/dev/null || true
  topo_down "$P"
  rm -rf "$out"
}
trap cleanup EXIT
topo_up "$P" 10.95.0
# A failed measurement records nan and the run goes on (rounds are minutes long).
set +e

bins=("new=$LINKEM")
[ -n "${OLD:-}" ] && bins+=("old=$OLD")

bridge_on() {
  ip link add "${P}br" type bridge
  ip link set "${P}ea" master "${P}br"; ip link set "${P}eb" master "${P}br"
  ip link set "${P}br" up
  sleep 0.5
}
bridge_off() { ip link del "${P}br"; }
# linkem_on BIN ARGS...: starts linkem (stats JSON in $out/stats.json).
linkem_on() {
  local bin=$1; shift
  "$bin" bridge "${P}ea" "${P}eb" --control none --stats json "$@" >"$out/stats.json" 2>"$out/err.txt" &
  LPID=$!
  sleep 1
  kill -0 "$LPID" 2>/dev/null || { cat "$out/err.txt" >&2; exit 1; }
}
linkem_off() { kill -INT "$LPID"; wait "$LPID" || true; LPID=; }
# Fates of a->b and b->a summed, from the last stats line, and the lateness of
# a->b (the data direction): "late N delivered N p50 US p99 US max US".
fates() {
  python3 - "$out/stats.json" <<'EOF'
import json, sys
lines = [l for l in open(sys.argv[1]) if l.startswith("{")]
d = json.loads(lines[-1]) if lines else {"directions": []}
late = sum(x["fates"].get("late", 0) for x in d["directions"])
dlv = sum(x["fates"].get("delivered", 0) for x in d["directions"])
l = d["directions"][0]["lateness_ns"] if d["directions"] else {}
us = lambda k: "%.0f" % (l[k] / 1e3) if k in l else "?"
print("late %d delivered %d p50 %s p99 %s max %s" % (late, dlv, us("p50"), us("p99"), us("max")))
EOF
}
# record "PART|LABEL" VALUE...: one line of $out/rows (label, a tab, the
# values), summarised at the end.
record() { local key=$1; shift; printf '%s\t%s\n' "$key" "$*" | tee -a "$out/rows" >&2; }

rtt() {
  local label=$1
  ip netns exec "${P}a" ping -n -q -c 20 -i 0.002 10.95.0.2 >/dev/null 2>&1 || true
  ip netns exec "${P}a" ping -n -c "$COUNT" -i 0.002 -W 1 10.95.0.2 2>/dev/null |
    python3 -c '
import re, sys
v = sorted(float(m.group(1)) * 1000 for m in re.finditer(r"time=([0-9.]+) ms", sys.stdin.read()))
print("%.0f %.0f %d" % (v[len(v)//2], v[len(v)*9//10], len(v)) if v else "nan nan 0")' |
    { read -r med p90 n; record "rtt|$label" "$med" "$p90" "$n"; }
}

flood() {
  local label=$1
  ip netns exec "${P}b" iperf3 -s -1 -D -p 5202 >/dev/null 2>&1
  sleep 0.5
  ip netns exec "${P}a" timeout $((SECS + 10)) iperf3 -c 10.95.0.2 -p 5202 -u -l 64 -b 0 \
    -t "$SECS" -J 2>/dev/null |
    python3 -c '
import json, sys
try:
    d = json.load(sys.stdin)["end"]["sum_received"]
    print("%.0f" % (d["bytes"] / 64 / d["seconds"] / 1e3))
except (ValueError, KeyError, ZeroDivisionError):
    print("nan")' |
    { read -r kpps; record "flood|$label" "$kpps"; }
}

tcp() {
  local label=$1
  ip netns exec "${P}b" iperf3 -s -1 -D -p 5203 >/dev/null 2>&1
  sleep 0.5
  local mbit
  mbit=$(ip netns exec "${P}a" timeout $((SECS + 10)) iperf3 -c 10.95.0.2 -p 5203 -t "$SECS" -J 2>/dev/null |
    python3 -c 'import json,sys; print("%.0f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e6))' ||
    echo nan)
  # A failed run can print a partial figure before the fallback: keep the last line.
  echo "${mbit##*$'\n'}"
}

for round in $(seq "$ROUNDS"); do
  echo "round $round of $ROUNDS" >&2
  if [[ " $PARTS " == *" rtt "* ]]; then
    bridge_on; rtt "Linux bridge"; bridge_off
    "$PLAIN" "${P}ea" "${P}eb" --threads 1 >/dev/null 2>&1 &
    LPID=$!; sleep 1
    rtt "plain forwarder"
    kill -INT "$LPID"; wait "$LPID"; LPID=
    for b in "${bins[@]}"; do
      rts=(default); [ "${b%%=*}" = new ] && for rt in $RT; do [ "$rt" = off ] || rts+=("$rt"); done
      for rt in "${rts[@]}"; do
        args=(); [ "$rt" = default ] || args=(--realtime "$rt")
        for be in $BACKENDS; do
          for d in 0us 50us; do
            linkem_on "${b#*=}" --backend "$be" "${args[@]}" delay "$d"
            rtt "${b%%=*}${args[*]:+ ${args[*]}} $be delay $d"
            linkem_off
          done
        done
      done
    done
  fi
  if [[ " $PARTS " == *" flood "* ]]; then
    bridge_on; flood "Linux bridge"; bridge_off
    for b in "${bins[@]}"; do
      for rt in default $RT; do
        args=(); [ "$rt" = default ] || args=(--realtime "$rt")
        linkem_on "${b#*=}" "${args[@]}"
        flood "${b%%=*} as started${args[*]:+ ${args[*]}}"
        linkem_off
      done
    done
  fi
  if [[ " $PARTS " == *" late "* ]]; then
    for b in "${bins[@]}"; do
      for lag in default lag-off $RT; do
        args=()
        case $lag in default) ;; lag-off) args=(--max-lag off) ;; *) args=(--realtime "$lag") ;; esac
        linkem_on "${b#*=}" "${args[@]}"
        mbit=$(tcp x)
        linkem_off
        record "late|${b%%=*} TCP${args[*]:+ ${args[*]}}" "$mbit" $(fates)
      done
    done
  fi
done

# One row per setting; each cell lists the rounds' values, then their median.
python3 - "$out/rows" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    if "\t" not in line:
        continue
    key, vals = line.rstrip("\n").split("\t")
    rows.setdefault(key, []).append(vals.split())
heads = {
    "rtt": ["ping RTT", "median µs", "p90 µs", "replies"],
    "flood": ["64-byte UDP flood", "received kpps"],
    "late": ["bulk TCP", "Mbit/s", "", "late frames", "", "delivered frames",
             "", "lateness p50 µs", "", "p99 µs", "", "max µs"],
}
def cell(xs):
    nums = []
    for x in xs:
        try:
            nums.append(float(x))
        except ValueError:
            pass
    med = " (median %.0f)" % statistics.median(nums) if len(nums) > 1 else ""
    return " / ".join(xs) + med
part = None
for key, runs in rows.items():
    p, label = key.split("|", 1)
    cols = [j for j, h in enumerate(heads[p][1:]) if h]
    if p != part:
        part = p
        print()
        print("| " + " | ".join([heads[p][0]] + [heads[p][1 + j] for j in cols]) + " |")
        print("|---" * (1 + len(cols)) + "|")
    print("| " + " | ".join([label] + [cell([r[j] if j < len(r) else "?" for r in runs]) for j in cols]) + " |")
EOF
