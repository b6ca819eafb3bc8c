"""A blocking client of a running linkem emulator's control socket.

The protocol (version 1, defined in ``crates/linkem-ctl/src/lib.rs``):

* a stream Unix socket, by default ``/run/linkem/NAME.sock``;
* on connect the emulator sends one banner line,
  ``{"linkem":"ctl","protocol":1,"version":"0.1.0","name":"lab"}``, or, when it has
  no room for the connection, ``{"linkem":"ctl","ok":false,"error":"..."}``;
* then each request is one line of blank-separated words (at most
  :data:`MAX_LINE_BYTES` bytes with its newline), answered by exactly one JSON
  line, in order: ``{"ok":true,...}`` or ``{"ok":false,"error":"...",
  "position":N,"word":"W"}`` (``"refused":true`` when the peer may not);
* ``watch [INTERVAL]`` answers with one ``stats`` line every INTERVAL
  (``"watch": 0, 1, ...``) until the client sends any line, which is consumed
  and answered ``{"ok":true,"watch":"ended","lines":N}``;
* ``begin`` ... ``commit`` is a batch: each change is checked and answered
  ``{"ok":true,"batched":N}``; ``commit`` applies all of them at one instant, or
  none if any failed;
* ``link [DIR] WORDS`` changes only what WORDS name, ``replace [DIR] WORDS`` the
  whole direction; a socket that serves several links (a lab) wants the link's
  name first (``link NAME ...``, ``show NAME``): :class:`Lab`.

Invariants kept here: one request is in flight at a time, so the next line read
is the reply to the line just sent; a watch left open is ended (and its lines
drained) before the next request is sent; nothing is retried, so a change is
never applied twice.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import time
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

#: Where emulators put their sockets by default.
SOCKET_DIR = "/run/linkem"
#: Longest request line, newline included: the emulator refuses longer lines.
MAX_LINE_BYTES = 4096
#: The protocol version this client speaks.
PROTOCOL_VERSION = 1
#: How long a whole reply may take to arrive, in seconds, unless ``connect`` says
#: otherwise: the limit is on the reply (from the request sent to its newline), not
#: on each read, so an emulator that trickles bytes cannot hold the client longer.
DEFAULT_TIMEOUT_S = 10.0
#: Longest reply line, newline included (64 MiB: ``show`` of the largest rule set
#: is far below): a longer one ends the connection with an error rather than
#: filling memory.
MAX_REPLY_BYTES = 64 << 20

#: Words of a request: one string ("delay 10ms rate 20mbit") or a sequence of words.
Words = Union[str, Iterable[Union[str, int, float]]]
Reply = Dict[str, Any]


class CtlError(Exception):
    """The emulator answered a request with ``"ok": false``; nothing changed.

    ``word`` and ``position`` name the offending word and its 1-based index in
    the line as sent (a leading ``@ID`` or ``ipfw`` counts); both are ``None``
    when the error is not about one word. ``refused`` is true when the peer may
    not make the change (ownership), ``reply`` is the whole reply and ``line``
    the request.
    """

    def __init__(self, message: str, *, word: Optional[str] = None,
                 position: Optional[int] = None, refused: bool = False,
                 line: Optional[str] = None, reply: Optional[Reply] = None) -> None:
        self.message = message
        self.word = word
        self.position = position
        self.refused = refused
        self.line = line
        self.reply: Reply = reply if reply is not None else {}
        super().__init__(str(self))

    def __str__(self) -> str:
        where = "" if self.line is None else f"'{self.line}': "
        if self.position is not None and self.word is not None:
            return f"{where}word {self.position} '{self.word}': {self.message}"
        return f"{where}{self.message}"

    @classmethod
    def from_reply(cls, reply: Reply, line: Optional[str] = None) -> "CtlError":
        position = reply.get("position")
        word = reply.get("word")
        return cls(str(reply.get("error", "the emulator gave no reason")),
                   word=word if isinstance(word, str) else None,
                   position=position if isinstance(position, int) else None,
                   refused=reply.get("refused") is True, line=line, reply=reply)


def default_socket_path(name: str) -> Path:
    """The socket of the emulator started with ``--name NAME``."""
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"emulator name {name!r}: use 1 to 64 of A-Z a-z 0-9 - _ . "
                         "(not starting with '.')")
    return Path(SOCKET_DIR) / f"{name}.sock"


def join_words(words: Words) -> str:
    """One request's words as a line; a word may not hold blanks or newlines."""
    if isinstance(words, str):
        return " ".join(words.split())
    out: List[str] = []
    for w in words:
        if isinstance(w, bool) or not isinstance(w, (str, int, float)):
            raise TypeError(f"word {w!r}: words are strings or numbers")
        text = str(w)
        if not text or text.split() != [text]:
            raise ValueError(f"word {text!r}: a word is not empty and holds no blanks")
        out.append(text)
    return " ".join(out)


