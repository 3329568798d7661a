"""SGLang's native generation API: POST /generate (streaming and not) and /abort_request."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Send

from engine.sim.engine import SimEngine
from engine.sim.errors import error_response, read_json
from engine.sim.faults import Fault, FaultKind
from engine.sim.media import ImageLoadError, MediaValueError
from engine.sim.requests import GenerateParams, SimRequestError, parse_generate
from engine.sim.scheduler import QueueFullError
from engine.sim.state import SimRequest
from engine.sim.watched import InjectedDisconnectError, WatchedResponse

log = logging.getLogger(__name__)

SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
DONE = b"data: [DONE]\n\n"
CRASH_EXIT_CODE = 17
YIELD_EVERY_EVENTS = 8
MID_STREAM = (FaultKind.DIE, FaultKind.CRASH, FaultKind.ERROR, FaultKind.MALFORMED)


def sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _mid_stream(fault: Fault | None, sent: int) -> Fault | None:
    if fault is not None and fault.kind in MID_STREAM and sent >= fault.after_tokens:
        return fault
    return None


async def events(engine: SimEngine, req: SimRequest) -> AsyncIterator[bytes]:
    """One event per token (cumulative text), the finish, then [DONE]; faults on the way."""
    scale = engine.settings.time_scale
    max_lag = engine.settings.max_event_lag
    segments = engine.settings.stream_output
    sent = 0
    without_wait = 0
    while True:
        if (fault := _mid_stream(req.fault, sent)) is not None:
            async for chunk in _strike(engine, req, fault):
                yield chunk
            return
        # With --stream-output an event's output_ids start where the last event's ended.
        since = sent if segments else 0
        if sent < len(req.ids):
            # A client that falls far behind gets the latest state in one event, as SGLang
            # merges pending outputs; otherwise one token per event.
            sent = len(req.ids) if len(req.ids) - sent > max_lag else sent + 1
            final = req.done and req.finish_on_token and sent == len(req.ids)
            if final:
                yield sse(req.event(sent, True, scale, since))
                break
            yield req.encode_event(sent, since)
            without_wait += 1
            if without_wait >= YIELD_EVERY_EVENTS:
                # Writes that never block would otherwise starve the event loop.
                without_wait = 0
                await asyncio.sleep(0)
            continue
        without_wait = 0
        if req.done:
            yield sse(req.event(sent, True, scale, since))
            break
        req.changed.clear()
        await req.changed.wait()
    yield DONE


async def _strike(engine: SimEngine, req: SimRequest, fault: Fault) -> AsyncIterator[bytes]:
    engine.scheduler.abort(req.rid, f"fault injected: {fault.kind.value}", counted=False)
    if fault.kind is FaultKind.CRASH:
        os._exit(CRASH_EXIT_CODE)
    if fault.kind is FaultKind.DIE:
        raise InjectedDisconnectError(req.rid)
    if fault.kind is FaultKind.ERROR:
        yield sse({"error": {"message": "simulated engine error (fault injection)", "code": 500}})
    else:
        yield b'data: {"text": "malformed, "meta_info": \n\n'
    yield DONE


def _disconnect(engine: SimEngine, rid: str) -> None:
    engine.scheduler.abort(rid, "client disconnected")


def _stream_response(
    engine: SimEngine, req: SimRequest, headers: list[tuple[bytes, bytes]]
) -> WatchedResponse:
    async def body(send: Send) -> None:
        try:
            await send(
                {"type": "http.response.start", "status": 200, "headers": SSE_HEADERS + headers}
            )
            async for chunk in events(engine, req):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            if not req.done:
                _disconnect(engine, req.rid)

    return WatchedResponse(body, lambda: _disconnect(engine, req.rid))


def _blocking_response(
    engine: SimEngine, req: SimRequest, headers: list[tuple[bytes, bytes]]
) -> WatchedResponse:
    scale = engine.settings.time_scale

    async def body(send: Send) -> None:
        try:
            while not req.done and _mid_stream(req.fault, len(req.ids)) is None:
                req.changed.clear()
                await req.changed.wait()
            fault = _mid_stream(req.fault, len(req.ids))
            if fault is not None and not req.done:
                payload = b"".join([c async for c in _strike_blocking(engine, req, fault, send)])
                status = 500 if fault.kind is FaultKind.ERROR else 200
            else:
                payload, status = orjson.dumps(req.event(len(req.ids), True, scale)), 200
            start_headers = [(b"content-type", b"application/json"), *headers]
            start_headers.append((b"content-length", str(len(payload)).encode()))
            await send({"type": "http.response.start", "status": status, "headers": start_headers})
            await send({"type": "http.response.body", "body": payload})
        finally:
            if not req.done:
                _disconnect(engine, req.rid)

    return WatchedResponse(body, lambda: _disconnect(engine, req.rid))


async def _strike_blocking(
    engine: SimEngine, req: SimRequest, fault: Fault, send: Send
) -> AsyncIterator[bytes]:
    engine.scheduler.abort(req.rid, f"fault injected: {fault.kind.value}", counted=False)
    if fault.kind is FaultKind.CRASH:
        os._exit(CRASH_EXIT_CODE)
    if fault.kind is FaultKind.DIE:
        # Promise a body, then drop the connection half-way.
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", b"1000")],
            }
        )
        await send({"type": "http.response.body", "body": b'{"text": "', "more_body": True})
        raise InjectedDisconnectError(req.rid)
    if fault.kind is FaultKind.ERROR:
        yield orjson.dumps(
            {"error": {"message": "simulated engine error (fault injection)", "code": 500}}
        )
    else:
        yield b'{"text": "malformed, "meta_info": '


def _engine_value_error(exc: MediaValueError, stream: bool) -> Response:
    """As SGLang's /generate answers a ValueError: a 400, or in the stream after its 200."""
    if not stream:
        return error_response(exc.status, exc.message, "invalid_request_error", exc.param)
    return _in_stream_refusal(exc.message)


