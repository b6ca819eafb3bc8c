#!/usr/bin/env bash
# The issue's scale measure: N pods (default 200) on two nodes against a real
# kube-apiserver + etcd (scripts/k8s.sh's), each pod's sandbox made by CNI ADD
# (bridge + host-local, then linkem-cni: a real `linkem bridge` per pod), the
# controller and two node agents as processes; one LinkChaos (delay 20ms, mode
# all) over every pod. Prints the time from its creation to every pod Applied,
# from its delete to every emulator restored, the agents' CPU and RSS, and the
# emulators' memory (summed RSS and PSS, the drop of MemAvailable).
#
#   scripts/bench-k8s.sh [N]        # root; e.g. 200
#
# LINKEM_BENCH_OPTIONS: linkem-cni's `options` for each emulator (default
# "--max-lag off"; e.g. "--max-lag off --backend packet"). Everything made
# (namespaces, bridge lkq<pid>*, processes) goes at the end, also on failure:
# the test harness's Drop and PR_SET_PDEATHSIG.
#
# Measured here (2 cores, 24 GiB, `scripts/bench-k8s.sh 200`, default options):
# every emulator had the delay 0.26 s after the create (the latest
# status.pods[*].at), every pod's status entry Applied after 0.42 s (one merge
# patch per resource and pass; a patch per pod took 7.4 s), restored 0.13 s
# after the delete; the agents 0.03 s of CPU each over the apply, 16 MiB RSS,
# 1.3% of a core idle; the emulators 43.3 MiB PSS each (8.7 GiB for 200).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-k8s: needs root"; exit 1; }
export LINKEM_BENCH_PODS=${1:-200}
scripts/k8s.sh build >/dev/null
# The emulators and the plugin are the test's sibling binaries.
cargo build -q -p linkem-emu -p linkem-cni -p linkem-operator --bins
# Each emulator holds a few descriptors and the agents one socket per pod.
ulimit -n 65536 2>/dev/null || true
exec cargo test -q -p linkem-operator --test k8s_bench -- --ignored --nocapture --test-threads 1
