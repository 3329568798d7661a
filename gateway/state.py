"""Everything a request needs, built once per app in its lifespan and passed down."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

import httpx
from starlette.requests import Request

from gateway.auth import ApiKeyChecker
from gateway.components import load_constraint_builder, load_parser_factory, load_renderer
from gateway.core.heads import HeadTokens
from gateway.core.prompt_counts import PromptCounts
from gateway.core.reasoning_codec import ReasoningCodec
from gateway.core.relay import error_kind
from gateway.errors import GatewayError
from gateway.fair_shares import FleetShares
from gateway.fairness import FairSlots
from gateway.media import MediaResolver
from gateway.media.addresses import HostResolver
from gateway.observability.metrics import CONNECTION_POOLS, OUTSTANDING_PICKS, Metrics
from gateway.observability.timeline import RequestRecord
from gateway.parsers.base import ParserFactory
from gateway.parsers.constraints import DecodingConstraintBuilder
from gateway.ratelimit import RateLimiter
from gateway.render.base import Renderer
from gateway.responses_store import StoredResponses
from gateway.routing import Replica, ReplicaPicker, capacity
from gateway.routing.build import build_routing
from gateway.routing.discovery import DnsReplicas, StaticReplicas, resolver_for
from gateway.routing.health import HealthProber
from gateway.routing.warm import HeadWarmer
from gateway.settings import Settings
from gateway.shared_state import SharedStore
from gateway.upstream.client import EngineClient

log = logging.getLogger("gateway.state")


@dataclass
class AppState:
    settings: Settings
    metrics: Metrics
    auth: ApiKeyChecker
    engine: EngineClient
    picker: ReplicaPicker
    prober: HealthProber
    renderer: Renderer
    parser_factory: ParserFactory
    constraint_builder: DecodingConstraintBuilder
    reasoning_codec: ReasoningCodec
    responses: StoredResponses
    # Per-key rate limits (gateway.admission asks it; off unless rate_limits sets some).
    limiter: RateLimiter
    # Each replica's running slots and their fair queues (gateway.core.run claims one).
    slots: FairSlots
    media: MediaResolver
    # Prompt heads' token counts (gateway.core.heads), asked of the engine once per head.
    head_tokens: HeadTokens
    # Counting endpoints' token counts by rendered prompt, and their /tokenize bound
    # (gateway.core.counting).
    prompt_counts: PromptCounts
    # Shared prompt heads prefilled on the replicas that lack them (gateway.routing.warm).
    warmer: HeadWarmer
    # Engines found by DNS (discovery.dns_name); None: the static `engines` list.
    discovery: DnsReplicas | None = None
    # The fleet's shared state store (state_url); None: in-process state only.
    shared: SharedStore | None = None
    # This gateway's shares of the replicas' slots among the fleet's (with a store).
    shares: FleetShares | None = None
    in_flight: int = 0
    # Fire-and-forget work (abort_request calls) kept referenced until done.
    background: set[asyncio.Task[bool]] = field(default_factory=set)

    def admit(self, model: str, arrival: float, api: str) -> RequestRecord:
        """Counts an admitted request in (the bound and queue are gateway.admission's)."""
        self.in_flight += 1
        self.metrics.in_flight.inc()
        return RequestRecord(metrics=self.metrics, model=model, arrival=arrival, api=api)

    def release(self) -> None:
        self.in_flight -= 1
        self.metrics.in_flight.dec()

    def refused(self, model: str, error: GatewayError, api: str) -> None:
        """A request that failed before admission (auth, input, limits)."""
        self.metrics.requests.labels(model=model, code=str(error.status_code), api=api).inc()
        self.metrics.errors.labels(kind=error_kind(error), api=api).inc()

    def outstanding(self) -> dict[str, int]:
        """Everything requests hold now, by kind: all zero when the gateway is idle. A test
        asserts it after each request; the same figures are gauges on /metrics."""
        picks = self.picker.pending()
        held = {f"connections_{pool}": self.engine.in_use(pool) for pool in CONNECTION_POOLS}
        running = sum(self.slots.running(replica.name) for replica in self.picker.replicas)
        return {
            **held,
            "in_flight": self.in_flight,
            "fair_queue_waiting": self.slots.waiting,
            "running_slots": running,
            "picks": picks.picks,
            "trials": picks.trials,
            "background": len(self.background),
        }

    def abort_upstream(self, replica: Replica, rid: str, phase: str) -> None:
        """Tell the engine to drop `rid` now, without making anyone wait for the answer."""
        self.metrics.upstream_aborts.labels(phase=phase).inc()
        task = asyncio.create_task(self._abort(replica, rid))
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def _abort(self, replica: Replica, rid: str) -> bool:
        sent = await self.engine.abort(replica, rid)
        if not sent:
            self.metrics.upstream_abort_failures.inc()
        return sent


def build_state(
    settings: Settings,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    media_transport: httpx.AsyncBaseTransport | None = None,
    media_resolve_host: HostResolver | None = None,
) -> AppState:
    """`transport`: the engines' network; `media_transport`, `media_resolve_host`: the network
    and DNS of image URL fetches. Tests inject them; None is the real network (create_app)."""
    metrics = Metrics()
    engine = EngineClient(settings.upstream, transport=transport, deadlines=settings.timeouts)
    for pool in CONNECTION_POOLS:
        child = metrics.upstream_connections_in_use.labels(pool=pool)
        child.set_function(partial(engine.in_use, pool))
    dns_name = settings.discovery.dns_name
    source = None if dns_name is None else StaticReplicas([])
    shared = (
        None
        if settings.state_url is None
        else SharedStore(settings.state_url, settings.state, metrics)
    )
    picker, prober = build_routing(settings, metrics, engine.control, source, shared)
    discovery = None
    if dns_name is not None:
        if settings.engines:
            log.info("discovery.dns_name is set: the engines list %s is not used", settings.engines)
        discovery = DnsReplicas(
            settings.discovery, resolver_for(settings.discovery), metrics, picker.add,
            picker.remove,
        )  # fmt: skip

    def running_slots(name: str) -> int:
        return _running_slots(picker.replicas, name, settings)

    shares = (
        None
        if shared is None
        else FleetShares(
            shared,
            settings.fairness,
            metrics,
            lambda: [r.name for r in picker.replicas if not r.gone],
            running_slots,
        )
    )
    state = AppState(
        settings=settings,
        metrics=metrics,
        auth=ApiKeyChecker(settings.api_keys),
        engine=engine,
        picker=picker,
        prober=prober,
        discovery=discovery,
        shared=shared,
        renderer=load_renderer(settings.render),
        parser_factory=load_parser_factory(settings.model.family),
        constraint_builder=load_constraint_builder(settings.model.family),
        reasoning_codec=_reasoning_codec(settings),
        media=MediaResolver(
            settings.media, metrics, transport=media_transport, resolve_host=media_resolve_host
        ),
        head_tokens=HeadTokens(settings.routing.head_table_size),
        prompt_counts=PromptCounts(settings.limits),
        warmer=HeadWarmer(
            picker,
            engine.prefill,
            settings.routing,
            lambda outcome: metrics.child(metrics.head_warms, outcome).inc(),
        ),
        responses=StoredResponses.build(settings.responses, metrics, shared),
        limiter=RateLimiter(settings.rate_limits, metrics, shared),
        slots=FairSlots(
            settings.fairness,
            metrics,
            running_slots if shares is None else shares.capacity,
            service_s=settings.routing.service_s,
        ),
        shares=shares,
    )
    prober.on_info = lambda: _learned_engine_info(state)
    for kind in OUTSTANDING_PICKS:
        child = metrics.routing_outstanding.labels(kind=kind)
        child.set_function(partial(_outstanding_picks, picker, kind))
    return state


def _outstanding_picks(picker: ReplicaPicker, kind: str) -> int:
    held: int = getattr(picker.pending(), kind)
    return held


def _running_slots(replicas: Sequence[Replica], name: str, settings: Settings) -> int:
    """A replica's running slots as the fair queue fills them: what its /server_info reports
    (max_running_requests), else routing.max_running_requests."""
    for replica in replicas:
        if replica.name == name:
            return capacity.max_running(replica, settings.routing)
    return settings.routing.max_running_requests


def _learned_engine_info(state: AppState) -> None:
    _follow_engine_image_bounds(state)
    # A replica's running slots may be known only now: requests waiting there may go.
    metrics = state.metrics
    for replica in state.picker.replicas:
        state.slots.capacity_changed(replica.name)
        if state.shares is None:  # with a store, its exchanges set the share
            slots = capacity.max_running(replica, state.settings.routing)
            metrics.child(metrics.fair_share_slots, replica.name).set(slots)


def _follow_engine_image_bounds(state: AppState) -> None:
    """The media stage estimates image tokens with the engines' own max_pixels, and takes no
    more images than the strictest engine (what their /server_info reports)."""
    replicas = [r for r in state.picker.replicas if not r.gone]
    pixels = [r.image_max_pixels for r in replicas if r.image_max_pixels]
    limits = [r.max_images for r in replicas if r.max_images]
    reported = [r.accepts_images for r in replicas if r.accepts_images is not None]
    state.media.engine_bounds(
        min(pixels, default=None),
        min(limits, default=None),
        accepts_images=not reported or any(reported),
    )


def _reasoning_codec(settings: Settings) -> ReasoningCodec:
    config = settings.reasoning
    if config.signing_key:
        return ReasoningCodec(
            config.signing_key.encode(),
            max_age_s=config.max_age_s,
            max_text_bytes=config.max_text_bytes,
        )
    log.info(
        "reasoning.signing_key is not set: reasoning tokens are signed with a key of this "
        "process and fall back to their visible text after a restart"
    )
    return ReasoningCodec.with_random_key(
        max_age_s=config.max_age_s, max_text_bytes=config.max_text_bytes
    )


async def start(state: AppState) -> None:
    started = time.perf_counter()
    if state.discovery is not None:
        # The first lookup before the first probe, so that probe already sees the engines.
        await state.discovery.refresh()
        state.discovery.start()
    await state.picker.prepare()
    await state.prober.probe_all()
    up = [r.name for r in state.picker.replicas if r.healthy]
    log.info("first health probe took %.3fs; replicas up: %s", time.perf_counter() - started, up)
    state.prober.start()
    state.warmer.start()
    if state.shares is not None:
        state.shares.attach(state.slots)
        state.shares.start()


async def stop(state: AppState) -> None:
    await state.warmer.stop()
    if state.shares is not None:
        await state.shares.stop()
    if state.discovery is not None:
        await state.discovery.stop()
    # Routing's last store writes (turn reports) before the store's connections close.
    await state.picker.aclose()
    if state.shared is not None:
        await state.shared.close()
    await state.prober.stop()
    if state.background:
        await asyncio.wait(state.background, timeout=state.settings.upstream.abort_timeout_s)
    await state.engine.aclose()
    await state.media.aclose()


def app_state(request: Request) -> AppState:
    """The app's state, from a route (built once in the lifespan; see gateway.app)."""
    state: AppState = request.app.state.flashbox
    return state
