"""A request body's JSON with its large base64 strings kept away from orjson (hop 1).

orjson parses about 1 GB/s and holds the GIL throughout, so the 5.9 MB body of a request with a
1080p PNG holds the event loop ~7 ms whether it is parsed on the loop or in a worker thread
(there the loop waits for the GIL: its longest stall was no shorter). Nearly all of such a body
is one string of base64, which needs none of a parser's work: each such string is cut out of
the body (found with bytes.find, its characters checked by pybase64's SIMD decoder), the rest is
parsed, and each string is put back where its placeholder landed: 0.9 ms instead of 5.6 for
that body alone; in the gateway on a VM, where the string's fresh memory costs ~3 ms of page
faults either way, 5-6 ms instead of 7.

A string is cut only where its raw text certainly is its value: an image data URL
("data:image/<type>;base64,...") or the value of a "data" key (Anthropic's base64 image
source), whose characters after the header are all standard base64, so it holds no quote, no
backslash and no control character. Its opening quote follows no backslash, so in valid JSON
it is a delimiter, and an opening one: after a closing quote only `, : ] }` or whitespace may
come, never base64. The placeholder is a string of the same kind, so the rest parses exactly
when the body does; when it does not, or a placeholder is not found as a value (a key), the
whole body is parsed as before: a bad body gets orjson's own error, positions and all.
"""

from __future__ import annotations

import binascii
import re
import secrets
from typing import Any

import orjson
import pybase64

_DATA = b'"data'
_DATA_URL_HEADER = re.compile(rb"data:image/[A-Za-z0-9!#$&^_.+-]+;base64,")
# A "data" key, then its value's opening quote (JSON's whitespace only).
_KEY_TO_VALUE = re.compile(rb'"[ \t\n\r]*:[ \t\n\r]*"')
# Candidates ("data" that turns out to be neither) cost ~1 us each in Python; at most one per
# this many bytes keeps the search under a quarter of the parse it saves, for any body.
_BYTES_PER_CANDIDATE = 4096
# Putting the strings back walks the rest of the parsed body in Python (~1 us a container,
# ~2 ms for 1 MB of agentic conversation, more than orjson parses a 1 MB image in), so the
# strings are cut out only when they are at least this many times the rest: then the walk,
# over at most one value per two bytes of the rest, costs less than the parse it saves,
# whatever the rest holds. A short prompt with its images passes; a long conversation with
# a screenshot is parsed by orjson whole, as it was (and only its head is searched).
_MIN_SHARE = 32
# Base64 characters checked at a time (a multiple of 4): 48 KiB of output, reused memory.
_CHECK_CHARS = 1 << 16
_PAD = ord("=")


def loads(body: bytes | bytearray, min_bytes: int) -> Any:
    """orjson.loads(body), with base64 strings of `min_bytes` or more cut out before parsing;
    raises orjson.JSONDecodeError as orjson.loads(body) would."""
    if len(body) < min_bytes:
        return orjson.loads(body)
    spans = find_spans(body, min_bytes)
    if not spans:
        return orjson.loads(body)
    nonce = secrets.token_hex(8)
    strings: dict[str, str] = {}
    rest: list[bytes | bytearray] = []
    at = 0
    view = memoryview(body)
    for start, end in spans:
        name = f"lifted:{nonce}:{len(strings)}"
        strings[name] = str(view[start:end], "ascii")
        rest += (body[at:start], name.encode())
        at = end
    rest.append(body[at:])
    try:
        value = orjson.loads(b"".join(rest))
    except orjson.JSONDecodeError:
        return orjson.loads(body)
    if _put_back(value, strings) != len(strings):
        return orjson.loads(body)
    return value


def find_spans(body: bytes | bytearray, min_bytes: int) -> list[tuple[int, int]]:
    """(start, end) of each string to cut, between its quotes, in body order; none unless
    they are at least _MIN_SHARE times the rest of the body."""
    spans: list[tuple[int, int]] = []
    left = len(body) // (_MIN_SHARE + 1)  # bytes the rest may still take
    candidates = max(1, len(body) // _BYTES_PER_CANDIDATE)
    done = 0  # where the rest resumes: the end of the last string cut
    at = body.find(_DATA, 0, left + len(_DATA))
    while at != -1 and candidates > 0:
        candidates -= 1
        span = _span_at(body, at, min_bytes)
        if span is not None:
            spans.append(span)
            left -= span[0] - done
            done, at = span[1], span[1] + 1
        else:
            at += len(_DATA)
        # A string that starts past what the rest may take cannot make the share.
        at = body.find(_DATA, at, done + left + len(_DATA))
    return spans if spans and len(body) - done <= left else []


def _span_at(body: bytes | bytearray, at: int, min_bytes: int) -> tuple[int, int] | None:
    """The string to cut for the `"data` at `at`, if it is one."""
    header = _DATA_URL_HEADER.match(body, at + 1)
    if header is not None:
        if at > 0 and body[at - 1] == ord("\\"):
            return None  # an escaped quote: inside some other string
        start, payload = at + 1, header.end()
    else:
        key = _KEY_TO_VALUE.match(body, at + len(_DATA))
        if key is None:
            return None
        start = payload = key.end()
    end = body.find(b'"', payload)
    if end - start < min_bytes:  # also end == -1: no closing quote
        return None
    return (start, end) if _is_base64(body, payload, end) else None


def _is_base64(body: bytes | bytearray, start: int, end: int) -> bool:
    """Whether body[start:end] is standard base64 with its padding and nothing else.

    Decoded a chunk at a time (pybase64: SIMD) into output that is thrown away: the output
    of one whole image would be megabytes of fresh memory, whose page faults cost the loop
    more than the decoding (~2.5 ms for a 1080p PNG on a VM). Chunks hold whole 4-character
    groups, so they decode exactly when the whole does, but for padding, which only the last
    may end with."""
    if (end - start) % 4:
        return False
    view = memoryview(body)
    try:
        for at in range(start, end, _CHECK_CHARS):
            stop = min(at + _CHECK_CHARS, end)
            if stop < end and body[stop - 1] == _PAD:
                return False
            pybase64.b64decode(view[at:stop], validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _put_back(value: Any, strings: dict[str, str]) -> int:
    """Each placeholder found as a value replaced by its string; how many were found.

    Level by level, without recursion (the depth bound is checked after parsing); a string's
    length is checked before its hash, which would read all of a long text."""
    sizes = {len(name) for name in strings}
    found = 0
    level: list[Any] = [value] if isinstance(value, (dict, list)) else []
    while level and found < len(strings):
        deeper: list[Any] = []
        for node in level:
            pairs = node.items() if isinstance(node, dict) else enumerate(node)
            hits = [
                (key, child)
                for key, child in pairs
                if type(child) is str and len(child) in sizes and child in strings
            ]
            for key, child in hits:
                node[key] = strings[child]
            found += len(hits)
            children = node.values() if isinstance(node, dict) else node
            deeper += [child for child in children if isinstance(child, (dict, list))]
        level = deeper
    return found