def list_emulators(timeout_s: float = 0.5) -> List[Tuple[str, Path]]:
    """The emulators that answer under :data:`SOCKET_DIR`, as (name, socket)."""
    found: List[Tuple[str, Path]] = []
    try:
        entries = sorted(Path(SOCKET_DIR).iterdir())
    except OSError:
        return found
    for p in entries:
        try:
            if p.suffix != ".sock" or not stat.S_ISSOCK(p.stat().st_mode):
                continue
            with Client(p, timeout_s=timeout_s) as c:
                found.append((str(c.banner.get("name", "?")), p))
        except (OSError, CtlError, ValueError):
            continue
    return found


def connect(path: Union[str, "os.PathLike[str]", None] = None, name: Optional[str] = None,
            timeout_s: float = DEFAULT_TIMEOUT_S) -> "Client":
    """Connects to a running emulator and reads its banner.

    ``path`` is the socket, ``name`` the emulator's ``--name`` (socket
    ``/run/linkem/NAME.sock``); with neither, the one emulator that answers under
    ``/run/linkem`` (an error names them when there are several). ``timeout_s``
    bounds every later read and write.
    """
    if path is not None and name is not None:
        raise ValueError("give path or name, not both")
    if path is None and name is not None:
        path = default_socket_path(name)
    if path is None:
        found = list_emulators()
        if not found:
            raise ConnectionError(f"no running emulator answers under {SOCKET_DIR}/ "
                                  "(give name= or path=)")
        if len(found) > 1:
            names = ", ".join(n for n, _ in found)
            raise ConnectionError(f"several emulators run ({names}): choose one with name=")
        path = found[0][1]
    return Client(path, timeout_s=timeout_s)


