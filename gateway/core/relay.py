"""Hops 5 and 6 for one answer: engine events -> parsed deltas -> the face's encoder.

The streaming and the one-shot paths share `_on_event`, so a streamed answer and a
non-streamed one are built from the same deltas; the face decides what bytes they become.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from gateway.core.answer import Collector, Finish, StreamEncoder, Usage, cache_created
from gateway.errors import GatewayError, InvalidRequestError, UpstreamStreamError
from gateway.observability.timeline import RequestRecord
from gateway.parsers.base import (
    ContentDelta,
    OutputParser,
    ParsedDelta,
    ReasoningDelta,
)
from gateway.stream.sse import SendBytes
from gateway.stream.text_diff import TextDiffer
from gateway.upstream.stream import EngineEvent, EngineStream


class EventSource(Protocol):
    """What the relay reads: an open /generate stream, or one still waiting to open."""

    def events(self) -> AsyncIterator[EngineEvent]: ...

    async def aclose(self) -> None: ...


class HeldStream:
    """A /generate stream opened only when the request's turn comes (gateway.fairness): the
    relay starts the answer (headers, the face's opening events and keepalives) and reads
    from it meanwhile. What fails while it opens ends the answer as an error event."""

    def __init__(self, opener: Callable[[], Awaitable[EngineStream]]) -> None:
        self._opener: Callable[[], Awaitable[EngineStream]] | None = opener
        self._stream: EngineStream | None = None

    async def events(self) -> AsyncIterator[EngineEvent]:
        if self._opener is not None:
            opener, self._opener = self._opener, None
            self._stream = await opener()
        if self._stream is None:
            return
        async for event in self._stream.events():
            yield event

    async def aclose(self) -> None:
        self._opener = None
        if self._stream is not None:
            await self._stream.aclose()


def error_kind(error: GatewayError) -> str:
    """Bounded label for flashbox_errors_total{kind}."""
    return type(error).__name__.removesuffix("Error").lower() or "gateway"


class Relay:
    def __init__(
        self,
        *,
        engine: EventSource,
        parser: OutputParser,
        differ: TextDiffer,
        record: RequestRecord,
        on_first_token: Callable[[], None] | None = None,
        kept_stop: str | None = None,
        checkpoint_interval: int = 0,
        prompt_tokens: int | None = None,
    ) -> None:
        self._engine = engine
        # The prompt's token count when the gateway counted it before /generate (None: it did
        # not); a face can report it before the engine's first event (Anthropic's
        # message_start).
        self._prompt_tokens = prompt_tokens
        # A stop string that belongs to the output (DecodingConstraint.kept_stop).
        self._kept_stop = kept_stop
        # Tokens between the engine's prefix-cache checkpoints (0: unknown).
        self._interval = checkpoint_interval
        # Told once, when the engine's first token arrives (its prefill is done).
        self._on_first_token = on_first_token
        # The engine's text as it came, for routing's output promise (gateway.routing.affinity).
        self._raw: list[str] = []
        self._parser = parser
        self._differ = differ
        self._record = record
        self._finish: dict[str, Any] | None = None
        self._meta: dict[str, Any] = {}
        self.streamed_tokens = False
        # True when the engine failed mid-answer (for the routing report).
        self.failed = False
        # True when the engine refused the request mid-stream (a 4xx error event): the
        # client's fault, not the replica's.
        self.refused = False
        self._scan_firsts = True
        self._usage: Usage | None = None
        self._reasoning_open = True
        self._reasoning_tokens = 0
        # When the last bytes went to the client (keepalive frames fill long silences).
        self._last_write = 0.0

    # -- shared ---------------------------------------------------------------------------

    def _on_event(self, event: EngineEvent) -> list[ParsedDelta]:
        now = time.perf_counter()
        record = self._record
        if event.meta:
            self._meta = event.meta
            record.tokens(event.completion_tokens, now)
        finish = event.finish_reason
        text = self._differ.push(event.text)
        if finish is not None:
            self._finish = finish
            text += self._differ.finish(event.text)
            if self._kept_stop is not None and finish.get("matched") == self._kept_stop:
                text += self._kept_stop
        if text:
            self._raw.append(text)
        parsed = self._parser.feed(text) if text else []
        if finish is not None:
            parsed += self._parser.finish()
        if parsed and self._scan_firsts:
            self._note_firsts(parsed, now)
        if parsed and self._reasoning_open:
            self._note_reasoning(parsed, event)
        return parsed

    def _note_reasoning(self, parsed: list[ParsedDelta], event: EngineEvent) -> None:
        """While the answer reasons (GLM reasons first), the completion tokens so far."""
        if all(type(delta) is ReasoningDelta for delta in parsed):
            self._reasoning_tokens = event.completion_tokens or self._reasoning_tokens
            return
        self._reasoning_open = False
        if type(parsed[0]) is ReasoningDelta:
            self._reasoning_tokens = event.completion_tokens or self._reasoning_tokens

    def _note_firsts(self, parsed: list[ParsedDelta], now: float) -> None:
        record = self._record
        record.first_token(now)
        if self._on_first_token is not None:
            self._on_first_token()
            self._on_first_token = None
        self.streamed_tokens = True
        for delta in parsed:
            if isinstance(delta, ReasoningDelta):
                record.mark("first_reasoning_token", now)
            elif isinstance(delta, ContentDelta):
                record.mark("first_content_token", now)
        stages = record.stages
        self._scan_firsts = not (
            "first_reasoning_token" in stages and "first_content_token" in stages
        )

    def _end(self) -> list[ParsedDelta]:
        """[DONE] came without a finish_reason event: flush what is held back."""
        text = self._differ.finish()
        if text:
            self._raw.append(text)
        parsed = self._parser.feed(text) if text else []
        return parsed + self._parser.finish()

    @property
    def output_text(self) -> str:
        """Everything the engine generated so far, as it wrote it (before parsing)."""
        return "".join(self._raw)

    def _finished(self) -> Finish:
        finish = self._finish or {}
        kind = finish.get("type")
        if kind == "abort":
            message = str(finish.get("message") or "the engine aborted the request")
            status = finish.get("status_code")
            if isinstance(status, int) and 400 <= status < 500:
                raise InvalidRequestError(f"The engine rejected the request: {message}")
            raise UpstreamStreamError(f"The engine aborted the request: {message}")
        matched = finish.get("matched")
        return Finish(
            # [DONE] with no finish event is taken as a stop: the engine ended the answer.
            "length" if kind == "length" else "stop",
            matched if isinstance(matched, str) else None,
            self.settle(),
            made_tool_calls=self._parser.made_tool_calls,
        )

    def settle(self) -> Usage:
        """At the end: token counts into the record, rejected tool calls counted; usage."""
        if self._usage is not None:
            return self._usage
        rejected = self._record.metrics.tool_calls_rejected
        for call in self._parser.rejected_tool_calls:
            rejected.labels(reason=call.reason).inc()
        meta, record = self._meta, self._record
        prompt, cached = _int(meta.get("prompt_tokens")), _int(meta.get("cached_tokens"))
        usage = self._usage = Usage(
            prompt_tokens=prompt,
            completion_tokens=_int(meta.get("completion_tokens")),
            cached_tokens=cached,
            reasoning_tokens=self._reasoning_tokens,
            cache_created_tokens=cache_created(prompt, cached, self._interval),
        )
        record.prompt_tokens = usage.prompt_tokens
        record.completion_tokens = usage.completion_tokens
        record.cached_tokens = usage.cached_tokens
        return usage

    @property
    def finish_reason(self) -> str | None:
        """Why the engine said it stopped (stop, length, abort); None: it did not say."""
        kind = (self._finish or {}).get("type")
        return kind if isinstance(kind, str) else None

    @property
    def usage(self) -> Usage | None:
        """The answer's usage once settled."""
        return self._usage

    @property
    def phase(self) -> str:
        return "streaming" if self.streamed_tokens else "before_first_token"

    async def aclose(self) -> None:
        await self._engine.aclose()

    # -- streaming ------------------------------------------------------------------------

    async def stream(
        self, send: SendBytes, *, encoder: StreamEncoder, keepalive_s: float | None = None
    ) -> None:
        """Relay the whole answer as SSE; ends the request's record.

        With `keepalive_s` and a face that has a keepalive frame, a task sends one whenever
        nothing was written for that long (a long prefill, a long silence mid-answer); faces
        without one (OpenAI) run no task at all. Frames may be numbered (the Responses API's
        sequence_number), so with a keepalive task each frame is made and sent under one lock.
        """
        opening = encoder.start(self._prompt_tokens)
        if opening:
            await send(opening)
        self._last_write = time.monotonic()
        pinger, lock = None, None
        if keepalive_s and encoder.sends_keepalive:
            lock = asyncio.Lock()
            pinger = asyncio.create_task(self._keepalive(send, encoder, keepalive_s, lock))
        try:
            await self._stream(send, encoder, pinger, lock)
        finally:
            if pinger is not None:
                pinger.cancel()
            await self._engine.aclose()

    async def _stream(
        self,
        send: SendBytes,
        encoder: StreamEncoder,
        pinger: asyncio.Task[None] | None,
        lock: asyncio.Lock | None,
    ) -> None:
        try:
            async for event in self._engine.events():
                parsed = self._on_event(event)
                if not parsed:
                    continue
                if lock is None:
                    data = encoder.deltas(parsed)
                    if data:
                        await send(data)
                    continue
                async with lock:
                    data = encoder.deltas(parsed)
                    if data:
                        self._last_write = time.monotonic()
                        await send(data)
            await _stop(pinger)
            if self._finish is None:
                parsed = self._end()
                if parsed:
                    data = encoder.deltas(parsed)
                    if data:
                        await send(data)
            tail = encoder.finish(self._finished())
            # The end of the response goes out with the last event, in one write and before
            # the record is finished: a client that reads to the end is done at once.
            await send(tail, last=True)
        except GatewayError as exc:
            if exc.status_code < 500:
                self.refused = True
            else:
                self.failed = True
            self.settle()
            self._record.finish(200, error_kind=error_kind(exc))
            await _stop(pinger)
            await send(encoder.error(exc), last=True)
        else:
            self._record.finish(200)

    async def _keepalive(
        self, send: SendBytes, encoder: StreamEncoder, interval: float, lock: asyncio.Lock
    ) -> None:
        while True:
            quiet = time.monotonic() - self._last_write
            if quiet < interval:
                await asyncio.sleep(interval - quiet)
                continue
            async with lock:
                frame = encoder.keepalive()
                if frame is None:
                    return
                self._last_write = time.monotonic()
                try:
                    await send(frame)
                except OSError:
                    return  # the connection is gone; the relay's own write or the watcher sees it

    # -- one-shot -------------------------------------------------------------------------

    async def collect(self, collector: Collector) -> Finish:
        """The whole answer into `collector`; raises GatewayError on engine failure."""
        try:
            async for event in self._engine.events():
                collector.add(self._on_event(event))
            if self._finish is None:
                collector.add(self._end())
            return self._finished()
        finally:
            await self._engine.aclose()


async def _stop(pinger: asyncio.Task[None] | None) -> None:
    """Ends the keepalive task before the last write, so no frame can follow the end."""
    if pinger is None or pinger.done():
        return
    pinger.cancel()
    try:
        await pinger
    except asyncio.CancelledError:
        # Ours; but if the request's own task is being cancelled too, that must go on.
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0
