"""The client address the throttles key on: the peer, unless the peer is a trusted proxy."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from inner_plane.http.guards import RateLimitedLog, is_loopback_host
from inner_plane.sources.peers import client_address

TRUSTED = "127.0.0.0/8, 10.9.0.0/16"


def test_without_trusted_proxies_the_peer_is_the_client() -> None:
    assert client_address("127.0.0.1", "203.0.113.9", "") == "127.0.0.1"
    assert client_address("198.51.100.1", None, TRUSTED) == "198.51.100.1"
    # A peer that is not a trusted proxy is believed about nothing.
    assert client_address("198.51.100.1", "203.0.113.9", TRUSTED) == "198.51.100.1"


def test_behind_trusted_proxies_the_right_most_untrusted_hop_is_the_client() -> None:
    assert client_address("127.0.0.1", "203.0.113.9", TRUSTED) == "203.0.113.9"
    chain = "1.2.3.4, 203.0.113.9, 10.9.0.7"
    assert client_address("127.0.0.1", chain, TRUSTED) == "203.0.113.9"
    # A hop that is not an address stops the walk at the last proxy that reported it.
    assert client_address("127.0.0.1", "<b>evil</b>, 10.9.0.7", TRUSTED) == "10.9.0.7"
    assert client_address("127.0.0.1", "[2001:db8::1]:443", TRUSTED) == "2001:db8::1"
    assert client_address("127.0.0.1", "203.0.113.9:8080", TRUSTED) == "203.0.113.9"


@given(st.text(max_size=400))
def test_whatever_the_header_the_client_is_an_address_or_the_peer(forwarded: str) -> None:
    found = client_address("127.0.0.1", forwarded, TRUSTED)
    assert found is not None and len(found) <= 64 and "," not in found and " " not in found


def test_loopback_host_names() -> None:
    for host in ("localhost", "LOCALHOST:8700", "127.0.0.1", "127.1.2.3:80", "[::1]:8700",
                 "app.localhost"):  # fmt: skip
        assert is_loopback_host(host), host
    for host in ("", "evil.example", "127.0.0.1.evil.example", "[::2]", "localhost.evil"):
        assert not is_loopback_host(host), host


def test_one_line_per_distinct_error_per_minute() -> None:
    log = RateLimitedLog()
    assert log.admit("a", now=0.0) == (True, 0)
    assert all(log.admit("a", now=float(n)) == (False, 0) for n in range(1, 59))
    assert log.admit("b", now=1.0) == (True, 0)
    assert log.admit("a", now=61.0) == (True, 58)  # the next line says how many were left out
