#!/usr/bin/env bash
# Soak test of `linkem bridge`: overload, SIGHUP storms and bursts for DURATION, then
# checks that nothing grew, every count adds up and nothing was left behind.
#
#   scripts/soak.sh DURATION          # e.g. 180, 3m, 30m, 1h (root)
#   BACKEND=packet scripts/soak.sh 3m # backend of the bridge (default auto)
#
#   nsA (trafgen at full speed, a->b) <-veth-> linkem bridge <-veth-> nsB (bursts, b->a)
#
# While it runs:
# - overload: trafgen (netsniff-ng) sends 64-byte UDP frames a->b as fast as it can;
# - bursts: every 2 s, 20000 frames back to back b->a;
# - SIGHUP storm: every 100 ms the config alternates between two links (one with rate,
#   delay, jitter and loss, one with a larger delay) and linkem is sent SIGHUP;
# - linkem's resident memory (VmRSS) is sampled every 5 s.
# At the end linkem is stopped with SIGINT. The run fails (exit 1) unless:
# - linkem exits 0 with its final counts, and in each direction
#   received = the sum of every fate (delivered and each drop) + in flight;
# - RSS stayed flat: after a warm-up (the first quarter of the run, at least 10 s, in
#   which the delay line's pages are touched for the first time), no sample exceeds the
#   warm-up's last sample by more than 16 MiB + 5 %;
# - no XDP program is left on the emulator's interfaces (checked before teardown), no
#   interface anywhere has an XDP program it did not have before the run, and (if
#   bpftool is installed) no more linkem BPF programs are loaded than before;
# - no namespace or interface of the run remains after teardown, no temporary file
#   named after linkem appeared in /tmp, /dev/shm or /run, and the run's control socket
#   is gone from /run/linkem (the directory itself stays, shared by every linkem).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: scripts/soak.sh DURATION (e.g. 180, 3m, 30m)"; exit 2; }
case $1 in
  *h) SECS=$(( ${1%h} * 3600 )) ;;
  *m) SECS=$(( ${1%m} * 60 )) ;;
  *s) SECS=${1%s} ;;
  *) SECS=$1 ;;
esac
[[ $SECS =~ ^[0-9]+$ ]] && [ "$SECS" -ge 30 ] || { echo "soak: DURATION must be at least 30 s"; exit 2; }
[ "$(id -u)" = 0 ] || { echo "soak: needs root"; exit 1; }
. scripts/topology.sh
need_packages ip:iproute2 ethtool:ethtool trafgen:netsniff-ng python3:python3
cargo build --release -q -p linkem-emu
LINKEM=${CARGO_TARGET_DIR:-$PWD/target}/release/linkem
P=lksk$$
work=$(mktemp -d /tmp/soak.XXXXXX)
PIDS=()
LPID=
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -n "$LPID" ] && kill -INT "$LPID" 2>/dev/null && wait "$LPID" 2>/dev/null || true
  topo_down "$P"
}
trap cleanup EXIT

fail=0
check() { # check OK|FAIL MESSAGE
  echo "soak: $1: $2"
  [ "$1" = ok ] || fail=1
}
xdp_links() { ip -o link show | grep -E ' xdp(generic|drv|offload)? | prog/xdp' | awk -F': ' '{print $2}' | sort || true; }
linkem_progs() { command -v bpftool >/dev/null && bpftool prog show 2>/dev/null | grep -c 'name linkem' || echo 0; }
# /run/linkem is the control sockets' directory, shared by every running linkem (made
# once, kept like /run/docker); what must not stay in it is this run's own socket.
leftovers() {
  { find /tmp /dev/shm /run -maxdepth 1 -newer "$work/start" -iname '*linkem*' ! -path /run/linkem
    find /run/linkem -maxdepth 1 -name "*${P}*" 2>/dev/null; } | sort
}

touch "$work/start"
xdp_before=$(xdp_links)
progs_before=$(linkem_progs)

