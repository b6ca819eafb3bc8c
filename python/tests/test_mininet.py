"""``linkem.mininet.LinkemLink`` in Mininet topologies (root and Debian's
``mininet`` package): TCLink's parameters become linkem words, ping RTTs and
iperf3 throughput follow them, and stopping the network leaves nothing behind.

The emulator ends are named ``lkmn<pid>x<n>a|b``; a finalizer stops every
network a test made and deletes any interface of that prefix still there."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any, Callable, Iterator, List

import pytest

from conftest import doc_block, median_ms, within_attempts

mininet = pytest.importorskip(
    "mininet", reason="Mininet is not installed (Debian: apt-get install mininet)")

from mininet.log import setLogLevel  # noqa: E402
from mininet.net import Mininet  # noqa: E402
from mininet.nodelib import LinuxBridge  # noqa: E402
from mininet.topo import Topo  # noqa: E402

from linkem.mininet import LinkemLink, tc_words  # noqa: E402

PREFIX = "lkmn"
#: The Linux bridge lives in the root namespace: a name no other run uses.
SWITCH = f"{PREFIX}s1"


def leftover_links() -> List[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], stdout=subprocess.PIPE,
                         text=True).stdout
    mine = (f"{PREFIX}{os.getpid():x}x", SWITCH)
    return [m for m in re.findall(r"^\d+: ([^:@]+)", out, re.M) if m.startswith(mine)]


def test_tclink_parameters_become_linkem_words() -> None:
    assert tc_words(bw=10, delay="10ms", jitter="1ms", loss=1, max_queue_size=50) == [
        "rate", "10mbit", "delay", "10ms", "1ms", "loss", "1%", "queue", "50"]
    assert tc_words(bw=0.5, loss=0.25) == ["rate", "0.5mbit", "loss", "0.25%"]
    assert tc_words(jitter="2ms") == ["delay", "0ms", "2ms"]
    assert tc_words(loss=0) == []
    for bad, why in ((dict(delay=10), "delay=10: a time with its unit"),
                     (dict(jitter="1 ms"), "jitter='1 ms'"),
                     (dict(loss=200), "loss=200: a percentage"),
                     (dict(bw=-1), "bw=-1"),
                     (dict(max_queue_size=0), "max_queue_size=0")):
        with pytest.raises(ValueError, match=re.escape(why)):
            tc_words(**bad)


@pytest.fixture
def networks(root: None, linkem_bin: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[
        Callable[..., Any]]:
    """``make(topo)``: a built Mininet network whose LinkemLinks use this
    tree's linkem and our prefix; every network is stopped at the end."""
    setLogLevel("warning")
    monkeypatch.setenv("LINKEM_BIN", str(linkem_bin))
    monkeypatch.setattr(LinkemLink, "emu_prefix", PREFIX)
    made: List[Any] = []

    def make(topo: Topo, **kwargs: Any) -> Any:
        net = Mininet(topo=topo, controller=None, build=False, **kwargs)
        made.append(net)
        net.build()
        net.start()
        return net

    try:
        yield make
    finally:
        for net in made:
            if net.links and all(link.intf1 is None for link in net.links):
                continue  # the test stopped it
            try:
                net.stop()
            except Exception as e:  # the test's own failure says more
                print(f"net.stop() failed: {e}")
        for name in leftover_links():
            subprocess.run(["ip", "link", "del", name], check=False)


class SwitchedPair(Topo):
    """h1 -[LinkemLink]- SWITCH (Linux bridge) -[Link]- h2."""

    def build(self, **link: Any) -> None:
        h1, h2 = self.addHost("h1"), self.addHost("h2")
        s1 = self.addSwitch(SWITCH, cls=LinuxBridge)
        self.addLink(h1, s1, cls=LinkemLink, **link)
        self.addLink(s1, h2)


def ping_ms(src: Any, dst: Any, count: int = 5) -> List[float]:
    out = src.cmd(f"ping -n -c {count} -i 0.2 -W 2 {dst.IP()}")
    return [float(t) for t in re.findall(r"time=([\d.]+) ms", out)]


