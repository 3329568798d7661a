"""Health, model and server information, metrics, and the simulator's own control endpoints."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.sim.engine import SimEngine
from engine.sim.errors import error_response, read_json
from engine.sim.faults import FaultSpecError, parse_fault
from engine.sim.requests import SimRequestError, parse_generate
from engine.sim.scheduler import QueueFullError

HEALTH_PROMPT = "health check"


def _engine(request: Request) -> SimEngine:
    engine: SimEngine = request.app.state.engine
    return engine


async def health(request: Request) -> Response:
    engine = _engine(request)
    if engine.settings.health_delay_s > 0:
        await asyncio.sleep(engine.settings.health_delay_s)
    if not engine.healthy:
        return Response(status_code=503)
    return Response(status_code=200)


async def health_generate(request: Request) -> Response:
    """As SGLang: run a one-token generation through the queue."""
    engine = _engine(request)
    if engine.settings.health_delay_s > 0:
        await asyncio.sleep(engine.settings.health_delay_s)
    if not engine.healthy:
        return Response(status_code=503)
    params = parse_generate(
        {
            "text": HEALTH_PROMPT,
            "sampling_params": {"max_new_tokens": 1},
            "rid": f"health-{time.monotonic_ns()}",
        }
    )
    req = engine.create_request(params)
    try:
        engine.scheduler.submit(req)
    except QueueFullError:
        return Response(status_code=503)
    try:
        while not req.done:
            req.changed.clear()
            await req.changed.wait()
    finally:
        engine.scheduler.abort(req.rid, "health check cancelled", counted=False)
    return Response(status_code=200)


def model_info_body(engine: SimEngine) -> dict[str, Any]:
    p = engine.settings.profile
    return {
        "model_path": p.model_path,
        "tokenizer_path": p.model_path,
        "served_model_name": p.served_model_name,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "model_type": p.model_type,
        "architectures": list(p.architectures),
        # As sglang-kt 0.7.2 (http_server.py model_info): true for a model with a vision
        # tower; nothing about image bounds is reported here (see /server_info).
        "has_image_understanding": p.images is not None,
        "has_audio_understanding": False,
    }


def _mm_server_args(engine: SimEngine) -> dict[str, Any]:
    """The image bounds SGLang's /server_info shows (its server_args): --mm-process-config
    ({} when not set) and --limit-mm-data-per-request (null when not set)."""
    images = engine.settings.profile.images
    if images is None or images.max_pixels_flag is None:
        mm_process_config: dict[str, Any] = {}
    else:
        mm_process_config = {"image": {"max_pixels": images.max_pixels_flag}}
    return {
        "mm_process_config": mm_process_config,
        "limit_mm_data_per_request": None if images is None else images.limit_mm_data_per_request,
    }


async def model_info(request: Request) -> Response:
    return JSONResponse(model_info_body(_engine(request)))


async def server_info(request: Request) -> Response:
    engine = _engine(request)
    s, p = engine.settings, engine.settings.profile
    return JSONResponse(
        {
            "simulator": True,
            "sim_name": s.name,
            "model_path": p.model_path,
            "served_model_name": p.served_model_name,
            "context_length": p.context_length,
            # As sglang-kt's TpModelWorker derives them (the KV pool is the profile's).
            "max_total_num_tokens": p.max_total_tokens,
            "max_req_input_len": min(p.context_length - 1, p.max_total_tokens - 1) - 5,
            "max_running_requests": p.max_running_requests,
            "max_queued_requests": p.max_queued_requests,
            "chunked_prefill_size": p.prefill_batch_tokens,
            "max_mamba_cache_size": p.checkpoint_slots,
            "mamba_track_interval": p.track_interval,
            "mamba_scheduler_strategy": "extra_buffer",
            "disable_radix_cache": False,
            "time_scale": s.time_scale,
            "bytes_per_token": p.bytes_per_token,
            "eos_token_ids": list(p.eos_token_ids),
            "checkpoints_in_use": len(engine.pool),
            "checkpoint_evictions": engine.pool.evictions,
            "head_checkpoints_in_use": engine.pool.head_count,
            "num_running_reqs": engine.scheduler.running_count,
            "num_queue_reqs": engine.scheduler.queued_count,
            "fault": None if engine.process_fault is None else engine.process_fault.kind.value,
            **_mm_server_args(engine),
            "version": "sim",
        }
    )


async def models(request: Request) -> Response:
    p = _engine(request).settings.profile
    return JSONResponse(
        {
            "object": "list",
            "data": [
                {
                    "id": p.served_model_name,
                    "object": "model",
                    "created": 0,
                    "owned_by": "sglang",
                    "root": p.served_model_name,
                    "max_model_len": p.context_length,
                }
            ],
        }
    )


async def metrics(request: Request) -> Response:
    return Response(_engine(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)


async def sim_config(request: Request) -> Response:
    """GET shows, POST changes the process-wide fault and health at run time (for tests).

    Body: {"fault": "503" | "die:3" | ... | null, "fault_rate": 0-1, "healthy": bool,
    "clear_checkpoints": true}.
    """
    engine = _engine(request)
    if request.method == "POST":
        try:
            body = await read_json(request, engine)
            if not isinstance(body, dict):
                raise SimRequestError("the body must be a JSON object")
            if "fault" in body:
                spec = body["fault"]
                if spec is not None and not isinstance(spec, str):
                    raise SimRequestError("fault must be a string or null", "fault")
                engine.process_fault = None if spec is None else parse_fault(spec)
            if "fault_rate" in body:
                rate = body["fault_rate"]
                if (
                    not isinstance(rate, int | float)
                    or isinstance(rate, bool)
                    or not 0 <= rate <= 1
                ):
                    raise SimRequestError("fault_rate must be a number in [0, 1]", "fault_rate")
                engine.fault_rate = float(rate)
            if "healthy" in body:
                if not isinstance(body["healthy"], bool):
                    raise SimRequestError("healthy must be a boolean", "healthy")
                engine.healthy = body["healthy"]
            if body.get("clear_checkpoints") is True:
                engine.pool.clear()
        except (SimRequestError, FaultSpecError) as exc:
            return error_response(400, str(exc), "invalid_request_error")
    return JSONResponse(
        {
            "fault": None
            if engine.process_fault is None
            else f"{engine.process_fault.kind.value}:{engine.process_fault.after_tokens}",
            "fault_rate": engine.fault_rate,
            "healthy": engine.healthy,
        }
    )


def _int_arg(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isdigit():
        raise SimRequestError(f"{name} must be a non-negative integer", name)
    return int(raw)


async def sim_model(request: Request) -> Response:
    """The performance model's figures (reference-hardware seconds) for given sizes.

    Query: prompt_tokens, cached_tokens, context (decode), batch_size.
    """
    engine = _engine(request)
    try:
        prompt = _int_arg(request, "prompt_tokens", 2048)
        cached = _int_arg(request, "cached_tokens", 0)
        context = _int_arg(request, "context", prompt)
        batch = max(1, _int_arg(request, "batch_size", 1))
    except SimRequestError as exc:
        return error_response(exc.status, exc.message, "invalid_request_error", exc.param)
    step = engine.perf.decode_step_seconds(context, batch)
    return JSONResponse(
        {
            "prompt_tokens": prompt,
            "cached_tokens": cached,
            "prefill_s": engine.perf.prefill_seconds(prompt, cached),
            # The same prompt on the hybrid route a batch holding an image takes (uncalibrated).
            "hybrid_prefill_s": engine.perf.hybrid_prefill_seconds(prompt, cached)
            if engine.settings.profile.images is not None
            else None,
            "context": context,
            "batch_size": batch,
            "decode_ms_per_step": step * 1000,
            "decode_tokens_per_s": batch / step,
            "time_scale": engine.settings.time_scale,
        }
    )


async def sim_timings(request: Request) -> Response:
    """Each recent request's arrival and first token, in time.perf_counter() seconds, and its
    modelled TTFT in reference-hardware seconds.

    The engine-side share of TTFT, per rid: a benchmark subtracts it from what its client saw
    to get what the hops in between added, whatever the modelled prefill took.
    """
    engine = _engine(request)
    return JSONResponse(
        {
            "clock": "time.perf_counter",
            "requests": [
                {
                    "rid": rid,
                    "request_id": request_id or rid,
                    "arrival_s": arrival,
                    "first_token_s": first,
                    "model_ttft_s": model_ttft,
                }
                for rid, request_id, arrival, first, model_ttft in engine.scheduler.timings
            ],
        }
    )