topo_up "$P" 10.97.0
MAC_A=$(ip netns exec "${P}a" cat "/sys/class/net/${P}ha/address")
MAC_B=$(ip netns exec "${P}b" cat "/sys/class/net/${P}hb/address")
# 60 bytes on the veth = a 64-byte Ethernet frame with its FCS.
cat > "$work/ab.cfg" <<EOF
{ eth(da=${MAC_B}, sa=${MAC_A}), ipv4(saddr=10.97.0.1, daddr=10.97.0.2, ttl=64), udp(sp=4000, dp=9), fill(0x00, 18) }
EOF
cat > "$work/ba.cfg" <<EOF
{ eth(da=${MAC_A}, sa=${MAC_B}), ipv4(saddr=10.97.0.2, daddr=10.97.0.1, ttl=64), udp(sp=4001, dp=9), fill(0x00, 1000) }
EOF
printf 'rate = "200mbit"\ndelay = "5ms 1ms"\nloss = "1%%"\noverhead = "ethernet"\n' > "$work/one.toml"
printf 'delay = "20ms"\nqueue = 5000\n' > "$work/two.toml"
cp "$work/one.toml" "$work/link.toml"

"$LINKEM" bridge "${P}ea" "${P}eb" --backend "${BACKEND:-auto}" --config "$work/link.toml" \
  --stats json --stats-interval 5 > "$work/stats.jsonl" 2> "$work/err.txt" &
LPID=$!
sleep 1
kill -0 "$LPID" 2>/dev/null || { cat "$work/err.txt"; exit 1; }
echo "soak: linkem (pid $LPID) on ${P}ea <-> ${P}eb for $SECS s: $(head -2 "$work/err.txt" | tr '\n' ' ')"

# Overload a->b for the whole run.
ip netns exec "${P}a" timeout -s INT "$SECS" trafgen -C -P 1 -Q --dev "${P}ha" \
  --conf "$work/ab.cfg" >/dev/null 2>&1 &
PIDS+=($!)
# Bursts b->a.
( end=$((SECONDS + SECS)); while [ $SECONDS -lt $end ]; do
    ip netns exec "${P}b" trafgen -C -P 1 -Q --dev "${P}hb" --conf "$work/ba.cfg" -n 20000 >/dev/null 2>&1 || true
    sleep 2
  done ) &
PIDS+=($!)
# SIGHUP storm: every 100 ms, the other config (replaced by rename, as an editor saves).
( end=$((SECONDS + SECS)); k=0; while [ $SECONDS -lt $end ]; do
    if [ $((k % 2)) = 0 ]; then src=two; else src=one; fi
    cp "$work/$src.toml" "$work/link.toml.new" && mv "$work/link.toml.new" "$work/link.toml"
    kill -HUP "$LPID" 2>/dev/null || exit 0
    k=$((k + 1)); sleep 0.1
  done; echo "$k" > "$work/hups" ) &
PIDS+=($!)

: > "$work/rss"
t0=$SECONDS
while [ $((SECONDS - t0)) -lt "$SECS" ]; do
  kill -0 "$LPID" 2>/dev/null || break
  echo "$((SECONDS - t0)) $(awk '/^VmRSS/ {print $2}' "/proc/$LPID/status")" >> "$work/rss"
  sleep 5
done
for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
PIDS=()
sleep 0.5

if kill -0 "$LPID" 2>/dev/null; then
  kill -INT "$LPID"
  rc=0; wait "$LPID" || rc=$?
  LPID=
  [ $rc = 0 ] && check ok "linkem stopped on SIGINT (exit 0)" || check FAIL "linkem exited $rc on SIGINT"
else
  rc=0; wait "$LPID" || rc=$?
  LPID=
  check FAIL "linkem ended by itself before the end (exit $rc): $(tail -3 "$work/err.txt")"
fi
grep -q panicked "$work/err.txt" && check FAIL "linkem panicked: $(grep -m1 panicked "$work/err.txt")"
echo "soak: SIGHUPs sent: $(cat "$work/hups" 2>/dev/null || echo '?'); re-reads applied: $(grep -c 'SIGHUP: a->b now' "$work/err.txt" || true); refused: $(grep -c 'keeping the current link' "$work/err.txt" || true)"

