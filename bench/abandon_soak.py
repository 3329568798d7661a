"""Soak with abandoned requests: every resource a request takes comes back (issue #38).

One gateway over one simulator. `--clients` clients loop for `--minutes` over the three faces
(chat completions, Messages, Responses), streamed and one-shot, each answer a short text the
simulator is steered to say verbatim with a per-request nonce in it. A share `--abandon` of the
requests is abandoned (the socket closed) at a random point:

- engine stalled: the simulator is steered to never send a first event (`stall_first`); the
  client leaves after a random wait, before the gateway's headers (a stream's refusal wait,
  gateway.upstream.stream.check_refusal) or after them, never having seen a token;
- before headers: a random wait shorter than this face's recent time to headers;
- after headers: the status line and headers read, nothing more;
- after k chunks (streams): k stream events read.

Every request that is not abandoned must be complete and correct: 200, the face's end event
(`[DONE]`, `message_stop`, `response.completed`) or a one-shot body, the stop reason of a
natural end, and exactly the steered answer (another request's bytes would show here).

After the run the gateway must be idle again: its /metrics gauges of held resources all 0
(`flashbox_upstream_connections_in_use` per pool, in-flight, fair queue, admission queue,
routing's outstanding picks and trials), and the simulator has nothing running or queued.
The gateway's RSS is sampled every 2 s; the goal is the end within 10% of its value after the
first minute.

`python -m bench abandon-soak --clients 60 --minutes 3` is the full run; `report()` (make
bench) runs 60 clients for 1.5 minutes and says so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil  # type: ignore[import-untyped]
from prometheus_client.parser import text_string_to_metric_families

from bench import soak
from bench.client import (
    ANTHROPIC_VERSION,
    StreamRecord,
    record_event,
    record_message_event,
    record_response_event,
)
from bench.procs import Proc, start_gateway, start_sim
from gateway.observability.metrics import IDLE_GAUGES

FACES = ("chat", "messages", "responses")
PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}
# How the client leaves, as planned; what it actually saw when it left is the outcome's phase.
PLANS = ("stalled", "before_headers", "after_headers", "after_chunks")
# Labelled by key and set on first use: no series means nothing ever waited. Every other gauge
# must be there (a gateway without them cannot show that it is idle).
SET_ON_USE = ("flashbox_fair_queue_waiting",)
# The simulator's own gauges that are 0 once nothing is generated for anybody (an abort the
# gateway never sent leaves a stalled request running there).
ENGINE_GAUGES = ("sglang:num_running_reqs", "sglang:num_queue_reqs")
# The answer's head around its nonce, and filler to make it ~30 tokens of a few events each.
REASONING = "Checking request {nonce} before answering."
ANSWER = "Answer {nonce}: the plan holds, the tests pass, and nothing is left behind."
# Room for the answer; a cut-off answer (finish `length`) would be an error here.
MAX_TOKENS = 128
# A request that is not abandoned and has no answer within this long is an error (a hang).
REQUEST_TIMEOUT_S = 60.0
# The simulator's pace: at the reference host's (1.0) a 30-token answer takes seconds, and at
# 0.03 sixty clients make ~20 requests/s, which a 2-core box serves with client, simulator and
# gateway on it (the gateway takes a small share of one core).
TIME_SCALE = 0.03
# The gateway's settings for the run: the soak's (custom_params forwarded to the simulator,
# admission wide enough for every client, quiet logs); no keys.
GATEWAY_ENV = {**soak.GATEWAY_ENV, "FLASHBOX_API_KEYS": ""}


@dataclass
class FaceTally:
    done: int = 0
    abandoned: int = 0
    errors: int = 0
    # Abandoned requests by where the client was when it left.
    phases: Counter[str] = field(default_factory=Counter)
    # Planned "before headers" that got their answer first (then checked as any other).
    outran: int = 0


@dataclass
class Run:
    started: float
    faces: dict[str, FaceTally] = field(default_factory=lambda: {f: FaceTally() for f in FACES})
    error_samples: list[str] = field(default_factory=list)
    # Recent time to headers per (face, stream): where a "before headers" wait is drawn.
    headers_s: dict[tuple[str, bool], float] = field(default_factory=dict)

    def error(self, face: str, text: str) -> None:
        self.faces[face].errors += 1
        if len(self.error_samples) < 20:
            self.error_samples.append(f"{face}: {text}")

    def saw_headers(self, face: str, stream: bool, seconds: float) -> None:
        key = (face, stream)
        self.headers_s[key] = 0.8 * self.headers_s.get(key, seconds) + 0.2 * seconds


class Abandoned(Exception):
    """The client left on purpose; the phase is what it had seen by then."""

    def __init__(self, phase: str) -> None:
        super().__init__(phase)
        self.phase = phase


def request_body(face: str, stream: bool, prompt: str, sim: Mapping[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"model": soak.MODEL, "stream": stream, "custom_params": {"sim": sim}}
    if face == "responses":
        # Not stored: the store is a bounded cache whose filling would read as growth here.
        return {**body, "input": prompt, "max_output_tokens": MAX_TOKENS, "store": False}
    return {**body, "messages": [{"role": "user", "content": prompt}], "max_tokens": MAX_TOKENS}


def http_request(face: str, host: str, body: bytes) -> bytes:
    extra = f"anthropic-version: {ANTHROPIC_VERSION}\r\n" if face == "messages" else ""
    return (
        f"POST {PATHS[face]} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"{extra}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


def dechunk(data: bytes) -> bytes:
    """A chunked HTTP/1.1 body's bytes; ValueError when it was cut before its last chunk."""
    out = bytearray()
    pos = 0
    while True:
        eol = data.find(b"\r\n", pos)
        if eol < 0:
            raise ValueError("chunked body cut before its last chunk")
        size = int(data[pos:eol].split(b";", 1)[0], 16)
        if size == 0:
            return bytes(out)
        start = eol + 2
        if start + size > len(data):
            raise ValueError("chunked body cut inside a chunk")
        out += data[start : start + size]
        pos = start + size + 2


