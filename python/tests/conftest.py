"""Fixtures of the Python package's tests: the linkem binary, two hosts in
network namespaces bridged by a live ``linkem bridge``, and the guide's code.

Live fixtures need root and skip with a message without it. Every name a test
creates starts with ``lkpy`` (namespaces, interfaces, emulator names) or, for
Mininet's emulator ends, ``lkmn``, followed by this process's id, so that
concurrent runs never meet; each fixture deletes what it made in a finalizer,
whether the test passed or not.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, List, Optional, TypeVar

import pytest

HERE = Path(__file__).resolve().parent
PYTHON_DIR = HERE.parent
REPO = PYTHON_DIR.parent
# The tests use the package in this tree, installed or not.
sys.path.insert(0, str(PYTHON_DIR))

import linkem  # noqa: E402

T = TypeVar("T")

PREFIX = "lkpy"
_serial = itertools.count()


def linkem_binary() -> Path:
    """$LINKEM_BIN, else the cargo build's debug binary."""
    if os.environ.get("LINKEM_BIN"):
        return Path(os.environ["LINKEM_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return target / "debug" / "linkem"


@pytest.fixture(scope="session")
def linkem_bin() -> Path:
    path = linkem_binary()
    if not os.access(path, os.X_OK):
        pytest.fail(f"no linkem binary at {path}: build it (cargo build -p linkem-emu) "
                    "or set LINKEM_BIN")
    return path


@pytest.fixture(scope="session")
def root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, veth pairs, linkem bridge)")


def run(args: List[str], check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"'{' '.join(args)}' failed: {p.stderr.strip()}")
    return p


def unique_prefix(tag: str = PREFIX) -> str:
    """``tag``, this process's id and a counter, short enough for interface names."""
    return f"{tag}{os.getpid():x}{next(_serial):x}"[:12]


class Topology:
    """``ns_a <-veth-> (root: ea, eb) <-veth-> ns_b``, 10.79.X.1 and .2/24."""

    def __init__(self) -> None:
        p = unique_prefix()
        self.prefix = p
        self.ns_a, self.ns_b = f"{p}a", f"{p}b"
        self.host_a, self.host_b = f"{p}ha", f"{p}hb"
        self.emu_a, self.emu_b = f"{p}ea", f"{p}eb"
        x = sum(p.encode()) % 250 + 1
        self.addr_a, self.addr_b = f"10.79.{x}.1", f"10.79.{x}.2"
        try:
            self._build()
        except BaseException:
            self.teardown()
            raise

    def _build(self) -> None:
        for ns, host, emu, addr in ((self.ns_a, self.host_a, self.emu_a, self.addr_a),
                                    (self.ns_b, self.host_b, self.emu_b, self.addr_b)):
            run(["ip", "netns", "add", ns])
            run(["ip", "link", "add", host, "type", "veth", "peer", "name", emu])
            Path(f"/proc/sys/net/ipv6/conf/{emu}/disable_ipv6").write_text("1")
            run(["ip", "link", "set", emu, "arp", "off"])
            run(["ethtool", "-K", emu, "gro", "off"])
            run(["ip", "link", "set", host, "netns", ns])
            run(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", host])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            run(["ip", "-n", ns, "link", "set", host, "up"])
            run(["ip", "link", "set", emu, "up"])
        # Static neighbours: a lost ARP request must not look like a slow ping.
        macs = [run(["ip", "netns", "exec", ns, "cat", f"/sys/class/net/{host}/address"])
                .stdout.strip()
                for ns, host in ((self.ns_a, self.host_a), (self.ns_b, self.host_b))]
        run(["ip", "-n", self.ns_a, "neigh", "replace", self.addr_b, "lladdr", macs[1],
             "dev", self.host_a, "nud", "permanent"])
        run(["ip", "-n", self.ns_b, "neigh", "replace", self.addr_a, "lladdr", macs[0],
             "dev", self.host_b, "nud", "permanent"])

    def exec_a(self, args: List[str], timeout_s: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.ns_a, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=timeout_s)

    def ping_rtts_ms(self, count: int = 5) -> List[float]:
        """RTTs of ``count`` pings from A to B, 0.2 s apart."""
        p = self.exec_a(["ping", "-n", "-c", str(count), "-i", "0.2", "-W", "2", self.addr_b])
        return [float(t) for t in re.findall(r"time=([\d.]+) ms", p.stdout)]

    def teardown(self) -> None:
        for name in (self.emu_a, self.emu_b, self.host_a, self.host_b):
            run(["ip", "link", "del", name], check=False)
        for ns in (self.ns_a, self.ns_b):
            run(["ip", "netns", "del", ns], check=False)


@pytest.fixture
def topology(root: None) -> Iterator[Topology]:
    topo = Topology()
    try:
        yield topo
    finally:
        topo.teardown()


class Bridge:
    """``linkem bridge`` between a topology's emulator ends, named uniquely,
    with ``--max-lag off`` (this shared machine stalls; lateness is not what
    these tests measure) and its control socket under /run/linkem."""

    def __init__(self, binary: Path, topo: Topology, args: List[str]) -> None:
        self.name = f"{topo.prefix}-py"
        self.socket = linkem.default_socket_path(self.name)
        self._err = tempfile.TemporaryFile()
        self._out = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [str(binary), "bridge", topo.emu_a, topo.emu_b, "--backend", "packet",
             "--name", self.name, "--max-lag", "off", "--stats", "json", "--duration", "120",
             *args], stdin=subprocess.DEVNULL, stdout=self._out, stderr=self._err)
        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"linkem bridge exited at start: {self.stderr()}")
            try:
                with linkem.Client(self.socket, timeout_s=1) as c:
                    c.ping()
                return
            except (OSError, linkem.CtlError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no control socket: {self.stderr()}")
                time.sleep(0.02)

    def stderr(self) -> str:
        self._err.seek(0)
        return self._err.read().decode("utf-8", "replace")

    def stop(self) -> Optional[int]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def start_bridge(linkem_bin: Path, topology: Topology) -> Iterator:
    """``start_bridge(*args)``: a Bridge on the test's topology, stopped at the end."""
    started: List[Bridge] = []

    def start(*args: str) -> Bridge:
        b = Bridge(linkem_bin, topology, list(args))
        started.append(b)
        return b

    try:
        yield start
    finally:
        for b in started:
            b.stop()


def median_ms(rtts: List[float], what: str) -> float:
    assert len(rtts) >= 3, f"{what}: too few ping replies ({rtts}): lost on the link?"
    return statistics.median(rtts)


def cpu_times() -> tuple:
    """(ticks this machine's cores ran, ticks the host took while they wanted to
    run: steal) so far, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    v += [0] * (8 - len(v))
    return v[0] + v[1] + v[2] + v[5] + v[6], v[7]


def host_share_since(before: tuple) -> float:
    """Of the time this machine's cores wanted to run since ``before``
    (cpu_times()), the share the host took."""
    ran, stolen = (a - b for a, b in zip(cpu_times(), before))
    return stolen / (ran + stolen) if ran + stolen > 0 else 0.0


def wait_for_the_host(limit_s: float) -> float:
    """Spins a core for 0.3 s at a time, a second apart, until the host takes at
    most 5 % of that (an idle machine's steal says nothing), or ``limit_s`` has
    passed; returns the last share seen."""
    start = time.monotonic()
    while True:
        before = cpu_times()
        spin = time.monotonic()
        while time.monotonic() - spin < 0.3:
            pass
        share = host_share_since(before)
        if share <= 0.05 or time.monotonic() - start >= limit_s:
            return share
        time.sleep(0.7)


# Above this share of the time the cores wanted taken by the host, a missed
# attempt says nothing of linkem (a quiet spell here is 0-3 %).
HOST_BUSY = 0.10


def within_attempts(what: str, attempts: int, measure: Callable[[], T]) -> T:
    """The result of the first of up to ``attempts`` calls of ``measure`` that
    raises no AssertionError. This VM is shared: its host takes the cores for
    seconds at a time (steal of 20-46 % in spells up to 21 s during one CI run),
    so that TCP lost a third of a link and a ping's median moved milliseconds,
    and a live measure of a few seconds that such a spell falls into says
    nothing of linkem. A defect (a wrong delay, a halved rate) fails every
    attempt; the failure lists each attempt's message and the host's share.
    Before each attempt after the first it waits up to 15 s for the host to
    give the cores back; a miss while the host took more than HOST_BUSY is not
    counted, up to twice ``attempts`` calls. Only for bars a loaded machine can
    miss."""
    missed = []
    counted = 0
    for run in range(1, 2 * attempts + 1):
        if run > 1:
            wait_for_the_host(15)
        before = cpu_times()
        try:
            return measure()
        except AssertionError as e:
            host = host_share_since(before)
            void = host > HOST_BUSY
            counted += 0 if void else 1
            line = (f"run {run}{', not counted' if void else ''}: {e} (the host took "
                    f"{host * 100:.0f} % of the time this machine's cores wanted)")
            print(f"{what}: {line}", file=sys.stderr)
            missed.append(line)
            if counted >= attempts:
                break
    raise AssertionError(f"{what}: missed in {len(missed)} runs, {counted} of them counted "
                         f"({attempts} allowed):\n" + "\n".join(missed))


def doc_block(marker: str) -> str:
    """The fenced code block that follows ``<!-- MARKER ... -->`` in README.md
    or a page of the guide (docs/guide/), which must show it once."""
    docs = [REPO / "README.md", *sorted((REPO / "docs" / "guide").glob("*.md"))]
    found = []
    for doc in docs:
        text = doc.read_text(encoding="utf-8")
        found += re.findall(r"<!-- " + re.escape(marker) + r"\b[^>]*-->\s*```python\n(.*?)```",
                            text, re.S)
    assert len(found) == 1, \
        f"{len(found)} python blocks after <!-- {marker} --> in README.md and docs/guide/"
    return found[0]