class Requests:
    """The protocol's requests as methods over :meth:`request`.

    Each returns the parsed reply (a dict with ``"ok": True``) and raises
    :class:`CtlError` on an error reply. Shared by :class:`Client` and
    :class:`Batch` (inside a batch, a change is answered ``{"batched": N}``).
    """

    def request(self, line: str) -> Reply:  # pragma: no cover - overridden
        raise NotImplementedError

    # Reading.
    def ping(self) -> Reply:
        """``ping``: ``{"pong": true}``."""
        return self.request("ping")

    def version(self) -> Reply:
        """``version``: the emulator's ``version``, ``protocol`` and ``name``."""
        return self.request("version")

    def help(self) -> str:
        """``help``: the list of requests, as text."""
        return str(self.request("help")["help"])

    def show(self, link: Optional[str] = None) -> Reply:
        """``show [LINK]``: links (or rules, pipes) and counters, the shape of
        ``--stats json``; in a socket of several links (a lab) one link, or all of
        them as ``{"links": [{"link": NAME, ...}, ...]}``."""
        return self.request(f"show {_name(link)}".rstrip())

    def stats(self, link: Optional[str] = None) -> Reply:
        """``stats [LINK]``: the counters (``directions``, per direction ``received``,
        ``fates``, ``in_flight``), counted since the last ``zero``."""
        return self.request(f"stats {_name(link)}".rstrip())

    def list(self) -> Reply:
        """``list``: the links (or rules), their owners and last change."""
        return self.request("list")

    # Changing.
    def link(self, direction: str, words: Words) -> Reply:
        """``link a-to-b|b-to-a|both WORDS``: WORDS change what they name and every
        other word of that link stays (PATCH; ``loss none``, ``rate unlimited``,
        ``delay 0ms`` remove one); ``at_ns`` is the instant it applies."""
        return self.request(_change("link", None, direction, words, {}))

    def set(self, words: Optional[Words] = None, direction: str = "both",
            **named: Union[str, int, float]) -> Reply:
        """:meth:`link` with the words also as keywords, ``set(delay="30ms",
        loss="1%")`` (``jitter_mode=`` is ``jitter-mode``): only those change."""
        return self.request(_change("link", None, direction, words, named))

    def replace(self, words: Optional[Words] = None, direction: str = "both",
                **named: Union[str, int, float]) -> Reply:
        """``replace a-to-b|b-to-a|both WORDS``: the link becomes exactly WORDS,
        unset words taking their defaults (``replace()`` clears it)."""
        return self.request(_change("replace", None, direction, words, named))

    def zero(self) -> Reply:
        """``zero``: the counters of show/stats/watch start again from zero."""
        return self.request("zero")

    def pipe(self, number: int, words: Words) -> Reply:
        """``pipe N config WORDS`` (Dummynet words; sets the whole pipe)."""
        return self._config("pipe", number, words)

    def queue(self, number: int, words: Words) -> Reply:
        """``queue N config WORDS``."""
        return self._config("queue", number, words)

    def sched(self, number: int, words: Words) -> Reply:
        """``sched N config WORDS``."""
        return self._config("sched", number, words)

    def pipe_show(self, number: Optional[int] = None) -> Reply:
        """``pipe [N] show``: pipes and flows (``text``: ``ipfw pipe show``'s layout)."""
        return self._object_show("pipe", number)

    def queue_show(self, number: Optional[int] = None) -> Reply:
        """``queue [N] show``."""
        return self._object_show("queue", number)

    def sched_show(self, number: Optional[int] = None) -> Reply:
        """``sched [N] show``."""
        return self._object_show("sched", number)

    def pipe_delete(self, number: int) -> Reply:
        """``pipe N delete``."""
        return self.request(f"pipe {_number(number)} delete")

    def queue_delete(self, number: int) -> Reply:
        """``queue N delete``."""
        return self.request(f"queue {_number(number)} delete")

    def sched_delete(self, number: int) -> Reply:
        """``sched N delete``."""
        return self.request(f"sched {_number(number)} delete")

    def add(self, words: Words, number: Optional[int] = None) -> Reply:
        """``add [NUM] ACTION ...``: an ipfw rule (unnumbered: 100 after the highest)."""
        head = "add" if number is None else f"add {_number(number)}"
        return self.request(f"{head} {join_words(words)}")

    def delete(self, *numbers: int) -> Reply:
        """``delete NUM...``: the rules with these numbers."""
        if not numbers:
            raise ValueError("delete needs rule numbers (or flush() for all)")
        return self.request("delete " + " ".join(str(_number(n)) for n in numbers))

    def flush(self) -> Reply:
        """``flush``: every rule, pipe, queue and scheduler."""
        return self.request("flush")

    def set_one_pass(self, on: bool) -> Reply:
        """``set one-pass on|off``."""
        return self.request("set one-pass " + ("on" if on else "off"))

    def _config(self, kind: str, number: int, words: Words) -> Reply:
        return self.request(f"{kind} {_number(number)} config {join_words(words)}".rstrip())

    def _object_show(self, kind: str, number: Optional[int]) -> Reply:
        if number is None:
            return self.request(f"{kind} show")
        return self.request(f"{kind} {_number(number)} show")


_DIRECTIONS = ("a-to-b", "b-to-a", "both", "a->b", "b->a")


def _name(link: Optional[str]) -> str:
    """A link's name as one word of a request ('' for none)."""
    if link is None:
        return ""
    if not isinstance(link, str) or not link or link.split() != [link]:
        raise ValueError(f"link name {link!r}: one word, such as r1:eth1--r2:eth1")
    return link


def _change(verb: str, link: Optional[str], direction: str, words: Optional[Words],
            named: Dict[str, Union[str, int, float]]) -> str:
    """``VERB [LINK] DIRECTION WORDS``, the keywords as words after ``words``."""
    if direction not in _DIRECTIONS:
        raise ValueError(f"direction {direction!r}: a-to-b, b-to-a or both")
    line = join_words(words) if words is not None else ""
    pairs = [(k.replace("_", "-"), v) for k, v in named.items()]
    extra = join_words([w for k, v in pairs for w in (k, *str(v).split())])
    text = " ".join(t for t in (line, extra) if t)
    if verb == "link" and not text:
        raise ValueError("set/link needs the words to change (replace() clears a link)")
    return " ".join(t for t in (verb, _name(link), direction, text) if t)


