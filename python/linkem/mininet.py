"""A Mininet link through linkem: ``LinkemLink`` takes ``TCLink``'s parameters.

An existing topology switches by changing ``cls=``::

    from linkem.mininet import LinkemLink
    net.addLink(h1, h2, cls=LinkemLink, bw=10, delay="10ms", loss=1,
                linkem="reorder allow")

Layout: where ``Link`` makes one veth pair between the nodes, ``LinkemLink`` makes
two, ``node1's intf <-veth-> E_a`` and ``E_b <-veth-> node2's intf``, with both
emulator ends in the namespace of this Python process (the root namespace), and
runs ``linkem bridge E_a E_b WORDS`` between them. The nodes see one interface each,
named as Mininet names them (``h1-eth0``), with the MAC and IP Mininet gives it.
Frames from node1 cross linkem's a->b link, frames from node2 its b->a link.

Words (one each per direction, as ``TCIntf`` shapes each interface's egress):

=====================  =====================================================
TCLink parameter       linkem words
=====================  =====================================================
``bw=10`` (Mbit/s)     ``rate 10mbit``
``delay="10ms"``       ``delay 10ms``
``jitter="1ms"``       ``delay D 1ms`` (the jitter of the delay; D 0 if unset)
``loss=1`` (%)         ``loss 1%``
``max_queue_size=50``  ``queue 50`` (packets)
``linkem="..."``       those linkem words too (a string or a list of words)
=====================  =====================================================

``params1``/``params2`` set the a->b/b->a direction alone (``--a-to-b``/
``--b-to-a``), as they set one interface's shaping with ``TCLink``. ``gro``,
``txo``, ``rxo`` switch the node interface's offloads with ``ethtool -K`` as
``TCIntf`` does, when given (TCIntf's defaults are not imposed). ``TCIntf``'s
choice of qdisc (``use_hfsc``, ``use_tbf``, ``latency_ms``, ``speedup``,
``enable_ecn``, ``enable_red``) has no linkem meaning: ignored with a warning.

The link's emulator is ``linkem bridge`` with ``--name E_a-E_b`` (control socket
``/run/linkem/E_a-E_b.sock``, see :meth:`LinkemLink.client`), ``--stats json``,
and the bridge options in ``linkem_args`` (e.g. ``["--backend", "packet"]``).
The binary is ``linkem_bin=``, else ``$LINKEM_BIN``, else ``linkem`` on PATH.
``stop()``/``delete()`` stop linkem (SIGINT, its final counts in
:attr:`LinkemLink.stats`) and delete both veth pairs.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Union

from .client import Client, CtlError, default_socket_path, join_words

try:
    from mininet.link import Intf, Link
    from mininet.log import info, warn
except ImportError as e:  # pragma: no cover - depends on the machine
    raise ImportError(
        "linkem.mininet needs Mininet (Debian/Ubuntu: apt-get install mininet)") from e

#: TCIntf parameters that become linkem words.
TC_WORDS = ("bw", "delay", "jitter", "loss", "max_queue_size")
#: TCIntf's offload switches, applied as TCIntf does (``ethtool -K`` on the node's
#: interface) when given; TCIntf's defaults are not imposed: hosts stay as they are.
TC_OFFLOADS = {"gro": "gro", "txo": "tx", "rxo": "rx"}
#: TCIntf parameters with no linkem meaning (its qdisc flavour): warned about.
TC_IGNORED = ("speedup", "use_hfsc", "use_tbf", "latency_ms", "enable_ecn", "enable_red")
#: How long linkem may take to open its interfaces and socket.
START_TIMEOUT_S = 10.0
#: How long linkem may take to stop on SIGINT before it is killed.
STOP_TIMEOUT_S = 5.0
#: Interface names the kernel takes (IFNAMSIZ - 1).
MAX_IFNAME = 15

_serial = itertools.count(1)


def _decimal(x: float) -> str:
    """A number as plain decimal (linkem reads no exponents)."""
    return f"{x:.6f}".rstrip("0").rstrip(".")


def tc_words(bw: Optional[float] = None, delay: Union[str, None] = None,
             jitter: Union[str, None] = None, loss: Optional[float] = None,
             max_queue_size: Optional[int] = None) -> List[str]:
    """The linkem words for ``TCLink``'s parameters (see the module's table).

    Raises ``ValueError`` naming the parameter for a value ``TCLink`` would not
    mean the same way (a delay without unit, a loss over 100 %)."""
    words: List[str] = []
    if bw is not None:
        if isinstance(bw, bool) or not isinstance(bw, (int, float)) or not bw > 0:
            raise ValueError(f"bw={bw!r}: a rate in Mbit/s above 0 (bw=10 is 10 Mbit/s)")
        words += ["rate", f"{_decimal(bw)}mbit"]
    for name, value in (("delay", delay), ("jitter", jitter)):
        if value is not None and (not isinstance(value, str) or value.split() != [value]
                                  or value[-1].isdigit()):
            raise ValueError(f"{name}={value!r}: a time with its unit, e.g. '10ms'")
    if delay is not None or jitter is not None:
        words += ["delay", delay if delay is not None else "0ms"]
        if jitter is not None:
            words.append(jitter)
    if loss is not None and loss != 0:
        if isinstance(loss, bool) or not isinstance(loss, (int, float)) or not 0 < loss <= 100:
            raise ValueError(f"loss={loss!r}: a percentage, 0 to 100 (loss=1 is 1 %)")
        words += ["loss", f"{_decimal(loss)}%"]
    if max_queue_size is not None:
        if isinstance(max_queue_size, bool) or not isinstance(max_queue_size, int) \
                or max_queue_size < 1:
            raise ValueError(f"max_queue_size={max_queue_size!r}: packets, at least 1")
        words += ["queue", str(max_queue_size)]
    return words


def _split_params(params: Dict[str, Any], where: str,
                  offloads: Dict[str, bool]) -> Dict[str, Any]:
    """Takes the TC parameters out of ``params`` (the rest goes to Mininet's Intf):
    returns the ones that are words, adds the offload switches to ``offloads``."""
    taken = {k: params.pop(k) for k in TC_WORDS if k in params}
    if "disable_gro" in params:
        params["gro"] = not params.pop("disable_gro")
    for k in TC_OFFLOADS:
        if k in params:
            offloads[k] = bool(params.pop(k))
    for k in TC_IGNORED:
        if k in params:
            warn(f"*** LinkemLink: {where}{k}={params.pop(k)!r} has no meaning for linkem: "
                 "ignored (give linkem words with linkem=)\n")
    return taken


def _run(args: Sequence[str]) -> None:
    """Runs a set-up command; raises naming it and what it printed when it fails."""
    try:
        p = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, check=False)
    except FileNotFoundError as e:
        raise RuntimeError(f"{args[0]} not found (install iproute2 and ethtool)") from e
    if p.returncode != 0:
        raise RuntimeError(f"'{' '.join(args)}' failed ({p.returncode}): {p.stdout.strip()}")


def _linkem_bin(given: Optional[str]) -> str:
    path = given or os.environ.get("LINKEM_BIN") or shutil.which("linkem")
    if not path:
        raise RuntimeError("no linkem binary: give linkem_bin=, set LINKEM_BIN, or put "
                           "linkem on PATH (cargo build -p linkem-emu: target/debug/linkem)")
    return path


class LinkemLink(Link):  # type: ignore[misc]  # Mininet has no type hints
    """A Mininet ``Link`` whose frames cross ``linkem bridge`` (see the module doc).

    Extra keyword arguments beside ``Link``'s and ``TCLink``'s:
    ``linkem`` (linkem words for both directions, a string or a list),
    ``linkem_args`` (``linkem bridge`` options), ``linkem_bin`` (the binary),
    ``emu_prefix`` (the start of the emulator ends' names, default ``lkm``).
    """

    emu_prefix = "lkm"

    def __init__(self, node1: Any, node2: Any, port1: Optional[int] = None,
                 port2: Optional[int] = None, intfName1: Optional[str] = None,
                 intfName2: Optional[str] = None, addr1: Optional[str] = None,
                 addr2: Optional[str] = None, intf: Any = Intf, cls1: Any = None,
                 cls2: Any = None, params1: Optional[Dict[str, Any]] = None,
                 params2: Optional[Dict[str, Any]] = None, fast: bool = True,
                 linkem: Union[str, Sequence[str], None] = None,
                 linkem_args: Sequence[str] = (), linkem_bin: Optional[str] = None,
                 emu_prefix: Optional[str] = None, **params: Any) -> None:
        params1 = dict(params1) if params1 else {}
        params2 = dict(params2) if params2 else {}
        # Words first: a bad parameter fails before anything exists.
        offloads_both: Dict[str, bool] = {}
        both = _split_params(params, "", offloads_both)
        self.offloads1 = dict(offloads_both)
        self.offloads2 = dict(offloads_both)
        only_ab = _split_params(params1, "params1: ", self.offloads1)
        only_ba = _split_params(params2, "params2: ", self.offloads2)
        self.words: List[str] = tc_words(**both)
        if linkem is not None:
            self.words += join_words(linkem).split()
        self.words_a_to_b: List[str] = tc_words(**only_ab)
        self.words_b_to_a: List[str] = tc_words(**only_ba)
        self.binary = _linkem_bin(linkem_bin)
        prefix = emu_prefix if emu_prefix is not None else self.emu_prefix
        tag = f"{prefix}{os.getpid():x}x{next(_serial)}"
        self.emu_a, self.emu_b = f"{tag}a", f"{tag}b"
        if len(self.emu_a) > MAX_IFNAME:
            raise ValueError(f"emulator interface name {self.emu_a!r} is longer than "
                             f"{MAX_IFNAME} characters: use a shorter emu_prefix")
        self.name = f"{self.emu_a}-{self.emu_b}"
        self.linkem_args: List[str] = list(linkem_args)
        #: The control socket (None with ``--control none``).
        self.socket = _control_path(self.linkem_args, self.name)
        #: linkem's final ``--stats json`` line, once stopped.
        self.stats: Optional[Dict[str, Any]] = None
        self._nodes = (node1, node2)
        self._proc: "Optional[subprocess.Popen[bytes]]" = None
        self._log_out: Any = None
        self._log_err: Any = None
        self._deleted = False
        try:
            # fast=False asks Link to make the pair in the root namespace and move
            # it; this class always makes the pairs in place, so it passes fast.
            super().__init__(node1, node2, port1=port1, port2=port2, intfName1=intfName1,
                             intfName2=intfName2, addr1=addr1, addr2=addr2, intf=intf,
                             cls1=cls1, cls2=cls2, params1=params1, params2=params2,
                             fast=True, **params)
            for intf, offloads in ((self.intf1, self.offloads1), (self.intf2, self.offloads2)):
                _set_offloads(intf, offloads)
            self._start()
        except BaseException:
            self._teardown()
            raise

    # Mininet calls this from Link.__init__ with the names it chose.
    def makeIntfPair(self, intfname1: str, intfname2: str, addr1: Optional[str] = None,
                     addr2: Optional[str] = None, node1: Any = None, node2: Any = None,
                     deleteIntfs: bool = True) -> None:
        """Makes ``intfname1 <-veth-> E_a`` and ``E_b <-veth-> intfname2`` (the
        node ends in the nodes' namespaces, the E ends here)."""
        n1, n2 = self._nodes
        for emu, name, addr, node in ((self.emu_a, intfname1, addr1, n1),
                                      (self.emu_b, intfname2, addr2, n2)):
            peer = ["peer", "name", name] + (["address", addr] if addr else [])
            _run(["ip", "link", "add", "name", emu, "type", "veth", *peer,
                  "netns", str(node.pid)])
            _set_up_emulator_end(emu)

    def _start(self) -> None:
        args = [self.binary, "bridge", self.emu_a, self.emu_b, *self.words]
        if self.words_a_to_b:
            args += ["--a-to-b", *self.words_a_to_b]
        if self.words_b_to_a:
            args += ["--b-to-a", *self.words_b_to_a]
        if "--name" not in self.linkem_args:
            args += ["--name", self.name]
        if "--stats" not in self.linkem_args:
            args += ["--stats", "json"]
        args += self.linkem_args
        info(f"({' '.join(args[2:])}) ")
        # Files, not pipes: linkem never blocks on output nobody reads.
        self._log_out = tempfile.TemporaryFile(prefix="linkem-out-")
        self._log_err = tempfile.TemporaryFile(prefix="linkem-err-")
        self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._log_out,
                                      stderr=self._log_err)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"linkem bridge {self.emu_a} {self.emu_b} exited at start "
                                   f"({self._proc.returncode}): {self._stderr()}")
            if self.socket is None:
                # No control socket to ask: give it the time it takes to open.
                time.sleep(0.5)
                if self._proc.poll() is None:
                    return
                continue
            try:
                with Client(self.socket, timeout_s=1.0) as c:
                    c.ping()
                return
            except (OSError, CtlError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"linkem bridge {self.emu_a} {self.emu_b}: no control "
                                   f"socket at {self.socket} after {START_TIMEOUT_S} s: "
                                   f"{self._stderr()}")
            time.sleep(0.02)

    def client(self, timeout_s: float = 10.0) -> Client:
        """A client of this link's emulator, to change it while the network runs
        (``link.client().link("both", "delay 50ms")``)."""
        if self.socket is None:
            raise RuntimeError("this link's linkem runs with --control none")
        return Client(self.socket, timeout_s=timeout_s)

    def _stderr(self) -> str:
        if self._log_err is None:
            return ""
        self._log_err.seek(0)
        data: bytes = self._log_err.read()
        return data.decode("utf-8", "replace").strip()

    def _stop_linkem(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                warn(f"*** LinkemLink: linkem {self.name} did not stop on SIGINT: killed\n")
                proc.kill()
                proc.wait()
        if proc.returncode != 0:
            warn(f"*** LinkemLink: linkem {self.name} exited with {proc.returncode}: "
                 f"{self._stderr()}\n")
        if self._log_out is not None:
            self._log_out.seek(0)
            lines = [ln for ln in self._log_out.read().decode("utf-8", "replace").splitlines()
                     if ln.startswith("{")]
            if lines:
                try:
                    self.stats = json.loads(lines[-1])
                except ValueError:
                    pass

    def _teardown(self) -> None:
        """Stops linkem and deletes both pairs; safe to call again."""
        self._stop_linkem()
        for emu in (self.emu_a, self.emu_b):
            # Deleting one end of a veth deletes the pair, the node's end too.
            subprocess.run(["ip", "link", "del", emu], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
        for f in (self._log_out, self._log_err):
            if f is not None:
                f.close()
        self._log_out = self._log_err = None

    def delete(self) -> None:
        """Stops linkem (its final counts in :attr:`stats`) and deletes the link."""
        if self._deleted:
            return
        self._deleted = True
        self._teardown()
        # The node ends went with their pairs; tell the nodes they are gone.
        for intf in (getattr(self, "intf1", None), getattr(self, "intf2", None)):
            if intf is not None and intf.node is not None:
                intf.node.delIntf(intf)
                intf.link = None
        self.intf1 = self.intf2 = None

    def stop(self) -> None:
        """Mininet's net.stop() calls this for every link."""
        self.delete()


def _control_path(args: Sequence[str], name: str) -> Optional[str]:
    """Where linkem puts its control socket: ``--control PATH``, none for
    ``--control none``, else the default for ``--name`` (``name`` if not given)."""
    args = list(args)
    if "--control" in args:
        i = args.index("--control")
        value = args[i + 1] if i + 1 < len(args) else None
        if value is None:
            raise ValueError("linkem_args: --control needs PATH or none")
        return None if value == "none" else value
    if "--name" in args:
        i = args.index("--name")
        if i + 1 < len(args):
            name = args[i + 1]
    return str(default_socket_path(name))


def _set_offloads(intf: Any, offloads: Dict[str, bool]) -> None:
    """``gro``/``txo``/``rxo`` as TCIntf sets them, on the node's interface."""
    if not offloads:
        return
    words = " ".join(f"{TC_OFFLOADS[k]} {'on' if on else 'off'}" for k, on in offloads.items())
    out = intf.cmd(f"ethtool -K {intf.name} {words} && echo linkem-ok")
    if "linkem-ok" not in out:
        raise RuntimeError(f"ethtool -K {intf.name} {words} failed: {out.strip()}")


def _set_up_emulator_end(ifname: str) -> None:
    """The emulator's end carries no traffic of its own: no IPv6 (router
    solicitations, DAD, MLD), no ARP; GRO off so that linkem takes frames as
    they were sent; then up."""
    ipv6 = f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6"
    if os.path.exists(ipv6):
        with open(ipv6, "w", encoding="ascii") as f:
            f.write("1")
    _run(["ip", "link", "set", ifname, "arp", "off"])
    _run(["ethtool", "-K", ifname, "gro", "off"])
    _run(["ip", "link", "set", ifname, "up"])
