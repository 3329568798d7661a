"""The body of a streamed /generate response, read as engine events.

SGLang sends `data: {json}` events; `text` is the whole output so far (gateway.stream.text_diff
turns it into deltas), `meta_info` carries token counts and, on the last event, the finish
reason; an error arrives in-stream as `data: {"error": ...}`; the stream ends with `[DONE]`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import orjson

from gateway.errors import (
    EngineRefusalError,
    GatewayError,
    UpstreamStreamError,
    UpstreamTimeoutError,
    context_error,
)
from gateway.upstream.wire import WireError, WireReadTimeout, WireResponse


@dataclass(slots=True)
class EngineEvent:
    """One event of a /generate stream."""

    text: str
    meta: dict[str, Any]

    @property
    def finish_reason(self) -> dict[str, Any] | None:
        reason = self.meta.get("finish_reason")
        return reason if isinstance(reason, dict) else None

    def followed_by(self, later: EngineEvent) -> EngineEvent:
        """Two incremental events as one: texts joined, the later event's meta_info."""
        return EngineEvent(self.text + later.text, later.meta or self.meta)

    @property
    def completion_tokens(self) -> int:
        value = self.meta.get("completion_tokens", 0)
        return value if isinstance(value, int) else 0


class ResponseBody(Protocol):
    """A streamed response body: our wire client's, or httpx's behind `_HttpxBody`."""

    status_code: int

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


class HttpxBody:
    """An httpx response as a ResponseBody (injected transports: tests)."""

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status_code = response.status_code

    async def __aiter__(self) -> AsyncIterator[bytes]:
        # The raw stream: SGLang does not compress, so httpx's decoding layers only cost time.
        async for chunk in self._response.stream:  # type: ignore[union-attr]
            yield chunk

    async def aclose(self) -> None:
        await self._response.aclose()


