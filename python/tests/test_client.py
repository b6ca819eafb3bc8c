"""The Python client against a live ``linkem bridge`` between two namespaces
(root only), and against a stand-in server for what a bridge never sends."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, List

import pytest

import linkem
import linkem.client
from conftest import Topology, median_ms

# --- without root: a stand-in server -----------------------------------------


def serve_once(path: Path, script: Callable[[socket.socket], None]) -> threading.Thread:
    """Listens on ``path`` and runs ``script`` on the first connection."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(1)

    def run() -> None:
        conn, _ = srv.accept()
        with conn:
            script(conn)
        srv.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def banner(conn: socket.socket, name: str = "fake") -> None:
    conn.sendall(json.dumps({"linkem": "ctl", "protocol": 1, "version": "0.1.0",
                             "name": name}).encode() + b"\n")


def test_error_reply_carries_word_position_and_line(tmp_path: Path) -> None:
    sent: List[bytes] = []

    def script(conn: socket.socket) -> None:
        banner(conn)
        f = conn.makefile("rb")
        sent.append(f.readline())
        conn.sendall(b'{"ok":false,"error":"unknown time unit","position":4,"word":"3xs"}\n')
        sent.append(f.readline())
        conn.sendall(b'{"ok":false,"refused":true,"error":"uid 1000 may not change it"}\n')

    t = serve_once(tmp_path / "s", script)
    with linkem.connect(path=tmp_path / "s") as c:
        assert c.name == "fake"
        with pytest.raises(linkem.CtlError) as e:
            c.link("both", ["delay", "3xs"])
        assert (e.value.word, e.value.position) == ("3xs", 4)
        assert e.value.line == "link both delay 3xs"
        assert str(e.value) == "'link both delay 3xs': word 4 '3xs': unknown time unit"
        assert not e.value.refused
        with pytest.raises(linkem.CtlError) as e:
            c.zero()
        assert e.value.refused and e.value.word is None and e.value.position is None
    t.join(5)
    assert sent == [b"link both delay 3xs\n", b"zero\n"]


def test_full_emulator_refuses_in_the_banner(tmp_path: Path) -> None:
    def script(conn: socket.socket) -> None:
        conn.sendall(b'{"linkem":"ctl","ok":false,"error":"too many clients of uid 0"}\n')

    serve_once(tmp_path / "s", script)
    with pytest.raises(linkem.CtlError, match="too many clients of uid 0"):
        linkem.connect(path=tmp_path / "s")


def test_other_sockets_and_missing_emulators_are_named(tmp_path: Path) -> None:
    serve_once(tmp_path / "s", lambda conn: conn.sendall(b'{"hello":1}\n'))
    with pytest.raises(ConnectionError, match="not a linkem control socket"):
        linkem.connect(path=tmp_path / "s")
    with pytest.raises(ConnectionError, match="no emulator listens there"):
        linkem.connect(path=tmp_path / "none.sock")
    with pytest.raises(ValueError, match="not both"):
        linkem.connect(path=tmp_path / "s", name="x")
    with pytest.raises(ValueError, match="emulator name"):
        linkem.connect(name="../etc/x")


def test_closed_connection_and_garbage_are_errors_not_hangs(tmp_path: Path) -> None:
    def script(conn: socket.socket) -> None:
        banner(conn)
        conn.makefile("rb").readline()
        conn.sendall(b"not json\n")

    serve_once(tmp_path / "s", script)
    with linkem.connect(path=tmp_path / "s", timeout_s=2) as c:
        with pytest.raises(ConnectionError, match="not JSON"):
            c.ping()
    serve_once(tmp_path / "t", banner)
    with linkem.connect(path=tmp_path / "t", timeout_s=2) as c:
        with pytest.raises(ConnectionError, match="closed the connection"):
            c.ping()


def test_silent_emulator_times_out(tmp_path: Path) -> None:
    done = threading.Event()

    def script(conn: socket.socket) -> None:
        banner(conn)
        done.wait(5)

    serve_once(tmp_path / "s", script)
    with linkem.connect(path=tmp_path / "s", timeout_s=0.2) as c:
        with pytest.raises(TimeoutError, match="no a reply within 0.2 s"):
            c.ping()
    done.set()


