"""Who is on the other end of a connection, as far as the server can know it.

The throttles are keyed on this address, so it must be something the client cannot write: the
TCP peer. A reverse proxy in front of the API makes every peer the proxy; only a proxy listed
in ``INNER_PLANE_TRUSTED_PROXIES`` is believed about the client, and then the client is the
right-most ``X-Forwarded-For`` hop that is not itself a trusted proxy (every hop to its left was
written by someone the proxies did not vouch for). uvicorn's own X-Forwarded-For handling is
off (``inner-plane serve``), so the peer reaching the app is the socket's.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
# An X-Forwarded-For hop is only an address: anything longer is not one.
_MAX_HOP = 64
_MAX_HOPS = 32


@functools.cache
def trusted_networks(setting: str) -> tuple[Network, ...]:
    """The networks of INNER_PLANE_TRUSTED_PROXIES (validated by the settings)."""
    return tuple(
        ipaddress.ip_network(part.strip(), strict=False)
        for part in setting.split(",")
        if part.strip()
    )


def _address(text: str) -> Address | None:
    text = text.strip()
    if not text or len(text) > _MAX_HOP:
        return None
    if text.startswith("["):  # [v6]:port
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:  # v4:port
        text = text.partition(":")[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _trusted(address: Address, networks: Iterable[Network]) -> bool:
    return any(address in network for network in networks)


def client_address(peer: str | None, forwarded_for: str | None, trusted: str) -> str | None:
    """The client's address: ``peer`` unless it is a trusted proxy; then the right-most
    X-Forwarded-For hop that is not trusted (a malformed hop ends the walk: it is the client
    as far as can be told, so it is keyed as the proxy that reported it)."""
    networks = trusted_networks(trusted)
    if peer is None or not networks or forwarded_for is None:
        return peer
    current = _address(peer)
    if current is None or not _trusted(current, networks):
        return peer
    for hop in reversed(forwarded_for.split(",")[-_MAX_HOPS:]):
        address = _address(hop)
        if address is None:
            return str(current)
        current = address
        if not _trusted(address, networks):
            return str(address)
    return str(current)
