#!/usr/bin/env bash
# linkem shell beside mahimahi's shells, on this machine, in the same run,
# alternating (ROUNDS rounds, default 3):
#   - TCP goodput (iperf3 from inside the shell to a server in its parent, SECONDS
#     each, default 5) with no impairment: `linkem shell` against `mm-delay 0`;
#   - the same through a 1 Gbit/s trace (83 opportunities of 1504 B per ms, one
#     line "1" 83 times: 83 * 1504 * 8 bit/ms = 998.5 Mbit/s):
#     `linkem shell trace F` against `mm-link F F`;
#   - ping's RTT at 10 ms each way: `linkem shell delay 10ms` against
#     `mm-delay 10` (also under SCHED_FIFO 10, the priority of linkem's output
#     stages); median and p99 of RTT - 20 ms.
#
#   MM_BIN=/path/to/mahimahi/bin scripts/bench-mahimahi.sh [ROUNDS] [SECONDS]   # root
#
# MM_BIN holds mm-delay and mm-link, installed as mahimahi's `make install`
# leaves them: owned by root and setuid. mahimahi refuses to run as root (its
# shells drop to the real user), so they run as MM_USER (default nobody) through
# setpriv; linkem runs as root. Everything runs in a network namespace made
# for the run (forwarding and NAT rules are that namespace's, gone with it):
# the machine is left as it was. LINKEM defaults to the release build.
# Not part of scripts/test.sh: mahimahi is not a dependency of linkem.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
secs=${2:-5}
die() { echo "bench-mahimahi: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (network namespaces; mahimahi's shells then run as MM_USER)"
[ -n "${MM_BIN:-}" ] || die "set MM_BIN to the directory holding mahimahi's mm-delay and mm-link (build mahimahi from source: ./autogen.sh && ./configure && make && make install)"
for mm in mm-delay mm-link; do
  [ -x "$MM_BIN/$mm" ] || die "$MM_BIN/$mm: not found or not executable: is mahimahi installed there?"
  [ "$(stat -c %u "$MM_BIN/$mm")" = 0 ] && [ -u "$MM_BIN/$mm" ] ||
    die "$MM_BIN/$mm must be owned by root and setuid (as mahimahi's make install leaves it: chown root, chmod u+s)"
done
for tool in iperf3 ping python3 setpriv ip; do
  command -v "$tool" >/dev/null || die "$tool not found (apt-get install iperf3 iputils-ping python3 util-linux iproute2)"
done
MM_USER=${MM_USER:-nobody}
mm_uid=$(id -u "$MM_USER") || die "no user $MM_USER (set MM_USER to an ordinary user)"
mm_gid=$(id -g "$MM_USER")
[ "$mm_uid" != 0 ] && [ "$mm_gid" != 0 ] || die "MM_USER must not be root: mahimahi refuses to run as root"
if [ -z "${LINKEM:-}" ]; then
  cargo build --release -q -p linkem-emu
  LINKEM=${CARGO_TARGET_DIR:-$PWD/target}/release/linkem
fi
[ -x "$LINKEM" ] || die "LINKEM=$LINKEM is not an executable"

NS=lkmm$$
WORK=$(mktemp -d)
chmod 755 "$WORK"
cleanup() {
  ip netns pids "$NS" 2>/dev/null | xargs -r kill 2>/dev/null || true
  ip netns del "$NS" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
ip netns add "$NS"
ip -n "$NS" link set lo up
# mahimahi checks that forwarding is on where it starts (its NAT); linkem turns
# it on itself. Either way only in this namespace.
ip netns exec "$NS" sysctl -q -w net.ipv4.ip_forward=1
for _ in $(seq 83); do echo 1; done >"$WORK/1gbit.trace"
chmod 644 "$WORK/1gbit.trace"

in_ns() { ip netns exec "$NS" "$@"; }
as_user() { in_ns setpriv --reuid "$mm_uid" --regid "$mm_gid" --clear-groups "$@"; }
# linkem's output stages run under SCHED_FIFO 10; mahimahi's shells do not
# ask for it, so they are also measured with it given (inherited across exec).
as_user_rt() { in_ns chrt -f 10 setpriv --reuid "$mm_uid" --regid "$mm_gid" --clear-groups "$@"; }

# Goodput in Mbit/s of `iperf3 -c PARENT` run inside the shell that "$@" starts
# (the shell's command is appended; PARENT is the variable the shell exports).
goodput() {
  local parent=$1
  shift
  # Not through in_ns: $! must be iperf3's pid (ip netns exec execs it), for a
  # server that a shell left waiting (mm-link's end may not close the test) is
  # killed before the next run.
  ip netns exec "$NS" iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
  local server=$!
  sleep 0.3
  "$@" sh -c "iperf3 -c \$$parent -p 5201 -t $secs -O 1 -J" 2>/dev/null |
    python3 -c 'import json,sys; print("%.0f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e6))' ||
    echo "?"
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
}

# "median p99" of ping RTT - 20 ms (ms), 100 pings 0.2 s apart (an ordinary
# user's shortest interval), the first (ARP) left out.
delay_error() {
  local parent=$1
  shift
  "$@" sh -c "ping -n -c 101 -i 0.2 \$$parent" 2>/dev/null |
    python3 -c '
import sys, statistics
r = [float(l.split("time=")[1].split()[0]) for l in sys.stdin if "time=" in l][1:]
if not r: print("? ?"); sys.exit()
r.sort()
p99 = r[min(len(r) - 1, int(round(0.99 * (len(r) - 1))))]
print("%.3f %.3f" % (statistics.median(r) - 20, p99 - 20))' || echo "? ?"
}

L=(in_ns "$LINKEM" shell --control none --)
printf '| round | TCP linkem | TCP mm-delay 0 | 1 Gbit/s trace linkem | 1 Gbit/s trace mm-link | delay 10ms linkem median / p99 | mm-delay 10 median / p99 | mm-delay 10 at SCHED_FIFO 10 median / p99 |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for r in $(seq 1 "$rounds"); do
  tcp_l=$(goodput LINKEM_SHELL_PARENT "${L[@]}")
  tcp_m=$(goodput MAHIMAHI_BASE as_user "$MM_BIN/mm-delay" 0)
  gb_l=$(goodput LINKEM_SHELL_PARENT in_ns "$LINKEM" shell --control none trace "$WORK/1gbit.trace" --)
  gb_m=$(goodput MAHIMAHI_BASE as_user "$MM_BIN/mm-link" "$WORK/1gbit.trace" "$WORK/1gbit.trace" --)
  read -r dl_med dl_p99 < <(delay_error LINKEM_SHELL_PARENT in_ns "$LINKEM" shell --control none delay 10ms --)
  read -r dm_med dm_p99 < <(delay_error MAHIMAHI_BASE as_user "$MM_BIN/mm-delay" 10)
  read -r dr_med dr_p99 < <(delay_error MAHIMAHI_BASE as_user_rt "$MM_BIN/mm-delay" 10)
  printf '| %s | %s Mbit/s | %s Mbit/s | %s Mbit/s | %s Mbit/s | %s / %s ms | %s / %s ms | %s / %s ms |\n' \
    "$r" "$tcp_l" "$tcp_m" "$gb_l" "$gb_m" "$dl_med" "$dl_p99" "$dm_med" "$dm_p99" "$dr_med" "$dr_p99"
done
