#!/usr/bin/env bash
# The Debian package, built and installed into a throwaway root (dpkg -x: the
# host's dpkg database, groups and /usr are never touched), then used:
#
#  - scripts/package.sh --profile dev, i.e. the binary `cargo test` already
#    built (no second, release build in CI);
#  - every promised file is there, root-owned, 0644 (0755 for directories and
#    the binaries); a man page per command `linkem --help` lists, each with
#    EXAMPLES; linkem-ctl (the client every user may run) and
#    /usr/lib/cni/linkem-cni with its page, answering CNI_COMMAND=VERSION; the
#    example traces and schedules replay; tmpfiles.d's line for /run/linkem;
#    the systemd unit runs `linkem bridge --name %i $ARGS` with the
#    capabilities the postinst gives, and `systemd-analyze verify` (if
#    present) says nothing about it;
#  - `linkem --version` names this checkout's commit; the packaged examples
#    replay (the capture through dsl.toml, and through each rules file);
#  - each man page renders with `man -l` without a groff warning, and shows
#    an EXAMPLES heading;
#  - the completions work: bash completes `linkem br` to bridge, fish likewise,
#    zsh parses its file;
#  - `cargo install --path crates/linkem --locked --offline --debug` works (a
#    few seconds: it reuses the tests' build) and names the same commit;
#  - as root, the postinst runs with DPKG_ROOT set to the throwaway root: group
#    linkem, the statoverride root:linkem 0750, and `getcap` on the installed
#    copy shows the capabilities of README's setcap line (which
#    bridge_policy_netns runs the bridge as nobody with); a setcap that fails
#    (a filesystem without xattrs) gives a message and a configured package;
#    the postinst's systemd-tmpfiles (if present) makes /run/linkem
#    root:linkem 1775 in the throwaway root; the postrm removes the
#    statoverride; the host's groups and statoverrides are unchanged;
#  - the package's own bridge, run by a member of group linkem (not root: the
#    file capabilities) with --claims in a network namespace of its own
#    (lkgpkgPID, removed after), places its socket in /run/linkem, which
#    another member cannot remove or replace (sticky); user nobody claims and
#    lists a UDP port with /usr/bin/linkem-ctl, a member of group linkem
#    releases it with `linkem ctl`, and the list no longer shows it.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() {
  echo "package-test: $*" >&2
  exit 1
}
for tool in man:man-db bash:bash zsh:zsh fish:fish python3:python3; do
  command -v "${tool%%:*}" >/dev/null || fail "${tool%%:*} is missing (install ${tool#*:})"
done

