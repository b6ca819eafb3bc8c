#!/usr/bin/env bash
# The output threads' wake-ups per packet and their release lateness through
# `delay 10ms`, at several packet rates (`linkem probe`, 64-byte frames, 3 s
# each), and TCP through `rate 50mbit delay 5ms` (iperf3, 4 s), beside another
# linkem binary (BASE, e.g. main's), alternating in each round. Per cell: the
# a->b output thread's wake-ups per packet delivered (`tx_wakeups` over
# `delivered`), its release lateness p50 / p99 and the spin's `covers`, from
# `--stats json`; the probe's one-way delay beyond 10 ms, or TCP's goodput.
#
#   BASE=/path/to/linkem LINKEM=/path/to/linkem scripts/bench-wake.sh [ROUNDS]   (root)
#
# Defaults: 3 rounds; RATES (default "1kpps 2kpps 3kpps 4kpps") are the probe's.
# Without BASE the BASE rows are left out.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-common.sh
rounds=${1:-3}
rates=${RATES:-1kpps 2kpps 3kpps 4kpps}
BASE=${BASE:-}
bench_start bench-wake lkwk
need_packages iperf3:iperf3
bench_one_topology 10.95.0
ip -n "${P}a" neigh replace 10.95.0.2 lladdr "$MAC_B" dev "${P}ha" nud permanent
ip -n "${P}b" neigh replace 10.95.0.1 lladdr "$MAC_A" dev "${P}hb" nud permanent

# cell NAME BIN WHAT WORDS...: one linkem bridge for one probe or TCP run.
cell() {
  local name=$1 bin=$2 what=$3 extra
  shift 3
  "$bin" bridge "${P}ea" "${P}eb" --control none --stats json "$@" >"$out/stats.json" 2>"$out/err" &
  LPID=$!
  sleep 0.7
  if [ "$what" = tcp ]; then
    extra="TCP $(tcp_goodput 10.95.0.2 4) Mbit/s"
  else
    "$bin" probe 10.95.0.2 --src-ns "${P}a" --dst-ns "${P}b" --rate "$what" --size 64 \
      --duration 3s --expect-delay 10ms --json "$out/probe.json" >/dev/null 2>&1
    extra=probe
  fi
  kill -INT "$LPID"
  wait "$LPID" || true
  LPID=
  python3 - "$name" "$extra" "$out" <<'PY'
import json, sys
name, extra, out = sys.argv[1:4]
lines = [json.loads(s) for s in open(f"{out}/stats.json") if s.strip()]
d = lines[-1]["directions"][0]
if extra == "probe":
    a = json.load(open(f"{out}/probe.json"))
    a = a.get("analysis", a)["delay_ns"]
    extra = f"one-way beyond 10 ms p50 {(a['p50'] - 10e6) / 1e3:.1f} p99 {(a['p99'] - 10e6) / 1e3:.1f} µs"
w = d["tx_wakeups"] / max(d["fates"]["delivered"], 1)
late = d["lateness_ns"]
print(f"| {name} | {w:.2f} | {late['p50'] / 1e3:.1f} / {late['p99'] / 1e3:.1f} | "
      f"{d['spin']['covers']} | {extra} |", flush=True)
PY
}

echo "| round, build, traffic | output wake-ups per packet | release lateness p50 / p99 µs | covers | path |"
echo "|---|---|---|---|---|"
for r in $(seq "$rounds"); do
  for what in $rates tcp; do
    for b in ${BASE:+BASE} NEW; do
      bin=$LINKEM
      [ "$b" = BASE ] && bin=$BASE
      if [ "$what" = tcp ]; then
        cell "$r $b tcp" "$bin" tcp rate 50mbit delay 5ms
      else
        cell "$r $b $what" "$bin" "$what" delay 10ms
      fi
    done
  done
done
