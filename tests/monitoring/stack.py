"""A monitoring stack on loopback for the end-to-end test: simulators, gateway, real Prometheus.

Prometheus is Debian's binary, configured like monitoring/prometheus/prometheus.yml (same job
names, the committed alert rules) but scraping loopback ports every second.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import io
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx
import openai
import yaml
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from PIL import Image

from monitoring.promapi import PrometheusAPI
from tests.monitoring.support import PROMETHEUS_DIR, debian_tool, load_yaml
from tests.support.procs import Proc, free_port

SCRAPE_INTERVAL_S = 1.0
GATEWAY_JOB = "flashbox-gateway"
ENGINE_JOB = "sglang"


def write_prometheus_config(path: Path, gateway: str, engines: Sequence[str]) -> None:
    committed = load_yaml(PROMETHEUS_DIR / "prometheus.yml")
    jobs = [job["job_name"] for job in committed["scrape_configs"]]
    # The dashboards and alerts select on these job names: keep the test's equal to the real.
    assert jobs == [GATEWAY_JOB, ENGINE_JOB], jobs
    interval = f"{SCRAPE_INTERVAL_S:g}s"
    config = {
        "global": {
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "evaluation_interval": interval,
        },
        "rule_files": [str(PROMETHEUS_DIR / rule) for rule in committed["rule_files"]],
        "scrape_configs": [
            {"job_name": GATEWAY_JOB, "static_configs": [{"targets": [gateway]}]},
            {"job_name": ENGINE_JOB, "static_configs": [{"targets": list(engines)}]},
        ],
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")


def start_prometheus(config: Path, workdir: Path, ready_timeout: float = 30.0) -> Proc:
    port = free_port()
    log = workdir / "prometheus.log"
    argv = [
        debian_tool("prometheus"),
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    with log.open("wb") as out:
        popen = subprocess.Popen(argv, cwd=workdir, stdout=out, stderr=subprocess.STDOUT)
    proc = Proc(popen=popen, port=port, log_path=log)
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"prometheus exited with {popen.returncode}:\n{proc.log()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(proc.url + "/-/ready", timeout=1.0).status_code == 200:
                return proc
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"prometheus not ready after {ready_timeout}s:\n{proc.log()}")


def wait_for_targets(prom: PrometheusAPI, count: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    states: list[str] = []
    while time.monotonic() < deadline:
        states = [target["health"] for target in prom.targets()]
        if len(states) == count and all(state == "up" for state in states):
            return
        time.sleep(SCRAPE_INTERVAL_S / 2)
    raise AssertionError(f"scrape targets not all up after {timeout}s: {prom.targets()}")


def wait_for_scrapes(count: int = 3) -> None:
    """Let Prometheus take `count` more scrapes, so the last values are in."""
    time.sleep(count * SCRAPE_INTERVAL_S + 0.5)


@dataclass
class LoadResult:
    ttfts: list[float] = field(default_factory=list)
    completed: int = 0
    admission_rejected: int = 0
    invalid_rejected: int = 0
    engine_failed: int = 0
    head_reuses: int = 0
    tool_calls_offered: int = 0
    images_sent: int = 0

    def median_ttft(self) -> float:
        return statistics.median(self.ttfts)


@dataclass(frozen=True)
class Load:
    """Multi-turn streaming sessions, each keyed by x-session-id, all running at once.

    With `misbehave`, five more requests go along, so that the error, status and rejection
    panels have something to show: first one the gateway must refuse (400), one the engine
    fails (the simulator's injected 503) and one where the model calls a tool the request did
    not declare, and one with an image (a data URL); then one sent with the sessions' first
    turns, which a gateway limited to `sessions` requests in flight must refuse (429) for one
    of them.
    """

    sessions: int = 6
    turns: int = 4
    max_tokens: int = 48
    system_words: int = 300
    misbehave: bool = False


# A gateway limited below the load's concurrency answers some requests 429 (admission).
MAX_ATTEMPTS = 200
RETRY_PAUSE_S = 0.2
T = TypeVar("T")


async def _admitted(call: Callable[[], Awaitable[T]], out: LoadResult) -> T:
    """Run `call`, retrying while the gateway is full (429), as a polite client would."""
    for _ in range(MAX_ATTEMPTS - 1):
        try:
            return await call()
        except openai.RateLimitError:
            out.admission_rejected += 1
            await asyncio.sleep(RETRY_PAUSE_S)
    return await call()


async def _turn(
    client: openai.AsyncOpenAI,
    model: str,
    messages: list[ChatCompletionMessageParam],
    session: str,
    load: Load,
) -> tuple[float, str]:
    started = time.perf_counter()
    first: float | None = None
    parts: list[str] = []
    stream = await client.chat.completions.create(
        model=model,
        messages=messages,
        stream=True,
        max_tokens=load.max_tokens,
        extra_headers={"x-session-id": session},
    )
    async for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        reasoning = (delta.model_extra or {}).get("reasoning_content")
        if first is None and (delta.content or reasoning or delta.tool_calls):
            first = time.perf_counter() - started
        parts.append(delta.content or "")
    assert first is not None, f"{session}: no token streamed"
    return first, "".join(parts)


def _first_messages(index: int, load: Load) -> list[ChatCompletionMessageParam]:
    system = " ".join(f"rule{n}" for n in range(load.system_words + index * 40))
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Session {index}: summarise the rules."},
    ]


async def _session(
    client: openai.AsyncOpenAI, model: str, index: int, load: Load, out: LoadResult
) -> None:
    messages = _first_messages(index, load)
    for turn in range(load.turns):
        call = functools.partial(_turn, client, model, messages, f"monitoring-{index}", load)
        ttft, text = await _admitted(call, out)
        out.ttfts.append(ttft)
        out.completed += 1
        messages += [
            {"role": "assistant", "content": text},
            {"role": "user", "content": f"Turn {turn + 1}: go on."},
        ]


async def _invalid_request(client: openai.AsyncOpenAI, model: str, out: LoadResult) -> None:
    async def call() -> None:
        await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=-1
        )

    try:
        await _admitted(call, out)
    except (openai.BadRequestError, openai.UnprocessableEntityError):
        out.invalid_rejected += 1


async def _engine_failure(client: openai.AsyncOpenAI, model: str, out: LoadResult) -> None:
    async def call() -> None:
        await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "fail, please"}],
            max_tokens=8,
            extra_body={"custom_params": {"sim": {"fault": "503"}}},
        )

    try:
        await _admitted(call, out)
    except openai.InternalServerError:
        out.engine_failed += 1


async def _undeclared_tool_call(client: openai.AsyncOpenAI, model: str, out: LoadResult) -> None:
    tool: ChatCompletionToolParam = {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
    }
    sim = {"reasoning_tokens": 2, "content_tokens": 2, "tool_call_list": [{"name": "launch"}]}

    async def call() -> None:
        await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "what is the weather?"}],
            tools=[tool],
            max_tokens=64,
            extra_body={"custom_params": {"sim": sim}},
        )

    await _admitted(call, out)
    out.tool_calls_offered += 1


def _png_data_url() -> str:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (40, 120, 200)).save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode("ascii")


async def _image_request(client: openai.AsyncOpenAI, model: str, out: LoadResult) -> None:
    """One image as a data URL, so the media stage's panels (images, check time, tokens) fill."""

    async def call() -> None:
        await client.chat.completions.create(
            model=model,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what is in this picture?"},
                        {"type": "image_url", "image_url": {"url": _png_data_url()}},
                    ],
                }
            ],
            max_tokens=8,
        )

    await _admitted(call, out)
    out.images_sent += 1


