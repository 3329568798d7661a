"""The small UDP DNS client behind discovery.nameserver, against a real DNS server on loopback
(dnslib) and against malformed answers."""

from __future__ import annotations

import asyncio
import struct

import pytest
from dnslib import CNAME, QTYPE, RR, A, DNSRecord

from gateway.observability.metrics import Metrics
from gateway.routing import AffinityPicker
from gateway.routing.discovery import DnsReplicas, nameserver_resolver
from gateway.routing.dns_query import DnsError, decode_answer, encode_query, query
from gateway.settings import DiscoverySettings, RoutingSettings
from tests.support.dns_server import Zone, dns_server

NAME = "engines.flashbox.test"


def test_the_query_is_what_a_dns_server_reads() -> None:
    parsed = DNSRecord.parse(encode_query(NAME + ".", "AAAA", 0x1234))
    assert parsed.header.id == 0x1234
    assert parsed.header.rd == 1
    assert str(parsed.q.qname) == NAME + "."
    assert parsed.q.qtype == QTYPE.AAAA


def test_answers_are_decoded_and_checked() -> None:
    request = DNSRecord.question(NAME)
    reply = request.reply()
    reply.add_answer(RR(NAME, QTYPE.CNAME, rdata=CNAME("other.test")))
    reply.add_answer(RR(NAME, QTYPE.A, rdata=A("10.0.0.7")))
    data = reply.pack()
    assert decode_answer(data, "A", request.header.id) == ["10.0.0.7"]
    with pytest.raises(DnsError, match="not the answer"):
        decode_answer(data, "A", request.header.id ^ 1)
    for cut in (5, 20, len(data) - 2):
        with pytest.raises(DnsError):
            decode_answer(data[:cut], "A", request.header.id)
    # SERVFAIL is an error; NXDOMAIN is an answer with no address.
    failed = bytearray(data)
    struct.pack_into("!H", failed, 2, 0x8182)
    with pytest.raises(DnsError, match="rcode 2"):
        decode_answer(bytes(failed), "A", request.header.id)
    struct.pack_into("!H", failed, 2, 0x8183)
    assert decode_answer(bytes(failed), "A", request.header.id) == []
    # A name without its end (more labels than a name may have) is an error.
    looped = bytearray(struct.pack("!HHHHHH", 7, 0x8180, 1, 0, 0, 0)) + b"\x01a" * 200
    with pytest.raises(DnsError):
        decode_answer(bytes(looped), "A", 7)


def test_names_that_are_not_dns_names_are_refused() -> None:
    for bad in ("", "a..b", "x" * 64 + ".test", "ünï.test"):
        with pytest.raises(DnsError):
            encode_query(bad, "A", 1)


async def test_a_real_server_answers_and_changes() -> None:
    zone = Zone()
    zone.set(NAME, ["127.0.0.2"])
    with dns_server(zone) as server:
        assert await query(server, NAME, "A") == ["127.0.0.2"]
        assert await query(server, NAME, "AAAA") == []
        assert await query(server, "other.flashbox.test", "A") == []
        zone.set(NAME, ["127.0.0.2", "127.0.0.3"])
        assert sorted(await nameserver_resolver(server, "any")(NAME)) == [
            "127.0.0.2",
            "127.0.0.3",
        ]


async def test_discovery_through_a_real_server() -> None:
    zone = Zone()
    zone.set(NAME, ["127.0.0.2"])
    with dns_server(zone) as (host, port):
        settings = DiscoverySettings(dns_name=NAME, nameserver=f"{host}:{port}", port=30000)
        picker = AffinityPicker([], RoutingSettings(), lambda *counted: None)
        discovery = DnsReplicas(
            settings,
            nameserver_resolver((host, port), "ipv4"),
            Metrics(process_metrics=False),
            picker.add,
            picker.remove,
        )
        await discovery.refresh()
        zone.set(NAME, ["127.0.0.3"])
        await discovery.refresh()
    assert [(r.name, r.gone) for r in picker.replicas] == [
        ("127.0.0.2:30000", True),
        ("127.0.0.3:30000", False),
    ]


async def test_no_server_is_an_error_or_a_timeout() -> None:
    # Nothing listens there: the kernel's port-unreachable arrives as an error, or nothing
    # arrives and the caller's deadline ends the wait.
    with pytest.raises((OSError, TimeoutError)):
        async with asyncio.timeout(0.5):
            await query(("127.0.0.1", 9), NAME, "A")
