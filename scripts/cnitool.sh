#!/usr/bin/env bash
# Builds the CNI project's reference tool `cnitool` (a Go module) into
# ${CARGO_TARGET_DIR:-target}/cnitool/ unless it is there, and prints its path.
# crates/linkem-cni/tests/cnitool.rs runs it; it needs Go (on PATH or in
# /usr/local/go/bin) and the Go module proxy.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${CARGO_TARGET_DIR:-$PWD/target}/cnitool"
case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac
if [ ! -x "$dir/cnitool" ]; then
  go=$(command -v go || true)
  [ -n "$go" ] || [ ! -x /usr/local/go/bin/go ] || go=/usr/local/go/bin/go
  if [ -z "$go" ]; then
    echo "cnitool: Go is missing (install it to build cnitool)" >&2
    exit 1
  fi
  mkdir -p "$dir"
  GOBIN="$dir" "$go" install github.com/containernetworking/cni/cnitool@v1.3.1 >&2
fi
echo "$dir/cnitool"
