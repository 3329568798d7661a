"""The input bounds (`limits.*`), checked once on the core request every face makes.

What a face converts is what reaches the renderer and the engine, so the bounds hold on that:
messages as the template sees them (Anthropic's tool results split out, Responses' history
from previous_response_id included), the functions the model is offered (namespace members
counted), the client's stop strings, the output budget. One check for every face, so the
bounds cannot drift apart; a face only names the fields for its error (`Params`). The raw-JSON
count check in gateway.faces.body stays in front of validation as its cheap early refusal.

Every face lowers an oversized max_tokens to the ceiling instead of refusing it (`at_ceiling`:
a client that asks for "as much as you can" gets the ceiling, the same on every face), while
converting; what it sends on is still checked here like any other.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.request import CoreRequest
from gateway.errors import InvalidRequestError
from gateway.settings import LimitSettings


@dataclass(frozen=True, slots=True)
class Params:
    """The face's names for the fields a bound is on: each error's `param` and wording."""

    messages: str = "messages"
    tools: str = "tools"
    stop: str = "stop"
    max_tokens: str = "max_tokens"
    # Said after the tools count (how the face counted them), e.g. namespace members.
    tools_counted: str = ""


DEFAULT = Params()


def check_bounds(core: CoreRequest, limits: LimitSettings, params: Params = DEFAULT) -> None:
    """InvalidRequestError (400) naming the first bound `core` passes and how to come under it."""
    count = len(core.messages)
    if count > limits.max_messages:
        raise InvalidRequestError(
            f"Too many messages: {count} > {limits.max_messages} (counted as the model sees "
            "them, earlier turns included); send fewer or compact the conversation.",
            param=params.messages,
        )
    count = len(core.tools or ())
    if count > limits.max_tools:
        raise InvalidRequestError(
            f"Too many tools: {count}{params.tools_counted} > {limits.max_tools}; "
            "offer fewer tools.",
            param=params.tools,
        )
    count = len(core.sampling.stop)
    if count > limits.max_stop_sequences:
        raise InvalidRequestError(
            f"Too many stop sequences: {count} > {limits.max_stop_sequences}; "
            f"send at most {limits.max_stop_sequences}.",
            param=params.stop,
        )
    max_tokens = core.sampling.max_tokens
    if max_tokens is not None and max_tokens > limits.max_tokens:
        raise InvalidRequestError(
            f"{params.max_tokens} is {max_tokens}, above this server's limit of "
            f"{limits.max_tokens}.",
            param=params.max_tokens,
        )


def at_ceiling(max_tokens: int | None, limits: LimitSettings) -> int | None:
    """The client's output budget, lowered to `limits.max_tokens` (None stays None: the face's
    default applies)."""
    return None if max_tokens is None else min(max_tokens, limits.max_tokens)


def allowed_expansion(sent_bytes: int, ratio: float, limits: LimitSettings) -> int:
    """The bytes a request that brought `sent_bytes` may expand into at `ratio` (one of the
    limits' ratios), the floor included: small requests carry templates and tools too."""
    return int(ratio * sent_bytes) + limits.expansion_floor_bytes


def check_prompt_expansion(size: int, sent_bytes: int, limits: LimitSettings) -> None:
    """Refuse a rendered prompt of `size` UTF-8 bytes past what the request's bytes allow
    (limits.max_prompt_ratio)."""
    allowed = allowed_expansion(sent_bytes, limits.max_prompt_ratio, limits)
    if size > allowed:
        raise InvalidRequestError(
            f"The request renders to a {size}-byte prompt, more than "
            f"{limits.max_prompt_ratio:g} x its {sent_bytes} bytes + "
            f"{limits.expansion_floor_bytes} (limits.max_prompt_ratio, "
            "limits.expansion_floor_bytes): send fewer tool_reference blocks or less restored "
            "reasoning, or split the request.",
            code="prompt_expansion_too_large",
        )


def utf8_length(text: str) -> int:
    """The text's UTF-8 bytes, an upper bound on its tokens; without copying it when it is
    ASCII (str.isascii reads a flag: a megabyte prompt is not encoded to be measured)."""
    return len(text) if text.isascii() else len(text.encode())
