"""A listening socket per server process for `inner-plane serve --workers N` (Linux).

uvicorn's supervisor binds one socket in its parent and hands it to every worker, and a worker
woken by a connection accepts every connection then waiting: connections a client or a proxy
opens at once all went to one worker (16 of 16 in 5 of 6 bursts of `bench.http`), which then
served them on one core while the others idled. Here each worker binds a socket of its own with
``SO_REUSEPORT``, and the kernel spreads new connections over the workers' sockets by their
addresses.

uvicorn's supervisor is kept (it restarts a worker that dies, answers SIGHUP, SIGTTIN and
SIGTTOU): it pickles the sockets it is given into each worker it spawns, and :class:`OwnListener`
pickles as the recipe for a socket rather than as one, so each worker, a restarted one too,
unpickles a socket of its own. The parent holds a bound socket of the group that never listens,
so the port is taken and checked before any worker starts, and receives no connection.

What ``SO_REUSEPORT`` changes: a connection waiting in a worker's own queue when that worker
exits (a kill, a SIGHUP restart) is reset instead of going to another worker (Linux 5.14 and
later migrate them with ``net.ipv4.tcp_migrate_req = 1``); and another process of the same user
that binds the port with ``SO_REUSEPORT`` joins the group. Elsewhere than Linux (macOS hands
every connection to the last socket bound) the workers share one socket, as uvicorn's do.
"""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass
from typing import Any


def spreads_connections() -> bool:
    """Whether the kernel spreads connections over sockets sharing a port (Linux)."""
    return sys.platform == "linux" and hasattr(socket, "SO_REUSEPORT")


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` with ``SO_REUSEPORT``, not yet listening (asyncio
    listens on it when the server starts). IPv6 only for an IPv6 address, as uvicorn binds: a
    name such as ``localhost`` binds its IPv4 address whatever the resolver lists first."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    _, kind, proto, _, address = socket.getaddrinfo(
        host, port, family=family, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


@dataclass(frozen=True)
class OwnListener:
    """Stands in uvicorn's list of sockets: pickled into a worker, it is a socket of its own."""

    host: str
    port: int

    def __reduce__(self) -> tuple[Any, tuple[str, int]]:
        return reuse_port_socket, (self.host, self.port)
