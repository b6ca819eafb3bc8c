#!/usr/bin/env bash
# Where the cycles go per frame (issue 21 item 4): CPU time per delivered
# frame, by thread and by user space / kernel, through `linkem bridge` and
# through the Linux bridge, from a machine-wide `perf record` while a steady
# load crosses the link:
#
#   udp64   trafgen's 64-byte UDP frames as fast as it sends them (RATE=Npps
#           paces them instead): at saturation no thread waits or spins, so
#           CPU time over frames is the cost of a frame;
#   tcp     one bulk iperf3 TCP stream (stock hosts, offloads on).
#
#   scripts/perf-frames.sh [udp64] [tcp]      # both by default (root)
#
# LINKEM=path runs that binary (a release build otherwise); BACKENDS (default
# "packet xdp"); SECS (8, the recorded window); LINK (linkem's link words,
# none by default: with a delay the output thread also spends time waiting
# for releases, which is not a cost of the frame); RATE. Samples are cpu-clock at 4999 Hz on every CPU, so a
# thread's share times (CPUs x window) is its CPU time; other programs running
# on the machine are left out by name (only linkem's threads, the traffic's
# programs, ksoftirqd and the idle task are counted), so the per-frame figures
# stay right on a shared machine, while the idle share is then only indicative.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-common.sh
bench_start perf-frames lkpf
need_packages perf:linux-perf iperf3:iperf3
PARTS=${*:-udp64 tcp}
SECS=${SECS:-8}
RATE=${RATE:-max}
read -r -a LINK <<<"${LINK:-}"
trap bench_cleanup EXIT
bench_one_topology 10.89.0
NCPU=$(nproc)

# ns_pids NS: the processes in network namespace NS (`ip netns pids` gives up
# when a process it is reading exits, which builds beside make frequent).
ns_pids() {
  python3 - "/run/netns/$1" <<'EOF'
import os, sys
want = os.stat(sys.argv[1]).st_ino
for p in os.listdir("/proc"):
    try:
        if p.isdigit() and os.stat("/proc/%s/ns/net" % p).st_ino == want:
            print(p)
    except OSError:
        pass
EOF
}

stat_of() { ip netns exec "$1" cat "/sys/class/net/$2/statistics/$3"; }

# profile LABEL KIND: records SECS seconds of the whole machine while the
# load KIND runs (linkem, if any, already started), then prints one row.
profile() {
  local label=$1 kind=$2 gen
  case $kind in
    udp64)
      local pace=()
      [ "$RATE" = max ] || pace=(-b "${RATE}pps")
      ip netns exec "${P}a" timeout -s INT "$((SECS + 30))" trafgen -C -P 1 -Q \
        --dev "${P}ha" --conf "$out/udp64.cfg" "${pace[@]}" >/dev/null 2>&1 &
      gen=$! ;;
    tcp)
      ip netns exec "${P}b" iperf3 -s -1 -D -p 5201 >/dev/null 2>&1
      sleep 0.3
      ip netns exec "${P}a" timeout $((SECS + 40)) iperf3 -c 10.89.0.2 -p 5201 \
        -t $((SECS + 30)) >/dev/null 2>&1 &
      gen=$! ;;
  esac
  sleep 1.5
  kill -0 "$gen" 2>/dev/null || { echo "perf-frames: the $kind load did not start" >&2; exit 1; }
  # This run's programs only (other builds may run linkem or iperf3 too):
  # linkem's process, the traffic's programs in the two namespaces, and the
  # kernel's own threads (ksoftirqd, idle).
  local tids
  tids=$( { echo "${LPID:-}"; ns_pids "${P}a"; ns_pids "${P}b"; pgrep -x 'ksoftirqd/[0-9]+' || true; } |
    while read -r pid; do [ -n "$pid" ] && ls "/proc/$pid/task" 2>/dev/null; done | sort -u | paste -sd, -)
  local rx0 rx1
  rx0=$(stat_of "${P}b" "${P}hb" rx_packets)
  local b0; b0=$(stat_of "${P}b" "${P}hb" rx_bytes)
  perf record -q -a -F 4999 -e cpu-clock -o "$out/perf.data" -- sleep "$SECS" >/dev/null 2>&1
  rx1=$(stat_of "${P}b" "${P}hb" rx_packets)
  local b1; b1=$(stat_of "${P}b" "${P}hb" rx_bytes)
  # The load outlasts the window whatever the machine's pace; it ends here.
  pkill -INT -P "$gen" 2>/dev/null || true
  kill -INT "$gen" 2>/dev/null || true
  wait "$gen" 2>/dev/null || true
  ns_pids "${P}b" | xargs -r kill 2>/dev/null || true
  perf report -i "$out/perf.data" --stdio --no-children --sort pid,dso -F overhead,pid,dso \
    --percent-limit 0 2>/dev/null | grep -v '^#' | grep -v '^$' > "$out/report.txt" || true
  # The receiving host counts frames as its kernel sees them (a super-frame
  # GRO merged is one): wire frames are its bytes over the MTU-sized frame.
  python3 - "$label" "$kind" "$out/report.txt" "$((rx1 - rx0))" "$((b1 - b0))" "$SECS" "$NCPU" "$tids" <<'EOF'
