"""The reasoning codec a face's request uses (gateway.core.reasoning_codec): the app's codec
bound to the request's API key, with a budget for what its tokens restore relative to the
bytes it sent. One per request, for its input (decode) and its answer (encode) alike, so a
token is issued to the key that may bring it back."""

from __future__ import annotations

from starlette.types import Scope

from gateway.auth import authenticate
from gateway.core.reasoning_codec import ExpansionBudget, ReasoningCodec, key_binding
from gateway.state import AppState


def request_codec(state: AppState, scope: Scope, sent_bytes: int) -> ReasoningCodec:
    """`sent_bytes`: what the request brought (its body, and a stored history it names)."""
    caller = authenticate(scope, state.auth)
    budget = ExpansionBudget.for_request(sent_bytes, state.settings.limits)
    return state.reasoning_codec.for_request(key_binding(caller.key_id), budget)