def _in_stream_refusal(message: str) -> Response:
    """sglang-kt's streamed answer to a ValueError: 200, one error event, [DONE]."""
    body = sse({"error": {"message": message}}) + DONE
    return Response(body, 200, headers={k.decode(): v.decode() for k, v in SSE_HEADERS})


def _load_failure(exc: ImageLoadError, stream: bool) -> Response | WatchedResponse:
    """SGLang does not catch the RuntimeError of a failed image load: a bare 500, or a stream
    cut right after its 200 (the simulator's 500 says why, as the engine's log does)."""
    log.warning("image load failed (as the engine would): %s", exc.message)
    if not stream:
        return error_response(500, exc.message, "server_error")

    async def body(send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        raise InjectedDisconnectError(exc.message)

    return WatchedResponse(body, lambda: None)


async def generate(request: Request) -> Response | WatchedResponse:
    engine: SimEngine = request.app.state.engine
    params: GenerateParams | None = None
    streamed = False
    try:
        body = await read_json(request, engine)
        streamed = isinstance(body, dict) and body.get("stream") is True
        params = parse_generate(
            body, request.headers.get("x-sim-fault"), request.headers.get("x-request-id")
        )
        req = engine.create_request(params, await engine.load_images(params))
        if req.fault is not None and req.fault.kind is FaultKind.UNAVAILABLE:
            return error_response(
                503, "simulated engine unavailable (fault injection)", "server_error"
            )
        engine.scheduler.submit(req)
    except MediaValueError as exc:
        return _engine_value_error(exc, params is not None and params.stream)
    except ImageLoadError as exc:
        return _load_failure(exc, params is not None and params.stream)
    except SimRequestError as exc:
        if exc.in_stream:
            if streamed:
                return _in_stream_refusal(exc.message)
            # sglang-kt's non-streamed ValueError answer: the message alone.
            return Response(
                orjson.dumps({"error": {"message": exc.message}}),
                exc.status,
                media_type="application/json",
            )
        return error_response(exc.status, exc.message, "invalid_request_error", exc.param)
    except QueueFullError as exc:
        return error_response(503, str(exc), "server_error", headers={"retry-after": "1"})
    headers = [(b"x-sim-name", engine.settings.name.encode())]
    if params.stream:
        return _stream_response(engine, req, headers)
    return _blocking_response(engine, req, headers)


async def abort_request(request: Request) -> Response:
    engine: SimEngine = request.app.state.engine
    try:
        body = await read_json(request, engine)
    except SimRequestError as exc:
        return error_response(exc.status, exc.message, "invalid_request_error", exc.param)
    if not isinstance(body, dict):
        return error_response(400, "the body must be a JSON object", "invalid_request_error")
    rid = body.get("rid", "")
    abort_all = body.get("abort_all", False)
    if not isinstance(rid, str) or not isinstance(abort_all, bool):
        return error_response(
            400, "rid must be a string and abort_all a boolean", "invalid_request_error"
        )
    if abort_all:
        count = engine.scheduler.abort_all("aborted by /abort_request")
    else:
        count = engine.scheduler.abort(rid, "aborted by /abort_request")
    return JSONResponse({"aborted": count})