def test_a_trickled_reply_times_out_as_a_whole(tmp_path: Path) -> None:
    """The timeout bounds the whole reply: one byte every 50 ms never lets a
    read wait 0.3 s, yet the reply cannot take longer than 0.3 s in all."""
    done = threading.Event()

    def script(conn: socket.socket) -> None:
        banner(conn)
        conn.makefile("rb").readline()
        try:
            while not done.is_set():
                conn.sendall(b" ")
                done.wait(0.05)
        except OSError:
            pass

    serve_once(tmp_path / "s", script)
    with linkem.connect(path=tmp_path / "s", timeout_s=0.3) as c:
        start = time.monotonic()
        with pytest.raises(TimeoutError, match="no a reply within 0.3 s"):
            c.ping()
        took_s = time.monotonic() - start
    done.set()
    # Margin for a loaded machine; before the bound it never returned.
    assert took_s < 5, f"the reply took {took_s:.1f} s against a 0.3 s timeout"


def test_an_endless_reply_line_is_cut_at_the_size_cap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(linkem.client, "MAX_REPLY_BYTES", 1 << 20)
    done = threading.Event()
    sent = [0]

    def script(conn: socket.socket) -> None:
        banner(conn)
        conn.makefile("rb").readline()
        chunk = b'{"ok":true,"x":"' + b"a" * 65536
        try:
            while not done.is_set():
                conn.sendall(chunk)
                sent[0] += len(chunk)
        except OSError:
            pass

    serve_once(tmp_path / "s", script)
    c = linkem.connect(path=tmp_path / "s", timeout_s=10)
    with pytest.raises(ConnectionError, match="longer than 1048576 bytes"):
        c.ping()
    done.set()
    c.close()
    # The client read no more than the cap (plus what the socket buffers held).
    assert sent[0] < 16 << 20, f"the server could send {sent[0]} bytes"


def test_replies_split_across_reads_and_sharing_one_read_are_whole(tmp_path: Path) -> None:
    def script(conn: socket.socket) -> None:
        banner(conn)
        f = conn.makefile("rb")
        f.readline()
        conn.sendall(b'{"ok":true,')
        time.sleep(0.05)
        conn.sendall(b'"pong":1}\n{"ok":true,"pong":2}\n')
        f.readline()

    serve_once(tmp_path / "s", script)
    with linkem.connect(path=tmp_path / "s", timeout_s=5) as c:
        assert c.ping()["pong"] == 1
        assert c.ping()["pong"] == 2


def test_lines_the_protocol_cannot_carry_are_refused_before_sending(tmp_path: Path) -> None:
    received: List[bytes] = []

    def script(conn: socket.socket) -> None:
        banner(conn)
        received.append(conn.makefile("rb").read())

    t = serve_once(tmp_path / "s", script)
    with linkem.connect(path=tmp_path / "s") as c:
        with pytest.raises(ValueError, match="no newline"):
            c.request("ping\nzero")
        with pytest.raises(ValueError, match="at most 4095 bytes"):
            c.request("link both " + "x" * 4090)
        with pytest.raises(ValueError, match="holds no blanks"):
            c.link("both", ["delay 10ms", "loss"])
        with pytest.raises(ValueError, match="use Client.watch"):
            c.request("@w1 watch 1s")
        with pytest.raises(ValueError, match="1..65535"):
            c.pipe(0, "bw 1Mbit/s")
        with pytest.raises(ValueError, match="direction"):
            c.link("up", "delay 1ms")
    t.join(5)
    assert received == [b""], "nothing may reach the emulator"


# --- live: a bridge between two namespaces -----------------------------------


@pytest.fixture
def client(start_bridge: Callable, topology: Topology) -> Iterator[linkem.Client]:
    bridge = start_bridge("delay", "10ms")
    with linkem.connect(name=bridge.name) as c:
        yield c


