"""``linkem.Lab``: a socket that serves several links, each request naming its
link; ``set`` changes only the words given, ``replace`` the whole direction.
Against a stand-in server (the lines sent), and live (root only) against a
``linkem bridge`` of two pairs with one ``--name``."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import List

import pytest

import linkem
from conftest import Topology, median_ms, within_attempts
from test_client import banner, serve_once


def recording_server(path: Path, count: int, lines: List[str]) -> None:
    """Answers ``count`` requests ok, keeping their lines; ``list`` names two links."""

    def script(conn: socket.socket) -> None:
        banner(conn, "lab")
        f = conn.makefile("rb")
        for _ in range(count):
            line = f.readline().decode().strip()
            if not line:
                return
            lines.append(line)
            reply = {"ok": True, "at_ns": 1}
            if line == "list":
                reply = {"ok": True, "links": [{"link": "r1:eth1--r2:eth1", "links": []},
                                               {"link": "r2:eth2--r3:eth1", "links": []}]}
            conn.sendall(json.dumps(reply).encode() + b"\n")

    serve_once(path, script)


def test_lab_requests_name_their_link_and_words(tmp_path: Path) -> None:
    path = tmp_path / "lab.sock"
    lines: List[str] = []
    recording_server(path, 10, lines)
    with linkem.Lab(path=path) as lab:
        r1 = lab.link("r1:eth1--r2:eth1")
        r1.set(delay="30ms", direction="a-to-b")
        r1.set("loss none", jitter_mode="packet")
        r1.replace(rate="10mbit", delay="5ms")
        r1.replace()
        r1.show()
        r1.stats()
        assert lab.links() == ["r1:eth1--r2:eth1", "r2:eth2--r3:eth1"]
        with lab.batch() as b:
            b.link("r2:eth2--r3:eth1").set(loss="1%")
    assert lines == [
        "link r1:eth1--r2:eth1 a-to-b delay 30ms",
        "link r1:eth1--r2:eth1 both loss none jitter-mode packet",
        "replace r1:eth1--r2:eth1 both rate 10mbit delay 5ms",
        "replace r1:eth1--r2:eth1 both",
        "show r1:eth1--r2:eth1",
        "stats r1:eth1--r2:eth1",
        "list",
        "begin",
        "link r2:eth2--r3:eth1 both loss 1%",
        "commit",
    ]


def test_set_needs_words_and_names_are_one_word(tmp_path: Path) -> None:
    path = tmp_path / "x.sock"
    serve_once(path, lambda conn: (banner(conn), conn.recv(10)))
    with linkem.Lab(path=path) as lab:
        with pytest.raises(ValueError, match="needs the words"):
            lab.link("a-b").set()
        with pytest.raises(ValueError, match="one word"):
            lab.link("a b")
        with pytest.raises(ValueError, match="direction"):
            lab.link("a-b").set(delay="1ms", direction="up")


def test_a_lab_link_patch_keeps_its_words_and_the_other_link(
        linkem_bin: Path, root: None) -> None:
    topos = [Topology(), Topology()]
    name = f"{topos[0].prefix}-lab"
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    args = [str(linkem_bin), "bridge", "--backend", "packet", "--name", name,
            "--max-lag", "off", "--stats", "json", "--duration", "120"]
    for t in topos:
        args += ["--pair", t.emu_a, t.emu_b, "delay", "10ms", "loss", "1%", "rate", "10mbit"]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, "linkem exited at start"
            try:
                lab = linkem.Lab(name, timeout_s=2)
                break
            except OSError:
                assert time.monotonic() < deadline, "no control socket"
                time.sleep(0.05)
        names = [f"{t.emu_a}-{t.emu_b}" for t in topos]
        with lab:
            assert lab.links() == names
            lab.link(names[0]).set(delay="30ms", direction="a-to-b")
            shown = lab.link(names[0]).show()
            ab = shown["links"][0]["link"]
            assert "delay 30ms" in ab and "loss 1%" in ab and "rate 10mbit" in ab, shown
            assert "delay 10ms" in shown["links"][1]["link"], shown
            assert [l["link"] for l in lab.show()["links"]] == names
            with pytest.raises(linkem.CtlError, match="no link 'nosuch'"):
                lab.link("nosuch").set(delay="1ms")

        def rtts() -> None:
            changed = median_ms(topos[0].ping_rtts_ms(10), "changed pair")
            other = median_ms(topos[1].ping_rtts_ms(10), "other pair")
            assert 40.0 <= changed < 44.0, f"changed pair's RTT median {changed} ms, not 40"
            assert 20.0 <= other < 24.0, f"other pair's RTT median {other} ms, not 20"

        within_attempts("the pairs' RTTs after the patch", 3, rtts)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for t in topos:
            t.teardown()
