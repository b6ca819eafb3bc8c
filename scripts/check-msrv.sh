#!/usr/bin/env bash
# The workspace's rust-version must be at least what every locked dependency
# declares (no toolchain download is needed: cargo metadata lists each package's
# rust_version). Prints the packages that need more than the workspace claims.
set -euo pipefail
cd "$(dirname "$0")/.."
claimed=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml | head -n 1)
if [ -z "$claimed" ]; then
    echo "check-msrv: no rust-version in [workspace.package] of Cargo.toml" >&2
    exit 1
fi
metadata=$(cargo metadata --format-version 1 --locked)
# "name":"x","version":"y",...,"rust_version":"z" appear in this order in each package.
needs=$(grep -o '"name":"[^"]*","version":"[^"]*"\|"rust_version":"[0-9.]*"' <<<"$metadata" |
    awk -F'"' '/"name"/ { pkg = $4 " " $8 } /rust_version/ { print $4, pkg }')
highest=$(cut -d' ' -f1 <<<"$needs" | sort -V | tail -n 1)
# "1.89" and "1.89.0" are one version: both compared with three parts.
three() { awk -F. '{ printf "%d.%d.%d\n", $1, $2, $3 }' <<<"$1"; }
if [ "$(printf '%s\n%s\n' "$(three "$claimed")" "$(three "$highest")" | sort -V | tail -n 1)" != "$(three "$claimed")" ]; then
    echo "check-msrv: rust-version = \"$claimed\" but locked dependencies need $highest:" >&2
    sort -V <<<"$needs" | awk -v c="$claimed" '
        { split($1, a, "."); split(c, b, ".");
          for (i = 1; i <= 3; i++) { if ((a[i]+0) != (b[i]+0)) { if ((a[i]+0) > (b[i]+0)) print "  " $0; break } } }' >&2
    exit 1
fi
echo "check-msrv: rust-version $claimed covers every locked dependency (highest needs $highest)"
