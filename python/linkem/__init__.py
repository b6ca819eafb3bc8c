"""A Python client of linkem, the network link emulator.

Connect to a running ``linkem bridge`` through its control socket, send it any
request of the control protocol and get the parsed replies::

    import linkem

    with linkem.connect(name="lab") as c:
        c.link("both", "delay 30ms rate 10mbit loss 1%")
        print(c.stats()["directions"][0]["received"])
        try:
            c.link("a-to-b", "delay 30xs")
        except linkem.CtlError as e:
            print(e.position, e.word)        # 4 30xs

A lab's one socket serves all its links: ``linkem.Lab("demo").link(
"r1:eth1--r2:eth1").set(delay="30ms")`` changes that link's delay only.

``linkem.mininet.LinkemLink`` (imported only when Mininet is installed) puts a
linkem link between two Mininet nodes. Pure Python, standard library only.
"""

from .client import (
    DEFAULT_TIMEOUT_S,
    MAX_LINE_BYTES,
    PROTOCOL_VERSION,
    SOCKET_DIR,
    Batch,
    Client,
    CtlError,
    Lab,
    LabBatch,
    LabLink,
    Watch,
    connect,
    default_socket_path,
    list_emulators,
)

__version__ = "0.1.0"

__all__ = [
    "Batch",
    "Client",
    "CtlError",
    "DEFAULT_TIMEOUT_S",
    "Lab",
    "LabBatch",
    "LabLink",
    "MAX_LINE_BYTES",
    "PROTOCOL_VERSION",
    "SOCKET_DIR",
    "Watch",
    "connect",
    "default_socket_path",
    "list_emulators",
]