class EngineStream:
    """An open /generate response; iterate `events()`, always `aclose()`.

    Events that arrive together (one network read) are coalesced into one: with cumulative
    text only the newest event matters, so the others are not even JSON-decoded (they are
    only checked for an error). A busy gateway thus does less work per token, not more, and
    a long answer is not re-parsed once per token when the engine runs ahead of us.
    """

    def __init__(
        self,
        response: ResponseBody,
        max_event_bytes: int,
        *,
        incremental: bool = False,
        first_deadline: float | None = None,
        idle_s: float | None = None,
    ) -> None:
        self._response = response
        self._max_event_bytes = max_event_bytes
        self._incremental = incremental
        # Event-loop time by which the first output must arrive, and the longest gap after it.
        self._first_deadline = first_deadline
        self._idle_s = idle_s
        self._deadline: float | None = None
        # The wire client times its reads itself: it takes the deadline into its one timer.
        self._wire = response if isinstance(response, WireResponse) else None
        if self._wire is not None:
            self._wire.deadline = self._next_deadline

    _got_output = False
    # The first read, started by `check_refusal` and taken by `events()`.
    _first_read: asyncio.Future[bytes | None] | None = None
    _chunks: AsyncIterator[bytes] | None = None

    async def check_refusal(self, within_s: float) -> None:
        """Raise the engine's refusal if it comes within `within_s`; else leave the stream be.

        sglang-kt answers a streamed /generate with 200 at once and, when it refuses the
        request (a prompt past the context, sampling values it rejects), sends the refusal
        as the first event. Its checks run before the scheduler sees the request, so a
        refusal comes in milliseconds; a prefill takes far longer. Waiting this long for the
        first event, before the client is sent a status, turns a refusal into the face's
        4xx instead of an error event inside a 200 stream (which clients do not read as
        "the prompt is too long"). The read goes on in the background either way and
        `events()` takes it: nothing is read twice or lost.
        """
        self._chunks = aiter(self._response)
        first = asyncio.ensure_future(self._read(self._chunks))
        self._first_read = first
        done, _ = await asyncio.wait({first}, timeout=within_s)
        if not done or first.exception() is not None:
            return  # still prefilling, or a failure `events()` reports as usual
        chunk = first.result()
        head = chunk.split(b"\n\n", 1)[0] if chunk else b""
        if b'"error"' in head[:48]:
            try:
                self._decode(head)
            except UpstreamStreamError:
                return  # an engine fault: `events()` reports it, where it belongs

    def _timeout_error(self) -> UpstreamTimeoutError:
        """One of our deadlines passed: first-token before any output, idle after it."""
        if self._got_output:
            return UpstreamTimeoutError(
                f"The engine sent nothing for {self._idle_s:g}s mid-answer "
                "(timeouts.stream_idle_s).",
                code="stream_idle_timeout",
            )
        return UpstreamTimeoutError(
            "The engine produced no output before the first-token deadline "
            "(timeouts.first_token_s).",
            code="first_token_timeout",
        )

    def _next_deadline(self) -> float | None:
        """Event-loop time by which the next network read must complete."""
        if not self._got_output:
            self._deadline = self._first_deadline
        elif self._idle_s is not None:
            self._deadline = asyncio.get_running_loop().time() + self._idle_s
        return self._deadline

    async def _read(self, chunks: AsyncIterator[bytes]) -> bytes | None:
        # Only the network read is timed, never the consumer's work between events (a slow
        # client reading its stream is not the engine's silence).
        if self._wire is not None:
            return await self._wire.next_chunk()
        async with asyncio.timeout_at(self._next_deadline()):
            return await anext(chunks, None)

    def _output(self, event: EngineEvent) -> EngineEvent:
        if event.text or event.completion_tokens:
            self._got_output = True
        return event

    def _deadline_passed(self) -> bool:
        # uvloop's timers run on a millisecond grid and may fire a little early.
        deadline = self._deadline
        return deadline is not None and asyncio.get_running_loop().time() >= deadline - 0.05

    async def _next(self, chunks: AsyncIterator[bytes]) -> bytes | None:
        first, self._first_read = self._first_read, None
        if first is not None:
            return await first
        return await self._read(chunks)

    async def events(self) -> AsyncIterator[EngineEvent]:
        buf = bytearray()
        chunks = self._chunks if self._chunks is not None else aiter(self._response)
        try:
            while (chunk := await self._next(chunks)) is not None:
                if (
                    not buf
                    and chunk.startswith(b"data: {")
                    and chunk.find(b"\n") == len(chunk) - 2
                    and b'"error"' not in chunk[:48]
                ):
                    # The usual read: one event on one line. SGLang repeats the whole output
                    # in each, so it is decoded in place: no split, no copies of it but one.
                    yield self._output(self._decode_json(chunk, 6, len(chunk) - 2))
                    continue
                if not buf and chunk.endswith(b"\n\n"):
                    # The usual read: whole events only, nothing carried over.
                    raws = chunk.split(b"\n\n")
                else:
                    buf += chunk
                    end = buf.rfind(b"\n\n")
                    if end < 0:
                        if len(buf) > self._max_event_bytes:
                            raise UpstreamStreamError(
                                "The engine sent an event larger than allowed."
                            )
                        continue
                    raws = bytes(buf[: end + 2]).split(b"\n\n")
                    del buf[: end + 2]
                raws.pop()  # what follows the last separator: empty
                newest: bytes | None = None
                previous: bytes | None = None
                merged: EngineEvent | None = None
                done = False
                for raw in raws:
                    if b'"error"' in raw[:48]:
                        # What came before an in-stream error is relayed before it.
                        if newest is not None:
                            merged, newest = self._decode(newest), None
                        if merged is not None:
                            yield self._output(merged)
                            merged = None
                    if self._incremental:
                        try:
                            event = self._decode(raw)
                        except UpstreamStreamError:
                            if merged is not None:
                                yield self._output(merged)  # the tokens before a bad event
                            raise
                        if event is None:
                            done = True
                            break
                        merged = event if merged is None else merged.followed_by(event)
                    elif raw.endswith(b"[DONE]") and self._decode(raw) is None:
                        done = True
                        break
                    else:
                        if b'"error"' in raw[:48]:
                            self._decode(raw)  # raises with the engine's message
                        previous, newest = newest, raw
                if newest is not None:
                    try:
                        merged = self._decode(newest)
                    except UpstreamStreamError:
                        # A bad last event (not JSON) of the read: the one before it still
                        # carries the text so far, which the client gets before the error.
                        before = self._decode(previous) if previous is not None else None
                        if before is not None:
                            yield self._output(before)
                        raise
                if merged is not None:
                    yield self._output(merged)
                if done:
                    await self._drain(chunks)
                    return
                if len(buf) > self._max_event_bytes:
                    raise UpstreamStreamError("The engine sent an event larger than allowed.")
        except EngineRefusalError as exc:
            if self._got_output:
                # Nothing a client sent is refused once generation has begun.
                raise UpstreamStreamError(
                    f"The engine reported an error: {exc.engine_message}"
                ) from exc
            raise
        except TimeoutError as exc:
            raise self._timeout_error() from exc  # httpx path: asyncio.timeout_at in _read
        except (httpx.TimeoutException, WireReadTimeout) as exc:
            if self._deadline_passed():
                raise self._timeout_error() from exc
            raise UpstreamStreamError("The engine stopped sending (read timeout).") from exc
        except (httpx.HTTPError, WireError) as exc:
            raise UpstreamStreamError(f"The engine stream broke: {exc}") from exc
        raise UpstreamStreamError("The engine stream ended without [DONE].")

    @staticmethod
    async def _drain(chunks: AsyncIterator[bytes]) -> None:
        """Read to the end of the response (the chunked terminator after [DONE]): a response
        closed before its end takes its connection with it, and every request would pay a
        new TCP connection to the engine."""
        async for _ in chunks:
            pass

    @staticmethod
    def _decode(raw: bytes) -> EngineEvent | None:
        """None on [DONE]; raises on an in-stream error event."""
        if raw.startswith(b"data:") and b"\n" not in raw:
            data = raw[5:].strip()  # the usual event: one data line
        else:
            data = b""
            for line in raw.split(b"\n"):
                if line.startswith(b"data:"):
                    data = line[5:].strip()
        if data == b"[DONE]":
            return None
        if not data:
            return EngineEvent("", {})
        return EngineStream._decode_json(data, 0, len(data))

    @staticmethod
    def _decode_json(data: bytes, start: int, end: int) -> EngineEvent:
        """The event whose JSON is data[start:end]; raises on an in-stream error event."""
        try:
            obj = orjson.loads(_without_output_ids(data, start, end))
        except orjson.JSONDecodeError:
            try:
                # Whatever the cut did, the event as sent decides.
                obj = orjson.loads(memoryview(data)[start:end])
            except orjson.JSONDecodeError as exc:
                raise UpstreamStreamError("The engine sent an event that is not JSON.") from exc
        if not isinstance(obj, dict):
            raise UpstreamStreamError("The engine sent an event that is not a JSON object.")
        error = obj.get("error")
        if error is not None:
            raise _stream_error(error)
        text = obj.get("text")
        meta = obj.get("meta_info")
        return EngineEvent(
            text if isinstance(text, str) else "", meta if isinstance(meta, dict) else {}
        )

    async def aclose(self) -> None:
        first, self._first_read = self._first_read, None
        if first is not None and not first.done():
            first.cancel()
            await asyncio.gather(first, return_exceptions=True)
        await self._response.aclose()


