#!/usr/bin/env bash
# The Debian package, built and installed into a throwaway root (dpkg -x: the
# host's dpkg database, groups and /usr are never touched), then used:
#
#  - scripts/package.sh --profile dev, i.e. the binary `cargo test` already
#    built (no second, release build in CI);
#  - every promised file is there, root-owned, 0644 (0755 for directories and
#    the binaries); a man page per command `linkem --help` lists, each with
#    EXAMPLES; linkem-ctl (the client every user may run) and linkem-cni with
#    its page; the example traces and schedules replay; tmpfiles.d makes
#    /run/linkem 0755; the systemd unit runs `linkem bridge --name %i $ARGS`;
#  - `linkem --version` names this checkout's commit; the packaged examples
#    replay (the capture through dsl.toml, and through each rules file);
#  - each man page renders with `man -l` without a groff warning;
#  - the completions work: bash completes `linkem br` to bridge, fish likewise,
#    zsh parses its file;
#  - `cargo install --path crates/linkem --locked --offline --debug` works (a
#    few seconds: it reuses the tests' build) and names the same commit;
#  - as root, the postinst runs with DPKG_ROOT set to the throwaway root: group
#    linkem, the statoverride root:linkem 0750, and `getcap` on the installed
#    copy shows the capabilities of README's setcap line (which
#    bridge_policy_netns runs the bridge as nobody with); a setcap that fails
#    (a filesystem without xattrs) gives a message and a configured package;
#    the postrm removes the statoverride; the host's groups and statoverrides
#    are unchanged.
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
trap 'rm -rf "$work"' EXIT
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
  usr/share/doc/linkem/examples/dsl.toml usr/share/doc/linkem/examples/rules/two-links.rules \
  usr/bin/linkem-ctl usr/bin/linkem-cni usr/share/man/man1/linkem-cni.1.gz \
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
  \( -type f ! -path './usr/bin/*' ! -perm 0644 \) -o \( -path './usr/bin/*' ! -perm 0755 \))
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

# -- /run/linkem and the systemd unit
grep -q '^d /run/linkem 0755 root root' "$fs/usr/lib/tmpfiles.d/linkem.conf" || fail "tmpfiles.d/linkem.conf does not make /run/linkem 0755"
if command -v systemd-tmpfiles >/dev/null; then
  systemd-tmpfiles --root="$work/tmproot" --create "$fs/usr/lib/tmpfiles.d/linkem.conf" 2>"$work/err" ||
    fail "systemd-tmpfiles refuses linkem.conf: $(cat "$work/err")"
  [ "$(stat -c %a "$work/tmproot/run/linkem")" = 755 ] || fail "systemd-tmpfiles made /run/linkem $(stat -c %a "$work/tmproot/run/linkem")"
fi
unit=$fs/usr/lib/systemd/system/linkem-bridge@.service
grep -q '^ExecStart=/usr/bin/linkem bridge --name %i $ARGS$' "$unit" || fail "linkem-bridge@.service runs no 'linkem bridge --name %i \$ARGS'"
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
for page in "$fs"/usr/share/man/man1/linkem*.1.gz; do
  zgrep -q '^\.SH EXAMPLES' "$page" || fail "$(basename "$page") has no EXAMPLES"
done
bridge=$(MANWIDTH=80 MANPAGER=cat man -l "$fs/usr/share/man/man1/linkem-bridge.1.gz" 2>/dev/null)
grep -q -- '--a-to-b' <<<"$bridge" || fail "linkem-bridge(1) does not document --a-to-b"
# The link words keep their columns (one word per line, as in --help).
grep -q '^ *rate R | bw R  ' <<<"$bridge" || fail "linkem-bridge(1)'s link words lost their layout"

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
for b in linkem-ctl linkem-cni; do
  [ "$(stat -c '%a' "$fs/usr/bin/$b")" = 755 ] && [ -z "$(getcap "$fs/usr/bin/$b")" ] ||
    fail "/usr/bin/$b is $(stat -c %a "$fs/usr/bin/$b") with '$(getcap "$fs/usr/bin/$b")' after postinst, not 0755 without capabilities"
done
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
