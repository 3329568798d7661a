"""A plain OpenAI-style /v1/chat/completions over the same engine, for routers measured in front.

The prompt format is deliberately simple ("role: content" lines, then "assistant:"), so the
output is plain content; GLM rendering and parsing are the gateway's job, not this route's.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Send

from engine.sim.engine import SimEngine
from engine.sim.errors import error_response, read_json
from engine.sim.faults import FaultKind
from engine.sim.native import DONE, events, sse
from engine.sim.requests import SimRequestError, parse_generate
from engine.sim.scheduler import QueueFullError
from engine.sim.state import SimRequest
from engine.sim.watched import WatchedResponse

_FINISH = {"stop": "stop", "length": "length", "abort": "stop"}


def render_messages(messages: Any) -> str:
    if not isinstance(messages, list) or not messages:
        raise SimRequestError("messages must be a non-empty list", "messages")
    lines = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise SimRequestError("each message needs a string role", "messages")
        content = m.get("content") or ""
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            raise SimRequestError("message content must be a string or a list of parts", "messages")
        lines.append(f"{m['role']}: {content}")
    return "\n".join(lines) + "\nassistant:"


def to_generate_body(body: Any, request_id: str | None = None) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise SimRequestError("the body must be a JSON object")
    sampling: dict[str, Any] = {}
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None:
        sampling["max_new_tokens"] = max_tokens
    for key, target in (
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("stop", "stop"),
        ("seed", "sampling_seed"),
        # SGLang's chat request hands its custom_params to the sampling params.
        ("custom_params", "custom_params"),
    ):
        if body.get(key) is not None:
            sampling[target] = body[key]
    return {
        "text": render_messages(body.get("messages")),
        "sampling_params": sampling,
        "stream": body.get("stream", False),
        "custom_params": body.get("custom_params"),
        # SGLang's OpenAI request takes its request id as the `rid` extension field; here a
        # router's x-request-id also counts, so /sim/timings can follow a request through it.
        "rid": body.get("rid") or request_id,
    }


def _finish(req: SimRequest) -> str | None:
    reason = req.finish_reason
    return None if reason is None else _FINISH.get(str(reason["type"]), "stop")


def _usage(req: SimRequest) -> dict[str, Any]:
    return {
        "prompt_tokens": req.prompt_tokens,
        "completion_tokens": req.completion_tokens,
        "total_tokens": req.prompt_tokens + req.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": req.cached_tokens},
    }


async def chat_completions(request: Request) -> Response | WatchedResponse:
    engine: SimEngine = request.app.state.engine
    try:
        raw = await read_json(request, engine)
        request_id = request.headers.get("x-request-id")
        params = parse_generate(
            to_generate_body(raw, request_id), request.headers.get("x-sim-fault"), request_id
        )
        req = engine.create_request(params)
        if req.fault is not None and req.fault.kind is FaultKind.UNAVAILABLE:
            return error_response(
                503, "simulated engine unavailable (fault injection)", "server_error"
            )
        engine.scheduler.submit(req)
    except SimRequestError as exc:
        return error_response(exc.status, exc.message, "invalid_request_error", exc.param)
    except QueueFullError as exc:
        return error_response(503, str(exc), "server_error")
    model = engine.settings.served_model_name
    name_header = (b"x-sim-name", engine.settings.name.encode())
    created = int(time.time())
    cid = f"chatcmpl-{req.rid}"
    include_usage = (
        isinstance(raw.get("stream_options"), dict)
        and raw["stream_options"].get("include_usage") is True
    )

    def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    async def stream() -> AsyncIterator[bytes]:
        yield sse(chunk({"role": "assistant", "content": ""}, None))
        seen = 0
        async for event in events(engine, req):
            if event == DONE or not event.startswith(b'data: {"text"'):
                if event != DONE:
                    yield event
                continue
            data = orjson.loads(event[6:])
            text: str = data["text"]
            final = data["meta_info"]["finish_reason"] is not None
            delta = text[seen:]
            seen = len(text)
            if delta or final:
                yield sse(
                    chunk({"content": delta} if delta else {}, _finish(req) if final else None)
                )
        if include_usage:
            yield sse({**chunk({}, None), "choices": [], "usage": _usage(req)})
        yield DONE

    async def stream_body(send: Send) -> None:
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"), name_header],
                }
            )
            async for piece in stream():
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            if not req.done:
                engine.scheduler.abort(req.rid, "client disconnected")

    async def json_body(send: Send) -> None:
        try:
            while not req.done:
                req.changed.clear()
                await req.changed.wait()
            visible = req.visible[-1] if req.visible else 0
            payload = orjson.dumps(
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": _finish(req),
                            "message": {"role": "assistant", "content": req.text[:visible]},
                        }
                    ],
                    "usage": _usage(req),
                }
            )
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json"), name_header],
                }
            )
            await send({"type": "http.response.body", "body": payload})
        finally:
            if not req.done:
                engine.scheduler.abort(req.rid, "client disconnected")

    def on_disconnect() -> None:
        engine.scheduler.abort(req.rid, "client disconnected")

    return WatchedResponse(stream_body if params.stream else json_body, on_disconnect)
