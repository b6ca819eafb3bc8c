#!/usr/bin/env bash
# Soak of `linkem bridge --rules` under a flood of new flows at a masked fq_codel pipe:
# the resident size stays within the stated bound, and falls back once the flows expired.
#
#   scripts/soak-flows.sh                 # 300000 flows, --max-flow-memory 256MiB (root)
#   FLOWS=20000 BOUND=64MiB scripts/soak-flows.sh
#
#   nsA (one UDP frame from each of FLOWS source addresses, a->b) <-veth-> linkem <-veth-> nsB
#
# Rules: `pipe 1 config bw 100Mbit/s mask src-ip 0xffffffff`, `sched 1 config type fq_codel
# flows 65536`, `add pipe 1 ip`: one scheduler instance per source, one flow queue in each.
# linkem's VmRSS is sampled every 0.5 s. The run fails (exit 1) unless:
# - the peak RSS stays below the RSS before the flood + BOUND x 5/4 + 32 MiB (the bound is
#   on what linkem charges for instances and flow queues; the rest is allocator slack);
# - 3 s after the flood (hold 1 s + the 100 ms sweep + margin), with no traffic, RSS is
#   back within a quarter of the flood's growth + 16 MiB of its level before the flood;
# - linkem exits 0 on SIGINT and each direction's counts add up (received = fates + in
#   flight), with the flows beyond the bound counted as flow-limit.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "soak-flows: needs root"; exit 1; }
FLOWS=${FLOWS:-300000}
BOUND=${BOUND:-256MiB}
. scripts/topology.sh
need_packages ip:iproute2 python3:python3
cargo build --release -q -p linkem
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
sleep 1
base=$(rss)
# One 60-byte UDP frame per source address 10.(128+i/65536).(i/256%256).(i%256).
ip netns exec "${P}a" python3 - "${P}ha" "$MAC_A" "$MAC_B" "$FLOWS" <<'EOF'
import socket, struct, sys
dev, sa, da, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
mac = lambda m: bytes(int(x, 16) for x in m.split(":"))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((dev, 0))
eth = mac(da) + mac(sa) + b"\x08\x00"
def csum(h):
    t = sum(struct.unpack("!10H", h))
    t = (t & 0xffff) + (t >> 16)
    return (~((t & 0xffff) + (t >> 16))) & 0xffff
for i in range(n):
    src = bytes([10, 128 + (i >> 16), (i >> 8) & 255, i & 255])
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 46, 0, 0, 64, 17, 0, src, bytes([10, 96, 0, 2]))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    udp = struct.pack("!HHHH", 4000, 9, 26, 0) + bytes(18)
    while True:
        try:
            s.send(eth + ip + udp)
            break
        except BlockingIOError:
            pass
EOF
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
final = [json.loads(l) for l in open(stats) if l.startswith("{") and '"final"' in l]
if not final:
    print("FAIL: no final counts"); sys.exit(1)
for d in final[-1]["directions"]:
    fates = d["fates"]
    total = sum(fates.values()) + d["in_flight"]
    good = d["received"] == total
    ok &= good
    print("%s: %s received %d = fates %s + in flight %d" % ("ok" if good else "FAIL", d["direction"],
          d["received"], json.dumps({k: v for k, v in fates.items() if v}), d["in_flight"]))
sys.exit(0 if ok else 1)
EOF
