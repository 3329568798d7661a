"""API keys: `Authorization: Bearer KEY`, several keys, constant-time comparison."""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from gateway.errors import AuthenticationError


class ApiKeyChecker:
    """No keys configured means no authentication (DESIGN.md: FLASHBOX_API_KEYS unset)."""

    def __init__(self, keys: Sequence[str]) -> None:
        self._keys = [key.encode() for key in keys if key]

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def check(self, authorization: str | None, api_key: str | None = None) -> None:
        """Raise AuthenticationError unless a header carries one of the keys: `Authorization:
        Bearer KEY`, or (the Anthropic API's way) `x-api-key: KEY`."""
        if not self._keys:
            return
        if api_key and not authorization:
            self._match(api_key.strip().encode())
            return
        if not authorization:
            raise AuthenticationError(
                "Missing API key: send it as 'Authorization: Bearer <key>' "
                "(or 'x-api-key: <key>').",
                headers={"www-authenticate": "Bearer"},
            )
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthenticationError(
                "Malformed Authorization header: expected 'Bearer <key>'.",
                headers={"www-authenticate": "Bearer"},
            )
        self._match(token.strip().encode())

    def _match(self, candidate: bytes) -> None:
        # Compare against every key, without stopping early, so timing says nothing about which
        # key (or how much of one) matched.
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(candidate, key)
        if not matched:
            raise AuthenticationError(
                "Incorrect API key provided.", headers={"www-authenticate": "Bearer"}
            )
