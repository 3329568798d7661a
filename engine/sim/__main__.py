"""`python -m engine.sim`: an SGLang-compatible simulator of the hybrid engine (DESIGN.md)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import uvicorn
from prometheus_client import disable_created_metrics

from engine.sim.app import build_app
from engine.sim.faults import FaultSpecError, parse_fault
from engine.sim.profile import (
    DEFAULT_PROFILE,
    Profile,
    ProfileError,
    load_profile,
    parse_mm_limits,
    parse_mm_process_config,
)
from engine.sim.script import ScriptError, load_script
from engine.sim.settings import SimSettings
from engine.sim.watched import silence_injected_disconnects


def _tool_calls(value: str) -> int | None:
    if value == "auto":
        return None
    count = int(value)
    if count < 0:
        raise argparse.ArgumentTypeError("tool calls must be 'auto' or >= 0")
    return count


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m engine.sim", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--time-scale", type=float, default=1.0, help="multiplies every modelled delay")
    p.add_argument("--profile", type=Path, default=DEFAULT_PROFILE, help="calibration YAML")
    p.add_argument("--checkpoint-slots", type=int, help="recurrent-state checkpoint slots")
    p.add_argument("--track-interval", type=int, help="tokens between checkpoints")
    p.add_argument("--name", default="sim", help="this replica's name (x-sim-name header)")
    p.add_argument("--served-model-name", help="model id (default: the profile's)")
    p.add_argument("--context-length", type=int, help="longest prompt + output (tokens)")
    p.add_argument("--max-body-bytes", type=int, default=64 * 1024 * 1024)
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--max-queued-requests", type=int)
    p.add_argument("--schedule-policy", choices=("fcfs", "lpm"), help="as SGLang's flag")
    p.add_argument("--reasoning-tokens", type=int, help="default reasoning length")
    p.add_argument("--content-tokens", type=int, help="default content length")
    p.add_argument("--tool-calls", help="'auto' or a count")
    p.add_argument(
        "--script", type=Path, help="scripted answers instead of random ones (engine/sim/script.py)"
    )
    p.add_argument(
        "--fault",
        help="process-wide fault: 503, die[:N], crash[:N], stall_first, "
        "stall[:N], error[:N], malformed[:N]",
    )
    p.add_argument("--fault-rate", type=float, default=1.0, help="share of requests that fault")
    p.add_argument("--health-delay", type=float, default=0.0, help="seconds /health waits")
    p.add_argument(
        "--random-without-seed",
        action="store_true",
        help="sample randomly when no sampling_seed is given (default: seed 0)",
    )
    p.add_argument(
        "--max-event-lag",
        type=int,
        default=64,
        help="tokens a slow stream may fall behind before they are merged",
    )
    p.add_argument(
        "--stream-output",
        action="store_true",
        help="as SGLang's flag: streamed output_ids are the new ids only (text stays cumulative)",
    )
    p.add_argument(
        "--loop",
        choices=["auto", "asyncio", "uvloop"],
        default="asyncio",
        help="event loop implementation (uvicorn's --loop)",
    )
    p.add_argument(
        "--mm-process-config",
        type=json.loads,
        help='as the engine\'s flag: {"image": {"max_pixels": N}} (default: the profile\'s)',
    )
    p.add_argument(
        "--limit-mm-data-per-request",
        type=json.loads,
        help="as the engine's flag, e.g. {\"image\": 4} (default: the profile's)",
    )
    p.add_argument("--log-level", default="warning")
    return p


def _image_flags(profile: Profile, args: argparse.Namespace) -> Profile:
    """The engine's image flags over the profile's images section."""
    if args.mm_process_config is None and args.limit_mm_data_per_request is None:
        return profile
    if profile.images is None:
        raise SystemExit("the profile has no images section: the model takes no images")
    changes: dict[str, Any] = {}
    try:
        if args.mm_process_config is not None:
            changes["max_pixels_flag"] = parse_mm_process_config(args.mm_process_config)
        if args.limit_mm_data_per_request is not None:
            changes["limit_mm_data_per_request"] = parse_mm_limits(args.limit_mm_data_per_request)
    except ProfileError as exc:
        raise SystemExit(str(exc)) from None
    return dataclasses.replace(profile, images=dataclasses.replace(profile.images, **changes))


def settings_from_args(argv: list[str]) -> SimSettings:
    args = parser().parse_args(argv)
    if args.time_scale <= 0:
        raise SystemExit("--time-scale must be > 0")
    try:
        profile = load_profile(args.profile)
        fault = None if args.fault is None else parse_fault(args.fault)
        script = None if args.script is None else load_script(args.script)
    except (ProfileError, FaultSpecError, ScriptError) as exc:
        raise SystemExit(str(exc)) from None
    settings = SimSettings(
        profile=_image_flags(profile, args),
        host=args.host,
        port=args.port,
        time_scale=args.time_scale,
        name=args.name,
        fault=fault,
        fault_rate=args.fault_rate,
        random_without_seed=args.random_without_seed,
        health_delay_s=args.health_delay,
        max_body_bytes=args.max_body_bytes,
        log_level=args.log_level,
        loop=args.loop,
        max_event_lag=max(1, args.max_event_lag),
        stream_output=args.stream_output,
        script=script,
    )
    overrides: dict[str, object] = {}
    for flag, field in (
        ("checkpoint_slots", "checkpoint_slots"),
        ("track_interval", "track_interval"),
        ("served_model_name", "served_model_name"),
        ("max_running_requests", "max_running_requests"),
        ("context_length", "context_length"),
        ("max_queued_requests", "max_queued_requests"),
        ("schedule_policy", "schedule_policy"),
        ("reasoning_tokens", "reasoning_tokens"),
        ("content_tokens", "content_tokens"),
    ):
        value = getattr(args, flag)
        if value is not None:
            overrides[field] = value
    if args.tool_calls is not None:
        try:
            overrides["tool_calls"] = _tool_calls(args.tool_calls)
        except (ValueError, argparse.ArgumentTypeError):
            raise SystemExit("--tool-calls must be 'auto' or an integer >= 0") from None
    return settings.with_profile(**overrides) if overrides else settings


def main(argv: list[str] | None = None) -> int:
    settings = settings_from_args(sys.argv[1:] if argv is None else argv)
    silence_injected_disconnects()
    # SGLang exports no *_created series; neither should its stand-in.
    disable_created_metrics()  # type: ignore[no-untyped-call]
    uvicorn.run(
        build_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,
        loop=settings.loop,
        timeout_graceful_shutdown=2,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
