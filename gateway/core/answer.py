"""What the core hands a face at the end of hop 5, and what a face gives the core for hop 6.

The core parses the engine's output into protocol-neutral deltas (gateway.parsers.base) and
knows how the answer ended (`Finish`); a face turns both into its wire format: a
`StreamEncoder` for SSE, a `Collector` for one JSON body. Streamed and one-shot answers are
built from the same deltas.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from gateway.errors import GatewayError
from gateway.parsers.base import ParsedDelta


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int  # all of the prompt, cached or not
    completion_tokens: int
    cached_tokens: int  # served from the engine's prefix cache
    # Completion tokens up to the end of the reasoning, as counted at the engine event that
    # ended it (exact to within that event's tokens; events carry one token or a few).
    reasoning_tokens: int = 0
    # Prompt tokens this request newly left checkpointed for the next turn: the prompt rounded
    # down to the engine's checkpoint interval, less what it read from the cache (Anthropic's
    # cache_creation_input_tokens).
    cache_created_tokens: int = 0


def cache_created(prompt_tokens: int, cached_tokens: int, interval: int) -> int:
    """Prompt tokens a request newly leaves checkpointed: its prompt rounded down to the
    engine's checkpoint interval (0: unknown, nothing claimed), less what it read."""
    if interval <= 0:
        return 0
    return max(0, prompt_tokens // interval * interval - cached_tokens)


@dataclass(frozen=True, slots=True)
class Finish:
    """How an answer ended. Why the engine stopped and whether tool calls were made are apart:
    a call that max_new_tokens cut is both, and each face must say it was cut off ("length",
    "max_tokens", "incomplete") so that an agent does not run arguments that end mid-value.
    An engine abort never makes a Finish: the relay raises it as the face's error."""

    # "stop": a stop token or string (client's or model's); "length": max_new_tokens.
    reason: Literal["stop", "length"]
    # The stop string the engine matched, when it matched one (client's or model's).
    matched: str | None
    usage: Usage
    # The parser emitted at least one tool call (they may be cut short when reason is "length").
    made_tool_calls: bool = False


class StreamEncoder(Protocol):
    """One request's SSE bytes. Each method returns whole events, ready to send."""

    def start(self, prompt_tokens: int | None = None) -> bytes:
        """Sent as soon as the response starts (b"" to send nothing yet). `prompt_tokens`:
        the prompt's token count when the gateway already knows it (None: not yet)."""
        ...

    def deltas(self, deltas: list[ParsedDelta]) -> bytes:
        """The events for parsed output (b"" when there is nothing to send)."""
        ...

    def finish(self, finish: Finish) -> bytes:
        """Everything up to the end of the stream."""
        ...

    def error(self, error: GatewayError) -> bytes:
        """The engine failed after the response started: the face's error event and its end."""
        ...

    @property
    def sends_keepalive(self) -> bool:
        """Whether the face fills long silences (prefill) with keepalive frames."""
        ...

    def keepalive(self) -> bytes | None:
        """The next keepalive frame (None: none now); called for each frame sent, as a frame
        may carry a sequence number."""
        ...


class Collector(Protocol):
    """One request's non-streamed answer, gathered from the same deltas."""

    def add(self, deltas: list[ParsedDelta]) -> None: ...

    def body(self, finish: Finish) -> bytes:
        """The JSON body of the answer."""
        ...


class Answer(Protocol):
    """A face's side of one request: its encoders and the headers its responses carry."""

    @property
    def headers(self) -> Mapping[str, str]: ...

    def stream_encoder(self) -> StreamEncoder: ...

    def collector(self) -> Collector: ...
