"""Reasoning that survives a client's round trip: an authenticated token carrying the text.

GLM-5.3-Flash's template renders past reasoning into the prompt, so the next turn keeps its
recurrent-state checkpoint only if the reasoning comes back byte for byte. Clients do not
promise that (display settings, trimming, re-encoding), so every reasoning block the gateway
sends carries a token (Anthropic's thinking `signature`, the Responses API's
`encrypted_content`) from which the exact text is restored on input.

Token: "fbx1." + base64url(issued-at seconds, 8 bytes big-endian + zlib(text)) + "." +
base64url(HMAC-SHA256(key, "fbx1." + payload) truncated to 16 bytes). The text is compressed,
not hidden: the client sees the same reasoning in clear anyway. A token that is foreign,
tampered, expired or undecodable is not an error: the caller falls back to the visible text.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
import zlib
from collections.abc import Callable

PREFIX = "fbx1."
_MAC_BYTES = 16
_STAMP_BYTES = 8


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class ReasoningCodec:
    def __init__(
        self,
        key: bytes,
        *,
        max_age_s: float,
        max_text_bytes: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not key:
            raise ValueError("the reasoning signing key must not be empty")
        self._key = key
        self._max_age_s = max_age_s
        # Bound on what one token may inflate to: zlib turns a few KiB into many MiB.
        self._max_text_bytes = max_text_bytes
        self._clock = clock

    @classmethod
    def with_random_key(cls, *, max_age_s: float, max_text_bytes: int) -> ReasoningCodec:
        """A key for this process only: tokens stop verifying after a restart."""
        return cls(secrets.token_bytes(32), max_age_s=max_age_s, max_text_bytes=max_text_bytes)

    def _mac(self, signed: bytes) -> bytes:
        return hmac.new(self._key, signed, hashlib.sha256).digest()[:_MAC_BYTES]

    def encode(self, text: str) -> str:
        stamp = int(self._clock()).to_bytes(_STAMP_BYTES, "big")
        payload = _b64(stamp + zlib.compress(text.encode("utf-8"), 6))
        signed = PREFIX + payload
        return signed + "." + _b64(self._mac(signed.encode("ascii")))

    def decode(self, token: object) -> str | None:
        """The text a token of ours carries, or None (not ours, altered, expired, too big)."""
        if not isinstance(token, str) or not token.startswith(PREFIX):
            return None
        signed, dot, mac = token.rpartition(".")
        if not dot or signed == PREFIX[:-1]:
            return None
        try:
            given = _unb64(mac)
            raw = _unb64(signed[len(PREFIX) :])
        except (binascii.Error, ValueError):
            return None
        if not hmac.compare_digest(given, self._mac(signed.encode("ascii", "replace"))):
            return None
        if len(raw) < _STAMP_BYTES:
            return None
        issued = int.from_bytes(raw[:_STAMP_BYTES], "big")
        if self._clock() - issued > self._max_age_s:
            return None
        inflater = zlib.decompressobj()
        try:
            data = inflater.decompress(raw[_STAMP_BYTES:], self._max_text_bytes + 1)
        except zlib.error:
            return None
        if len(data) > self._max_text_bytes or not inflater.eof:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return None
