"""The engine's share of a request's TTFT, from the simulators' GET /sim/timings.

The simulators run at a fraction of the reference host's time (`--time-scale`), so a client's
wall-clock TTFT divided by the time scale also scales up what the router and the network took:
at 0.02, a router's 10 ms reads as 0.5 s. A request's TTFT in hardware seconds is therefore
the engine's modelled TTFT (queue and prefill) plus the client's wall-clock TTFT minus the
engine's wall-clock TTFT (network, router, client: wall time at its own scale).
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx


@dataclass(frozen=True)
class EngineTiming:
    """One request as a simulator saw it (GET /sim/timings)."""

    wall_ttft_s: float  # arrival to first token, wall clock
    model_ttft_s: float  # the same, modelled: reference-hardware seconds


def hardware_ttft(ttft_scaled: float, timing: EngineTiming, time_scale: float) -> float:
    """TTFT in hardware seconds for every part of the path (see the module docstring)."""
    hops = max(0.0, ttft_scaled * time_scale - timing.wall_ttft_s)
    return timing.model_ttft_s + hops


def fetch_engine_timings(sim_urls: list[str]) -> dict[str, EngineTiming]:
    """x-request-id -> EngineTiming, from each simulator's /sim/timings.

    Keyed by the x-request-id the engine request carried, which is the client's own id on
    every path: smg forwards the header (and the simulator's OpenAI route takes it as rid),
    and flashbox's gateway sends it with /generate while the rid is its own.
    """
    timings: dict[str, EngineTiming] = {}
    for url in sim_urls:
        body = httpx.get(url + "/sim/timings", timeout=30.0).json()
        for t in body["requests"]:
            timings[t["request_id"]] = EngineTiming(
                wall_ttft_s=t["first_token_s"] - t["arrival_s"], model_ttft_s=t["model_ttft_s"]
            )
    return timings
