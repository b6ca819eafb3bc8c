#!/usr/bin/env bash
# Soak of `linkem bridge --rules` under a flood of new flows at a masked fq_codel pipe:
# the resident size stays within the stated bound, and falls back once the flows expired.
#
#   scripts/soak-flows.sh                 # 300000 flows, --max-flow-memory 64MiB (root)
#   FLOWS=100000 BOUND=16MiB scripts/soak-flows.sh
#
#   nsA (one UDP frame from each of FLOWS source addresses, a->b) <-veth-> linkem <-veth-> nsB
#
# Rules: `pipe 1 config bw 100Mbit/s mask src-ip 0xffffffff`, `sched 1 config type fq_codel
# flows 65536`, `add pipe 1 ip`: one scheduler instance per source, one flow queue in each.
# Sources expire 1 s after their frame, so the flood fills the bound only when more
# than BOUND / 3700 bytes sources a second reach linkem (18 000 at 64MiB).
# A warm-up of FLOWS frames from one source comes first, then linkem's VmRSS before
# the flood is taken; it is sampled every 0.5 s. The run fails (exit 1) unless:
# - the peak RSS stays below the RSS before the flood + BOUND x 5/4 + 32 MiB (the bound is
#   on what linkem charges for instances and flow queues; the rest is allocator slack);
# - 3 s after the flood (hold 1 s + the 100 ms sweep + margin), with no traffic, RSS is
#   back within a quarter of the flood's growth + 16 MiB of its level before the flood;
# - the node's charge (stats JSON `node.flow_memory_bytes`) never passes BOUND, and at
#   the end no instance is left (`node.flow_instances` 0) and none is charged;
# - the flood filled the bound, and the sources beyond it (1322 + 2378 bytes each: a
#   scheduler instance and its first fq_codel flow) are counted as `flow-limit` in
#   a->b's fates, as many as pipe 1's `flow_limit_drops`;
# - linkem exits 0 on SIGINT and each direction's counts add up (received = fates + in
#   flight).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "soak-flows: needs root"; exit 1; }
FLOWS=${FLOWS:-300000}
BOUND=${BOUND:-64MiB}
. scripts/topology.sh
need_packages ip:iproute2 python3:python3
cargo build --release -q -p linkem-emu
LINKEM=${CARGO_TARGET_DIR:-$PWD/target}/release/linkem
P=lksf$$
work=$(mktemp -d /tmp/soakflows.XXXXXX)
LPID=
cleanup() {
  [ -n "$LPID" ] && kill -INT "$LPID" 2>/dev/null && wait "$LPID" 2>/dev/null || true
  topo_down "$P"
  rm -rf "$work"
}
trap cleanup EXIT

topo_up "$P" 10.96.0
MAC_A=$(ip netns exec "${P}a" cat "/sys/class/net/${P}ha/address")
MAC_B=$(ip netns exec "${P}b" cat "/sys/class/net/${P}hb/address")
printf 'pipe 1 config bw 100Mbit/s mask src-ip 0xffffffff\nsched 1 config type fq_codel flows 65536\nadd pipe 1 ip\n' > "$work/rules"
"$LINKEM" bridge "${P}ea" "${P}eb" --rules "$work/rules" --max-flow-memory "$BOUND" --max-lag off \
  --stats json --stats-interval 1 > "$work/stats.jsonl" 2> "$work/err.txt" &
LPID=$!
sleep 1
kill -0 "$LPID" 2>/dev/null || { cat "$work/err.txt"; exit 1; }
rss() { awk '/^VmRSS/ {print $2}' "/proc/$LPID/status"; }
( while kill -0 "$LPID" 2>/dev/null; do echo "$(date +%s.%N) $(rss)"; sleep 0.5; done ) > "$work/rss" &
SAMPLER=$!
# One 60-byte UDP frame per source address 10.(128+i/65536).(i/256%256).(i%256)
# (or, with "one", all from 10.127.0.1).
flood() {
  ip netns exec "${P}a" python3 - "${P}ha" "$MAC_A" "$MAC_B" "$@" <<'EOF'
import socket, struct, sys, time
dev, sa, da, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
one = sys.argv[5:] == ["one"]
mac = lambda m: bytes(int(x, 16) for x in m.split(":"))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((dev, 0))
eth = mac(da) + mac(sa) + b"\x08\x00"
def csum(h):
    t = sum(struct.unpack("!10H", h))
    t = (t & 0xffff) + (t >> 16)
    return (~((t & 0xffff) + (t >> 16))) & 0xffff
# Built first, so that the sending loop is one system call per frame: the
# sources must come faster than they expire (1 s) to fill the bound.
frames = []
for i in range(n):
    src = bytes([10, 127, 0, 1]) if one else bytes([10, 128 + (i >> 16), (i >> 8) & 255, i & 255])
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 46, 0, 0, 64, 17, 0, src, bytes([10, 96, 0, 2]))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    frames.append(eth + ip + struct.pack("!HHHH", 4000, 9, 26, 0) + bytes(18))
t0 = time.monotonic()
send = s.send
for f in frames:
    while True:
        try:
            send(f)
            break
        except BlockingIOError:
            pass