python3 - "$work/stats.jsonl" "$work/rss" "$SECS" > "$work/verdict" <<'EOF' || fail=1
import json, sys
stats, rss_path, secs = sys.argv[1], sys.argv[2], int(sys.argv[3])
ok = True
lines = [json.loads(l) for l in open(stats) if l.startswith("{")]
final = [l for l in lines if l.get("final")]
if not final:
    print("FAIL: no final counts printed"); sys.exit(1)
f = final[-1]
for d in f["directions"]:
    fates = d["fates"]
    total = sum(fates.values()) + d["in_flight"]
    drops = {k: v for k, v in fates.items() if k != "delivered" and v}
    good = d["received"] == total
    ok &= good
    print("%s: counts %s: received %d = delivered %d + drops %s + in flight %d%s" % (
        "ok" if good else "FAIL", d["direction"], d["received"], fates.get("delivered", 0),
        json.dumps(drops), d["in_flight"], "" if good else " (sum %d)" % total))
    l = d["lateness_ns"]
    print("info: %s lateness p50 %.1f us p99 %.1f us max %.1f us; %.0f frames/s received" % (
        d["direction"], l["p50"] / 1e3, l["p99"] / 1e3, l["max"] / 1e3, d["received"] / f["elapsed_s"]))
samples = [tuple(map(int, l.split())) for l in open(rss_path) if len(l.split()) == 2]
warm = max(10, secs // 4)
base = [kb for t, kb in samples if t <= warm]
after = [kb for t, kb in samples if t > warm]
if not base or not after:
    print("FAIL: too few RSS samples (%d)" % len(samples)); sys.exit(1)
ref = base[-1]
bound = ref + 16 * 1024 + ref // 20
peak = max(after)
good = peak <= bound
ok &= good
print("%s: RSS after warm-up %d KiB, peak later %d KiB, last %d KiB (bound %d KiB = +16 MiB + 5 %%); first sample %d KiB, %d samples" % (
    "ok" if good else "FAIL", ref, peak, after[-1], bound, samples[0][1], len(samples)))
sys.exit(0 if ok else 1)
EOF
sed 's/^/soak: /' "$work/verdict"

# XDP on the emulator's ends, before they go away with the topology.
for dev in "${P}ea" "${P}eb"; do
  shown=$(ip -d link show "$dev" 2>/dev/null || true)
  if grep -qE 'xdp|prog/xdp' <<<"$shown"; then
    check FAIL "$dev still has an XDP program after linkem exited"
  fi
done
topo_down "$P"
left_ns=$(ip netns list | grep -c "^${P}" || true)
left_links=$(ip -o link show | grep -c "${P}" || true)
[ "$left_ns" = 0 ] && [ "$left_links" = 0 ] && check ok "no namespaces or interfaces left" \
  || check FAIL "$left_ns namespaces and $left_links interfaces of the run remain"
new_xdp=$(comm -13 <(echo "$xdp_before") <(xdp_links) | grep -v '^$' || true)
[ -z "$new_xdp" ] && check ok "no interface has an XDP program it did not have before" \
  || check FAIL "XDP programs left on: $new_xdp"
if command -v bpftool >/dev/null; then
  progs_after=$(linkem_progs)
  [ "$progs_after" -le "$progs_before" ] && check ok "linkem BPF programs loaded: $progs_before before, $progs_after after" \
    || check FAIL "linkem BPF programs loaded: $progs_before before, $progs_after after"
else
  echo "soak: bpftool not installed; XDP checked with ip link only"
fi
left_files=$(leftovers)
[ -z "$left_files" ] && check ok "no temporary files left" || check FAIL "files left: $left_files"
rm -rf "$work"
[ $fail = 0 ] && echo "soak: PASS ($SECS s)" || echo "soak: FAIL"
exit $fail