def _stream_error(error: object) -> GatewayError:
    """What an in-stream `{"error": ...}` event means.

    sglang-kt sends one in place of the whole stream when it refuses the request: its
    /generate turns a ValueError (sampling params it rejects, a prompt longer than the
    context) into this event under a 200 stream, where the same request unstreamed is an
    HTTP 400 (entrypoints/http_server.py). So the event is the client's fault unless it says
    otherwise with a 5xx `code` (as the simulator's injected engine faults do), or it comes
    after output (`EngineStream.events` turns those into engine faults: sglang-kt validates
    before it generates).
    """
    details = error if isinstance(error, dict) else {}
    message = str(details.get("message") if details else error)
    code = details.get("code")
    if isinstance(code, int) and not isinstance(code, bool) and code >= 500:
        return UpstreamStreamError(f"The engine reported an error: {message}")
    return context_error(message) or EngineRefusalError(message)


_OUTPUT_IDS = b',"output_ids":['


def _without_output_ids(data: bytes, start: int, end: int) -> bytes | memoryview:
    """The event in data[start:end] without its `output_ids`, which the gateway never reads.

    By default SGLang's events carry every token id generated so far, like `text`: decoding
    them makes a list of n ints per event, O(n^2) over an answer (at 256 tokens the decode was
    the largest single line of the gateway's profile). The launcher starts SGLang with
    --stream-output, which sends only the new ids, but an engine started otherwise must cost
    no more. Cutting the array out is two C-speed scans. The match is structural: inside a
    JSON string a quote is always escaped, so `,"` cannot occur there, and token ids are a
    flat array of ints, closed by the first `]`. Anything unexpected (spaces from another
    JSON encoder, a different layout) leaves the event as it is.
    """
    cut = data.find(_OUTPUT_IDS, start, end)
    close = -1 if cut < 0 else data.find(b"]", cut + len(_OUTPUT_IDS), end)
    if close < 0:
        return memoryview(data)[start:end]  # orjson reads a view: no copy
    return data[start:cut] + data[close + 1 : end]