dt = time.monotonic() - t0
print("%s: %d frames sent in %.2f s (%.0f/s)" % ("warm-up" if one else "flood", n, dt, n / dt))
EOF
}
# The same number of frames from one source first: the rings, the delay line and
# the allocator's arenas reach their working size, and its one instance expires,
# before the size the flood is measured from.
flood "$FLOWS" one
sleep 2
base=$(rss)
flood "$FLOWS"
flood_end=$(date +%s.%N)
sleep 3
after=$(rss)
kill -INT "$LPID"; rc=0; wait "$LPID" || rc=$?; LPID=
kill "$SAMPLER" 2>/dev/null || true
python3 - "$work/stats.jsonl" "$work/rss" "$base" "$after" "$flood_end" "$BOUND" "$rc" "$FLOWS" <<'EOF'
import json, sys
stats, rss_path, base, after, flood_end, bound, rc, flows = sys.argv[1:]
base, after, flood_end, rc, flows = int(base), int(after), float(flood_end), int(rc), int(flows)
units = {"KiB": 1, "MiB": 1024, "GiB": 1024 * 1024}
bound_kib = next(int(float(bound[:-3]) * v) for u, v in units.items() if bound.endswith(u))
samples = [tuple(map(float, l.split())) for l in open(rss_path) if len(l.split()) == 2]
peak = int(max(kb for _, kb in samples))
ok = rc == 0
print("%s: linkem exited %d on SIGINT" % ("ok" if rc == 0 else "FAIL", rc))
lim = base + bound_kib * 5 // 4 + 32 * 1024
good = peak <= lim
ok &= good
print("%s: %d new flows, --max-flow-memory %s: RSS before %d KiB, peak %d KiB (+%d; limit %d KiB)"
      % ("ok" if good else "FAIL", flows, bound, base, peak, peak - base, lim))
back = base + (peak - base) // 4 + 16 * 1024
good = after <= back
ok &= good
print("%s: RSS 3 s after the flood (instances expired) %d KiB (+%d over before; limit %d KiB)"
      % ("ok" if good else "FAIL", after, after - base, back))
lines = [json.loads(l) for l in open(stats) if l.startswith("{")]
final = [v for v in lines if v.get("final")]
if not final:
    print("FAIL: no final counts"); sys.exit(1)
last = final[-1]
# The node's charge never passes the bound; after the flood every instance expired.
charged = max(v["node"]["flow_memory_bytes"] for v in lines)
live = max(v["node"]["flow_instances"] for v in lines)
good = charged <= bound_kib * 1024
ok &= good
print("%s: most instances live %d, most charged %d KiB (bound %d KiB)"
      % ("ok" if good else "FAIL", live, charged // 1024, bound_kib))
left = (last["node"]["flow_instances"], last["node"]["flow_memory_bytes"])
good = left == (0, 0)
ok &= good
print("%s: at the end, with no traffic since the flood: %d instances, %d bytes charged"
      % ("ok" if good else "FAIL", left[0], left[1]))
# Each new source needs a scheduler instance and its first fq_codel flow
# (1322 + 2378 bytes): the sources beyond the bound are flow-limit drops.
a2b = last["directions"][0]
limited = a2b["fates"].get("flow-limit", 0)
pipe1 = next(p for p in last["node"]["pipes"] if p["pipe"] == 1)
per_source = 1322 + 2378
fit = bound_kib * 1024 // per_source
reached = charged + per_source > bound_kib * 1024
good = reached and limited > 0 and pipe1["flow_limit_drops"] == limited
ok &= good
print("%s: %s flow-limit %d (pipe 1: %d refused, %d expired); %d sources fit the bound%s"
      % ("ok" if good else "FAIL", a2b["direction"], limited, pipe1["flow_limit_drops"],
         pipe1["expired"], fit,
         "" if reached else ": the flood never filled it (more sources a second than"
         " expire, or a smaller BOUND)"))
for d in last["directions"]:
    fates = d["fates"]
    total = sum(fates.values()) + d["in_flight"]
    good = d["received"] == total
    ok &= good
    print("%s: %s received %d = fates %s + in flight %d (kernel dropped %d)"
          % ("ok" if good else "FAIL", d["direction"], d["received"],
             json.dumps({k: v for k, v in fates.items() if v}), d["in_flight"],
             d.get("rx_kernel_drops", 0)))
sys.exit(0 if ok else 1)
EOF
