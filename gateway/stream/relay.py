"""Hops 5 and 6 for one choice: engine events -> parsed deltas -> OpenAI chunks or one message.

The streaming and the one-shot paths share `_on_event`, so a streamed answer and a
non-streamed one are built from the same deltas.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.engine_stream import EngineEvent, EngineStream
from gateway.errors import GatewayError, InvalidRequestError, UpstreamStreamError
from gateway.observability.timeline import RequestRecord
from gateway.parsers.base import (
    ContentDelta,
    OutputParser,
    ParsedDelta,
    ReasoningDelta,
)
from gateway.stream import sse
from gateway.stream.chunks import ChunkBuilder, MessageAccumulator
from gateway.stream.sse import SendBytes
from gateway.stream.text_diff import TextDiffer


def error_kind(error: GatewayError) -> str:
    """Bounded label for flashbox_errors_total{kind}."""
    return type(error).__name__.removesuffix("Error").lower() or "gateway"


class ChatRelay:
    def __init__(
        self,
        *,
        engine: EngineStream,
        parser: OutputParser,
        differ: TextDiffer,
        record: RequestRecord,
        completion_id: str,
        created: int,
        model: str,
    ) -> None:
        self._engine = engine
        self._parser = parser
        self._differ = differ
        self._record = record
        self._id = completion_id
        self._created = created
        self._model = model
        self._finish: dict[str, Any] | None = None
        self._meta: dict[str, Any] = {}
        self.streamed_tokens = False
        # True when the engine failed mid-answer (for the routing report).
        self.failed = False
        self._scan_firsts = True
        self._usage: dict[str, Any] | None = None

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
        parsed = self._parser.feed(text) if text else []
        if finish is not None:
            parsed += self._parser.finish()
        if parsed and self._scan_firsts:
            self._note_firsts(parsed, now)
        return parsed

    def _note_firsts(self, parsed: list[ParsedDelta], now: float) -> None:
        record = self._record
        record.first_token(now)
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
        parsed = self._parser.feed(text) if text else []
        return parsed + self._parser.finish()

    def _finish_reason(self) -> str:
        finish = self._finish or {}
        kind = finish.get("type")
        if kind == "abort":
            message = str(finish.get("message") or "the engine aborted the request")
            status = finish.get("status_code")
            if isinstance(status, int) and 400 <= status < 500:
                raise InvalidRequestError(f"The engine rejected the request: {message}")
            raise UpstreamStreamError(f"The engine aborted the request: {message}")
        if self._parser.made_tool_calls:
            return "tool_calls"
        return "length" if kind == "length" else "stop"

    def settle(self) -> dict[str, Any]:
        """At the end: token counts into the record, rejected tool calls counted; usage."""
        if self._usage is not None:
            return self._usage
        rejected = self._record.metrics.tool_calls_rejected
        for call in self._parser.rejected_tool_calls:
            rejected.labels(reason=call.reason).inc()
        meta, record = self._meta, self._record
        prompt = _int(meta.get("prompt_tokens"))
        completion = _int(meta.get("completion_tokens"))
        cached = _int(meta.get("cached_tokens"))
        record.prompt_tokens, record.completion_tokens, record.cached_tokens = (
            prompt,
            completion,
            cached,
        )
        self._usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        return self._usage

    @property
    def phase(self) -> str:
        return "streaming" if self.streamed_tokens else "before_first_token"

    async def aclose(self) -> None:
        await self._engine.aclose()

    # -- streaming ------------------------------------------------------------------------

    async def stream(self, send: SendBytes, *, include_usage: bool) -> None:
        """Relay the whole answer as SSE; ends the request's record."""
        builder = ChunkBuilder(self._id, self._created, self._model)
        # The role chunk goes out with the first output, as SGLang's own server sends it: one
        # write and one client wake-up fewer per request. The headers went out already.
        head = builder.role()
        try:
            async for event in self._engine.events():
                parsed = self._on_event(event)
                if parsed:
                    await send(head + builder.deltas(parsed))
                    head = b""
            if self._finish is None:
                parsed = self._end()
                if parsed:
                    await send(head + builder.deltas(parsed))
                    head = b""
            tail = builder.finish(self._finish_reason())
            usage = self.settle()
            if include_usage:
                tail += builder.usage(usage)
            # The end of the response goes out with [DONE], in one write and before the
            # record is finished: a client that reads to the end (the async openai client
            # does, to reuse its connection) is done at once.
            await send(head + tail + sse.DONE, last=True)
        except GatewayError as exc:
            self.failed = True
            self.settle()
            self._record.finish(200, error_kind=error_kind(exc))
            await send(head + sse.error_event(exc) + sse.DONE, last=True)
        else:
            self._record.finish(200)
        finally:
            await self._engine.aclose()

    # -- one-shot -------------------------------------------------------------------------

    async def collect(self) -> dict[str, Any]:
        """The whole answer as one ChatCompletion; raises GatewayError on engine failure."""
        message = MessageAccumulator()
        try:
            async for event in self._engine.events():
                message.add(self._on_event(event))
            if self._finish is None:
                message.add(self._end())
            reason = self._finish_reason()
        finally:
            await self._engine.aclose()
        return {
            "id": self._id,
            "object": "chat.completion",
            "created": self._created,
            "model": self._model,
            "choices": [
                {
                    "index": 0,
                    "message": message.message(),
                    "logprobs": None,
                    "finish_reason": reason,
                }
            ],
            "usage": self.settle(),
        }


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0
