"""Hops 2-4 for one admitted request of any face, and the client-disconnect handling around them.

Phases, as `flashbox_upstream_aborts_total{phase}` names them: "queued" (the /generate request
is sent but the engine has not answered yet), "before_first_token" (streaming, no token relayed
yet), "streaming", and "non_streaming". Once /generate is sent, a client that leaves always
costs the engine an abort_request.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import time
from functools import partial
from typing import Any

from starlette.responses import Response
from starlette.types import Receive

from gateway.core import traced
from gateway.core.answer import Answer
from gateway.core.bounds import check_prompt_expansion, utf8_length
from gateway.core.heads import HEAD_TOKENS_PARAM, prompt_head
from gateway.core.images import check_markers
from gateway.core.relay import EventSource, HeldStream, Relay, error_kind
from gateway.core.request import CoreRequest
from gateway.core.retry import backoff_s, classify_failure, route_context
from gateway.errors import ClientDisconnected, ContextLengthError, GatewayError, InternalError
from gateway.fairness import Slot
from gateway.media import CheckedImage, ImageRef
from gateway.observability.timeline import RequestRecord
from gateway.observability.tracing import LiveSpan, RequestTrace, traceparent
from gateway.routing import Outcome, Replica, RequestContext, TurnOutput
from gateway.routing.capacity import track_interval
from gateway.routing.picker import Pick
from gateway.routing.session_key import digest_text
from gateway.sampling import add_constraint, generate_body
from gateway.state import AppState
from gateway.stream.response import DisconnectWatcher, SSEResponse
from gateway.stream.sse import SendBytes
from gateway.stream.text_diff import TextDiffer
from gateway.upstream.stream import EngineStream

log = logging.getLogger("gateway.core.run")

_SPECIAL_TOKENS_MARGIN = 64


class Run:
    def __init__(
        self,
        state: AppState,
        request: CoreRequest,
        answer: Answer,
        record: RequestRecord,
        scope_state: dict[str, Any],
        *,
        keepalive_s: float | None = None,
    ) -> None:
        self._state = state
        self._request = request
        self._answer = answer
        self._keepalive_s = keepalive_s
        self._record = record
        self._scope_state = scope_state
        # gateway.admission charges the request's tokens to its key's rate limit once it is over.
        scope_state["record"] = record
        # The engine's rid (gateway.middleware makes it); the client's own id, for the engine's
        # logs, travels as the x-request-id header of /generate.
        self._rid: str = scope_state["rid"]
        self._request_id: str = scope_state["request_id"]
        self._tool_choice = request.tool_choice
        self._ctx: RequestContext | None = None
        self._replica: Replica | None = None
        # The prompt's tokens once an engine counted them (_fit_input and _fit_output share one
        # /tokenize call).
        self._counted: int | None = None
        # The prefill this request added to its replica's queue, until its first token.
        self._prefill_s = 0.0
        self._relay: Relay | None = None
        # The running slot claimed at the replica (gateway.fairness), held until the end.
        self._slot: Slot | None = None
        # Whose share of the engine the request counts against (gateway.admission sets it).
        self._flow: str = scope_state.get("flow", "unknown")
        self._upstream_sent = False
        self._outcome = Outcome.OK
        self._closed = False
        # What the request opened on the engine (its /generate response: a connection of the
        # pool) is given back here, on every exit (`aclose`), whoever else closes it first.
        self._owned = contextlib.AsyncExitStack()
        # The request's trace (gateway.core.traced); None unless tracing is on, and then only
        # is anything below noted for it.
        self._trace: RequestTrace | None = scope_state.get("trace")
        self._pick: Pick | None = None
        self._engine_span: LiveSpan | None = None
        self._engine_sent = 0.0
        if self._trace is not None and self._trace.recording:
            record.exemplar = {"trace_id": self._trace.trace_id}

    async def respond(self, receive: Receive) -> Response:
        """The answer to send. A stream's response finishes the request when it is sent
        (`aclose` is its last step); anything else is finished here, whatever happens."""
        watcher = DisconnectWatcher(receive)
        watcher.start()
        streaming = False
        try:
            relay = await watcher.run(self._prepare())
            answer = self._answer
            if self._request.stream:
                streaming = True
                body = partial(self._stream, relay)
                return SSEResponse(
                    body, watcher, self._client_gone, self.aclose, headers=answer.headers
                )
            collector = answer.collector()
            finish = await watcher.run(relay.collect(collector))
            self._record.finish(200)
            return Response(
                collector.body(finish), media_type="application/json", headers=answer.headers
            )
        except ClientDisconnected:
            await self._client_gone()
            return Response(status_code=499)
        except GatewayError as exc:
            # An engine's 4xx (its refusal of this request) is the client's, not the replica's.
            self._outcome = Outcome.REJECTED if exc.status_code < 500 else Outcome.UPSTREAM_ERROR
            self._record.finish(exc.status_code, error_kind=error_kind(exc))
            raise
        except asyncio.CancelledError:
            # The server is going away under the request: like a client that left.
            await self._client_gone()
            raise
        except Exception as exc:
            # A bug of ours: a 500 (gateway.middleware answers it in the face's shape), never
            # an OK to routing, and the engine stops generating for nobody.
            self._failed(exc)
            raise
        finally:
            if not streaming:
                watcher.stop()
                await self.aclose()

    async def _stream(self, relay: Relay, send: SendBytes) -> None:
        encoder = self._answer.stream_encoder()
        try:
            await relay.stream(send, encoder=encoder, keepalive_s=self._keepalive_s)
        except asyncio.CancelledError:
            # The server cancels the stream (a forced shutdown): as for a client that left,
            # the engine stops and routing hears it, instead of a 200 and an OK.
            await self._client_gone()
            raise
        except Exception as exc:
            # A bug of ours mid-stream: the headers are out, so the face's error event ends
            # the stream (a 200 whose body says it failed), counted as a 500.
            self._failed(exc)
            with contextlib.suppress(Exception):
                await send(encoder.error(InternalError()), last=True)

    def _failed(self, exc: BaseException) -> None:
        log.error("request %s failed in the gateway", self._request_id, exc_info=exc)
        # Not the replica's fault, and nothing to place: routing hears what it hears of a
        # request the engine refused (REJECTED: no breaker count, a new pin dropped).
        self._outcome = Outcome.REJECTED
        self._record.finish(500, error_kind="internal")
        if self._replica is not None and self._upstream_sent:
            self._state.abort_upstream(self._replica, self._rid, "error")

    async def _prepare(self) -> Relay:
        state, request, record = self._state, self._request, self._record
        record.mark("queue")
        images = await resolve_images(state, request)
        if images:
            record.mark("media")
        prompt, order = await render_prompt(state, request)
        # What a small body may make the engine read is bounded (restored reasoning and
        # tool_reference blocks are bounded before this; the prompt as a whole here).
        prompt_bytes = utf8_length(prompt)  # measured once: a non-ASCII prompt is encoded
        check_prompt_expansion(prompt_bytes, request.body_bytes, state.settings.limits)
        record.mark("render")
        tag = state.settings.model.reasoning_open_tag
        in_reasoning = bool(tag) and prompt.endswith(tag)
        placed = [images[i] for i in order]
        image_tokens = extra_tokens(placed)
        head, head_text, head_tokens = await self._head(prompt)
        # Keys are hashed here, before anything could log them (gateway.routing.session_key).
        ctx = route_context(
            request, state.settings, self._rid, prompt, head, head_tokens, images, order,
            image_tokens,
        )  # fmt: skip
        if head is not None and head_tokens and state.head_tokens.shared(head, ctx.session_key):
            ctx = dataclasses.replace(ctx, save_head=True)
            state.warmer.offer(head, head_text, head_tokens)
        self._ctx = ctx
        body = generate_body(request, prompt, self._rid, state.settings)
        if ctx.save_head:
            params = body["sampling_params"]
            params["custom_params"] = {HEAD_TOKENS_PARAM: head_tokens}
        if placed:
            # Only checked bytes, as data URLs the gateway built: the engine would fetch or
            # open anything else it is given.
            body["image_data"] = [image.data_url for image in placed]
        await self._fit_input(prompt, prompt_bytes, image_tokens)
        if request.clamp_max_tokens:
            await self._fit_output(prompt, prompt_bytes, body["sampling_params"], image_tokens)
        elif image_tokens:
            # Images can take most of the context by themselves: refuse what cannot fit
            # before the engine spends a vision pass on it.
            await self._fit_output(prompt, prompt_bytes, {"max_new_tokens": 1}, image_tokens)
        constraint = state.constraint_builder(
            tools=request.tools,
            tool_choice=self._tool_choice,
            starts_in_reasoning=in_reasoning,
            parallel_tool_calls=request.parallel_tool_calls,
        )
        add_constraint(body, constraint)
        # Built before /generate is sent: a tool_choice the parser refuses is a 400 that must
        # not leave a generation running on the engine.
        parser = state.parser_factory(
            tools=request.tools, tool_choice=self._tool_choice, starts_in_reasoning=in_reasoning
        )
        engine = await self._open(ctx, body)
        if isinstance(engine, EngineStream) and request.stream:
            # Whatever ends this wait (a refusal, the client leaving), the stream is closed
            # by its owner (`aclose`): no path here needs to remember it.
            await engine.check_refusal(state.settings.upstream.refusal_wait_s)
        self._relay = Relay(
            engine=engine,
            parser=parser,
            differ=TextDiffer(incremental=state.settings.upstream.incremental_output),
            record=record,
            on_first_token=self._prefilled,
            kept_stop=constraint.kept_stop,
            checkpoint_interval=(
                track_interval(self._replica, state.settings.routing) if self._replica else 0
            ),
            # Known when the prompt was counted to fit the context (Anthropic's message_start
            # says it); no request pays a /tokenize call only for that.
            prompt_tokens=self._counted,
        )
        return self._relay

    async def _head(self, prompt: str) -> tuple[str | None, str, int]:
        """The prompt head's digest and text, and its tokens when the engine should
        checkpoint it (0: not worth a checkpoint slot, or prompt heads are off)."""
        settings = self._state.settings
        text = prompt_head(prompt, settings.model.user_turn_marker)
        if text is None:
            return None, "", 0
        digest = digest_text("head", text)
        routing = settings.routing
        # A text has no more tokens than characters: a shorter head cannot reach the minimum,
        # a longer one costs one /tokenize per distinct head, and the count decides.
        if not routing.prompt_heads or len(text) < routing.min_head_tokens:
            return digest, text, 0
        replica = next((r for r in self._state.picker.replicas if r.healthy), None)
        if replica is None:
            return digest, text, 0
        engine = self._state.engine
        tokens = await self._state.head_tokens.count(
            digest, text, lambda head: engine.count_prompt_tokens(replica, head)
        )
        return digest, text, tokens if tokens >= routing.min_head_tokens else 0

    async def _count(self, replica: Replica, prompt: str) -> int:
        if self._counted is None:
            self._counted = await self._state.engine.count_prompt_tokens(replica, prompt)
        return self._counted

    async def _fit_input(self, prompt: str, prompt_bytes: int, extra: int) -> None:
        """Refuse a prompt past the smallest max_req_input_len the replicas report, as the real
        server reports it (context_length is null there unless the flag is passed): the face's
        400 before the engine sees the request, which it would refuse or abort after queueing.
        Only a prompt whose bytes reach the bound costs a /tokenize call."""
        replicas = [r for r in self._state.picker.replicas if r.healthy and r.max_input_tokens]
        if not replicas:
            return
        replica = min(replicas, key=lambda r: r.max_input_tokens or 0)
        limit = replica.max_input_tokens or 0
        if prompt_bytes + _SPECIAL_TOKENS_MARGIN + extra <= limit:
            return
        tokens = await self._count(replica, prompt) + extra
        if tokens > limit:
            raise ContextLengthError(tokens, limit)

    async def _fit_output(
        self, prompt: str, prompt_bytes: int, params: dict[str, Any], extra: int = 0
    ) -> None:
        """Lower max_new_tokens to what fits in the engine's context (SGLang refuses a prompt
        plus max_new_tokens past its context, and its auto-truncation would cut the prompt).

        A prompt has at most as many tokens as UTF-8 bytes, so only a prompt whose bytes and
        max_new_tokens reach the context costs a /tokenize call (milliseconds, next to the
        minutes such a prompt's prefill takes); a prompt that does not fit is a
        ContextLengthError, which faces word as their clients expect.
        """
        replicas = [r for r in self._state.picker.replicas if r.healthy]
        known = [r for r in replicas if r.context_length]
        if not known:
            return  # the engine's own check answers (a 400, or an error event mid-stream)
        replica = min(known, key=lambda r: r.context_length or 0)
        context = replica.context_length or 0
        # Margin for special tokens the engine's tokenizer may add to the text's own.
        # `extra`: what images add to the text's own tokens (the engine's /tokenize is text-only).
        wanted = int(params["max_new_tokens"]) + _SPECIAL_TOKENS_MARGIN + extra
        if prompt_bytes + wanted < context:
            return
        wanted -= _SPECIAL_TOKENS_MARGIN + extra
        tokens = await self._count(replica, prompt) + extra
        if tokens >= context:
            raise ContextLengthError(tokens, context)
        params["max_new_tokens"] = min(wanted, context - tokens - 1)

    async def _open(self, ctx: RequestContext, body: dict[str, Any]) -> EventSource:
        """Route, take a running slot there (gateway.fairness), send /generate.

        A stream that must wait for its slot is answered at once with a stream that waits
        inside it: its headers and the face's keepalives go out while it waits, as they do
        while the engine prefills. Anything else waits here."""
        state = self._state
        # Refused before routing: a flow over its share must not place a new conversation.
        state.slots.check_room(self._flow)
        slot = await self._route(ctx, [])
        if self._request.stream and not slot.granted:
            return HeldStream(partial(self._send, ctx, body, slot))
        return await self._send(ctx, body, slot)

    async def _route(self, ctx: RequestContext, failed: list[str]) -> Slot:
        state = self._state
        pick = await state.picker.route(ctx, exclude=failed)
        replica = pick.replica
        if self._trace is not None:
            self._pick = pick
        self._take(replica, pick.prefill_s)
        self._record.mark("route")
        try:
            slot = state.slots.claim(replica.name, self._flow, pinned=pick.affinity == "pinned")
        except GatewayError:
            self._abandon(replica)
            raise
        self._slot = slot
        return slot

    async def _send(self, ctx: RequestContext, body: dict[str, Any], slot: Slot) -> EngineStream:
        """Nothing has reached the client yet, so a connect error or an engine 5xx is retried
        on another replica, a bounded number of times."""
        state, settings = self._state, self._state.settings.routing
        failed: list[str] = []
        rng: random.Random | None = None
        for attempt in range(1, settings.max_attempts + 1):
            replica = self._replica
            assert replica is not None  # _route took it
            try:
                await state.slots.wait(slot)
            except BaseException:
                # The wait was too long, the gateway drains or the client left: nothing
                # reached the engine, and nothing counts against the replica.
                self._abandon(replica)
                raise
            self._record.mark("slot")
            self._upstream_sent = True
            parent = None
            if self._trace is not None:
                span = traced.engine_span(self._trace, self._request, replica, attempt)
                self._engine_span, self._engine_sent = span, time.perf_counter()
                parent = traceparent(span)
            try:
                stream = await state.engine.open_generate(
                    replica, body, self._request_id, traceparent=parent
                )
                self._owned.push_async_callback(stream.aclose)
                self._record.mark("upstream_first_byte")  # the engine's response headers
                return stream
            except GatewayError as exc:
                if self._engine_span is not None:
                    traced.engine_failed(self._engine_span, exc)
                    self._engine_span = None
                outcome, retryable = classify_failure(exc)
                self._untake(replica)
                state.picker.report(ctx, replica, outcome)
                state.metrics.replica_up.labels(replica=replica.name).set(int(replica.healthy))
                _note_breaker(state, replica)
                failed.append(replica.name)
                others = any(r.healthy and r.name not in failed for r in state.picker.replicas)
                if not retryable or not others or attempt == settings.max_attempts:
                    raise
                state.metrics.retries.inc()
                rng = rng or random.Random()  # seeded from the OS: only when retrying
                await asyncio.sleep(backoff_s(attempt, settings, rng))
                slot = await self._route(ctx, failed)
        raise AssertionError("unreachable: the last attempt re-raises")

    def _take(self, replica: Replica, prefill_s: float) -> None:
        self._replica = replica
        self._prefill_s = prefill_s
        replica.prefill_s += prefill_s
        self._scope_state["replica"] = replica.name
        replica.in_flight += 1
        metrics = self._state.metrics
        metrics.child(metrics.replica_in_flight, replica.name).inc()

    def _untake(self, replica: Replica) -> None:
        self._prefilled()
        self._replica = None
        self._upstream_sent = False
        replica.in_flight -= 1
        metrics = self._state.metrics
        metrics.child(metrics.replica_in_flight, replica.name).dec()
        if self._slot is not None:
            self._state.slots.release(self._slot)
            self._slot = None

    def _abandon(self, replica: Replica) -> None:
        """The request leaves before reaching the engine: what its pick noted goes."""
        self._untake(replica)
        if self._ctx is not None:
            self._state.picker.forget(self._ctx, replica)

    def _prefilled(self) -> None:
        """The replica answered (or the request is over): its prefill left the queue."""
        if self._replica is not None and self._prefill_s:
            # Clamped: float sums drift, and a queue is never negative.
            self._replica.prefill_s = max(0.0, self._replica.prefill_s - self._prefill_s)
        self._prefill_s = 0.0
        if self._ctx is not None:
            self._state.picker.first_token(self._ctx)

    async def _client_gone(self) -> None:
        self._outcome = Outcome.CLIENT_GONE
        if self._replica is not None and self._upstream_sent:
            if not self._request.stream:
                phase = "non_streaming"
            elif self._relay is None:
                phase = "queued"
            else:
                phase = self._relay.phase
            self._state.abort_upstream(self._replica, self._rid, phase)
        if self._relay is not None:
            self._relay.settle()
        # What the request opened on the engine is closed by its owner (`aclose`), which runs
        # next on every path: not by hand here.
        self._record.finish(499)

    async def aclose(self) -> None:
        """Runs once when the request is over, whatever happened: what it opened on the
        engine is given back, then what it took in the gateway."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._owned.aclose()
        finally:
            self._give_back()
            if self._trace is not None:
                traced.close(
                    self._trace, self._request, self._record, self._outcome, self._pick,
                    self._relay, self._engine_span, self._engine_sent,
                )  # fmt: skip

    def _give_back(self) -> None:
        # A stream that ended without finishing its record (it should not happen) still counts.
        self._record.finish(200 if self._outcome is Outcome.OK else 500)
        self._state.release()
        replica, ctx = self._replica, self._ctx
        if replica is None or ctx is None:
            return
        self._untake(replica)  # its prefill, in-flight count and running slot
        record, relay = self._record, self._relay
        outcome = self._outcome
        if relay is not None and relay.failed:
            outcome = Outcome.UPSTREAM_ERROR
        elif relay is not None and relay.refused:
            # The engine refused the request mid-stream (a 4xx error event): the client's.
            outcome = Outcome.REJECTED
        output = None
        if relay is not None and outcome is Outcome.OK:
            output = TurnOutput(relay.output_text, record.completion_tokens)
        self._state.picker.report(
            ctx,
            replica,
            outcome,
            prompt_tokens=record.prompt_tokens,
            cached_tokens=record.cached_tokens,
            output=output,
        )
        _note_breaker(self._state, replica)


def _note_breaker(state: AppState, replica: Replica) -> None:
    metrics = state.metrics
    is_open = int(replica.breaker.opened_at is not None)
    metrics.child(metrics.replica_breaker_open, replica.name).set(is_open)


async def resolve_images(state: AppState, request: CoreRequest) -> list[CheckedImage]:
    """The media stage: every image of the request checked (in request order)."""
    if not request.images:
        return []
    refs = [ImageRef(slot.url, slot.where) for slot in request.images.slots]
    return await state.media.resolve(refs)


def extra_tokens(images: list[CheckedImage]) -> int:
    """What images add to the prompt's text tokens: each marker's image token becomes the
    image's own tokens (CheckedImage.tokens counts the begin/end markers too)."""
    return sum(image.tokens - 3 for image in images)


async def render_prompt(state: AppState, request: CoreRequest) -> tuple[str, list[int]]:
    """Hop 2: the prompt text for `request` (also what count_tokens counts), and the order in
    which the template shows the request's images (indices into request.images)."""
    renderer = state.renderer
    offload = state.settings.render_offload
    # tool_choice "none": the model is not offered the tools at all, so it cannot call them.
    tools = None if request.tool_choice == "none" else request.tools
    messages, kwargs = request.messages, request.template_kwargs
    started = time.perf_counter()
    if len(messages) >= offload.min_messages or request.body_bytes >= offload.min_bytes:
        prompt = await asyncio.to_thread(renderer.render, messages, tools, kwargs)
    else:
        prompt = renderer.render(messages, tools, kwargs)
    seconds = time.perf_counter() - started
    metrics = state.metrics
    metrics.child(metrics.render_seconds, renderer.name).observe(seconds)
    model = state.settings.model
    if (
        not request.thinking
        and model.reasoning_open_tag
        and prompt.endswith(model.reasoning_open_tag)
    ):
        # Reasoning off: the prompt closes the block, as past turns without reasoning are
        # rendered, so the model answers at once and the next turn's prompt extends this one.
        prompt += model.reasoning_close_tag
    order: list[int] = []
    if request.images:
        prompt, order = request.images.place(prompt, model.image_marker)
    check_markers(prompt, tuple(model.image_marker_tokens), len(order))
    return prompt, order