# Twins: h1's transmit offloads switched off by txo=False (as TCIntf does), and
# left as a stock host keeps them (on).
@pytest.mark.parametrize("txo", [False, None], ids=["txo-off", "offloads-as-they-are"])
def test_switch_per_direction_words_live_change_and_teardown(
        networks: Callable[..., Any], txo: Any) -> None:
    params1: dict[str, Any] = {"delay": "10ms"}
    if txo is not None:
        params1["txo"] = txo
    net = networks(SwitchedPair(params1=params1,
                                params2={"delay": "30ms"}, linkem="reorder allow",
                                linkem_args=["--max-lag", "off"]))
    h1, h2 = net.get("h1", "h2")
    link = net.linksBetween(h1, net.get(SWITCH))[0]
    assert isinstance(link, LinkemLink)
    assert (link.words, link.words_a_to_b, link.words_b_to_a) == (
        ["reorder", "allow"], ["delay", "10ms"], ["delay", "30ms"])
    # Mininet's names and addresses stay: the host sees h1-eth0 with its IP.
    assert "10.0.0.1" in h1.cmd("ip -4 addr show dev h1-eth0")
    # txo=False for h1's interface alone, as TCIntf switches it; else untouched.
    h1_tx = "off" if txo is False else "on"
    assert f"tx-checksumming: {h1_tx}" in h1.cmd("ethtool -k h1-eth0")
    assert "tx-checksumming: on" in net.get(SWITCH).cmd(f"ethtool -k {SWITCH}-eth1")
    rtt = median_ms(ping_ms(h1, h2), "10 ms there, 30 ms back")
    assert 39.5 < rtt < 60, f"RTT through 10 ms + 30 ms: {rtt} ms"

    with link.client() as c:
        assert c.name == link.name
        c.link("both", "delay 1ms")
    rtt = median_ms(ping_ms(h1, h2), "after the change")
    assert 1.5 < rtt < 15, f"RTT after 'link both delay 1ms': {rtt} ms"

    socket = link.socket
    assert socket is not None and os.path.exists(socket)
    net.stop()
    assert link.stats is not None and link.stats["final"] is True, link.stats
    a_to_b = link.stats["directions"][0]
    assert a_to_b["fates"]["delivered"] >= 8, a_to_b
    assert not leftover_links(), "net.stop() left interfaces behind"
    assert not os.path.exists(socket), "linkem's socket outlived net.stop()"
    link.delete()  # a second delete is harmless


def test_bad_parameters_fail_before_anything_exists(networks: Callable[..., Any]) -> None:
    class Bad(Topo):
        def build(self) -> None:
            self.addLink(self.addHost("h1"), self.addHost("h2"), cls=LinkemLink,
                         delay=10)

    with pytest.raises(ValueError, match="delay=10: a time with its unit"):
        networks(Bad())
    assert not leftover_links()

    class BadWord(Topo):
        def build(self) -> None:
            self.addLink(self.addHost("h1"), self.addHost("h2"), cls=LinkemLink,
                         linkem="delay 5xs")

    with pytest.raises(RuntimeError, match="5xs"):
        networks(BadWord())
    assert not leftover_links(), "a link whose linkem failed left its interfaces"


def test_readme_mininet_example(networks: Callable[..., Any],
                                capsys: pytest.CaptureFixture) -> None:
    code = doc_block("python-mininet")
    assert "cls=LinkemLink, bw=10, delay=\"10ms\"" in code

    def example() -> Any:
        scope: dict = {}
        try:
            exec(compile(code, "docs/guide/python.md", "exec"), scope)
        finally:
            if "net" in scope and scope["net"].links and scope["net"].links[0].intf1 is not None:
                scope["net"].stop()
        out = capsys.readouterr().out
        rtts = [float(t) for t in re.findall(r"time=([\d.]+) ms", out)]
        rtt = median_ms(rtts, "bw=10 delay=10ms")
        m = re.search(r"([\d.]+) ([KMG])bits/sec\s+receiver", out)
        assert m, f"no iperf3 receiver line:\n{out}"
        mbit = float(m.group(1)) * {"K": 1e-3, "M": 1.0, "G": 1e3}[m.group(2)]
        # More than the link is a defect no load explains.
        if mbit >= 10.3:
            raise RuntimeError(f"iperf3 through bw=10: {mbit} Mbit/s\n{out}")
        print(f"The guide's Mininet example: ping RTT median {rtt} ms, iperf3 {mbit} Mbit/s")
        assert 19.5 < rtt < 35, f"RTT with delay=10ms each way: {rtt} ms\n{out}"
        # TCP over a 10 Mbit/s link: headers and slow start cost a few percent.
        assert 8.0 < mbit, f"iperf3 through bw=10: {mbit} Mbit/s\n{out}"
        return scope["net"].links[0].stats

    stats = within_attempts("the guide's Mininet example", 3, example)
    assert stats is not None and stats["directions"][0]["fates"]["delivered"] > 1000, stats
    assert not leftover_links()