import re, sys
label, kind, path, frames, nbytes, secs, ncpu, tids = sys.argv[1:]
tids = set(tids.split(",")) | {"0"}
frames, nbytes, secs, ncpu = int(frames), int(nbytes), float(secs), int(ncpu)
wire = frames if kind == "udp64" else max(1, nbytes // 1514)
groups = {}
for line in open(path):
    m = re.match(r"\s*([0-9.]+)%\s+(\d+):(.*?)\s{2,}(\S+)\s*$", line)
    if not m or m.group(2) not in tids:
        continue
    pct, comm, dso = float(m.group(1)), m.group(3).strip(), m.group(4)
    space = "kernel" if dso.startswith("[kernel") else "user"
    if comm.startswith("linkem-stage"):
        g = "linkem stage"
    elif comm.startswith("linkem-out"):
        g = "linkem output"
    elif comm.startswith("linkem"):
        g = "linkem other"
    elif comm in ("trafgen", "iperf3"):
        g = "sender/receiver (%s)" % comm
    elif comm.startswith("ksoftirqd"):
        g = "ksoftirqd"
    elif comm == "swapper":
        g = "idle"
    else:
        continue
    groups.setdefault(g, {"user": 0.0, "kernel": 0.0})[space] += pct
cpu_ns = secs * ncpu * 1e9
rate = wire / secs
print("### %s, %s: %.0f wire frames/s reached the receiver" % (label, kind, rate))
print()
print("| thread | user ns/frame | kernel ns/frame | share of all CPUs |")
print("|---|---|---|---|")
tot_u = tot_k = 0.0
for g in sorted(groups):
    u, k = groups[g]["user"], groups[g]["kernel"]
    if g != "idle":
        tot_u += u; tot_k += k
    print("| %s | %.0f | %.0f | %.1f %% |" % (g, u / 100 * cpu_ns / max(wire, 1), k / 100 * cpu_ns / max(wire, 1), u + k))
print("| **all but idle** | %.0f | %.0f | %.1f %% |" % (tot_u / 100 * cpu_ns / max(wire, 1), tot_k / 100 * cpu_ns / max(wire, 1), tot_u + tot_k))
print()
EOF
  # The top kernel and user symbols of linkem's own threads.
  [ -n "${LPID:-}" ] || return 0
  echo '<details><summary>top symbols of linkem'"'"'s threads</summary>'
  echo
  echo '```'
  perf report -i "$out/perf.data" --stdio --no-children --percentage absolute --pid "$LPID" --sort dso,sym -F overhead,sym --percent-limit 1.5 2>/dev/null | grep -v '^#' | grep -v '^$' | head -25 || true
  echo '```'
  echo '</details>'
  echo
}

for kind in $PARTS; do
  ip link add "${P}br" type bridge
  ip link set "${P}ea" master "${P}br"; ip link set "${P}eb" master "${P}br"
  ip link set "${P}br" up
  sleep 0.5
  profile "Linux bridge" "$kind"
  ip link del "${P}br"
  for be in $BACKENDS; do
    "$LINKEM" bridge "${P}ea" "${P}eb" --backend "$be" --control none --stats json "${LINK[@]}" >/dev/null \
      2>"$out/err.txt" &
    LPID=$!
    sleep 1
    kill -0 "$LPID" 2>/dev/null || { cat "$out/err.txt" >&2; exit 1; }
    profile "linkem $be${LINK[*]:+ ${LINK[*]}}" "$kind"
    kill -INT "$LPID"; wait "$LPID" || true; LPID=
  done
done
