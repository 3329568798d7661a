"""Reasoning that survives a client's round trip: an authenticated token carrying the text.

GLM-5.3-Flash's template renders past reasoning into the prompt, so the next turn keeps its
recurrent-state checkpoint only if the reasoning comes back byte for byte. Clients do not
promise that (display settings, trimming, re-encoding), so every reasoning block the gateway
sends carries a token (Anthropic's thinking `signature`, the Responses API's
`encrypted_content`) from which the exact text is restored on input.

Token: "fbx1." + base64url(issued-at seconds, 8 bytes big-endian + zlib(text)) + "." +
base64url(HMAC-SHA256(key, "fbx1." + payload [+ "\0" + binding]) truncated to 16 bytes). The
text is compressed, not hidden: the client sees the same reasoning in clear anyway. A token that
is foreign, tampered, expired, undecodable, issued to another binding or past a bound is not an
error: the caller falls back to the visible text.

A token restores up to `max_text_bytes` from a few KiB (zlib inflates ~1000:1), so two things
keep one from being replayed as an amplifier:
- Binding. Each request's codec (`for_request`) is bound to the API key that sent it (its key
  id, gateway.auth.Caller); the binding is inside the MAC, so a token issued to key A
  restores nothing under key B. Without authentication there is no identity to bind to
  (anyone may send any key) and the binding is empty, which signs as tokens always did. Tokens
  are not bound to the conversation: clients fork, resume and compact sessions under new
  session ids, and a turn that lost its exact reasoning costs the engine a full prefill.
- Budget. What one request's tokens restore in total is bounded relative to the bytes it sent
  (`ExpansionBudget.for_request`, limits.max_expansion_ratio and limits.expansion_floor_bytes),
  enforced while inflating: a token past what is left inflates no further and falls back to its
  visible text (which the request itself carried), and what was inflated is charged either way.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import hmac
import logging
import secrets
import time
import zlib
from collections.abc import Callable

from gateway.core.bounds import allowed_expansion
from gateway.settings import LimitSettings

log = logging.getLogger("gateway.core.reasoning_codec")

PREFIX = "fbx1."
_MAC_BYTES = 16
_STAMP_BYTES = 8


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def key_binding(key_id: str | None) -> str:
    """What a request's reasoning tokens are bound to: its API key's id (gateway.auth.Caller),
    or "" when the gateway checks no keys (an unchecked key identifies nobody)."""
    return "" if key_id is None else "key:" + key_id


class ExpansionBudget:
    """The bytes one request's reasoning tokens may still inflate to, in total."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    @classmethod
    def for_request(cls, sent_bytes: int, limits: LimitSettings) -> ExpansionBudget:
        """`sent_bytes`: what the request brought (its body, and a stored history it names)."""
        return cls(allowed_expansion(sent_bytes, limits.max_expansion_ratio, limits))

    @property
    def left(self) -> int:
        return max(0, self.limit - self.used)

    def charge(self, inflated: int) -> None:
        self.used += inflated


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
        self._binding = b""
        self._budget: ExpansionBudget | None = None

    def for_request(self, binding: str, budget: ExpansionBudget) -> ReasoningCodec:
        """This codec for one request: its tokens signed for and accepted from `binding` only,
        and what they restore drawn from `budget`."""
        bound = copy.copy(self)
        bound._binding = binding.encode()
        bound._budget = budget
        return bound

    @classmethod
    def with_random_key(cls, *, max_age_s: float, max_text_bytes: int) -> ReasoningCodec:
        """A key for this process only: tokens stop verifying after a restart."""
        return cls(secrets.token_bytes(32), max_age_s=max_age_s, max_text_bytes=max_text_bytes)

    def _mac(self, signed: bytes) -> bytes:
        # The payload is base64url, so a NUL cannot occur in it: binding and payload cannot
        # be shifted into each other. An empty binding signs as tokens did before bindings.
        bound = signed + b"\0" + self._binding if self._binding else signed
        return hmac.new(self._key, bound, hashlib.sha256).digest()[:_MAC_BYTES]

    def encode(self, text: str) -> str:
        stamp = int(self._clock()).to_bytes(_STAMP_BYTES, "big")
        payload = _b64(stamp + zlib.compress(text.encode("utf-8"), 6))
        signed = PREFIX + payload
        return signed + "." + _b64(self._mac(signed.encode("ascii")))

    def decode(self, token: object) -> str | None:
        """The text a token of ours carries, or None (not ours, bound to another key, altered,
        expired, past the token's or the request's bound)."""
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
        bound = self._max_text_bytes
        budget = self._budget
        if budget is not None:
            bound = min(bound, budget.left)
        inflater = zlib.decompressobj()
        try:
            # max_length stops inflating one byte past the bound (never 0: that means no limit).
            data = inflater.decompress(raw[_STAMP_BYTES:], bound + 1)
        except zlib.error:
            return None
        if budget is not None:
            budget.charge(len(data))
            if len(data) > bound and budget.used - len(data) < budget.limit:  # once, as it runs out
                log.info(
                    "a reasoning token passes its request's expansion budget (%d bytes): "
                    "its visible text is used",
                    budget.limit,
                )
        if len(data) > bound or not inflater.eof:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return None
