"""The socket each `serve --workers N` worker listens on (inner_plane.http.listeners)."""

from __future__ import annotations

import pickle
import socket

import pytest

from inner_plane.http.listeners import OwnListener, reuse_port_socket, spreads_connections

pytestmark = pytest.mark.skipif(not spreads_connections(), reason="SO_REUSEPORT spreads on Linux")


def test_sockets_made_by_the_recipe_share_a_port_and_each_listens() -> None:
    first = reuse_port_socket("127.0.0.1", 0)
    port = first.getsockname()[1]
    second = reuse_port_socket("127.0.0.1", port)
    try:
        for sock in (first, second):
            sock.listen()
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
            assert sock.getsockname() == ("127.0.0.1", port)
    finally:
        first.close()
        second.close()


def test_the_stand_in_unpickles_as_a_socket_of_its_own_each_time() -> None:
    held = reuse_port_socket("127.0.0.1", 0)
    port = held.getsockname()[1]
    recipe = pickle.dumps(OwnListener("127.0.0.1", port))
    one, two = pickle.loads(recipe), pickle.loads(recipe)
    try:
        assert isinstance(one, socket.socket) and isinstance(two, socket.socket)
        assert one.fileno() != two.fileno()
        assert one.getsockname()[1] == two.getsockname()[1] == port
    finally:
        for sock in (held, one, two):
            sock.close()


def test_a_port_a_plain_listener_holds_is_refused() -> None:
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        with pytest.raises(OSError, match="in use"):
            reuse_port_socket("127.0.0.1", taken.getsockname()[1])
    finally:
        taken.close()


def test_a_name_binds_ipv4_as_uvicorn_binds_it() -> None:
    sock = reuse_port_socket("localhost", 0)
    try:
        assert sock.family == socket.AF_INET
    finally:
        sock.close()