def test_link_changes_follow_and_bad_words_change_nothing(
        client: linkem.Client, topology: Topology) -> None:
    before = median_ms(topology.ping_rtts_ms(), "delay 10ms")
    assert 19.5 < before < 35, f"RTT with 10 ms each way: {before} ms"
    reply = client.link("both", "delay 30ms")
    assert reply["ok"] is True and reply["at_ns"] > 0
    after = median_ms(topology.ping_rtts_ms(), "delay 30ms")
    assert 59.5 < after < 80, f"RTT after 'link both delay 30ms': {after} ms"

    with pytest.raises(linkem.CtlError) as e:
        client.link("a-to-b", "delay 30ms loss 1% 20xs")
    assert (e.value.word, e.value.position) == ("20xs", 7), e.value.reply
    with pytest.raises(linkem.CtlError) as e:
        client.request("@x7 link both delay 3xs")
    assert (e.value.word, e.value.position, e.value.reply["id"]) == ("3xs", 5, "x7")
    again = median_ms(topology.ping_rtts_ms(3), "after bad words")
    assert 59.5 < again < 80, f"a refused change changed the RTT: {again} ms"
    assert [d["changes"] for d in client.list()["links"]] == [1, 1]


def test_batches_apply_all_at_one_instant_or_nothing(
        client: linkem.Client, topology: Topology) -> None:
    with pytest.raises(linkem.CtlError) as e:
        with client.batch() as b:
            assert b.link("a-to-b", "delay 1ms")["batched"] == 1
            b.link("b-to-a", "delay 1ms loss 200%")
    assert e.value.word == "200%"
    links = client.list()["links"]
    assert [d["changes"] for d in links] == [0, 0], "an aborted batch changed a link"

    with client.batch() as b:
        b.link("a-to-b", "delay 2ms")
        client.link("b-to-a", "delay 3ms")
    assert b.result is not None and b.result["applied"] == 2
    links = client.list()["links"]
    assert links[0]["changed_at_ns"] == links[1]["changed_at_ns"] == b.result["at_ns"]
    rtt = median_ms(topology.ping_rtts_ms(3), "after the batch")
    assert 4.5 < rtt < 20, f"RTT with 2 + 3 ms: {rtt} ms"

    # A commit after a refused line applies nothing and says so.
    client.begin()
    with pytest.raises(linkem.CtlError):
        client.link("both", "delay 1xs")
    with pytest.raises(linkem.CtlError, match="batch not applied"):
        client.commit()
    assert client.begin()["batch"] == "begun"
    assert client.abort()["aborted"] is True


def test_reading_requests_and_zero(client: linkem.Client, topology: Topology,
                                   linkem_bin: Path) -> None:
    assert client.ping()["pong"] is True
    v = client.version()
    assert v["protocol"] == linkem.PROTOCOL_VERSION and v["name"] == client.name
    # The commit as `linkem --version` gives it between parentheses.
    said = subprocess.run([str(linkem_bin), "--version"], capture_output=True, text=True).stdout
    assert v["commit"] == said.strip().rsplit("(", 1)[1].rstrip(")")
    assert "watch [INTERVAL]" in client.help()
    topology.ping_rtts_ms(4)
    stats = client.stats()
    assert [d["direction"] for d in stats["directions"]] == ["a->b", "b->a"]
    assert stats["directions"][0]["received"] >= 4, stats
    shown = client.show()
    assert shown["rule_set"] is False and len(shown["links"]) == 2
    assert client.zero()["at_ns"] > 0
    after = client.stats()
    assert after["zeroed"] is True and after["directions"][0]["received"] < 4, after
    with pytest.raises(linkem.CtlError, match="no rule set in this emulator"):
        client.pipe(1, "bw 1Mbit/s")


def test_watch_is_an_iterator_that_ends_cleanly(client: linkem.Client) -> None:
    with client.watch(0.05) as w:
        seen = [next(w)["watch"] for _ in range(3)]
    assert seen == [0, 1, 2]
    assert w.lines is not None and w.lines >= 3
    assert client.ping()["pong"] is True, "the connection carries requests after a watch"
    # Left open, a watch ends before the next request; a time word works too.
    for stats in client.watch("20ms"):
        if stats["watch"] == 2:
            break
    assert client.stats()["ok"] is True
    with pytest.raises(linkem.CtlError) as e:
        client.watch("2h")
    assert e.value.word == "2h"
    assert client.ping()["pong"] is True


