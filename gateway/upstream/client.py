"""SGLang's native API as the gateway uses it: POST /generate (streamed), POST /abort_request,
POST /tokenize.

Reading the streamed body is gateway.upstream.stream's job. Generation uses the lean wire client
(gateway.upstream.wire) unless `upstream.client: httpx`; an injected `transport=` (an
httpx.MockTransport in the gateway's tests) replaces the network for every call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
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
from gateway.upstream.memory import memory_network
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
    """The shared HTTP clients to every replica, each with its own bounded pool so that one
    kind of traffic never waits behind another: generation (/generate, the lean wire client),
    control (health probes and aborts: they must get through while every generation
    connection is taken), and count (/tokenize: a flood of token counts fills only its own
    pool). Every pool counts the connections in use (`in_use`)."""

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
        # Generation uses the lean wire client (wire.py: it is the per-token hot path). An
        # injected httpx transport (tests) becomes the network beneath it
        # (gateway.upstream.memory), so the production pool runs in every test; with
        # `client: httpx` the transport is called below httpx.AsyncClient's per-request layers
        # (URL merging, cookies, auth, redirects), which an engine needs not.
        self._generation: _Counted | None = None
        if settings.client == "httpx":
            inner = transport or self._httpx_transport()
            self._owned_transport = transport is None
            self._generation = _Counted(inner, settings.max_connections, settings.pool_timeout_s)
        self._transport: httpx.AsyncBaseTransport | None = self._generation
        self._wire = (
            WirePool(
                max_connections=settings.max_connections,
                max_idle=settings.max_keepalive_connections,
                keepalive_expiry=settings.keepalive_expiry_s,
                connect_timeout=settings.connect_timeout_s,
                read_timeout=settings.read_timeout_s,
                pool_timeout=settings.pool_timeout_s,
                connect=None if transport is None else memory_network(transport),
            )
            if settings.client == "wire"
            else None
        )
        self._urls: dict[str, str] = {}
        self._injected = transport
        # A probe or an abort waits for a connection no longer than one of its tries takes
        # (abort_timeout_s): it tries again, rather than queueing behind a burst.
        self._control_pool = self._pool(
            settings.control_max_connections, transport, settings.abort_timeout_s
        )
        self.control = self._small_client(self._control_pool)
        self._count_pool = self._pool(
            settings.count_max_connections, transport, settings.pool_timeout_s
        )
        self._counting = self._small_client(self._count_pool)

    @staticmethod
    def _pool(
        connections: int, transport: httpx.AsyncBaseTransport | None, wait_s: float
    ) -> _Counted:
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        inner = transport or httpx.AsyncHTTPTransport(limits=limits)
        return _Counted(inner, connections, wait_s)

    def _small_client(self, pool: _Counted) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            timeout=httpx.Timeout(
                self._settings.abort_timeout_s, connect=self._settings.connect_timeout_s
            ),
            transport=pool,
        )

    def in_use(self, pool: str) -> int:
        """Connections taken and not given back: "generation", "control" or "count"."""
        if pool == "control":
            return self._control_pool.in_use
        if pool == "count":
            return self._count_pool.in_use
        total = self._wire.in_use if self._wire is not None else 0
        return total + (self._generation.in_use if self._generation is not None else 0)

    async def open_generate(
        self,
        replica: Replica,
        payload: dict[str, Any],
        request_id: str | None = None,
        *,
        traceparent: str | None = None,
    ) -> EngineStream:
        """POST /generate with stream=true; returns once the engine answered with 200.

        `request_id` (the client's x-request-id, or the rid) goes along as the x-request-id
        header: SGLang ignores it, but an operator's proxy or the simulator can log it.
        `traceparent` (a traced request's engine-call span): SGLang makes its request span a
        child of it."""
        url = self._urls.get(replica.base_url)
        if url is None:
            url = self._urls[replica.base_url] = replica.base_url + "/generate"
        body = orjson.dumps(payload)
        loop = asyncio.get_running_loop()
        first_deadline = loop.time() + self.deadlines.first_token_s
        answered: list[ResponseBody] = []
        try:
            async with asyncio.timeout_at(first_deadline):
                answered.append(await self._post(url, body, request_id, traceparent))
        except BaseException as exc:
            # The deadline (or a cancel) can land just after the engine answered: the
            # response is ours to give back before the error goes on.
            for response in answered:
                await response.aclose()
            error = self._post_error(replica, exc)
            if error is None:
                raise
            raise error from exc
        response = answered[0]
        try:
            if response.status_code != 200:
                raise await self._status_error(response)
            return EngineStream(
                response,
                self._max_event_bytes,
                incremental=self._settings.incremental_output,
                first_deadline=first_deadline,
                idle_s=self.deadlines.stream_idle_s,
            )
        except BaseException:
            await response.aclose()
            raise

    def _post_error(self, replica: Replica, exc: BaseException) -> GatewayError | None:
        """What a failed /generate POST is to the client (None: not a network failure)."""
        if isinstance(exc, TimeoutError):
            return UpstreamTimeoutError(
                f"The engine did not start answering within {self.deadlines.first_token_s:g}s "
                "(timeouts.first_token_s).",
                code="first_token_timeout",
            )
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, WireConnectError)):
            return EngineUnreachableError(
                f"The engine replica {replica.name} is unreachable; retry shortly."
            )
        if isinstance(exc, (httpx.PoolTimeout, WirePoolTimeout)):
            return NoReplicaError("All connections to the engine are busy; retry shortly.")
        if isinstance(exc, (httpx.TimeoutException, WireReadTimeout)):
            return UpstreamTimeoutError("The engine did not answer in time.")
        if isinstance(exc, (httpx.HTTPError, WireError)):
            return UpstreamError(f"The engine request failed: {exc}")
        return None

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

    async def _post(
        self, url: str, body: bytes, request_id: str | None = None, traceparent: str | None = None
    ) -> ResponseBody:
        if self._wire is not None and url.startswith("http://"):
            return await self._wire.post(url, body, request_id, traceparent)
        if self._transport is None:
            # An https:// engine: TLS is httpx's job (the wire client speaks plain HTTP only).
            inner = self._injected or self._httpx_transport()
            self._owned_transport = self._injected is None
            self._transport = self._generation = _Counted(
                inner, self._settings.max_connections, self._settings.pool_timeout_s
            )
        headers = _JSON_HEADERS if request_id is None else {**_JSON_HEADERS, _ID: request_id}
        if traceparent is not None:
            headers = {**headers, "traceparent": traceparent}
        request = httpx.Request(
            "POST", url, content=body, headers=headers, extensions={"timeout": self._timeouts}
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
        """Ask the engine to drop request `rid`; never raises (the client is gone anyway).

        Retried (`upstream.abort_attempts`, with a doubling pause from `abort_retry_s`) when
        the engine could not be reached or answered 5xx: a dropped abort leaves the engine
        generating for nobody until its own deadline, holding a running slot and a
        checkpoint. Each try is bounded by `abort_timeout_s` on the control pool, which
        nothing but probes and aborts uses."""
        settings = self._settings
        body = orjson.dumps({"rid": rid})
        pause = settings.abort_retry_s
        for attempt in range(1, settings.abort_attempts + 1):
            try:
                response = await self.control.post(
                    replica.base_url + "/abort_request", content=body, headers=_JSON_HEADERS
                )
            except httpx.HTTPError as exc:
                failure = repr(exc)
            else:
                if response.status_code < 500:
                    return response.status_code < 400
                failure = f"status {response.status_code}"
            if attempt == settings.abort_attempts:
                log.warning(
                    "abort_request %s on %s failed %d times, last: %s",
                    rid, replica.name, attempt, failure,
                )  # fmt: skip
                return False
            await asyncio.sleep(pause)
            pause *= 2
        return False

    async def count_prompt_tokens(self, replica: Replica, text: str) -> int:
        """How many tokens the engine makes of `text` as a /generate prompt (POST /tokenize).

        On the count pool: a count must not wait behind generations, and a flood of counts
        must not take the connections that probes and aborts need."""
        settings = self._settings
        limit = settings.max_tokenize_body_bytes
        body = orjson.dumps({"prompt": text, "add_special_tokens": _ADD_SPECIAL_TOKENS})
        try:
            # httpx's timeouts bound each read; this bounds the whole exchange.
            async with (
                asyncio.timeout(settings.tokenize_timeout_s),
                self._counting.stream(
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
        await self._counting.aclose()


class _Counted(httpx.AsyncBaseTransport):
    """An httpx transport that holds at most `connections` responses open at once and counts
    them: the connections in use, as the pool beneath cannot be asked (httpcore keeps that
    private). Its own bound, not only httpcore's, so that it holds beneath an injected test
    transport too. httpx closes a response in `aclose()`, which every caller reaches in
    `finally` or `async with`."""

    def __init__(
        self, inner: httpx.AsyncBaseTransport, connections: int, pool_timeout_s: float
    ) -> None:
        self._inner = inner
        self._slots = asyncio.Semaphore(connections)
        self._pool_timeout_s = pool_timeout_s
        self.in_use = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            async with asyncio.timeout(self._pool_timeout_s):
                await self._slots.acquire()
        except TimeoutError as exc:
            raise httpx.PoolTimeout("no free engine connection in time", request=request) from exc
        self.in_use += 1
        try:
            response = await self._inner.handle_async_request(request)
        except BaseException:
            self.release()
            raise
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_CountedStream(response, self),
            extensions=response.extensions,
            request=request,
        )

    def release(self) -> None:
        self.in_use -= 1
        self._slots.release()

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CountedStream(httpx.AsyncByteStream):
    def __init__(self, response: httpx.Response, owner: _Counted) -> None:
        self._response = response
        self._owner: _Counted | None = owner

    def __aiter__(self) -> AsyncIterator[bytes]:
        stream = self._response.stream
        assert isinstance(stream, httpx.AsyncByteStream)  # an async transport's response
        return stream.__aiter__()  # no generator hop per chunk

    async def aclose(self) -> None:
        owner, self._owner = self._owner, None
        try:
            await self._response.aclose()
        finally:
            if owner is not None:
                owner.release()


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
