# Installs the Debian packages linkem's scripts and tests use (source it).
#
#   need_packages CMD:PACKAGE ...      apt-get install the packages whose command is missing
#   need_py_modules MODULE:PACKAGE ... the same for python3 modules (system python3)
#   need_test_packages                 everything ./scripts/test.sh needs
#
# As root the missing ones are installed (apt-get update first when the package
# lists are empty or stale); otherwise each missing package is named and the
# caller decides (test.sh carries on: a live test that needs a missing tool
# fails naming its package).

_apt_install() {
  local log
  log=$(mktemp)
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >"$log" 2>&1; then
    # A fresh machine has no package lists yet: fetch them once and try again.
    if ! { apt-get update -q >"$log" 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >"$log" 2>&1; }; then
      echo "packages: could not install $*:" >&2
      tail -5 "$log" >&2
      rm -f "$log"
      return 1
    fi
  fi
  rm -f "$log"
}

_install_or_name() {
  [ $# -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "packages: installing $*" >&2
    _apt_install "$@"
  else
    echo "packages: missing $* (install them as root: apt-get install $*)" >&2
    return 1
  fi
}

need_packages() {
  local missing=() pair
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
  done
  _install_or_name "${missing[@]}"
}

need_py_modules() {
  local missing=() pair
  for pair in "$@"; do
    /usr/bin/python3 -c "import ${pair%%:*}" 2>/dev/null || missing+=("${pair#*:}")
  done
  _install_or_name "${missing[@]}"
}

# What the tests run: ip/ping/ethtool/iperf3/trafgen/setcap in the live tests,
# python3 with the Prometheus client's parser in the metrics test, column in
# the demo, a C++ compiler for libFuzzer (cargo fuzz builds it from source), and
# for python/tests pytest, venv (ensurepip: the offline `pip install` test),
# Mininet and brctl (its Linux bridge switch); for linkem-cni's test the CNI
# plugins it chains after (bridge, host-local, host-device, static), nsenter and
# setsid (cnitool itself is built with Go by scripts/cnitool.sh); for the Debian
# package's test dpkg-shlibdeps and strip, man, zsh and fish; for the web page's
# browser test (python/tests/test_web.py) Chromium, its WebDriver and selenium;
# for the Grafana dashboard's test Prometheus (its queries evaluated on a scrape).
need_test_packages() {
  need_packages ip:iproute2 ping:iputils-ping /usr/bin/python3:python3 column:bsdextrautils \
    ethtool:ethtool iperf3:iperf3 trafgen:netsniff-ng c++:g++ setcap:libcap2-bin \
    brctl:bridge-utils /usr/lib/cni/bridge:containernetworking-plugins nsenter:util-linux \
    setsid:util-linux flock:util-linux openssl:openssl pasta:passt iptables:iptables dpkg-shlibdeps:dpkg-dev strip:binutils man:man-db zsh:zsh fish:fish \
    /usr/bin/chromium:chromium /usr/bin/chromedriver:chromium-driver prometheus:prometheus &&
    need_py_modules prometheus_client:python3-prometheus-client pytest:python3-pytest \
      ensurepip:python3-venv mininet:mininet selenium:python3-selenium
}
