#!/usr/bin/env bash
# Builds linkem's Debian package: target/debian/linkem_VERSION-1_ARCH.deb.
#
#   scripts/package.sh [--profile release|dev]
#
# The binary is built with cargo's profile (release by default; cargo rebuilds
# nothing if it is fresh), stripped, and packed with dpkg-deb (no cargo-deb:
# it would be one more tool to install, and the package is a few files) with
# its man pages and bash/zsh/fish completions, made by the binary itself
# (`linkem generate`), the examples of testdata/ (captures, rules, traces,
# schedules), README.md and the documents it links (docs/, the user guide in
# docs/guide/, beside it as in the tree); linkem-ctl (the client, 0755 for
# every user) and linkem-cni (in /usr/lib/cni, where Debian's CNI plugins
# are) with its man page; a tmpfiles.d entry for /run/linkem and a
# systemd unit, linkem-bridge@NAME, reading /etc/linkem/NAME.conf. Depends comes
# from dpkg-shlibdeps (dpkg-dev), or without it from the binary's symbol
# versions. The postinst (packaging/debian/postinst) gives the group linkem
# the bridge without root. LINKEM_COMMIT, if set, names the commit (a tarball);
# DEBFULLNAME and DEBEMAIL the maintainer, as for dch. Prints the package's path.
set -euo pipefail
cd "$(dirname "$0")/.."
umask 022

profile=release
while [ $# -gt 0 ]; do
  case $1 in
    --profile) profile=${2:-}; shift $(($# > 1 ? 2 : 1)) ;;
    --profile=*) profile=${1#--profile=}; shift ;;
    -h | --help) sed -n '2,/^set -e/{/^set -e/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "package: unknown argument '$1' (usage: scripts/package.sh [--profile release|dev])" >&2; exit 2 ;;
  esac
done
case $profile in
  release) out_dir=release ;;
  dev) out_dir=debug ;;
  *) echo "package: --profile takes release or dev, not '$profile'" >&2; exit 2 ;;
esac
for tool in cargo:cargo dpkg-deb:dpkg gzip:gzip strip:binutils; do
  command -v "${tool%%:*}" >/dev/null || { echo "package: ${tool%%:*} is missing (install ${tool#*:})" >&2; exit 1; }
done

cargo build --locked -q --profile "$profile" -p linkem-emu -p linkem-cni
target=${CARGO_TARGET_DIR:-$PWD/target}
bin=$target/$out_dir/linkem

# `linkem 0.1.0 (1a2b3c4)`: the version and commit the binary carries.
read -r _ version commit < <("$bin" --version)
commit=${commit#(}
commit=${commit%)}
debversion=$version-1
arch=$(dpkg --print-architecture)
if [ -n "${DEBEMAIL:-}" ]; then
  maintainer="${DEBFULLNAME:-linkem maintainers} <$DEBEMAIL>"
else
  maintainer="$(git config user.name || echo linkem maintainers) <$(git config user.email || echo linkem@localhost)>"
fi
# The commit's time dates the changelog entry and every file, so that two
# builds of one commit give the same package.
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH=$epoch

