"""Hops 2-4 for one admitted chat request, and the client-disconnect handling around them.

Phases, as `flashbox_upstream_aborts_total{phase}` names them: "queued" (the /generate request
is sent but the engine has not answered yet), "before_first_token" (streaming, no token relayed
yet), "streaming", and "non_streaming". Once /generate is sent, a client that leaves always
costs the engine an abort_request.
"""

from __future__ import annotations

import asyncio
import random
import time
from functools import partial
from typing import Any

import orjson
from starlette.responses import Response
from starlette.types import Receive

from gateway.engine_stream import EngineStream
from gateway.errors import ClientDisconnected, GatewayError
from gateway.observability.timeline import RequestRecord
from gateway.routes.chat_input import ChatInput
from gateway.routes.chat_route import backoff_s, classify_failure, request_session_key
from gateway.routing import Outcome, Replica, RequestContext
from gateway.sampling import add_constraint, generate_body, template_kwargs
from gateway.state import AppState
from gateway.stream.relay import ChatRelay, error_kind
from gateway.stream.response import DisconnectWatcher, SSEResponse
from gateway.stream.text_diff import TextDiffer


class ChatRun:
    def __init__(
        self,
        state: AppState,
        chat: ChatInput,
        record: RequestRecord,
        scope_state: dict[str, Any],
        session_header: str | None,
    ) -> None:
        self._state = state
        self._chat = chat
        self._record = record
        self._scope_state = scope_state
        # The engine's rid (gateway.middleware makes it); the client's own id, for the engine's
        # logs, travels as the x-request-id header of /generate.
        self._rid: str = scope_state["rid"]
        self._request_id: str = scope_state["request_id"]
        # Hashed here, before anything could log it (gateway.routing.session_key).
        self._session_key = request_session_key(chat, session_header, state.settings.routing)
        self._tool_choice = _tool_choice(chat)
        self._ctx: RequestContext | None = None
        self._replica: Replica | None = None
        self._relay: ChatRelay | None = None
        self._upstream_sent = False
        self._outcome = Outcome.OK
        self._closed = False

    async def respond(self, receive: Receive) -> Response:
        watcher = DisconnectWatcher(receive)
        watcher.start()
        streaming = False
        try:
            relay = await watcher.run(self._prepare())
            if self._chat.request.stream:
                streaming = True
                body = partial(relay.stream, include_usage=self._chat.request.include_usage)
                return SSEResponse(body, watcher, self._client_gone, self._close)
            result = await watcher.run(relay.collect())
            self._record.finish(200)
            return Response(orjson.dumps(result), media_type="application/json")
        except ClientDisconnected:
            await self._client_gone()
            return Response(status_code=499)
        except GatewayError as exc:
            self._outcome = Outcome.UPSTREAM_ERROR
            self._record.finish(exc.status_code, error_kind=error_kind(exc))
            raise
        finally:
            if not streaming:
                watcher.stop()
                self._close()

    async def _prepare(self) -> ChatRelay:
        state, chat, record = self._state, self._chat, self._record
        record.mark("queue")
        prompt = await self._render()
        record.mark("render")
        ctx = self._ctx = RequestContext(self._rid, self._session_key, prompt)
        tag = state.settings.model.reasoning_open_tag
        in_reasoning = bool(tag) and prompt.endswith(tag)
        body = generate_body(chat.request, prompt, self._rid, state.settings)
        constraint = state.constraint_builder(
            tools=chat.tools, tool_choice=self._tool_choice, starts_in_reasoning=in_reasoning
        )
        add_constraint(body, constraint)
        # Built before /generate is sent: a tool_choice the parser refuses is a 400 that must
        # not leave a generation running on the engine.
        parser = state.parser_factory(
            tools=chat.tools, tool_choice=self._tool_choice, starts_in_reasoning=in_reasoning
        )
        engine = await self._open(ctx, body)
        record.mark("upstream_first_byte")
        self._relay = ChatRelay(
            engine=engine,
            parser=parser,
            differ=TextDiffer(incremental=state.settings.upstream.incremental_output),
            record=record,
            completion_id=f"chatcmpl-{self._rid}",
            created=int(time.time()),
            model=chat.model,
        )
        return self._relay

    async def _open(self, ctx: RequestContext, body: dict[str, Any]) -> EngineStream:
        """Route and send /generate. Nothing has reached the client yet, so a connect error or
        an engine 5xx is retried on another replica, a bounded number of times."""
        state, settings = self._state, self._state.settings.routing
        failed: list[str] = []
        rng: random.Random | None = None
        for attempt in range(1, settings.max_attempts + 1):
            replica = state.picker.pick(ctx, exclude=failed).replica
            self._take(replica)
            self._record.mark("route")
            self._upstream_sent = True
            try:
                return await state.engine.open_generate(replica, body, self._request_id)
            except GatewayError as exc:
                outcome, retryable = classify_failure(exc)
                self._untake(replica)
                state.picker.report(ctx, replica, outcome)
                state.metrics.replica_up.labels(replica=replica.name).set(int(replica.healthy))
                failed.append(replica.name)
                others = any(r.healthy and r.name not in failed for r in state.picker.replicas)
                if not retryable or not others or attempt == settings.max_attempts:
                    raise
                state.metrics.retries.inc()
                rng = rng or random.Random()  # seeded from the OS: only when retrying
                await asyncio.sleep(backoff_s(attempt, settings, rng))
        raise AssertionError("unreachable: the last attempt re-raises")

    async def _render(self) -> str:
        chat, renderer = self._chat, self._state.renderer
        offload = self._state.settings.render_offload
        kwargs = template_kwargs(chat.request)
        # tool_choice "none": the model is not offered the tools at all, so it cannot call them.
        tools = None if self._tool_choice == "none" else chat.tools
        started = time.perf_counter()
        if len(chat.messages) >= offload.min_messages or chat.body_bytes >= offload.min_bytes:
            prompt = await asyncio.to_thread(renderer.render, chat.messages, tools, kwargs)
        else:
            prompt = renderer.render(chat.messages, tools, kwargs)
        seconds = time.perf_counter() - started
        metrics = self._state.metrics
        metrics.child(metrics.render_seconds, renderer.name).observe(seconds)
        return prompt

    def _take(self, replica: Replica) -> None:
        self._replica = replica
        self._scope_state["replica"] = replica.name
        replica.in_flight += 1
        metrics = self._state.metrics
        metrics.child(metrics.replica_in_flight, replica.name).inc()

    def _untake(self, replica: Replica) -> None:
        self._replica = None
        self._upstream_sent = False
        replica.in_flight -= 1
        self._state.metrics.replica_in_flight.labels(replica=replica.name).dec()

    async def _client_gone(self) -> None:
        self._outcome = Outcome.CLIENT_GONE
        if self._replica is not None and self._upstream_sent:
            if not self._chat.request.stream:
                phase = "non_streaming"
            elif self._relay is None:
                phase = "queued"
            else:
                phase = self._relay.phase
            self._state.abort_upstream(self._replica, self._rid, phase)
        if self._relay is not None:
            self._relay.settle()
            await self._relay.aclose()
        self._record.finish(499)

    def _close(self) -> None:
        """Runs once when the request is over, whatever happened."""
        if self._closed:
            return
        self._closed = True
        # A stream that ended without finishing its record (it should not happen) still counts.
        self._record.finish(200 if self._outcome is Outcome.OK else 500)
        self._state.release()
        replica, ctx = self._replica, self._ctx
        if replica is None or ctx is None:
            return
        replica.in_flight -= 1
        metrics = self._state.metrics
        metrics.child(metrics.replica_in_flight, replica.name).dec()
        record = self._record
        self._state.picker.report(
            ctx,
            replica,
            Outcome.UPSTREAM_ERROR if self._relay and self._relay.failed else self._outcome,
            prompt_tokens=record.prompt_tokens,
            cached_tokens=record.cached_tokens,
        )


def _tool_choice(chat: ChatInput) -> str | dict[str, Any] | None:
    choice = chat.request.tool_choice
    if choice is None or isinstance(choice, str):
        return choice
    return choice.model_dump()