def sse_data(body: bytes) -> Iterator[bytes]:
    for line in body.split(b"\n"):
        if line.startswith(b"data:"):
            yield line[5:].strip()


def check_stream(face: str, body: bytes, answer: str) -> str | None:
    """None when the stream is a complete, natural end with exactly `answer` as its text."""
    record = StreamRecord()
    ended = False
    stop: object = None
    for data in sse_data(body):
        if face == "chat":
            if data == b"[DONE]":
                ended = True
                break
            payload = orjson.loads(data)
            record_event(record, payload, 0.0)
            for choice in payload.get("choices") or ():
                stop = choice.get("finish_reason") or stop
            continue
        payload = orjson.loads(data)
        kind = payload.get("type")
        if face == "messages":
            record_message_event(record, payload, 0.0)
            if kind == "message_delta":
                stop = (payload.get("delta") or {}).get("stop_reason")
            ended = kind == "message_stop"
        else:
            record_response_event(record, payload, 0.0)
            if kind in ("response.completed", "response.incomplete", "response.failed"):
                stop = (payload.get("response") or {}).get("status")
            ended = kind == "response.completed"
        if ended:
            break
    if record.error is not None:
        return f"error event: {record.error[:200]}"
    if not ended:
        return "stream ended without its end event"
    return _check_answer(face, stop, "".join(record.content), answer)


def check_one_shot(face: str, body: bytes, answer: str) -> str | None:
    data = orjson.loads(body)
    if face == "chat":
        choice = (data.get("choices") or [{}])[0]
        message = choice.get("message") or {}
        return _check_answer(face, choice.get("finish_reason"), message.get("content"), answer)
    if face == "messages":
        texts = [b.get("text", "") for b in data.get("content") or () if b.get("type") == "text"]
        return _check_answer(face, data.get("stop_reason"), "".join(texts), answer)
    texts = [
        part.get("text", "")
        for item in data.get("output") or ()
        if item.get("type") == "message"
        for part in item.get("content") or ()
        if part.get("type") == "output_text"
    ]
    return _check_answer(face, data.get("status"), "".join(texts), answer)


# The stop reason of an answer that ended on its own, per face.
NATURAL_STOP = {"chat": "stop", "messages": "end_turn", "responses": "completed"}


def _check_answer(face: str, stop: object, text: object, answer: str) -> str | None:
    if stop != NATURAL_STOP[face]:
        return f"stopped with {stop!r}, not {NATURAL_STOP[face]!r}"
    if text != answer:
        return f"answer {str(text)[:100]!r} is not {answer[:100]!r}"
    return None


def check_response(face: str, stream: bool, head: bytes, rest: bytes, answer: str) -> str | None:
    status = int(head.split(b" ", 2)[1])
    body = dechunk(rest) if b"transfer-encoding: chunked" in head.lower() else rest
    if status != 200:
        return f"status {status}: {body[:200]!r}"
    return check_stream(face, body, answer) if stream else check_one_shot(face, body, answer)


