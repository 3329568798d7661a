"""Strict parsing of `data:` URLs and their base64 payloads.

Only `data:image/<subtype>;base64,<payload>` is accepted: no other media type, no parameters,
no percent-encoded (non-base64) form. The payload must be standard-alphabet base64 with its
padding and nothing else (no whitespace or line breaks): the engine decodes it the same strict
way, and one canonical form keeps image digests and caching stable.

The payload is not copied out of the URL string on the event loop (megabytes): a DataUrl is
the string and where its payload starts, and only decoding (in a worker thread for a large
image) reads it.
"""

from __future__ import annotations

import binascii
import re
from dataclasses import dataclass

import pybase64

from gateway.media.errors import MediaError

# RFC 2045 token characters, restricted to what image subtypes use (png, jpeg, svg+xml, ...).
_HEADER = re.compile(
    r"data:([A-Za-z0-9!#$&^_.+-]+)/([A-Za-z0-9!#$&^_.+-]+);base64,", re.ASCII | re.IGNORECASE
)
# The shape of a header, for the message when the type or the encoding is wrong.
_ANY_HEADER = re.compile(r"data:([^,;]*)((?:;[^,;]*)*),", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class DataUrl:
    url: str  # the whole data URL, as the client sent it
    start: int  # where the base64 payload starts in it
    media_type: str  # lower case, e.g. "image/png"

    @property
    def payload_length(self) -> int:
        return len(self.url) - self.start


def parse_data_url(url: str, where: str) -> DataUrl:
    """The data URL's type and where its payload starts; MediaError when it is not an image
    in base64."""
    header = _HEADER.match(url)
    if header is None:
        shape = _ANY_HEADER.match(url)
        if shape is not None and not shape.group(1).strip().lower().startswith("image"):
            media_type = shape.group(1) or "text/plain (none given)"
            raise MediaError(
                "unsupported_image_type",
                where,
                f"the data URL's type is {_quote(media_type)}; only image/* types are accepted "
                "(data:image/png;base64,...).",
            )
        raise MediaError(
            "malformed_data_url",
            where,
            "the data URL must have the form data:image/<type>;base64,<payload> (for example "
            "data:image/png;base64,iVBOR...); parameters and non-base64 data URLs are not "
            "accepted.",
        )
    kind, subtype = header.group(1).lower(), header.group(2).lower()
    if kind != "image":
        raise MediaError(
            "unsupported_image_type",
            where,
            f"the data URL's type is {_quote(kind + '/' + subtype)}; only image/* types are "
            "accepted.",
        )
    return DataUrl(url=url, start=header.end(), media_type=f"{kind}/{subtype}")


def decoded_length(data_url: DataUrl, where: str) -> int:
    """Bytes the payload decodes to, from its length alone (checked before any decoding, so
    an oversized image costs nothing). The shape is validated here; the alphabet on decode."""
    length = data_url.payload_length
    if not length or length % 4:
        raise MediaError(
            "invalid_base64",
            where,
            f"the data URL's base64 payload has {length} characters, which is not a positive "
            "multiple of 4: send standard base64 with its = padding, no line breaks or spaces.",
        )
    padding = 2 if data_url.url.endswith("==") else 1 if data_url.url.endswith("=") else 0
    return length // 4 * 3 - padding


def decode_base64(data_url: DataUrl, where: str) -> bytes:
    """Strict decode: the standard alphabet, correct padding, nothing after it. The payload's
    length must already have passed decoded_length (a multiple of 4).

    pybase64 with validate=True refuses what binascii's strict mode refuses (a test compares
    them), decodes with SIMD (tens of times faster than binascii) and releases the GIL
    while it does, so a 10 MB image neither costs milliseconds nor stalls the event loop."""
    try:
        return pybase64.b64decode(data_url.url[data_url.start :], validate=True)
    except (binascii.Error, ValueError) as exc:  # ValueError: non-ASCII characters
        raise MediaError(
            "invalid_base64",
            where,
            "the data URL's payload is not valid base64 (standard alphabet A-Z a-z 0-9 + /, "
            f"= padding, no spaces or line breaks): {_reason(exc)}.",
        ) from None


def _quote(text: str) -> str:
    # A client's type string, bounded: messages are echoed and logged.
    return repr(text[:64])


def _reason(exc: Exception) -> str:
    return str(exc)[:120] or type(exc).__name__
