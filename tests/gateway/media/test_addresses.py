"""The address policy: only global unicast, also behind IPv6 wrappers."""

from __future__ import annotations

import pytest

from gateway.media.addresses import denied_because, parse_address, resolve_with_getaddrinfo

DENIED = [
    "127.0.0.1", "127.8.9.10", "0.0.0.0", "10.1.2.3", "172.16.0.1", "192.168.1.1",
    "100.64.0.1",  # CGNAT
    "169.254.169.254",  # cloud metadata (link-local)
    "169.254.170.2",  # ECS task metadata
    "224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255",
    "192.0.2.10", "198.51.100.1", "203.0.113.5",  # documentation
    "198.18.0.1",  # benchmarking
    "::1", "::", "fe80::1", "fc00::1", "fd00:ec2::254",  # ULA (AWS IPv6 metadata)
    "ff02::1", "fec0::1", "2001:db8::1",
    "::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:10.0.0.1", "::ffff:0.0.0.0",
    "::127.0.0.1",  # IPv4-compatible (deprecated, reserved)
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "2002:7f00:1::1",  # 6to4 of 127.0.0.1
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
]  # fmt: skip
ALLOWED = ["93.184.216.34", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "2a00:1450:4001::64",
           "::ffff:93.184.216.34", "2002:5db8:d822::1"]  # fmt: skip


@pytest.mark.parametrize("text", DENIED)
def test_non_global_addresses_are_denied(text: str) -> None:
    address = parse_address(text)
    assert address is not None
    assert denied_because(address) is not None


@pytest.mark.parametrize("text", ALLOWED)
def test_global_addresses_pass(text: str) -> None:
    address = parse_address(text)
    assert address is not None
    assert denied_because(address) is None


def test_mapped_forms_name_the_inner_address() -> None:
    address = parse_address("::ffff:127.0.0.1")
    assert address is not None
    why = denied_because(address)
    assert why is not None
    assert "127.0.0.1 is a loopback address" in why


def test_scoped_link_local_parses_and_is_denied() -> None:
    address = parse_address("fe80::1%eth0")
    assert address is not None
    assert denied_because(address) is not None


def test_not_an_address() -> None:
    assert parse_address("example.com") is None
    assert parse_address("2130706433") is None  # integer form: resolved, then checked


async def test_default_resolver_needs_no_network_for_literals() -> None:
    assert await resolve_with_getaddrinfo("127.0.0.1", 443) == ["127.0.0.1"]