async def _leave(
    run: Run, face: str, stream: bool, plan: str, reader: asyncio.StreamReader, rng: random.Random
) -> tuple[bytes, bytes]:
    """Carry out the plan on an open request: raise Abandoned where the client leaves, or
    return the response's head and what was read of its body when the answer outran it."""
    started = time.monotonic()
    if plan in ("stalled", "before_headers"):
        # A stalled stream's headers come after the refusal wait (0.25 s by default): the
        # client leaves on either side of it.
        wait = (
            rng.uniform(0, 1.0)
            if plan == "stalled"
            else rng.uniform(0, 1) * run.headers_s.get((face, stream), 0.2)
        )
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), wait)
        except TimeoutError:
            raise Abandoned(
                "engine stalled, before headers" if plan == "stalled" else "before headers"
            ) from None
        if plan == "stalled":
            await asyncio.sleep(max(0.0, wait - (time.monotonic() - started)))
            raise Abandoned("engine stalled, after headers")
        run.faces[face].outran += 1
        return head, b""
    head = await reader.readuntil(b"\r\n\r\n")
    if plan == "after_headers" or not stream:
        raise Abandoned("after headers")
    # After k stream events (a short answer has ~15-30): the stream may end first.
    wanted = rng.randint(1, 12)
    seen = bytearray()
    while seen.count(b"\n\n") < wanted:
        chunk = await reader.read(65536)
        if not chunk:
            return head, bytes(seen)
        seen += chunk
    raise Abandoned("after k chunks")


async def one_request(
    run: Run, host: str, port: int, rng: random.Random, nonce: str, abandon: float
) -> None:
    face = rng.choice(FACES)
    stream = rng.random() < 0.5
    plan = rng.choice(PLANS) if rng.random() < abandon else None
    if plan == "after_chunks" and not stream:
        plan = "after_headers"
    answer = ANSWER.format(nonce=nonce)
    sim: dict[str, Any] = (
        {"fault": "stall_first"}
        if plan == "stalled"
        else {"output": REASONING.format(nonce=nonce) + "</think>" + answer}
    )
    prompt = f"abandon soak {nonce}: what is the plan?"
    body = orjson.dumps(request_body(face, stream, prompt, sim))
    tally = run.faces[face]
    started = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError as exc:
        run.error(face, f"connect: {exc!r}")
        await asyncio.sleep(0.5)  # a gateway that refuses connections is not hammered
        return
    try:
        writer.write(http_request(face, host, body))
        async with asyncio.timeout(REQUEST_TIMEOUT_S):
            if plan is None:
                head, seen = await reader.readuntil(b"\r\n\r\n"), b""
                run.saw_headers(face, stream, time.monotonic() - started)
            else:
                head, seen = await _leave(run, face, stream, plan, reader, rng)
            rest = seen + await reader.read()  # to the end: the gateway closes (Connection: close)
        problem = check_response(face, stream, head, rest, answer)
    except Abandoned as left:
        tally.abandoned += 1
        tally.phases[left.phase] += 1
        return
    except TimeoutError:
        run.error(face, f"no complete answer within {REQUEST_TIMEOUT_S:g} s (stream={stream})")
        return
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        run.error(face, f"stream={stream}: {exc!r}")
        return
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    if problem is not None:
        run.error(face, f"stream={stream}: {problem}")
    else:
        tally.done += 1


async def _client(
    run: Run, gateway: Proc, index: int, stop_at: float, abandon: float, seed: int
) -> None:
    rng = random.Random(seed * 1_000_003 + index)
    # Spread the starts over a few seconds, as real clients arrive.
    await asyncio.sleep(rng.uniform(0, min(5.0, (stop_at - time.monotonic()) / 4)))
    turn = 0
    while time.monotonic() < stop_at:
        turn += 1
        await one_request(run, "127.0.0.1", gateway.port, rng, f"c{index}t{turn}", abandon)


async def drive(
    gateway: Proc, clients: int, seconds: float, abandon: float, seed: int
) -> tuple[Run, list[tuple[float, int]]]:
    run = Run(started=time.monotonic())
    # The soak's RSS sampler (every 2 s until stop_at) fills its own Run's samples.
    rss = soak.Run(started=run.started, window_s=seconds)
    stop_at = run.started + seconds
    tasks = [
        asyncio.create_task(_client(run, gateway, i, stop_at, abandon, seed))
        for i in range(clients)
    ]
    tasks.append(asyncio.create_task(soak._sample_rss(rss, gateway.popen.pid, stop_at)))
    await asyncio.gather(*tasks)
    return run, rss.rss


