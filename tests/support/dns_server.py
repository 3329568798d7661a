"""A DNS server on loopback for tests: answers A queries for the names it is given, with a set
of addresses the test can change while it runs (dnslib, in a thread of the test process)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from dnslib import QTYPE, RCODE, RR, A, DNSRecord
from dnslib.server import (
    BaseResolver,
    DNSHandler,
    DNSLogger,
    DNSServer,
)


@dataclass
class Zone(BaseResolver):  # type: ignore[misc]  # dnslib is untyped
    """name -> IPv4 addresses; other names answer NXDOMAIN, other record types no answer."""

    records: dict[str, list[str]] = field(default_factory=dict)
    ttl: int = 1
    queries: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def set(self, name: str, addresses: Iterable[str]) -> None:
        with self._lock:
            self.records[name.rstrip(".").lower()] = list(addresses)

    def resolve(self, request: DNSRecord, handler: DNSHandler) -> DNSRecord:
        reply = request.reply()
        name = str(request.q.qname).rstrip(".").lower()
        with self._lock:
            self.queries += 1
            addresses = self.records.get(name)
        if addresses is None:
            reply.header.rcode = RCODE.NXDOMAIN
        elif request.q.qtype == QTYPE.A:
            for address in addresses:
                reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(address), ttl=self.ttl))
        return reply


@contextmanager
def dns_server(zone: Zone, host: str = "127.0.0.1") -> Iterator[tuple[str, int]]:
    """Serves `zone` over UDP on a free port of `host`; yields (host, port)."""
    server = DNSServer(zone, address=host, port=0, logger=DNSLogger(logf=lambda _: None))
    server.start_thread()
    try:
        yield host, server.server.server_address[1]
    finally:
        server.stop()
        server.server.server_close()