async def _one_more(client: openai.AsyncOpenAI, model: str, out: LoadResult) -> None:
    """A request sent with the sessions' first turns; no retry if the gateway is full."""
    try:
        await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "one more"}], max_tokens=8
        )
    except openai.RateLimitError:
        out.admission_rejected += 1


async def _drive(base_url: str, load: Load) -> LoadResult:
    out = LoadResult()
    async with openai.AsyncOpenAI(
        base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=120.0
    ) as client:
        model = (await client.models.list()).data[0].id
        extra = []
        if load.misbehave:
            await _invalid_request(client, model, out)
            await _engine_failure(client, model, out)
            await _undeclared_tool_call(client, model, out)
            await _image_request(client, model, out)
            extra.append(_one_more(client, model, out))
        await asyncio.gather(
            *(_session(client, model, i, load, out) for i in range(load.sessions)), *extra
        )
        if load.misbehave:
            # Two new sessions with session 0's system prompt (routing.min_head_tokens is below
            # its size): the first is its second session, which saves the head's checkpoint;
            # the next one is placed where that checkpoint is and restores it.
            for name in ("monitoring-head", "monitoring-head-2"):
                reuse = functools.partial(
                    _turn, client, model, _first_messages(0, load), name, load
                )
                await _admitted(reuse, out)
            out.head_reuses += 1
    return out


def drive(base_url: str, load: Load) -> LoadResult:
    return asyncio.run(_drive(base_url, load))


@contextlib.contextmanager
def stopping(*procs: Proc) -> Iterator[None]:
    try:
        yield
    finally:
        for proc in reversed(procs):
            proc.stop()