def metric_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [
        (sample.name, dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def _label(name: str, labels: Mapping[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}" if inner else name


def held(
    samples: list[tuple[str, dict[str, str], float]], names: tuple[str, ...]
) -> dict[str, float]:
    """Every sample of `names`, zeros included (a report shows that the gauge was read)."""
    return {_label(n, labels): v for n, labels, v in samples if n in names}


def wait_idle(gateway: Proc, sim: Proc, settle_s: float) -> tuple[float, dict[str, Any]]:
    """Poll both /metrics until nothing is held or `settle_s` passed: (seconds taken, last
    figures). Aborts run as background tasks after a client leaves, so idle takes a moment."""
    started = time.monotonic()
    with httpx.Client(timeout=10.0) as http:
        while True:
            gw = metric_samples(http.get(gateway.url + "/metrics").text)
            engine = metric_samples(http.get(sim.url + "/metrics").text)
            gauges = held(gw, IDLE_GAUGES)
            engine_gauges = held(engine, ENGINE_GAUGES)
            busy = any(gauges.values()) or any(engine_gauges.values())
            if not busy or time.monotonic() - started > settle_s:
                break
            time.sleep(0.25)
    aborts = {
        labels.get("phase", ""): v for n, labels, v in gw if n == "flashbox_upstream_aborts_total"
    }
    missing = [n for n in IDLE_GAUGES if n not in SET_ON_USE and not any(s[0] == n for s in gw)]
    return time.monotonic() - started, {
        "gauges": gauges,
        "engine_gauges": engine_gauges,
        "missing_gauges": missing,
        "idle": not busy and not missing,
        "aborts_by_phase": aborts,
        "abort_failures": sum(v for n, _, v in gw if n == "flashbox_upstream_abort_failures_total"),
        "engine_aborted": sum(v for n, _, v in engine if n == "sglang:num_aborted_requests_total"),
        "engine_finished": sum(v for n, _, v in engine if n == "sglang:num_requests_total"),
    }


def rss_summary(samples: list[tuple[float, int]], end_rss: int, warmup_s: float) -> dict[str, Any]:
    after = [rss for t, rss in samples if t >= warmup_s]
    first = after[0] if after else end_rss
    return {
        "warmup_s": warmup_s,
        "after_warmup_mib": first / 2**20,
        "end_mib": end_rss / 2**20,
        "peak_mib": max([end_rss, *(r for _, r in samples)]) / 2**20,
        "ratio": end_rss / first,
        "samples": [(round(t, 1), round(r / 2**20, 1)) for t, r in samples],
    }


def abandon_soak(
    clients: int,
    seconds: float,
    *,
    abandon: float = 0.33,
    seed: int = 0,
    time_scale: float = TIME_SCALE,
    warmup_s: float = 60.0,
    settle_s: float = 5.0,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Run the soak against a fresh simulator and gateway; the figures, as JSON-ready data."""
    sim = start_sim(
        "--max-running-requests", "1024", "--max-queued-requests", "4096", time_scale=time_scale
    )
    try:
        gateway = start_gateway([sim.url], env={**GATEWAY_ENV, **(env or {})})
        try:
            run, samples = asyncio.run(drive(gateway, clients, seconds, abandon, seed))
            ended = time.monotonic() - run.started
            settled_s, metrics = wait_idle(gateway, sim, settle_s)
            process = psutil.Process(gateway.popen.pid)
            end_rss = int(process.memory_info().rss)
            cpu = process.cpu_times()
            alive = gateway.alive()
        finally:
            gateway.stop()
    finally:
        sim.stop()
    faces = {
        name: {
            "done": t.done,
            "abandoned": t.abandoned,
            "errors": t.errors,
            "abandoned_by_phase": dict(sorted(t.phases.items())),
            "planned_before_headers_outran": t.outran,
        }
        for name, t in run.faces.items()
    }
    rss = rss_summary(samples, end_rss, warmup_s)
    errors = sum(t.errors for t in run.faces.values())
    return {
        "clients": clients,
        "seconds": seconds,
        "abandon": abandon,
        "seed": seed,
        "time_scale": time_scale,
        "gateway_env": dict(env or {}),
        "drive_s": ended,
        "requests_per_s": (sum(t.done + t.abandoned + t.errors for t in run.faces.values()))
        / ended,
        "gateway_cpu_s": cpu.user + cpu.system,
        "settled_s": settled_s,
        "faces": faces,
        "done": sum(t.done for t in run.faces.values()),
        "abandoned": sum(t.abandoned for t in run.faces.values()),
        "errors": errors,
        "error_samples": run.error_samples,
        "metrics": metrics,
        "rss": rss,
        "gateway_alive": alive,
        "ok": alive and errors == 0 and metrics["idle"] and rss["ratio"] <= 1.10,
    }


def markdown(summary: dict[str, Any], note: str) -> str:
    rss, metrics = summary["rss"], summary["metrics"]
    gauges = {**metrics["gauges"], **metrics["engine_gauges"]}
    lines = [
        "## Soak: abandoned requests (one gateway, one simulator)",
        "",
        note,
        "",
        f"- {summary['clients']} clients for {summary['seconds'] / 60:g} min over chat, Messages "
        f"and Responses, streamed and one-shot; {summary['abandon']:.0%} of requests abandoned "
        f"(seed {summary['seed']}, simulator time scale {summary['time_scale']:g})"
        + (f"; gateway settings {summary['gateway_env']}" if summary["gateway_env"] else ""),
        f"- requests: {summary['done']} complete and correct, {summary['abandoned']} abandoned, "
        f"{summary['errors']} errors ({summary['requests_per_s']:.1f} requests/s; the gateway "
        f"used {summary['gateway_cpu_s']:.0f} s of CPU)",
        f"- idle after the run: **{'yes' if metrics['idle'] else 'NO'}** "
        f"({summary['settled_s']:.1f} s after the last request)",
        f"- gateway RSS after {rss['warmup_s']:g} s: {rss['after_warmup_mib']:.1f} MiB, at the "
        f"end {rss['end_mib']:.1f} MiB (ratio {rss['ratio']:.3f}, goal <= 1.10; peak "
        f"{rss['peak_mib']:.1f} MiB)",
        "- aborts the gateway sent, by phase: "
        + (", ".join(f"{k} {v:g}" for k, v in sorted(metrics["aborts_by_phase"].items())) or "none")
        + f"; failed aborts {metrics['abort_failures']:g}; the simulator counted "
        f"{metrics['engine_aborted']:g} aborted and {metrics['engine_finished']:g} finished",
        "",
        "| face | complete | abandoned | errors | abandoned by phase |",
        "|---|---|---|---|---|",
    ]
    for name, face in summary["faces"].items():
        phases = ", ".join(f"{k} {v}" for k, v in face["abandoned_by_phase"].items())
        lines.append(
            f"| {name} | {face['done']} | {face['abandoned']} | {face['errors']} | {phases} |"
        )
    lines += ["", "| gauge after the run | value |", "|---|---|"]
    lines += [f"| `{k}` | {v:g} |" for k, v in gauges.items()]
    # A labelled gauge has no series until a request first set it (nothing ever waited).
    lines += [
        f"| `{name}` | " + ("MISSING |" if name in metrics["missing_gauges"] else "no series |")
        for name in IDLE_GAUGES
        if not any(k == name or k.startswith(name + "{") for k in gauges)
    ]
    if summary["error_samples"]:
        lines += ["", "First errors: " + "; ".join(summary["error_samples"][:5])]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench abandon-soak", description=__doc__)
    parser.add_argument("--clients", type=int, default=60)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--abandon", type=float, default=0.33, help="share of requests abandoned")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-scale", type=float, default=TIME_SCALE, help="the simulator's")
    parser.add_argument("--warmup-s", type=float, default=60.0, help="RSS baseline after this")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a gateway setting for the run (FLASHBOX_...), repeatable: to isolate a cause",
    )
    parser.add_argument("--out", type=Path, default=Path("bench-results/abandon-soak"))
    args = parser.parse_args(argv)
    env = dict(item.split("=", 1) for item in args.env)
    summary = abandon_soak(
        args.clients,
        args.minutes * 60,
        abandon=args.abandon,
        seed=args.seed,
        time_scale=args.time_scale,
        warmup_s=args.warmup_s,
        env=env,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "abandon_soak.json").write_text(json.dumps(summary, indent=2))
    print(markdown(summary, f"`python -m bench abandon-soak {' '.join(argv)}`"))
    return 0 if summary["ok"] else 1


def report(out_dir: Path) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = abandon_soak(60, 90.0)
    (out_dir / "abandon_soak.json").write_text(json.dumps(summary, indent=2))
    return markdown(
        summary,
        "Short version for `make bench` (60 clients, 1.5 minutes); the full soak is "
        "`python -m bench abandon-soak --clients 60 --minutes 3`.",
    )