deb=$(scripts/package.sh --profile dev)
work=$(mktemp -d)
netns=
bridge_pid=
cleanup() {
  [ -z "$bridge_pid" ] || kill "$bridge_pid" 2>/dev/null || true
  [ -z "$bridge_pid" ] || wait "$bridge_pid" 2>/dev/null || true
  [ -z "$netns" ] || ip netns del "$netns" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fs=$work/fs
dpkg-deb -x "$deb" "$fs"
dpkg-deb -e "$deb" "$work/DEBIAN"
bin=$fs/usr/bin/linkem
doc=$fs/usr/share/doc/linkem

# -- files, owners and modes
for f in usr/bin/linkem usr/share/man/man1/linkem.1.gz \
  usr/share/bash-completion/completions/linkem usr/share/zsh/vendor-completions/_linkem \
  usr/share/fish/vendor_completions.d/linkem.fish usr/share/doc/linkem/copyright \
  usr/share/doc/linkem/changelog.Debian.gz usr/share/doc/linkem/changelog.gz \
  usr/share/doc/linkem/README.md.gz usr/share/doc/linkem/examples/demo.pcap \
  usr/share/doc/linkem/docs/guide/README.md.gz usr/share/doc/linkem/docs/guide/rules.md.gz \
  usr/share/doc/linkem/docs/architecture.md.gz \
  usr/share/doc/linkem/examples/dsl.toml usr/share/doc/linkem/examples/rules/two-links.rules \
  usr/bin/linkem-ctl usr/lib/cni/linkem-cni usr/share/man/man1/linkem-cni.1.gz \
  usr/share/man/man1/linkem-ctl.1.gz usr/share/doc/linkem/examples/traces/12mbit.trace \
  usr/share/doc/linkem/examples/schedules/steps.sched usr/share/doc/linkem/examples/bridge.conf \
  usr/lib/tmpfiles.d/linkem.conf usr/lib/systemd/system/linkem-bridge@.service; do
  [ -f "$fs/$f" ] || fail "$deb lacks /$f"
done
commands=$("$bin" --help | sed -n '/^Commands:/,/^$/p' | awk 'NR > 1 && NF && $1 != "help" { print $1 }')
[ -n "$commands" ] || fail "linkem --help lists no commands"
for c in $commands; do
  [ -f "$fs/usr/share/man/man1/linkem-$c.1.gz" ] || fail "no man page for 'linkem $c' (linkem-$c.1.gz)"
done
not_root=$(dpkg-deb -c "$deb" | awk '$2 != "root/root"')
[ -z "$not_root" ] || fail "files not owned by root in the package:"$'\n'"$not_root"
bad_modes=$(cd "$fs" && find . \( -type d ! -perm 0755 \) -o \
  \( -type f ! -path './usr/bin/*' ! -path ./usr/lib/cni/linkem-cni ! -perm 0644 \) -o \
  \( \( -path './usr/bin/*' -o -path ./usr/lib/cni/linkem-cni \) ! -perm 0755 \))
[ -z "$bad_modes" ] || fail "wrong modes (directories and the binaries 0755, files 0644):"$'\n'"$bad_modes"

# -- the version names the commit
version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' Cargo.toml | head -n 1)
said=$("$bin" --version)
if commit=$(git rev-parse --short HEAD 2>/dev/null); then
  [[ $said =~ ^linkem\ $version\ \($commit(-dirty)?\)$ ]] ||
    fail "linkem --version says '$said', not 'linkem $version (${commit}[-dirty])'"
else
  [[ $said =~ ^linkem\ $version\ \(.+\)$ ]] || fail "linkem --version says '$said'"
fi
grep -q "^Version: $version-1$" "$work/DEBIAN/control" || fail "control's Version is not $version-1"
built_from=${said##*(}
built_from=${built_from%)}
zgrep -q "commit $built_from;" "$doc/changelog.Debian.gz" ||
  fail "changelog.Debian does not name the commit $built_from"

# -- the examples replay
"$bin" replay "$doc/examples/demo.pcap" "$work/out.pcap" --config "$doc/examples/dsl.toml" \
  --stats json --quiet >"$work/stats.json" || fail "replay of the packaged demo.pcap through dsl.toml failed"
python3 - "$work/stats.json" <<'EOF' || fail "the packaged demo replay's counts are wrong: $(cat "$work/stats.json")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["arrived"] == 2000 and 0 < s["written"] == s["fates"]["delivered"] < 2000, s
EOF
[ -s "$work/out.pcap" ] || fail "the packaged demo replay wrote no capture"
for rules in "$doc"/examples/rules/*.rules; do
  "$bin" replay "$doc/examples/demo.pcap" "$work/out.pcap" --rules "$rules" --stats none --quiet 2>"$work/err" ||
    fail "replay through the packaged $(basename "$rules") failed: $(cat "$work/err")"
done

# -- the traces and schedules replay
for trace in "$doc"/examples/traces/*.trace; do
  "$bin" replay "$doc/examples/demo.pcap" "$work/out.pcap" trace "$trace" --stats none --quiet 2>"$work/err" ||
    fail "replay through the packaged $(basename "$trace") failed: $(cat "$work/err")"
done
for sched in "$doc"/examples/schedules/*.sched; do
  "$bin" replay "$doc/examples/demo.pcap" "$work/out.pcap" rate 10mbit schedule "$sched" --stats none --quiet 2>"$work/err" ||
    fail "replay through the packaged $(basename "$sched") failed: $(cat "$work/err")"
done

# -- the client every user may run: linkem-ctl, no capabilities
ctl=$fs/usr/bin/linkem-ctl
[ "$("$ctl" --version)" = "linkem-ctl ${said#linkem }" ] || fail "linkem-ctl --version says '$("$ctl" --version)'"
"$ctl" --socket "$work/none.sock" ping 2>"$work/err" && fail "linkem-ctl reached a socket that is not there"
grep -q "none.sock" "$work/err" || fail "linkem-ctl's error does not name the socket: $(cat "$work/err")"
"$ctl" list-emulators >/dev/null || fail "linkem-ctl list-emulators failed"

# -- the CNI plugin, where runtimes look for plugins, answers as one
[ ! -e "$fs/usr/bin/linkem-cni" ] || fail "linkem-cni is in /usr/bin, where no CNI runtime looks"
cni_said=$(CNI_COMMAND=VERSION "$fs/usr/lib/cni/linkem-cni" 2>&1) || fail "CNI_COMMAND=VERSION linkem-cni failed: $cni_said"
grep -q '"supportedVersions"' <<<"$cni_said" || fail "CNI_COMMAND=VERSION linkem-cni said: $cni_said"
grep -q '^Recommends:.*iproute2' "$work/DEBIAN/control" || fail "control does not recommend iproute2 (linkem-cni runs ip)"

# -- /run/linkem (made in the throwaway root by the postinst, below) and the systemd unit
tmpfiles=$(grep -v '^#' "$fs/usr/lib/tmpfiles.d/linkem.conf" | grep .)
[ "$tmpfiles" = "d /run/linkem 1775 root linkem -" ] ||
  fail "tmpfiles.d/linkem.conf says '$tmpfiles', not 'd /run/linkem 1775 root linkem -'"
unit=$fs/usr/lib/systemd/system/linkem-bridge@.service
grep -q '^ExecStart=/usr/bin/linkem bridge --name %i $ARGS$' "$unit" || fail "linkem-bridge@.service runs no 'linkem bridge --name %i \$ARGS'"
grep -q '^ExecReload=/bin/kill' "$unit" && fail "linkem-bridge@.service reloads with /bin/kill (procps, not a dependency)"
# The unit's capabilities are those the postinst's setcap gives the binary.
postinst_caps=$(sed -n 's/^CAPS=\(.*\)+ep$/\1/p' "$work/DEBIAN/postinst" | tr ',' '\n' | sort | paste -sd' ')
for key in AmbientCapabilities CapabilityBoundingSet; do
  unit_caps=$(sed -n "s/^$key=//p" "$unit" | tr ' ' '\n' | tr 'A-Z' 'a-z' | sort | paste -sd' ')
  [ -n "$postinst_caps" ] && [ "$unit_caps" = "$postinst_caps" ] ||
    fail "linkem-bridge@.service's $key is '$unit_caps', the postinst's setcap '$postinst_caps'"
done
for key in DynamicUser=yes SupplementaryGroups=linkem ProtectSystem=strict ReadWritePaths=/run/linkem \
  'SystemCallFilter=@system-service' 'SuccessExitStatus=143'; do
  grep -q "^$key" "$unit" || fail "linkem-bridge@.service lacks $key"
done
if command -v systemd-analyze >/dev/null; then
  # verify checks that ExecStart's binary exists: the throwaway root's. It
  # names what is wrong (an unknown key, a bad value) but still exits 0.
  mkdir "$work/units"
  sed "s|^ExecStart=/usr/bin/linkem |ExecStart=$fs/usr/bin/linkem |" "$unit" >"$work/units/linkem-bridge@test.service"
  verified=$(systemd-analyze verify --man=no "$work/units/linkem-bridge@test.service" 2>&1) ||
    fail "systemd-analyze verify linkem-bridge@.service failed:"$'\n'"$verified"
  [ -z "$verified" ] || fail "systemd-analyze verify linkem-bridge@.service says:"$'\n'"$verified"
fi
grep -q '^ARGS=[^ ]\+ [^ ]\+ ' "$doc/examples/bridge.conf" || fail "examples/bridge.conf gives no ARGS=IF_A IF_B ..."

# -- man pages
for page in "$fs"/usr/share/man/man1/*.1.gz; do
  warnings=$(MANWIDTH=80 MANPAGER=cat man --warnings -l "$page" 2>&1 >/dev/null)
  [ -z "$warnings" ] || fail "man -l $(basename "$page") warns:"$'\n'"$warnings"
done
top=$(MANWIDTH=80 MANPAGER=cat man -l "$fs/usr/share/man/man1/linkem.1.gz" 2>/dev/null)
for c in $commands; do
  grep -q "linkem-$c(1)" <<<"$top" || fail "linkem(1) does not point to linkem-$c(1)"
done
for page in "$fs"/usr/share/man/man1/*.1.gz; do
  # Read whole first: `man | grep -q` under pipefail fails when grep leaves early.
  shown=$(MANWIDTH=80 MANPAGER=cat man -l "$page" 2>/dev/null)
  grep -q '^EXAMPLES$' <<<"$shown" || fail "man -l $(basename "$page") shows no EXAMPLES"
done
# An example's command line copied from the page runs: ASCII '-' only.
cni_page=$(MANWIDTH=80 MANPAGER=cat man -l "$fs/usr/share/man/man1/linkem-cni.1.gz" 2>/dev/null)
grep -q '^ *CNI_COMMAND=VERSION /usr/lib/cni/linkem-cni$' <<<"$cni_page" ||
  fail "linkem-cni(1)'s EXAMPLES lack 'CNI_COMMAND=VERSION /usr/lib/cni/linkem-cni' in plain ASCII"
grep -q '^FILES$' <<<"$cni_page" || fail "linkem-cni(1) has no FILES"
bridge=$(MANWIDTH=80 MANPAGER=cat man -l "$fs/usr/share/man/man1/linkem-bridge.1.gz" 2>/dev/null)
grep -q -- '--a-to-b' <<<"$bridge" || fail "linkem-bridge(1) does not document --a-to-b"
# The link words keep their columns (one word per line, as in --help).
grep -q '^ *rate R | bw R | rate unlimited  ' <<<"$bridge" || fail "linkem-bridge(1)'s link words lost their layout"

# -- completions
bash_said=$(bash -c 'source "$1" && complete -p linkem &&
  COMP_WORDS=(linkem br) COMP_CWORD=1 && _linkem linkem br linkem && echo "${COMPREPLY[*]}"' _ \
  "$fs/usr/share/bash-completion/completions/linkem") || fail "the bash completion does not load"
grep -q '^complete .* linkem$' <<<"$bash_said" || fail "the bash completion registers no 'complete ... linkem': $bash_said"
[ "$(tail -n 1 <<<"$bash_said")" = bridge ] || fail "bash completes 'linkem br' to '$(tail -n 1 <<<"$bash_said")', not bridge"
grep -q generate "$fs/usr/share/bash-completion/completions/linkem" && fail "the bash completion offers the hidden 'generate'"
fish_said=$(fish --no-config -c "source $fs/usr/share/fish/vendor_completions.d/linkem.fish; complete -C 'linkem br'") ||
  fail "the fish completions do not load"
[ "$(cut -f1 <<<"$fish_said")" = bridge ] || fail "fish completes 'linkem br' to '$fish_said', not bridge"
zsh -n "$fs/usr/share/zsh/vendor-completions/_linkem" || fail "zsh cannot parse _linkem"

# -- cargo install, reusing the build above (same target directory and profile)
CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target} cargo install -q --path crates/linkem \
  --root "$work/cargo" --locked --offline --debug 2>"$work/err" || fail "cargo install failed: $(cat "$work/err")"
[ "$("$work/cargo/bin/linkem" --version)" = "$said" ] ||
  fail "cargo install's linkem says '$("$work/cargo/bin/linkem" --version)', the package's '$said'"

# -- maintainer scripts, on the throwaway root
if [ "$(id -u)" != 0 ]; then
  echo "package-test: postinst not run: it needs root (groupadd, setcap)" >&2
  echo "package-test: $deb passed (without the postinst)"
  exit 0
fi
command -v getcap >/dev/null || fail "getcap is missing (install libcap2-bin)"
host_before=$(getent group linkem || true; dpkg-statoverride --list)
mkdir -p "$fs/etc" "$fs/var/lib/dpkg"
printf 'root:x:0:\n' >"$fs/etc/group"
printf 'root:*::\n' >"$fs/etc/gshadow"
chmod 600 "$fs/etc/gshadow"
postinst() { DPKG_ROOT=$fs sh "$work/DEBIAN/postinst" configure "$@" 2>"$work/err"; }
postinst || fail "postinst configure failed: $(cat "$work/err")"
[ ! -s "$work/err" ] || fail "postinst complained: $(cat "$work/err")"
gid=$(sed -n 's/^linkem:[^:]*:\([0-9]*\):.*/\1/p' "$fs/etc/group")
[ -n "$gid" ] || fail "postinst made no group linkem: $(cat "$fs/etc/group")"
[ "$(stat -c '%u %g %a' "$bin")" = "0 $gid 750" ] ||
  fail "/usr/bin/linkem is $(stat -c '%u %g %a' "$bin") after postinst, not 0 $gid 750"
for b in usr/bin/linkem-ctl usr/lib/cni/linkem-cni; do
  [ "$(stat -c '%a' "$fs/$b")" = 755 ] && [ -z "$(getcap "$fs/$b")" ] ||
    fail "/$b is $(stat -c %a "$fs/$b") with '$(getcap "$fs/$b")' after postinst, not 0755 without capabilities"
done
# /run/linkem as tmpfiles.d makes it at boot (the postinst makes it at once).
if command -v systemd-tmpfiles >/dev/null; then
  [ "$(stat -c '%u %g %a' "$fs/run/linkem" 2>&1)" = "0 $gid 1775" ] ||
    fail "/run/linkem after postinst: $(stat -c '%u %g %a' "$fs/run/linkem" 2>&1), not 0 $gid 1775 (root:linkem 1775)"
fi
# Any user runs the client (the throwaway root is made reachable for the test).
chmod 755 "$work"
runuser -u nobody -- "$fs/usr/bin/linkem-ctl" --socket "$work/none.sock" ping 2>"$work/err" &&
  fail "linkem-ctl as nobody reached a socket that is not there"
grep -q "none.sock" "$work/err" || fail "nobody cannot run linkem-ctl: $(cat "$work/err")"
readme_caps=$(grep -o 'setcap [a-z_,]*+ep /usr/local/bin/linkem' README.md | head -n 1 | cut -d' ' -f2)
[ -n "$readme_caps" ] || fail "README.md has no 'setcap CAPS+ep /usr/local/bin/linkem' line"
# getcap prints the set in its own order: compare as sorted lists.
sorted() { tr ',' '\n' <<<"${1%=*}" | sort | paste -sd,; }
got=$(getcap "$bin" | awk '{ print $2 }')
[ "$(sorted "$got")=${got#*=}" = "$(sorted "${readme_caps%+ep}")=ep" ] ||
  fail "getcap after postinst: '$got'; README's setcap line gives '$readme_caps'"
# An upgrade configures again: nothing changes, nothing is said.
postinst 0.0.9-1 || fail "postinst configure (upgrade) failed: $(cat "$work/err")"
[ ! -s "$work/err" ] || fail "postinst (upgrade) complained: $(cat "$work/err")"
[ "$(getcap "$bin" | awk '{ print $2 }')" = "$got" ] || fail "postinst (upgrade) changed the capabilities"

# -- the client for every user, against the package's own bridge with --claims
# (its socket open to every local user), in a network namespace of its own
command -v setpriv >/dev/null || fail "setpriv is missing (install util-linux)"
netns=lkgpkg$$
if_a=${netns}a
if_b=${netns}b
ip netns add "$netns" || fail "cannot add the network namespace $netns"
ip -n "$netns" link add "$if_a" type veth peer name "$if_b" || fail "cannot add the veth pair $if_a/$if_b"
ip -n "$netns" link set "$if_a" up && ip -n "$netns" link set "$if_b" up || fail "cannot set $if_a/$if_b up"
as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
as_member() { setpriv --reuid=nobody --regid=nogroup --groups="$gid" "$@"; }
# The bridge runs as a member of the group would: not root, with the file
# capabilities the postinst gave, its socket in /run/linkem as tmpfiles.d
# made it (the throwaway root's; without systemd-tmpfiles, made here so).
[ -d "$fs/run/linkem" ] || install -d -o 0 -g "$gid" -m 1775 "$fs/run/linkem"
chmod 755 "$fs/run"
sock=$fs/run/linkem/$netns.sock
ip netns exec "$netns" setpriv --reuid=nobody --regid=nogroup --groups="$gid" --inh-caps=-all \
  "$bin" bridge "$if_a" "$if_b" --claims --backend packet --max-lag off \
  --control "$sock" >"$work/bridge.log" 2>&1 &
bridge_pid=$!
for _ in $(seq 100); do
  [ -S "$sock" ] || ! kill -0 "$bridge_pid" 2>/dev/null && break
  sleep 0.1
done
[ -S "$sock" ] || fail "the packaged bridge, run by a member of linkem, made no control socket in 10 s: $(cat "$work/bridge.log")"
# Sticky: another member (uid daemon) can neither remove nor replace it.
as_other() { setpriv --reuid=daemon --regid=nogroup --groups="$gid" "$@"; }
as_other rm -f "$sock" 2>/dev/null && fail "another member of linkem (daemon) removed the bridge's socket in /run/linkem"
as_other touch "$fs/run/linkem/$netns.other" || fail "another member of linkem cannot create a file in /run/linkem"
as_other mv -f "$fs/run/linkem/$netns.other" "$sock" 2>/dev/null &&
  fail "another member of linkem (daemon) replaced the bridge's socket in /run/linkem"
rm -f "$fs/run/linkem/$netns.other"
[ -S "$sock" ] || fail "the bridge's socket in /run/linkem is gone"
# A port nobody may claim: unprivileged, and (a namespace of its own) no socket holds it.
port=$((47000 + $$ % 1000))
said=$(as_nobody "$fs/usr/bin/linkem-ctl" --socket "$sock" claim udp "$port" -- delay 5ms 2>&1) ||
  fail "nobody's linkem-ctl claim udp $port failed: $said"
said=$(as_nobody "$fs/usr/bin/linkem-ctl" --socket "$sock" claims 2>&1) || fail "nobody's linkem-ctl claims failed: $said"
grep -q "udp $port" <<<"$said" || fail "nobody's linkem-ctl claims does not list udp $port: $said"
# A member of the group runs /usr/bin/linkem (root:linkem 0750) as `linkem ctl`;
# the same uid as the claim's, which is what a release needs.
said=$(as_member "$bin" ctl --socket "$sock" release udp "$port" 2>&1) ||
  fail "a member's linkem ctl release udp $port failed: $said"
said=$(as_nobody "$fs/usr/bin/linkem-ctl" --socket "$sock" claims 2>&1) || fail "nobody's linkem-ctl claims failed: $said"
grep -q "udp $port" <<<"$said" && fail "udp $port is still claimed after its release: $said"
kill "$bridge_pid"
wait "$bridge_pid" 2>/dev/null || true
bridge_pid=
ip netns del "$netns"
netns=
# A filesystem without extended attributes: setcap fails, the package still configures.
mkdir "$work/nocaps"
printf '#!/bin/sh\necho "Failed to set capabilities on file (Operation not supported)" >&2\nexit 1\n' >"$work/nocaps/setcap"
chmod 755 "$work/nocaps/setcap"
PATH=$work/nocaps:$PATH postinst || fail "postinst fails when setcap does: $(cat "$work/err")"
grep -q "extended attributes" "$work/err" || fail "postinst does not say why setcap failed: $(cat "$work/err")"
DPKG_ROOT=$fs sh "$work/DEBIAN/postrm" remove || fail "postrm remove failed"
[ -z "$(DPKG_ROOT=$fs dpkg-statoverride --list)" ] || fail "postrm left the statoverride: $(DPKG_ROOT=$fs dpkg-statoverride --list)"
[ "$(getent group linkem || true; dpkg-statoverride --list)" = "$host_before" ] ||
  fail "the host's group linkem or statoverrides changed"
echo "package-test: $deb passed"