def test_connect_without_a_name_finds_the_one_emulator(
        start_bridge: Callable, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bridge = start_bridge()
    # Other emulators may run on this machine: look in a directory of our own.
    (tmp_path / "only.sock").symlink_to(bridge.socket)
    monkeypatch.setattr(linkem.client, "SOCKET_DIR", str(tmp_path))
    assert linkem.list_emulators() == [(bridge.name, tmp_path / "only.sock")]
    with linkem.connect() as c:
        assert c.name == bridge.name
    (tmp_path / "second.sock").symlink_to(bridge.socket)
    with pytest.raises(ConnectionError, match="several emulators run"):
        linkem.connect()


def test_rules_pipes_queues_and_schedulers(
        start_bridge: Callable, topology: Topology, tmp_path: Path) -> None:
    rules = tmp_path / "lab.rules"
    rules.write_text("pipe 1 config bw 10Mbit/s delay 5\nadd 100 pipe 1 ip from any to any\n")
    bridge = start_bridge("--rules", str(rules))
    with linkem.connect(path=bridge.socket) as c:
        rtt = median_ms(topology.ping_rtts_ms(), "pipe 1 delay 5")
        assert 9.5 < rtt < 25, f"RTT through pipe 1 (5 ms): {rtt} ms"
        assert c.pipe(1, "bw 10Mbit/s delay 20")["at_ns"] > 0
        rtt = median_ms(topology.ping_rtts_ms(), "pipe 1 delay 20")
        assert 39.5 < rtt < 60, f"RTT after 'pipe 1 config ... delay 20': {rtt} ms"
        with c.batch() as b:
            b.pipe(2, "bw 1Mbit/s delay 50")
            b.sched(3, "type wf2q+")
            b.pipe(3, "bw 2Mbit/s")
            b.queue(4, "sched 3 weight 10")
            b.add("pipe 2 ip from any to 10.1.2.3", number=50)
            b.add("queue 4 udp from any to 10.1.2.4", number=60)
        assert b.result is not None and b.result["applied"] == 6
        shown = c.pipe_show(2)
        assert "50ms" in shown["text"], shown
        assert c.sched_show(3)["ok"] and c.queue_show(4)["ok"] and c.pipe_show()["ok"]
        rules_now = c.list()
        assert [r["number"] for r in rules_now["rules"]] == [50, 60, 100], rules_now
        with pytest.raises(linkem.CtlError) as e:
            c.pipe(2, "bw 1Mbit/s delay 50xs")
        assert e.value.word == "50xs" and e.value.position == 7
        c.delete(50, 60)
        c.queue_delete(4)
        c.sched_delete(3)
        c.pipe_delete(2)
        c.pipe_delete(3)
        with pytest.raises(linkem.CtlError, match="2"):
            c.pipe_show(2)
        assert c.set_one_pass(False)["ok"] and c.set_one_pass(True)["ok"]
        assert c.add("count ip from any to any")["ok"]
        assert [r["number"] for r in c.list()["rules"]] == [100, 200]
        assert c.flush()["ok"]
        assert c.list()["rules"] == []
    assert bridge.stop() == 0, bridge.stderr()


def test_readme_python_example(start_bridge: Callable, topology: Topology,
                               capsys: pytest.CaptureFixture) -> None:
    from conftest import doc_block

    bridge = start_bridge("delay", "10ms")
    code = doc_block("python-client")
    assert 'name="lab"' in code
    # The guide's emulator is 'lab'; ours has a name no other run uses.
    exec(compile(code.replace('name="lab"', f'name="{bridge.name}"'), "docs/guide/python.md", "exec"), {})
    out = capsys.readouterr().out
    assert "refused: 30xs at word 4" in out, out
    rtt = median_ms(topology.ping_rtts_ms(), "after the guide's batch")
    assert 24.5 < rtt < 45, f"RTT with 5 + 20 ms: {rtt} ms"
    assert os.path.exists(bridge.socket)
