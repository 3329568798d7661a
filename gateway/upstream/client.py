"""SGLang's native API as the gateway uses it: POST /generate (streamed), POST /abort_request,
POST /tokenize.

Reading the streamed body is gateway.upstream.stream's job. Generation uses the lean wire client
(gateway.upstream.wire) unless `upstream.client: httpx`; an injected `transport=` (an
httpx.MockTransport in the gateway's tests) replaces the network for every call.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import orjson

from gateway.errors import (
    EngineUnreachableError,
    GatewayError,
    InvalidRequestError,
    NoReplicaError,
    UpstreamError,
    UpstreamTimeoutError,
    context_error,
)
from gateway.routing.replica import Replica
from gateway.settings import TimeoutSettings, UpstreamSettings
from gateway.upstream.stream import EngineStream, HttpxBody, ResponseBody
from gateway.upstream.wire import (
    WireConnectError,
    WireError,
    WirePool,
    WirePoolTimeout,
    WireReadTimeout,
)

log = logging.getLogger("gateway.upstream")

_JSON_HEADERS = {"content-type": "application/json"}
_ID = "x-request-id"
# sglang-kt 0.7.2 serves /tokenize and /v1/tokenize with one handler (entrypoints/http_server.py);
# the native path sits next to /generate and /abort_request.
_TOKENIZE_PATH = "/tokenize"
# /generate tokenizes a `text` prompt with the tokenizer's defaults, add_special_tokens
# included (TokenizerManager._tokenize_texts calls tokenizer(text)), so /tokenize must too for
# its count to be the prompt_tokens /generate reports: were the tokenizer to add a BOS to the
# rendered prompt (which spells [gMASK]<sop> itself), /generate's prompt would carry it too.
_ADD_SPECIAL_TOKENS = True


class EngineClient:
    """The shared HTTP clients to every replica: one for generation, one small one for control."""

    def __init__(
        self,
        settings: UpstreamSettings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        deadlines: TimeoutSettings | None = None,
    ) -> None:
        self._settings = settings
        # First-token and idle deadlines of every /generate (settings.timeouts).
        self.deadlines = deadlines or TimeoutSettings()
        self._owned_transport = False
        self._max_event_bytes = settings.max_event_bytes
        self._timeouts = {
            "connect": settings.connect_timeout_s,
            "read": settings.read_timeout_s,
            "write": settings.write_timeout_s,
            "pool": settings.pool_timeout_s,
        }
        # Generation uses the lean wire client (engine_wire.py: it is the per-token hot path);
        # an injected httpx transport (tests) replaces it, called below httpx.AsyncClient's
        # per-request layers (URL merging, cookies, auth, redirects), which an engine needs not.
        if transport is None and settings.client == "httpx":
            transport = self._httpx_transport()
            self._owned_transport = True
        self._transport = transport
        self._wire = (
            WirePool(
                max_connections=settings.max_connections,
                max_idle=settings.max_keepalive_connections,
                keepalive_expiry=settings.keepalive_expiry_s,
                connect_timeout=settings.connect_timeout_s,
                read_timeout=settings.read_timeout_s,
                pool_timeout=settings.pool_timeout_s,
            )
            if transport is None
            else None
        )
        self._urls: dict[str, str] = {}
        # Aborts and health probes must not wait behind a pool full of long generations.
        self.control = httpx.AsyncClient(
            timeout=httpx.Timeout(settings.abort_timeout_s, connect=settings.connect_timeout_s),
            limits=httpx.Limits(
                max_connections=settings.control_max_connections,
                max_keepalive_connections=settings.control_max_connections,
            ),
            transport=transport,
        )

    async def open_generate(
        self, replica: Replica, payload: dict[str, Any], request_id: str | None = None
    ) -> EngineStream:
        """POST /generate with stream=true; returns once the engine answered with 200.

        `request_id` (the client's x-request-id, or the rid) goes along as the x-request-id
        header: SGLang ignores it, but an operator's proxy or the simulator can log it."""
        url = self._urls.get(replica.base_url)
        if url is None:
            url = self._urls[replica.base_url] = replica.base_url + "/generate"
        body = orjson.dumps(payload)
        loop = asyncio.get_running_loop()
        first_deadline = loop.time() + self.deadlines.first_token_s
        try:
            async with asyncio.timeout_at(first_deadline):
                response = await self._post(url, body, request_id)
        except TimeoutError as exc:
            raise UpstreamTimeoutError(
                f"The engine did not start answering within {self.deadlines.first_token_s:g}s "
                "(timeouts.first_token_s).",
                code="first_token_timeout",
            ) from exc
        except (httpx.ConnectError, httpx.ConnectTimeout, WireConnectError) as exc:
            raise EngineUnreachableError(
                f"The engine replica {replica.name} is unreachable; retry shortly."
            ) from exc
        except (httpx.PoolTimeout, WirePoolTimeout) as exc:
            raise NoReplicaError("All connections to the engine are busy; retry shortly.") from exc
        except (httpx.TimeoutException, WireReadTimeout) as exc:
            raise UpstreamTimeoutError("The engine did not answer in time.") from exc
        except (httpx.HTTPError, WireError) as exc:
            raise UpstreamError(f"The engine request failed: {exc}") from exc
        if response.status_code != 200:
            raise await self._status_error(response)
        return EngineStream(
            response,
            self._max_event_bytes,
            incremental=self._settings.incremental_output,
            first_deadline=first_deadline,
            idle_s=self.deadlines.stream_idle_s,
        )

    async def prefill(self, replica: Replica, payload: dict[str, Any]) -> dict[str, Any]:
        """POST /generate for a prompt that generates nothing (`max_new_tokens` 0: the engine
        prefills it and keeps its checkpoints); the answer's meta_info."""
        stream = await self.open_generate(replica, payload)
        meta: dict[str, Any] = {}
        try:
            async for event in stream.events():
                meta = event.meta or meta
        finally:
            await stream.aclose()
        return meta

    async def _post(self, url: str, body: bytes, request_id: str | None = None) -> ResponseBody:
        if self._wire is not None and url.startswith("http://"):
            return await self._wire.post(url, body, request_id)
        if self._transport is None:
            # An https:// engine: TLS is httpx's job (the wire client speaks plain HTTP only).
            self._transport = self._httpx_transport()
            self._owned_transport = True
        request = httpx.Request(
            "POST",
            url,
            content=body,
            headers=_JSON_HEADERS if request_id is None else {**_JSON_HEADERS, _ID: request_id},
            extensions={"timeout": self._timeouts},
        )
        return HttpxBody(await self._transport.handle_async_request(request))

    def _httpx_transport(self) -> httpx.AsyncHTTPTransport:
        settings = self._settings
        return httpx.AsyncHTTPTransport(
            limits=httpx.Limits(
                max_connections=settings.max_connections,
                max_keepalive_connections=settings.max_keepalive_connections,
                keepalive_expiry=settings.keepalive_expiry_s,
            )
        )

    async def _status_error(self, response: ResponseBody) -> GatewayError:
        body = bytearray()
        try:
            async for chunk in response:
                body += chunk
                if len(body) >= self._settings.max_error_body_bytes:
                    break
        except (httpx.HTTPError, WireError):
            pass
        finally:
            await response.aclose()
        detail = _error_message(bytes(body[: self._settings.max_error_body_bytes]))
        status = response.status_code
        if status in (400, 413, 422):
            # The engine refused the input itself (prompt longer than the context, bad schema).
            return context_error(detail) or InvalidRequestError(
                f"The engine rejected the request: {detail}"
            )
        if status == 503:
            return NoReplicaError(f"The engine is not ready: {detail}", code="engine_unavailable")
        return UpstreamError(f"The engine answered {status}: {detail}")

    async def abort(self, replica: Replica, rid: str) -> bool:
        """Ask the engine to drop request `rid`; never raises (the client is gone anyway)."""
        try:
            response = await self.control.post(
                replica.base_url + "/abort_request",
                content=orjson.dumps({"rid": rid}),
                headers={"content-type": "application/json"},
            )
        except httpx.HTTPError as exc:
            log.warning("abort_request %s on %s failed: %r", rid, replica.name, exc)
            return False
        return response.status_code < 400

    async def count_prompt_tokens(self, replica: Replica, text: str) -> int:
        """How many tokens the engine makes of `text` as a /generate prompt (POST /tokenize).

        On the control client: a count is small work, and must not wait behind generations."""
        settings = self._settings
        limit = settings.max_tokenize_body_bytes
        body = orjson.dumps({"prompt": text, "add_special_tokens": _ADD_SPECIAL_TOKENS})
        try:
            # httpx's timeouts bound each read; this bounds the whole exchange.
            async with (
                asyncio.timeout(settings.tokenize_timeout_s),
                self.control.stream(
                    "POST",
                    replica.base_url + _TOKENIZE_PATH,
                    content=body,
                    headers=_JSON_HEADERS,
                    timeout=httpx.Timeout(
                        settings.tokenize_timeout_s, connect=settings.connect_timeout_s
                    ),
                ) as response,
            ):
                if response.status_code != 200:
                    raise await self._status_error(HttpxBody(response))
                answer = bytearray()
                async for chunk in response.aiter_bytes():
                    answer += chunk
                    if len(answer) > limit:
                        raise UpstreamError(
                            f"The engine's /tokenize answer exceeds {limit} bytes "
                            "(upstream.max_tokenize_body_bytes)."
                        )
        except TimeoutError as exc:
            raise UpstreamTimeoutError(
                f"The engine did not count the prompt's tokens within "
                f"{settings.tokenize_timeout_s:g}s (upstream.tokenize_timeout_s).",
                code="tokenize_timeout",
            ) from exc
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise EngineUnreachableError(
                f"The engine replica {replica.name} is unreachable; retry shortly."
            ) from exc
        except httpx.PoolTimeout as exc:
            raise NoReplicaError("All connections to the engine are busy; retry shortly.") from exc
        except httpx.TimeoutException as exc:
            raise UpstreamTimeoutError("The engine did not answer in time.") from exc
        except httpx.HTTPError as exc:
            raise UpstreamError(f"The engine's /tokenize request failed: {exc}") from exc
        return _token_count(bytes(answer))

    async def aclose(self) -> None:
        if self._wire is not None:
            self._wire.close()
        if self._owned_transport and self._transport is not None:
            await self._transport.aclose()
        await self.control.aclose()


def _token_count(body: bytes) -> int:
    """`count` of a /tokenize answer for one prompt, else the length of its `tokens`."""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise UpstreamError(f"The engine's /tokenize answer is not JSON: {exc}") from exc
    if isinstance(answer, dict):
        count = answer.get("count")
        if count is None and isinstance(answer.get("tokens"), list):
            count = len(answer["tokens"])
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            return count
    raise UpstreamError(
        f"The engine's /tokenize answer has no token count: {body[:200].decode(errors='replace')}"
    )


def _error_message(body: bytes) -> str:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode(errors="replace").strip() or "(empty body)"
    if isinstance(obj, dict):
        error = obj.get("error", obj)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
        if isinstance(obj.get("message"), str):
            return str(obj["message"])
    return body.decode(errors="replace")
