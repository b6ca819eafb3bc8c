"""A stand-in for linkem's web server (test helper, not shipped): the page's three
files from the source tree and canned JSON and SSE shaped as the design says, for a
lab of three links whose first link carries a steady 8 Mbit/s. Token ``00ff``.

    /usr/bin/python3 python/tests/web_standin.py [PORT [SPOKES]]   # then open /#token=00ff
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "crates/linkem/src/control/web/page"
TOKEN = "00ff"
LINKS = ["h1:eth1--r1:eth1", "r1:eth2--r2:eth1", "r2:eth2--h2:eth1"]
START = time.monotonic()
WORDS = {n: {"a-to-b": "delay 10ms rate 20mbit", "b-to-a": "delay 10ms rate 20mbit"}
         for n in LINKS}
MARKS: list = []
LOCK = threading.Lock()
# The event streams opened so far; while DROP is set each stream is closed by the
# server, as a restarted or overloaded one would.
STREAMS = {"opened": 0}
DROP = threading.Event()


def now_s() -> float:
    return time.monotonic() - START


def dirs_at(name: str, t: float) -> list:
    out = []
    for k, d in enumerate(("a-to-b", "b-to-a")):
        base = {0: 8e6, 1: 3e6, 2: 0.0}.get(LINKS.index(name), 1e6) * (1 if k == 0 else 0.3)
        tput = base * (1 + 0.05 * math.sin(t / 3)) if base else 0.0
        drops = {"loss": int(2 + 2 * math.sin(t))} if base and k == 0 else {}
        if base and int(t) % 20 < 3:
            drops["queue"] = 4
        out.append({"dir": d, "offered_bps": tput * 1.02, "tput_bps": tput, "cap_bps": 20e6,
                    "delay_p50_ms": 10.2 if base else None,
                    "delay_p99_ms": 12.5 + math.sin(t) if base else None,
                    "queue_packets": int(5 + 4 * math.sin(t / 2)) if base else 0,
                    "drops": drops})
    return out


def sample(t: float) -> dict:
    return {"t_s": round(t, 3), "links": [{"name": n, "dirs": dirs_at(n, t)} for n in LINKS]}


def links_json() -> list:
    return [{"name": n, "words": WORDS[n], "rules": None, "changes": 0, "changed_at_s": None}
            for n in LINKS]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy",
                         "default-src 'self'; style-src 'self'; script-src 'self'; "
                         "img-src 'self' data:; frame-ancestors 'none'")
        self.end_headers()
        self.wfile.write(body)

    def json(self, status: int, value) -> None:
        self.send(status, json.dumps(value).encode(), "application/json")

    def do_GET(self) -> None:  # noqa: N802
        path, _, query = self.path.partition("?")
        files = {"/": ("index.html", "text/html; charset=utf-8"),
                 "/app.js": ("app.js", "text/javascript"), "/style.css": ("style.css", "text/css")}
        if path in files:
            name, ctype = files[path]
            return self.send(200, (PAGE / name).read_bytes(), ctype)
        if path == "/api/state":
            writable = self.headers.get("X-Linkem-Token") == TOKEN
            ends = [[e.split(":") for e in n.split("--")] for n in LINKS]
            names = list(dict.fromkeys(node for pair in ends for node, _ in pair))
            nodes = [{"name": n, "kind": "linux"} for n in names]
            links = [{"name": n, "a": a[0], "b": b[0], "a_if": a[1], "b_if": b[1]}
                     for n, (a, b) in zip(LINKS, ends)]
            return self.json(200, {"name": "standin", "front": "lab", "version": "0.0",
                                   "writable": writable, "interval_ms": 500, "history_s": 300,
                                   "now_s": now_s(), "topology": {"nodes": nodes, "links": links},
                                   "links": links_json(), "marks": MARKS, "sample": sample(now_s())})
        if path == "/api/history":
            link = query.partition("link=")[2].replace("%3A", ":").replace("%3a", ":")
            if link not in LINKS:
                return self.json(404, {"error": f"no link '{link}'"})
            t = now_s()
            samples = [{"t_s": round(x, 3), "dirs": dirs_at(link, x)}
                       for x in [t - 0.5 * i for i in range(min(600, int(t / 0.5) + 120), 0, -1)]]
            return self.json(200, {"link": link, "interval_ms": 500, "samples": samples,
                                   "marks": [m for m in MARKS if m["link"] == link]})
        if path == "/api/events":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            seen = len(MARKS)
            with LOCK:
                STREAMS["opened"] += 1
            try:
                while True:
                    time.sleep(0.5)
                    if DROP.is_set():
                        self.close_connection = True
                        return
                    chunks = []
                    while seen < len(MARKS):
                        chunks.append(f"event: mark\ndata: {json.dumps(MARKS[seen])}\n\n")
                        chunks.append(f"event: links\ndata: {json.dumps(links_json())}\n\n")
                        seen += 1
                    chunks.append(f"event: sample\ndata: {json.dumps(sample(now_s()))}\n\n")
                    self.wfile.write("".join(chunks).encode())
                    self.wfile.flush()
            except OSError:
                return
        return self.json(404, {"error": "not found"})

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/api/change":
            return self.json(404, {"error": "not found"})
        if self.headers.get("X-Linkem-Token") != TOKEN:
            return self.json(403, {"ok": False, "error": "no token or a wrong one: read-only"})
        req = json.loads(body)
        words = req.get("words") or req.get("line") or ""
        for i, w in enumerate(words.split(), 1):
            if w.endswith("xs"):
                return self.json(200, {"ok": False, "error": f"'{w}': unknown time unit 'xs'",
                                       "word": w, "position": i})
        with LOCK:
            link = req.get("link") or LINKS[0]
            dirs = ("a-to-b", "b-to-a") if req.get("dir", "both") == "both" else (req["dir"],)
            for d in dirs:
                WORDS[link][d] = words if req.get("verb") == "replace" else \
                    f"{WORDS[link][d]} {words}"
                MARKS.append({"t_s": round(now_s(), 3), "link": link, "kind": "change",
                              "text": f"link {d} {words}"})
        return self.json(200, {"ok": True, "at_ns": int(now_s() * 1e9)})


def serve(port: int = 0) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


if __name__ == "__main__":
    if len(sys.argv) > 2:  # a hub of N spokes instead, to look at a larger drawing
        LINKS[:] = [f"hub:e{i}--s{i}:eth1" for i in range(int(sys.argv[2]))]
        WORDS.update({n: dict(WORDS[n] if n in WORDS else WORDS[next(iter(WORDS))])
                      for n in LINKS})
    s = serve(int(sys.argv[1]) if len(sys.argv) > 1 else 8765)
    print(f"http://127.0.0.1:{s.server_address[1]}/#token={TOKEN}", flush=True)
    threading.Event().wait()