def _number(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 65535:
        raise ValueError(f"number {n!r}: objects and rules are numbered 1..65535")
    return n


class Client(Requests):
    """One connection to an emulator; use :func:`connect` to open one.

    ``banner`` is the emulator's banner (``name``, ``version``, ``protocol``).
    A client is a context manager that closes the connection on exit.
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"],
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.path = Path(path)
        self.timeout_s = timeout_s
        self._watch: Optional[Watch] = None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        try:
            sock.connect(str(self.path))
        except PermissionError as e:
            sock.close()
            raise PermissionError(
                f"{self.path}: permission denied (the socket is root-only unless the "
                "emulator runs with --control-group)") from e
        except (FileNotFoundError, ConnectionRefusedError) as e:
            sock.close()
            raise ConnectionError(f"{self.path}: no emulator listens there ({e})") from e
        except OSError:
            sock.close()
            raise
        self._sock = sock
        # Bytes received after the last full reply line (the next line's start).
        self._buffer = bytearray()
        try:
            banner = self._read_json("the banner")
        except BaseException:
            self.close()
            raise
        if banner.get("linkem") != "ctl":
            self.close()
            raise ConnectionError(f"{self.path}: not a linkem control socket (banner {banner})")
        if banner.get("ok") is False:
            # The emulator had no room for this connection and says which bound it hit.
            self.close()
            raise CtlError.from_reply(banner)
        self.banner: Reply = banner

    @property
    def name(self) -> str:
        """The emulator's name (its ``--name``)."""
        return str(self.banner.get("name", ""))

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connection (an open watch ends with it)."""
        self._watch = None
        sock = getattr(self, "_sock", None)
        if sock is not None:
            sock.close()

    def send(self, line: str) -> None:
        """Sends one request line without reading its reply."""
        if "\n" in line or "\r" in line:
            raise ValueError("a request is one line: it holds no newline")
        data = line.encode("utf-8") + b"\n"
        if len(data) > MAX_LINE_BYTES:
            raise ValueError(f"a request line holds at most {MAX_LINE_BYTES - 1} bytes "
                             f"(this one {len(data) - 1})")
        try:
            self._sock.sendall(data)
        except socket.timeout as e:
            raise TimeoutError(f"{self.path}: the emulator took no request within "
                               f"{self.timeout_s} s") from e
        except (BrokenPipeError, ConnectionResetError) as e:
            raise ConnectionError(f"{self.path}: the emulator closed the connection "
                                  f"({e.strerror})") from e

    def recv(self, timeout_s: Optional[float] = None) -> Reply:
        """The next reply line, parsed (whether ok or not); the whole line must
        arrive within ``timeout_s`` (default: the client's timeout)."""
        return self._read_json("a reply", timeout_s)

    def request(self, line: str) -> Reply:
        """Sends one request line and returns its reply, parsed.

        Raises :class:`CtlError` when the reply says ``"ok": false``,
        ``ValueError`` for a line the protocol cannot carry (a newline, more than
        4095 bytes), ``ConnectionError``/``TimeoutError`` when the emulator goes
        away or does not answer within the timeout. A request that starts a
        watch is refused here: use :meth:`watch`.
        """
        words = line.split()
        # The verb comes after an optional @ID and an ignored ipfw/dnctl.
        verb = [w for w in words if not w.startswith("@") and w not in ("ipfw", "dnctl")][:1]
        if verb == ["watch"]:
            raise ValueError("use Client.watch() for watch: it answers with many lines")
        self._end_watch()
        self.send(line)
        reply = self.recv()
        if reply.get("ok") is not True:
            raise CtlError.from_reply(reply, line)
        return reply

    def watch(self, interval: Union[float, str, None] = None) -> "Watch":
        """``watch [INTERVAL]``: an iterator over ``stats`` replies, one every
        ``interval`` (seconds as a number, or a time such as ``"100ms"``; default
        1 s; 10 ms to 1 h). Ending it (``close()``, leaving its ``with`` block, or
        the next request on this client) sends a line and drains what is left."""
        self._end_watch()
        line = "watch" if interval is None else f"watch {_interval(interval)}"
        self.send(line)
        first = self.recv()
        if first.get("ok") is not True:
            raise CtlError.from_reply(first, line)
        interval_s = _interval_s(interval)
        self._watch = Watch(self, first, interval_s)
        return self._watch

    def batch(self) -> "Batch":
        """``begin`` ... ``commit``: a context manager whose changes apply at one
        instant when its block ends, or not at all (``abort``) when the block
        raises; :attr:`Batch.result` holds the ``commit`` reply."""
        return Batch(self)

    def begin(self) -> Reply:
        """``begin``: starts a batch (see :meth:`batch`)."""
        return self.request("begin")

    def commit(self) -> Reply:
        """``commit``: applies the batch (``applied``, ``at_ns``), or raises."""
        return self.request("commit")

    def abort(self) -> Reply:
        """``abort``: drops the batch."""
        return self.request("abort")

    def _end_watch(self) -> None:
        if self._watch is not None:
            self._watch.close()

    def _read_line(self, what: str, timeout_s: float) -> bytes:
        """The next line (newline included): all of it within ``timeout_s`` and at
        most :data:`MAX_REPLY_BYTES` long, else ``TimeoutError``/``ConnectionError``."""
        deadline = time.monotonic() + timeout_s
        searched = 0
        try:
            while True:
                end = self._buffer.find(b"\n", searched)
                if end >= 0:
                    line = bytes(self._buffer[: end + 1])
                    del self._buffer[: end + 1]
                    return line
                searched = len(self._buffer)
                if searched >= MAX_REPLY_BYTES:
                    self.close()
                    raise ConnectionError(
                        f"{self.path}: {what} is longer than {MAX_REPLY_BYTES} bytes "
                        "(connection closed)")
                left_s = deadline - time.monotonic()
                if left_s <= 0:
                    raise socket.timeout
                self._sock.settimeout(left_s)
                chunk = self._sock.recv(min(1 << 16, MAX_REPLY_BYTES - searched))
                if not chunk:
                    return b""
                self._buffer += chunk
        except socket.timeout as e:
            raise TimeoutError(f"{self.path}: no {what} within {timeout_s} s") from e
        except ConnectionResetError as e:
            raise ConnectionError(f"{self.path}: the emulator closed the connection "
                                  f"before {what} ({e.strerror})") from e
        finally:
            if getattr(self, "_sock", None) is not None and self._sock.fileno() >= 0:
                self._sock.settimeout(self.timeout_s)

    def _read_json(self, what: str, timeout_s: Optional[float] = None) -> Reply:
        raw = self._read_line(what, self.timeout_s if timeout_s is None else timeout_s)
        if not raw:
            raise ConnectionError(f"{self.path}: the emulator closed the connection "
                                  f"before {what}")
        try:
            value = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ConnectionError(f"{self.path}: {what} is not JSON: {raw[:200]!r}") from e
        if not isinstance(value, dict):
            raise ConnectionError(f"{self.path}: {what} is not a JSON object: {value!r}")
        return value


def _interval(interval: Union[float, str]) -> str:
    if isinstance(interval, str):
        if interval.split() != [interval]:
            raise ValueError(f"watch interval {interval!r}: one word, e.g. '100ms'")
        return interval
    if isinstance(interval, bool) or not isinstance(interval, (int, float)):
        raise TypeError(f"watch interval {interval!r}: seconds, or a time like '100ms'")
    # Plain decimal seconds, never an exponent the emulator would not read.
    return f"{interval:.9f}".rstrip("0").rstrip(".")


def _interval_s(interval: Union[float, str, None]) -> float:
    """The interval in seconds, for the read timeout (a guess is enough)."""
    if interval is None:
        return 1.0
    if not isinstance(interval, str):
        return float(interval)
    for unit, scale in (("ns", 1e-9), ("us", 1e-6), ("ms", 1e-3), ("s", 1.0)):
        if interval.endswith(unit):
            try:
                return float(interval[: -len(unit)]) * scale
            except ValueError:
                break
    try:
        return float(interval)
    except ValueError:
        return 3600.0


class Watch:
    """The ``stats`` lines of one ``watch``, as an iterator of dicts (each with
    ``"watch": SEQ``). Ends when closed; a context manager."""

    def __init__(self, client: Client, first: Reply, interval_s: float) -> None:
        self._client = client
        self._pending: List[Reply] = [first]
        self._open = True
        self._interval_s = interval_s
        #: Lines the emulator sent, from its final ``{"watch":"ended","lines":N}``.
        self.lines: Optional[int] = None

    def __iter__(self) -> Iterator[Reply]:
        return self

    def __next__(self) -> Reply:
        if self._pending:
            return self._pending.pop(0)
        if not self._open:
            raise StopIteration
        c = self._client
        # A line comes every interval: wait that long beyond the usual timeout.
        reply = c.recv(c.timeout_s + self._interval_s)
        if reply.get("ok") is not True:
            self._open = False
            raise CtlError.from_reply(reply, "watch")
        return reply

    def close(self) -> None:
        """Ends the watch: sends a line (consumed, not run) and reads up to the
        emulator's ``ended`` reply, so the connection is ready for requests."""
        if not self._open:
            return
        self._open = False
        self._pending.clear()
        c = self._client
        if c._watch is self:
            c._watch = None
        c.send("")
        while True:
            reply = c.recv()
            if reply.get("watch") == "ended":
                lines = reply.get("lines")
                self.lines = lines if isinstance(lines, int) else None
                return

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Batch(Requests):
    """A batch on one client (see :meth:`Client.batch`); the request methods
    queue changes, each checked as it arrives."""

    def __init__(self, client: Client) -> None:
        self.client = client
        #: The ``commit`` reply (``applied``, ``at_ns``) once the batch applied.
        self.result: Optional[Reply] = None

    def request(self, line: str) -> Reply:
        return self.client.request(line)

    def __enter__(self) -> "Batch":
        self.client.begin()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.result = self.client.commit()
        else:
            try:
                self.client.abort()
            except (CtlError, OSError):
                # The block's exception says more than a failed abort; a
                # connection that broke drops the batch anyway.
                pass


class LabLink:
    """One link of a socket that serves several (a lab, ``--pair ... --name G``),
    named as the emulator names it (``r1:eth1--r2:eth1``, ``IF_A-IF_B``): its
    requests name it first. ``via`` is the client or a batch of it."""

    def __init__(self, via: Requests, name: str) -> None:
        self.via = via
        self.name = _name(name)

    def set(self, words: Optional[Words] = None, direction: str = "both",
            **named: Union[str, int, float]) -> Reply:
        """``link NAME DIRECTION WORDS``: only the words given change
        (``set(delay="30ms", direction="a-to-b")``)."""
        return self.via.request(_change("link", self.name, direction, words, named))

    def replace(self, words: Optional[Words] = None, direction: str = "both",
                **named: Union[str, int, float]) -> Reply:
        """``replace NAME DIRECTION WORDS``: that direction becomes exactly the words."""
        return self.via.request(_change("replace", self.name, direction, words, named))

    def show(self) -> Reply:
        """``show NAME``: the link's two directions (``links``) and counts (``stats``)."""
        return self.via.request(f"show {self.name}")

    def stats(self) -> Reply:
        """``stats NAME``: the link's counts since the last ``zero``."""
        return self.via.request(f"stats {self.name}")


class Lab:
    """The control socket of a lab (or of ``linkem bridge --pair ... --name G``),
    which serves several links::

        with linkem.Lab("demo") as lab:
            lab.link("r1:eth1--r2:eth1").set(delay="30ms", direction="a-to-b")
            print(lab.links())
    """

    def __init__(self, name: Optional[str] = None,
                 path: Union[str, "os.PathLike[str]", None] = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.client = connect(path, name=name, timeout_s=timeout_s)

    def __enter__(self) -> "Lab":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()

    def link(self, name: str) -> LabLink:
        """The link NAME (not checked here: a request about an unknown name is
        refused by the emulator, naming it and a few known ones)."""
        return LabLink(self.client, name)

    def links(self) -> List[str]:
        """The names of the lab's links, in the emulator's order."""
        return [str(l["link"]) for l in self.client.list().get("links", [])]

    def show(self) -> Reply:
        """``show``: every link, ``{"links": [{"link": NAME, ...}, ...]}``."""
        return self.client.show()

    def stats(self) -> Reply:
        """``stats``: every link's counts."""
        return self.client.stats()

    def batch(self) -> "LabBatch":
        """Changes of several links applied at once, or none of them::

            with lab.batch() as b:
                b.link("r1:eth1--r2:eth1").set(delay="5ms")
                b.link("r2:eth2--r3:eth1").set(loss="1%")
        """
        return LabBatch(self.client)


class LabBatch(Batch):
    """A :class:`Batch` of a lab's socket, whose links are named."""

    def link(self, name: str) -> LabLink:  # type: ignore[override]
        return LabLink(self, name)
