"""Reasoning tokens bound to a key and to a per-request budget (gateway/core/reasoning_codec.py):
a token restores only under the binding it was issued to, and what one request's tokens
restore in total stops at its budget, inflating no further than that."""

from __future__ import annotations

from gateway.core.reasoning_codec import ExpansionBudget, ReasoningCodec, key_binding
from gateway.settings import LimitSettings

KEY = b"k" * 32


def codec(max_text_bytes: int = 1 << 20) -> ReasoningCodec:
    return ReasoningCodec(KEY, max_age_s=3600.0, max_text_bytes=max_text_bytes)


def unlimited() -> ExpansionBudget:
    return ExpansionBudget(1 << 40)


def test_a_token_restores_only_under_the_key_it_was_issued_to() -> None:
    app = codec()
    key_a = app.for_request(key_binding("aaaaaaaaaaaa"), unlimited())
    key_b = app.for_request(key_binding("bbbbbbbbbbbb"), unlimited())
    anonymous = app.for_request(key_binding(None), unlimited())
    token = key_a.encode("reasoning of key a")
    assert key_a.decode(token) == "reasoning of key a"
    assert app.for_request(key_binding("aaaaaaaaaaaa"), unlimited()).decode(token) is not None
    assert key_b.decode(token) is None
    assert anonymous.decode(token) is None
    assert app.decode(token) is None
    # And the other way: an unbound token (no keys configured) is not any key's.
    assert key_a.decode(anonymous.encode("open")) is None


def test_without_keys_tokens_sign_as_before_bindings() -> None:
    """No keys configured: the binding is empty and the MAC is the unbound one, so tokens
    issued before this change still restore."""
    assert key_binding(None) == ""
    unbound = codec().for_request("", unlimited())
    assert unbound.decode(codec().encode("earlier")) == "earlier"
    assert codec().decode(unbound.encode("later")) == "later"


def test_the_request_budget_stops_restoring_and_charges_what_was_inflated() -> None:
    budget = ExpansionBudget(2500)
    request = codec().for_request("", budget)
    tokens = [request.encode("x" * 1000) for _ in range(4)]
    restored = [request.decode(token) for token in tokens]
    assert restored[:2] == ["x" * 1000, "x" * 1000]
    # The third would pass the budget: it falls back (None) after inflating only what was
    # left plus one byte, and the fourth inflates nothing more.
    assert restored[2:] == [None, None]
    assert budget.used <= 2500 + 2
    assert budget.left == 0


def test_each_request_has_its_own_budget() -> None:
    app = codec()
    token = app.encode("y" * 1000)
    first = app.for_request("", ExpansionBudget(1500))
    assert first.decode(token) == "y" * 1000
    assert first.decode(token) is None
    assert app.for_request("", ExpansionBudget(1500)).decode(token) == "y" * 1000


def test_a_bomb_inflates_no_further_than_the_budget() -> None:
    """A 32 MiB text in a ~32 KiB token, against a 1 KiB budget: refused after ~1 KiB."""
    app = codec(max_text_bytes=64 << 20)
    token = app.encode("\0" * (32 << 20))
    assert len(token) < 64 << 10
    budget = ExpansionBudget(1024)
    assert app.for_request("", budget).decode(token) is None
    assert budget.used == 1025


def test_the_budget_follows_the_bytes_sent() -> None:
    limits = LimitSettings(max_expansion_ratio=4.0, expansion_floor_bytes=100)
    assert ExpansionBudget.for_request(1000, limits).limit == 4100
    assert ExpansionBudget.for_request(0, limits).limit == 100


def test_an_empty_text_restores_even_with_nothing_left() -> None:
    request = codec().for_request("", ExpansionBudget(0))
    assert request.decode(request.encode("")) == ""
