#!/usr/bin/env bash
# A real Kubernetes control plane (kube-apiserver and etcd, no kubelet) for
# linkem-operator's tests and for trying the operator by hand. Both are built
# from their official sources through the Go module proxy and cached.
#
#   scripts/k8s.sh build   build kube-apiserver v1.34.2 and etcd 3.6.4 into the
#                          cache's bin/ unless they are there; prints their paths
#   scripts/k8s.sh path    prints the bin directory (the tests read the same one)
#   scripts/k8s.sh up      starts etcd and kube-apiserver on 127.0.0.1, waits
#                          until ready, prints the kubeconfig's path
#   scripts/k8s.sh down    stops what `up` started
#
# The cache is ${K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/linkem-k8s}: bin/,
# the wrapper modules in src/, Go's module and build caches in gopath/ and
# gocache/, `up`'s state in run/. A first build downloads about 700 MB of
# modules and takes 10-12 minutes on two busy cores (kube-apiserver; etcd about
# 1.5); with the caches, seconds. It runs at nice 19 with one Go process
# (GOMAXPROCS=1, -p 1): about 2 GB of memory at its peak.
#
# Needs Go 1.24 or later (on PATH or in /usr/local/go/bin), curl for `up`, and
# openssl for `up`'s service-account keys.
#
# Why a wrapper module: `go install k8s.io/kubernetes/cmd/kube-apiserver@v1.34.2`
# is refused, since k8s.io/kubernetes's go.mod replaces its staging modules
# with local paths; a module of our own requiring it, with each staging module
# replaced by its published v0.34.2, builds the same main. Same for etcd's
# server module. The -X flags stamp the version as Kubernetes' own build does.
#
# Env: K8S_CACHE, API_PORT (16443) and ETCD_PORT (12379) for `up`.
set -euo pipefail

# (The tests' harness reads the same: crates/linkem-operator/tests/common.)
CACHE=${K8S_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/linkem-k8s}
K8S_VERSION=1.34.2
ETCD_VERSION=3.6.4
GO_MIN=1.24
API_PORT=${API_PORT:-16443}
ETCD_PORT=${ETCD_PORT:-12379}
BIN=$CACHE/bin
RUN=$CACHE/run

log() { echo "k8s: $*" >&2; }