mkdir -p "$target/debian"
stage=$(mktemp -d "$target/debian/stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
chmod 755 "$stage"
doc=$stage/usr/share/doc/linkem

install -d "$stage/DEBIAN" "$stage/usr/bin" "$stage/usr/lib/cni" "$stage/usr/share/man/man1" \
  "$stage/usr/share/bash-completion/completions" "$stage/usr/share/zsh/vendor-completions" \
  "$stage/usr/share/fish/vendor_completions.d" "$doc/examples/rules" "$doc/examples/traces" \
  "$doc/examples/schedules" "$doc/docs/guide" "$stage/usr/lib/tmpfiles.d" "$stage/usr/lib/systemd/system"
# Stripped as Debian's own packages are (dh_strip): the build's debug info
# is for the tree it was built in. linkem gets its capabilities in the
# postinst (group linkem only); linkem-ctl, the client, and linkem-cni, run by
# root's container runtime, need none and stay 0755 for every user.
# linkem-cni goes where CNI runtimes look for plugins (Debian's
# containernetworking-plugins: /usr/lib/cni), not on PATH; it finds
# /usr/bin/linkem on PATH.
binaries="usr/bin/linkem usr/bin/linkem-ctl usr/lib/cni/linkem-cni"
for b in $binaries; do
  strip --remove-section=.comment --remove-section=.note -o "$stage/$b" "$target/$out_dir/${b##*/}"
  chmod 755 "$stage/$b"
done

"$bin" generate man "$stage/usr/share/man/man1"
install -m 644 packaging/linkem-cni.1 "$stage/usr/share/man/man1/"
"$bin" generate bash >"$stage/usr/share/bash-completion/completions/linkem"
"$bin" generate zsh >"$stage/usr/share/zsh/vendor-completions/_linkem"
"$bin" generate fish >"$stage/usr/share/fish/vendor_completions.d/linkem.fish"

install -m 644 testdata/demo.pcap testdata/dsl.toml "$doc/examples/"
install -m 644 testdata/rules/* "$doc/examples/rules/"
install -m 644 testdata/traces/* "$doc/examples/traces/"
install -m 644 testdata/schedules/* "$doc/examples/schedules/"
install -m 644 packaging/systemd/bridge.conf "$doc/examples/"
install -m 644 packaging/systemd/linkem.tmpfiles "$stage/usr/lib/tmpfiles.d/linkem.conf"
install -m 644 packaging/systemd/linkem-bridge@.service "$stage/usr/lib/systemd/system/"
install -m 644 README.md "$doc/README.md"
install -m 644 docs/*.md "$doc/docs/"
install -m 644 docs/guide/*.md "$doc/docs/guide/"
install -m 644 CHANGELOG.md "$doc/changelog"
{
  cat packaging/debian/copyright.in
  # The font's own copyright and license paragraphs, without its Files line
  # and its packaging's (debian/*) paragraph.
  sed -n '/^Files: \*/,/^Files: debian/{/^Files:/d;p}' crates/linkem/assets/DejaVuSans.LICENSE
} >"$doc/copyright"
cat >"$doc/changelog.Debian" <<EOF
linkem ($debversion) unstable; urgency=medium

  * Built from commit $commit; its changes are in changelog.gz.

 -- $maintainer  $(date -u -R -d "@$epoch")
EOF
gzip -9n "$stage"/usr/share/man/man1/*.1 "$doc/README.md" "$doc/changelog" "$doc/changelog.Debian" \
  "$doc"/docs/*.md "$doc"/docs/guide/*.md

# Depends: what the binary links, at the lowest versions its symbols allow.
if command -v dpkg-shlibdeps >/dev/null; then
  shlibs=$(mktemp -d)
  mkdir "$shlibs/debian"
  printf 'Source: linkem\n\nPackage: linkem\nArchitecture: any\n' >"$shlibs/debian/control"
  executables=()
  for b in $binaries; do executables+=("-e$stage/$b"); done
  depends=$(cd "$shlibs" && dpkg-shlibdeps -O "${executables[@]}" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
  rm -rf "$shlibs"
else
  glibc=$(for b in $binaries; do readelf -V "$stage/$b"; done | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n 1)
  depends="libc6 (>= $glibc)"
  # Read whole first: under pipefail a `grep -q` leaving early fails the pipe's writer.
  dynamic=$(for b in $binaries; do readelf -d "$stage/$b"; done)
  if grep -q 'NEEDED.*libgcc_s' <<<"$dynamic"; then depends="$depends, libgcc-s1"; fi
fi
[ -n "$depends" ] || { echo "package: could not work out the libraries linkem needs" >&2; exit 1; }
# The postinst runs groupadd (passwd); setcap (libcap2-bin) only if present.
# Recommends iproute2: linkem-cni runs `ip` (through nsenter) in the container.
depends="$depends, passwd"

install -m 755 packaging/debian/postinst packaging/debian/postrm "$stage/DEBIAN/"
cat >"$stage/DEBIAN/control" <<EOF
Package: linkem
Version: $debversion
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $(du -sk --apparent-size "$stage/usr" | cut -f1)
Depends: $depends
Recommends: libcap2-bin, iproute2
Section: net
Priority: optional
Description: precise, fast network link emulator
 linkem makes a path look like a satellite hop, a congested DSL line, a lossy
 radio link or a fast data-centre link, exactly and repeatably, with the words
 of netem and Dummynet: live as a layer-2 bridge between two interfaces
 (AF_XDP or AF_PACKET), or offline on a capture. It also measures paths and
 itself (probe, bench).
 .
 Members of the group linkem may run the bridge without root: the package
 gives the binary the capabilities it needs, for that group only. Every user
 may run linkem-ctl, the control client (claims of one's own ports). Also
 linkem-cni, a CNI plugin (in /usr/lib/cni) that puts a link on a container's
 interface, and linkem-bridge@.service for a long-lived link.
EOF
(cd "$stage" && find usr -type f -print0 | sort -z | xargs -0 md5sum >DEBIAN/md5sums)
chmod 644 "$stage/DEBIAN/control" "$stage/DEBIAN/md5sums"
find "$stage" -depth -exec touch -h -d "@$epoch" {} +

deb=$target/debian/linkem_${debversion}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "$deb"
