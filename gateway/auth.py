"""API keys: one decision per request, the same accepted headers on every face.

A key comes as `Authorization: Bearer KEY` (the OpenAI SDKs, the Anthropic SDK's `api_key`
and `auth_token`, Codex) or as `x-api-key: KEY` (the Anthropic API's own way; Claude Code sends
ANTHROPIC_API_KEY so), on any face. When both headers are sent they must carry the same key
(Claude Code sends both when both variables are set): two different keys are refused, never
resolved by picking one, so no proxy in front and no rate limit can read the request as one key
while it is served as the other.

The decision is made once, by `authenticate`, before anything is charged: gateway.admission
makes it first for every face endpoint (before the rate limit and the admission slot) and
leaves it in the scope state; a route asks `authenticate` again and gets that same decision
back. Several keys are accepted, each compared in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from starlette.types import Scope

from gateway.errors import AuthenticationError
from gateway.faces.headers import read_headers
from gateway.ratelimit.limiter import key_id

_CREDENTIALS = (b"authorization", b"x-api-key")
_CHALLENGE = {"www-authenticate": "Bearer"}
# Where the decision is kept in the ASGI scope's state.
_SCOPE_KEY = "caller"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a request is, once authenticated."""

    # The presented key's id (gateway.ratelimit.key_id: never the key itself); None when no
    # keys are configured, so everyone is the same caller.
    key_id: str | None


ANONYMOUS = Caller(None)


class ApiKeyChecker:
    """No keys configured means no authentication (DESIGN.md: FLASHBOX_API_KEYS unset)."""

    def __init__(self, keys: Sequence[str]) -> None:
        self._keys = [key.encode() for key in keys if key]

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def identify(self, authorization: str | None, api_key: str | None) -> Caller:
        """The caller these headers name; AuthenticationError unless they carry one key that
        is one of the configured keys."""
        if not self._keys:
            return ANONYMOUS
        key = presented_key(authorization, api_key)
        self._match(key.encode())
        return Caller(key_id(key))

    def check(self, authorization: str | None, api_key: str | None = None) -> None:
        """`identify` for routes outside the faces that only need a yes or no."""
        self.identify(authorization, api_key)

    def _match(self, candidate: bytes) -> None:
        # Compare against every key, without stopping early, so timing says nothing about which
        # key (or how much of one) matched.
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(candidate, key)
        if not matched:
            raise AuthenticationError("Incorrect API key provided.", headers=_CHALLENGE)


def presented_key(authorization: str | None, api_key: str | None) -> str:
    """The one key the headers carry (an empty header counts as not sent); AuthenticationError
    when none is sent, Authorization is not `Bearer <key>`, or the two headers disagree."""
    bearer = None
    if authorization and authorization.strip():
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthenticationError(
                "Malformed Authorization header: expected 'Bearer <key>'.", headers=_CHALLENGE
            )
        bearer = token.strip()
    header_key = api_key.strip() if api_key and api_key.strip() else None
    if bearer is None and header_key is None:
        raise AuthenticationError(
            "Missing API key: send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'.",
            headers=_CHALLENGE,
        )
    if (
        bearer is not None
        and header_key is not None
        and not hmac.compare_digest(bearer.encode(), header_key.encode())
    ):
        raise AuthenticationError(
            "The Authorization and x-api-key headers carry different keys: send one key, "
            "in either header (or the same key in both).",
            headers=_CHALLENGE,
        )
    key = bearer if bearer is not None else header_key
    assert key is not None
    return key


def authenticate(scope: Scope, checker: ApiKeyChecker) -> Caller:
    """The request's one auth decision: the one already made for it (gateway.admission makes
    it first), else made now and kept for the rest of the request. Raises AuthenticationError
    (nothing is kept then: the request ends with the 401)."""
    state: dict[str, Any] = scope.setdefault("state", {})
    decided = state.get(_SCOPE_KEY)
    if isinstance(decided, Caller):
        return decided
    if checker.enabled:
        headers = read_headers(scope["headers"], _CREDENTIALS)
        caller = checker.identify(headers.get(b"authorization"), headers.get(b"x-api-key"))
    else:
        caller = ANONYMOUS  # nothing to read: no header work on the hot path
    state[_SCOPE_KEY] = caller
    return caller