# ----------------------------------------------------------------------------- build
find_go() {
  local go
  go=$(command -v go || true)
  [ -n "$go" ] || [ ! -x /usr/local/go/bin/go ] || go=/usr/local/go/bin/go
  if [ -z "$go" ]; then
    log "Go is missing: install Go $GO_MIN or later (https://go.dev/dl/, into /usr/local/go;"
    log "Debian 12's golang-go is 1.19, too old), or put etcd and kube-apiserver in $BIN"
    return 1
  fi
  local v
  v=$("$go" env GOVERSION)   # go1.26.8
  v=${v#go}
  if ! printf '%s\n%s\n' "$GO_MIN" "$v" | sort -V -C; then
    log "Go $v is too old: kube-apiserver v$K8S_VERSION needs Go $GO_MIN or later (https://go.dev/dl/)"
    return 1
  fi
  echo "$go"
}

# The version is read whole before it is matched: `etcd --version | grep -q` under
# pipefail failed about once in 25 on a loaded machine, grep leaving after the first
# of etcd's four writes and the next one dying of SIGPIPE.
apiserver_ok() {
  local v
  [ -x "$BIN/kube-apiserver" ] && v=$("$BIN/kube-apiserver" --version 2>/dev/null) &&
    grep -qx "Kubernetes v$K8S_VERSION" <<<"$v"
}
etcd_ok() {
  local v
  [ -x "$BIN/etcd" ] && v=$("$BIN/etcd" --version 2>/dev/null) && grep -q "^etcd Version: $ETCD_VERSION\$" <<<"$v"
}

go_env() {
  export GOPATH=$CACHE/gopath GOMODCACHE=$CACHE/gopath/pkg/mod GOCACHE=$CACHE/gocache
  export GOFLAGS="-buildvcs=false -mod=mod" GOMAXPROCS=1 GOTOOLCHAIN=local
}

build_apiserver() {
  local go=$1 d=$CACHE/src/kube-apiserver minor staging m p ldf="-s -w"
  minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  staging="v0.${K8S_VERSION#*.}"
  mkdir -p "$d"
  cat > "$d/main.go" <<'EOF'
// k8s.io/kubernetes/cmd/kube-apiserver/apiserver.go, built as a module of its own.
package main

import (
	"os"
	_ "time/tzdata"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
EOF
  {
    printf 'module example.local/kube-apiserver\n\ngo 1.24.0\n\ngodebug default=go1.24\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$K8S_VERSION"
    # The staging modules k8s.io/kubernetes's own go.mod lists.
    for m in api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider \
             cluster-bootstrap code-generator component-base component-helpers controller-manager \
             cri-api cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt \
             kms kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet \
             metrics mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller; do
      printf '\tk8s.io/%s => k8s.io/%s %s\n' "$m" "$m" "$staging"
    done
    printf ')\n'
  } > "$d/go.mod"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldf="$ldf -X $p.gitVersion=v$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  log "building kube-apiserver v$K8S_VERSION (first time: 10-12 minutes)"
  (cd "$d" && nice -n 19 "$go" mod tidy &&
    nice -n 19 "$go" build -p 1 -ldflags "$ldf" -o "$BIN/kube-apiserver.tmp" . &&
    mv "$BIN/kube-apiserver.tmp" "$BIN/kube-apiserver")
}

build_etcd() {
  local go=$1 d=$CACHE/src/etcd
  mkdir -p "$d"
  cat > "$d/main.go" <<'EOF'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
  printf 'module example.local/etcd\n\ngo 1.24.0\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$ETCD_VERSION" > "$d/go.mod"
  log "building etcd $ETCD_VERSION (first time: about 2 minutes)"
  (cd "$d" && nice -n 19 "$go" mod tidy &&
    nice -n 19 "$go" build -p 1 -ldflags "-s -w" -o "$BIN/etcd.tmp" . &&
    mv "$BIN/etcd.tmp" "$BIN/etcd")
}

build() {
  mkdir -p "$BIN"
  # One build at a time per cache (test.sh's and one by hand would share it).
  exec 9>"$CACHE/build.lock"
  flock 9
  if ! apiserver_ok || ! etcd_ok; then
    local go
    go=$(find_go)
    go_env
    apiserver_ok || build_apiserver "$go"
    etcd_ok || build_etcd "$go"
  fi
  apiserver_ok || { log "$BIN/kube-apiserver does not say v$K8S_VERSION"; return 1; }
  etcd_ok || { log "$BIN/etcd does not say $ETCD_VERSION"; return 1; }
  echo "$BIN/kube-apiserver"
  echo "$BIN/etcd"
}

# ----------------------------------------------------------------------------- run
alive() {  # the pid file names a live, non-zombie process
  [ -s "$1" ] || return 1
  local p
  p=$(cat "$1")
  [ -r "/proc/$p/stat" ] && [ "$(awk '{print $3}' "/proc/$p/stat")" != Z ]
}

up() {
  for tool in curl openssl; do
    command -v "$tool" >/dev/null || { log "$tool is missing (apt-get install $tool)"; return 1; }
  done
  apiserver_ok && etcd_ok || { log "the binaries are missing: run scripts/k8s.sh build"; return 1; }
  if alive "$RUN/apiserver.pid"; then
    log "already up (pid $(cat "$RUN/apiserver.pid"))"
    echo "$RUN/kubeconfig"
    return
  fi
  rm -rf "$RUN"
  mkdir -p "$RUN/pki" "$RUN/certs"
  local P=$RUN/pki token
  openssl genrsa -out "$P/sa.key" 2048 2>/dev/null
  openssl rsa -in "$P/sa.key" -pubout -out "$P/sa.pub" 2>/dev/null
  token=$(openssl rand -hex 16)
  echo "$token,admin,admin-uid,system:masters" > "$P/tokens.csv"
  setsid "$BIN/etcd" --name linkem --data-dir "$RUN/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "linkem=http://127.0.0.1:$((ETCD_PORT + 1))" --unsafe-no-fsync \
    > "$RUN/etcd.log" 2>&1 < /dev/null &
  echo $! > "$RUN/etcd.pid"
  local i
  for i in $(seq 1 100); do curl -sf "http://127.0.0.1:$ETCD_PORT/health" >/dev/null && break; sleep 0.1; done
  setsid "$BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT" \
    --cert-dir="$RUN/certs" --token-auth-file="$P/tokens.csv" --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 --allow-privileged=true \
    --disable-admission-plugins=ServiceAccount --enable-priority-and-fairness=false \
    --endpoint-reconciler-type=none \
    > "$RUN/apiserver.log" 2>&1 < /dev/null &
  echo $! > "$RUN/apiserver.pid"
  local code=000
  for i in $(seq 1 900); do
    code=$(curl -sk -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" \
      "https://127.0.0.1:$API_PORT/readyz" || true)
    [ "$code" = 200 ] && break
    if ! alive "$RUN/apiserver.pid" || ! alive "$RUN/etcd.pid"; then
      tail -20 "$RUN/etcd.log" "$RUN/apiserver.log" >&2
      down
      log "etcd or kube-apiserver ended (logs above)"
      return 1
    fi
    sleep 0.1
  done
  if [ "$code" != 200 ]; then
    tail -20 "$RUN/apiserver.log" >&2
    down
    log "kube-apiserver not ready after 90 s (its log above)"
    return 1
  fi
  cat > "$RUN/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: linkem
  cluster: {server: "https://127.0.0.1:$API_PORT", insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: "$token"}
contexts:
- name: linkem
  context: {cluster: linkem, user: admin, namespace: default}
current-context: linkem
EOF
  log "up: https://127.0.0.1:$API_PORT (export KUBECONFIG=$RUN/kubeconfig; 'scripts/k8s.sh down' stops it)"
  echo "$RUN/kubeconfig"
}

down() {
  local f i
  for f in apiserver etcd; do
    if alive "$RUN/$f.pid"; then
      kill "$(cat "$RUN/$f.pid")"
      for i in $(seq 1 50); do alive "$RUN/$f.pid" || break; sleep 0.1; done
      log "stopped $f"
    fi
    rm -f "$RUN/$f.pid"
  done
}

case "${1:-}" in
  build) build ;;
  path) echo "$BIN" ;;
  up) up ;;
  down) down ;;
  -h | --help) sed -n '2,/^set -e/{/^set -e/d;s/^# \{0,1\}//;p}' "$0" ;;
  *) echo "usage: scripts/k8s.sh build|path|up|down (--help says more)" >&2; exit 2 ;;
esac
