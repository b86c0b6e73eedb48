"""Which process holds which TCP socket on a port, read from /proc (Linux): a test of a server
with several worker processes can see which worker accepted which connection."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

ESTABLISHED = "01"
LISTEN = "0A"


def _inodes(state: str, port: int) -> set[str]:
    """The inodes of the sockets on local ``port`` in ``state`` (both address families)."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, socket_state, inode = fields[1], fields[3], fields[9]
            if socket_state == state and int(local.rsplit(":", 1)[1], 16) == port:
                found.add(inode)
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes: set[str] = set()
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def holders(pids: list[int], port: int, state: str) -> Counter[int]:
    """How many sockets on local ``port`` in ``state`` each of ``pids`` holds (those holding
    none are left out)."""
    wanted = _inodes(state, port)
    return Counter({pid: n for pid in pids if (n := len(_socket_inodes(pid) & wanted))})
