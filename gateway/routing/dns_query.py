"""One DNS question over UDP to a given server: the A or AAAA addresses of a name.

For `discovery.nameserver` only (tests, or a server the system resolver does not use); the
default is the system resolver (gateway/routing/discovery.py). Deliberately small: one question,
no recursion of its own (it asks for it), no TCP fallback, no search list. A truncated answer
gives the addresses that fit (about 30 A records in 512 bytes); `discovery.max_replicas` takes
fewer than that anyway in a usual pool.
"""

from __future__ import annotations

import asyncio
import ipaddress
import secrets
import struct
from typing import Literal

RecordType = Literal["A", "AAAA"]
_QTYPE: dict[RecordType, int] = {"A": 1, "AAAA": 28}
_RDATA_BYTES: dict[RecordType, int] = {"A": 4, "AAAA": 16}
_CLASS_IN = 1
_FLAG_RESPONSE = 0x8000
_FLAG_RECURSION_DESIRED = 0x0100
_RCODE_NXDOMAIN = 3
# A name has at most 127 labels; more jumps than that is a compression loop.
_MAX_NAME_STEPS = 128


class DnsError(OSError):
    """The server answered with an error, or with something that is not a DNS answer."""


def encode_query(name: str, record: RecordType, query_id: int) -> bytes:
    try:
        labels = [label.encode("ascii") for label in name.rstrip(".").split(".")]
    except UnicodeEncodeError as exc:
        raise DnsError(f"{name!r} is not an ASCII DNS name (IDNA-encode it)") from exc
    if not all(labels) or any(len(label) > 63 for label in labels):
        raise DnsError(f"{name!r} is not a DNS name")
    encoded = b"".join(bytes([len(label)]) + label for label in labels)
    if len(encoded) > 254:
        raise DnsError(f"{name!r} is longer than a DNS name may be")
    header = struct.pack("!HHHHHH", query_id, _FLAG_RECURSION_DESIRED, 1, 0, 0, 0)
    return header + encoded + b"\0" + struct.pack("!HH", _QTYPE[record], _CLASS_IN)


def decode_answer(data: bytes, record: RecordType, query_id: int) -> list[str]:
    """The addresses of type `record` in the answer section; none for NXDOMAIN."""
    try:
        answer_id, flags, questions, answers = struct.unpack_from("!HHHH", data)
        if answer_id != query_id or not flags & _FLAG_RESPONSE:
            raise DnsError("not the answer to this query")
        rcode = flags & 0xF
        if rcode == _RCODE_NXDOMAIN:
            return []
        if rcode:
            raise DnsError(f"DNS server answered rcode {rcode}")
        offset = 12
        for _ in range(questions):
            offset = _skip_name(data, offset) + 4
        addresses: list[str] = []
        for _ in range(answers):
            offset = _skip_name(data, offset)
            rtype, rclass, _ttl, length = struct.unpack_from("!HHIH", data, offset)
            offset += 10
            rdata = data[offset : offset + length]
            offset += length
            if len(rdata) != length:
                raise DnsError("truncated record")
            if rtype == _QTYPE[record] and rclass == _CLASS_IN:
                if length != _RDATA_BYTES[record]:
                    raise DnsError(f"{record} record of {length} bytes")
                addresses.append(str(ipaddress.ip_address(bytes(rdata))))
        return addresses
    except struct.error as exc:
        raise DnsError("truncated DNS answer") from exc


def _skip_name(data: bytes, offset: int) -> int:
    for _ in range(_MAX_NAME_STEPS):
        if offset >= len(data):
            raise DnsError("truncated name")
        length = data[offset]
        if length == 0:
            return offset + 1
        if length & 0xC0 == 0xC0:
            # A compression pointer ends the name where it stands.
            if offset + 2 > len(data):
                raise DnsError("truncated name")
            return offset + 2
        offset += 1 + length
    raise DnsError("name too long")


class _Exchange(asyncio.DatagramProtocol):
    def __init__(self, answered: asyncio.Future[bytes], query_id: int) -> None:
        self._answered = answered
        self._query_id = query_id

    def datagram_received(self, data: bytes, addr: object) -> None:
        # Anything that is not the answer to this query (a late answer to an earlier one) is
        # ignored, not taken as the answer.
        ours = len(data) >= 2 and int.from_bytes(data[:2], "big") == self._query_id
        if ours and not self._answered.done():
            self._answered.set_result(data)

    def error_received(self, exc: Exception) -> None:
        if not self._answered.done():
            self._answered.set_exception(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._answered.done():
            self._answered.set_exception(exc or DnsError("socket closed before the answer"))


async def query(server: tuple[str, int], name: str, record: RecordType) -> list[str]:
    """Ask `server` (host, port) for `name`'s `record` addresses. The caller bounds the wait."""
    loop = asyncio.get_running_loop()
    query_id = secrets.randbits(16)
    message = encode_query(name, record, query_id)
    answered: asyncio.Future[bytes] = loop.create_future()
    transport, _ = await loop.create_datagram_endpoint(
        lambda: _Exchange(answered, query_id), remote_addr=server
    )
    try:
        transport.sendto(message)
        data = await answered
    finally:
        transport.close()
    return decode_answer(data, record, query_id)
