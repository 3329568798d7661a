"""Which network addresses an image may be fetched from, and the default name resolver.

Only global unicast addresses pass. Refused: loopback, private (RFC 1918, IPv6 ULA),
shared/CGNAT, link-local (169.254.169.254 and the other cloud metadata addresses live
there), multicast, reserved, unspecified, and the same behind an IPv6 wrapper: IPv4-mapped
(::ffff:127.0.0.1), NAT64 (64:ff9b::/96), 6to4 (2002::/16) and Teredo.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable

# (host, port) -> the host's addresses as text, in the resolver's order.
HostResolver = Callable[[str, int], Awaitable[list[str]]]

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_address(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def denied_because(address: IPAddress) -> str | None:
    """Why a fetch may not connect to `address` (a short phrase), or None when it may."""
    for candidate in _embedded(address):
        why = _denied(candidate)
        if why is not None:
            return f"{why} (inside {address})"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        # ::ffff:a.b.c.d is a.b.c.d on the wire (Python counts all of ::ffff:0:0/96 private).
        return None
    return _denied(address)


def _embedded(address: IPAddress) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address reaches through a wrapper."""
    found: list[ipaddress.IPv4Address] = []
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            found.append(address.ipv4_mapped)
        if address.sixtofour is not None:
            found.append(address.sixtofour)
        if address.teredo is not None:
            found.extend(address.teredo)
        if address in _NAT64:
            found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def _denied(address: IPAddress) -> str | None:
    # The named checks first, for a useful message; is_global last catches the rest
    # (CGNAT 100.64/10, documentation and benchmarking ranges, ...).
    if address.is_unspecified:
        return f"{address} is unspecified"
    if address.is_loopback:
        return f"{address} is a loopback address"
    if address.is_link_local:
        return f"{address} is link-local (cloud metadata lives there)"
    if address.is_multicast:
        return f"{address} is multicast"
    if address.is_private:
        return f"{address} is a private address"
    if address.is_reserved:
        return f"{address} is reserved"
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return f"{address} is site-local"
    if not address.is_global:
        return f"{address} is not a global address"
    return None


async def resolve_with_getaddrinfo(host: str, port: int) -> list[str]:
    """The host's addresses via the event loop's getaddrinfo (run off the loop by asyncio)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    # A scoped IPv6 address ("fe80::1%eth0") keeps its scope; parse_address handles it.
    return list(dict.fromkeys(str(info[4][0]) for info in infos))
