"""--schedule-policy: the order queued prompts are admitted in (SGLang's fcfs and lpm)."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial

import httpx
import pytest

from tests.engine.sim.helpers import generate, metric
from tests.support.procs import start_sim

INTERVAL = 64


def _prompt(name: str) -> str:
    return f"[gMASK]<sop><|user|>session {name} " + name * 1200 + "<|assistant|><think>"


def _queued_at_least(url: str, n: int) -> None:
    deadline = time.monotonic() + 10
    while metric(url, "sglang:num_queue_reqs") < n:
        assert time.monotonic() < deadline, f"never {n} queued"
        time.sleep(0.01)


def _record(order: list[str], name: str, _done: Future[httpx.Response]) -> None:
    order.append(name)


def _admission_order(policy: str) -> list[str]:
    """One running slot: a long request holds it while a cold prompt and then a turn that
    extends a cached session queue behind it; returns the two in the order they finished."""
    proc = start_sim(
        "--max-running-requests",
        "1",
        "--track-interval",
        str(INTERVAL),
        "--schedule-policy",
        policy,
        name=f"policy-{policy}",
        time_scale=0.1,
    )
    try:
        url = proc.url
        warm = _prompt("w")
        first = generate(url, {"text": warm, "sampling_params": {"max_new_tokens": 8}}).json()
        follow_up = warm + first["text"] + "<|user|>next<|assistant|><think>"
        order: list[str] = []
        short = {"max_new_tokens": 8}
        with ThreadPoolExecutor(3) as pool:
            blocker = pool.submit(
                generate, url, {"text": _prompt("b"), "sampling_params": {"max_new_tokens": 300}}
            )
            while metric(url, "sglang:num_running_reqs") < 1:
                time.sleep(0.01)
            done: list[Future[httpx.Response]] = []
            for name, text in (("cold", _prompt("c")), ("warm", follow_up)):
                fut = pool.submit(generate, url, {"text": text, "sampling_params": short})
                fut.add_done_callback(partial(_record, order, name))
                done.append(fut)
                _queued_at_least(url, len(done))
            assert all(f.result().status_code == 200 for f in (blocker, *done))
        return order
    finally:
        proc.stop()


@pytest.mark.parametrize(
    ("policy", "expected"), [("fcfs", ["cold", "warm"]), ("lpm", ["warm", "cold"])]
)
def test_queued_turn_with_a_checkpoint_goes_first_under_lpm(
    policy: str, expected: list[str]
) -> None:
    assert _admission_order(policy) == expected


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(RuntimeError):
        start_sim("--schedule-policy", "random", name="bad-policy")
