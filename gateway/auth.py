"""API keys: one decision per request, the same accepted headers on every face.

A key comes as `Authorization: Bearer KEY` (the OpenAI SDKs, the Anthropic SDK's `api_key`
and `auth_token`, Codex) or as `x-api-key: KEY` (the Anthropic API's own way; Claude Code sends
ANTHROPIC_API_KEY so), on any face. When both headers are sent with different keys (Claude Code
sends both when both variables are set, and a real Anthropic key is often left in the shell),
the one that is a key of this gateway names the caller; two keys of this gateway are refused,
never resolved by picking one, so no rate limit can read the request as one key while it is
served as the other.

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
        # Both headers with different keys: the one that is a key of this gateway names the
        # caller (Claude Code sends ANTHROPIC_API_KEY as x-api-key and ANTHROPIC_AUTH_TOKEN as
        # a Bearer token; a real Anthropic key left in the shell must not lock it out). Two
        # keys of this gateway are two identities: refused, never resolved by picking one.
        matching = [key for key in presented_keys(authorization, api_key) if self._is_key(key)]
        if not matching:
            raise AuthenticationError("Incorrect API key provided.", headers=_CHALLENGE)
        if len(matching) > 1:
            raise AuthenticationError(_TWO_KEYS, headers=_CHALLENGE)
        return Caller(key_id(matching[0]))

    def check(self, authorization: str | None, api_key: str | None = None) -> None:
        """`identify` for routes outside the faces that only need a yes or no."""
        self.identify(authorization, api_key)

    def _is_key(self, candidate: str) -> bool:
        # Compare against every key, without stopping early, so timing says nothing about which
        # key (or how much of one) matched.
        encoded = candidate.encode()
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(encoded, key)
        return matched


def presented_keys(authorization: str | None, api_key: str | None) -> tuple[str, ...]:
    """The distinct keys the headers carry, one or two (an empty header counts as not sent);
    AuthenticationError when none is sent or Authorization is not `Bearer <key>`."""
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
    if bearer is None or header_key is None:
        key = bearer if bearer is not None else header_key
        assert key is not None
        return (key,)
    if hmac.compare_digest(bearer.encode(), header_key.encode()):
        return (bearer,)
    return (bearer, header_key)


def presented_key(authorization: str | None, api_key: str | None) -> str:
    """The one key the headers carry; AuthenticationError as `presented_keys`, or when the two
    headers carry different keys."""
    keys = presented_keys(authorization, api_key)
    if len(keys) > 1:
        raise AuthenticationError(_TWO_KEYS, headers=_CHALLENGE)
    return keys[0]


_TWO_KEYS = (
    "The Authorization and x-api-key headers carry two different keys of this gateway: send "
    "one key, in either header (or the same key in both)."
)


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
