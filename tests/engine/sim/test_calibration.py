"""At time scale 1e-3 the simulator's modelled TTFT and ms/step reproduce FACTS.md section 2.

The modelled figures come back in meta_info["sim"] (reference-hardware seconds) and from
GET /sim/model; wall-clock figures are only checked loosely (a shared, noisy machine).
"""

from __future__ import annotations

import concurrent.futures
import random

import httpx
import pytest

from tests.engine.sim.helpers import generate
from tests.support.procs import Proc, start_sim


def _prompt(tokens: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(tokens * 4))


def within(value: float, expected: float, tolerance: float = 0.10) -> bool:
    return abs(value - expected) <= tolerance * expected


@pytest.mark.parametrize(
    ("tokens", "ttft"), [(2048, 6.43), (8192, 6.57), (32768, 22.59), (61440, 48.26)]
)
def test_cold_ttft_and_decode_step(sim: Proc, tokens: int, ttft: float) -> None:
    body = {"text": _prompt(tokens, tokens), "sampling_params": {"max_new_tokens": 12}}
    response = generate(sim.url, body)
    meta = response.json()["meta_info"]
    model = meta["sim"]
    assert meta["prompt_tokens"] == tokens
    assert meta["cached_tokens"] == 0
    assert model["queue_s"] == 0
    assert within(model["ttft_s"], ttft)
    assert within(model["ms_per_step"], 33.4)
    # Loose wall-clock sanity: the sleeps happened, and not absurdly late.
    modelled_wall = model["e2e_s"] * model["time_scale"]
    assert 0.5 * modelled_wall <= meta["e2e_latency"] <= modelled_wall + 5.0


def test_second_turn_on_a_checkpoint_costs_about_ten_seconds(sim: Proc) -> None:
    first = _prompt(61440, 99)
    turn1 = generate(sim.url, {"text": first, "sampling_params": {"max_new_tokens": 8}}).json()
    second = first + turn1["text"] + "<|user|>and now?<|assistant|><think>"
    turn2 = generate(sim.url, {"text": second, "sampling_params": {"max_new_tokens": 8}}).json()
    assert turn2["meta_info"]["cached_tokens"] >= (61440 // 256) * 256
    assert within(turn2["meta_info"]["sim"]["ttft_s"], 10.0)
    assert turn1["meta_info"]["sim"]["ttft_s"] > 4 * turn2["meta_info"]["sim"]["ttft_s"]


def test_model_endpoint_reports_the_tables(sim: Proc) -> None:
    def model(**query: int) -> dict[str, float]:
        body: dict[str, float] = httpx.get(sim.url + "/sim/model", params=query).json()
        return body

    assert within(model(prompt_tokens=250_000)["prefill_s"], 332.35)
    assert within(model(prompt_tokens=512_000)["prefill_s"], 1118.64)
    assert within(model(context=512_000)["decode_ms_per_step"], 37.7)
    assert within(model(context=250_000)["decode_ms_per_step"], 34.3)
    bs1 = model(context=8192, batch_size=1)["decode_tokens_per_s"]
    assert within(model(context=8192, batch_size=2)["decode_tokens_per_s"] / bs1, 32.5 / 25.2)
    assert within(model(context=8192, batch_size=4)["decode_tokens_per_s"] / bs1, 47.1 / 25.2)
    assert httpx.get(sim.url + "/sim/model", params={"context": "x"}).status_code == 400


def test_concurrent_requests_share_decode_steps() -> None:
    # A slower clock, so the four arrivals surely land within the first prefill (325 ms).
    proc = start_sim(name="batching", time_scale=0.05)
    body = {"text": _prompt(100, 5), "sampling_params": {"max_new_tokens": 20, "ignore_eos": True}}
    try:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda _: generate(proc.url, body).json(), range(4)))
    finally:
        proc.stop()
    steps = [r["meta_info"]["sim"]["ms_per_step"] for r in results]
    # Four decoding together take the bs4 step: 33.4 ms * (4 / 47.1 tok/s) / (1 / 25.2 tok/s).
    bs4_step_ms = 33.4 * (4 / 47.1) * 25.2
    assert all(within(step, bs4_step_ms) for step in steps), steps
