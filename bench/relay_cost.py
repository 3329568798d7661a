"""`python -m bench relay`: the gateway's CPU per engine event on the streaming path, in-process.

An SGLang-shaped /generate response (cumulative `text` and `output_ids`, `meta_info`, one HTTP
chunk per token, a finish event, `[DONE]`) is fed to the engine connection's protocol
callbacks one chunk per event-loop turn, as a socket would deliver it, and relayed by the real
pieces: the wire client's parser, EngineStream, the core's Relay with the model family's output
parser, and the face's encoder. Only the network is missing, on both sides (the client side
is a `send` that drops the bytes), so this is the gateway's own work per event, warm, without
syscalls: the number to move when changing the relay. Median and best of `--rounds` answers
of `--tokens` tokens, in microseconds per event, for each face's encoder in the same run (the
OpenAI face's ChunkBuilder; the Messages face's MessageStream and the Responses face's
ResponseStream, each with its keepalive task on, as their routes run them), each round running
the faces in another order, and each face / OpenAI. The timing starts once the response has
started (Messages' message_start, Responses' response.created and response.in_progress are
sent), so it is the cost per engine event and the answer's end.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import orjson
import uvloop

from bench.stats import percentile, ratio
from gateway.core.answer import StreamEncoder
from gateway.core.reasoning_codec import ReasoningCodec
from gateway.core.relay import Relay
from gateway.faces.anthropic.encode import MessageStream
from gateway.faces.openai_chat.encode import ChunkBuilder
from gateway.faces.responses.convert import ToolNames
from gateway.faces.responses.encode import ItemWriter, ResponseInfo, ResponseStream
from gateway.settings import Settings
from gateway.state import build_state
from gateway.stream.text_diff import TextDiffer
from gateway.upstream.stream import EngineStream
from gateway.upstream.wire import WirePool, WireResponse, _Connection

MODEL = "glm-5.3-flash"
# face -> the API label its requests are counted under
FACES = {"openai": "openai", "messages": "anthropic", "responses": "responses"}
# Each round runs the faces in the next of these orders: none always runs first, or right
# after another.
_ORDERS = list(itertools.permutations(FACES))
# The request id the Responses face names its response and output items after.
_RID = "bench"
_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def engine_chunks(tokens: int) -> list[bytes]:
    """HTTP chunks of one answer: a quarter reasoning, then content, as GLM writes it."""
    words = ("on ", "with ", "the ", "model ", "token ", "and ")
    text, ids, chunks = "", [], []
    meta: dict[str, object]
    for i in range(tokens):
        text += "</think>" if i == tokens // 4 else words[i % len(words)]
        ids.append(1000 + i)
        meta = {"id": "r", "finish_reason": None, "prompt_tokens": 10, "completion_tokens": i + 1}
        if i == tokens - 1:
            meta["finish_reason"] = {"type": "stop", "matched": 151336}
        data = b"data: " + orjson.dumps({"text": text, "output_ids": ids, "meta_info": meta})
        chunks.append(b"%x\r\n%s\n\n\r\n" % (len(data) + 2, data))
    done = b"data: [DONE]\n\n"
    chunks.append(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
    return chunks


class _NoNetwork:
    """The engine socket's transport: nothing to write to, nothing to pause."""

    def write(self, data: bytes) -> None:
        return None

    def writelines(self, data: list[bytes]) -> None:
        return None

    def pause_reading(self) -> None:
        return None

    def resume_reading(self) -> None:
        return None

    def close(self) -> None:
        return None


def _encoders(settings: Settings) -> dict[str, tuple[Callable[[], StreamEncoder], float | None]]:
    """face -> (a new request's stream encoder, the keepalive its route runs)."""
    codec = ReasoningCodec.with_random_key(max_age_s=3600, max_text_bytes=1 << 20)

    def responses() -> ResponseStream:
        # As gateway.faces.responses.encode.ResponsesAnswer builds it (no tools, no store).
        info = ResponseInfo(response_id=f"resp_{_RID}", model=MODEL, created_at=0, echo={})
        return ResponseStream(info, ItemWriter(codec, ToolNames(), _RID))

    return {
        "openai": (lambda: ChunkBuilder("chatcmpl-bench", 0, MODEL, include_usage=True), None),
        "messages": (
            lambda: MessageStream("msg_bench", MODEL, codec, ()),
            settings.anthropic.keepalive_s,
        ),
        "responses": (responses, settings.responses.keepalive_s),
    }


async def _measure(
    tokens: int, rounds: int, sinks: dict[str, list[bytes]]
) -> dict[str, list[float]]:
    settings = Settings(engines=["http://127.0.0.1:9"])
    state = build_state(settings)
    encoders = _encoders(settings)
    chunks = engine_chunks(tokens)
    pool = WirePool(
        max_connections=1,
        max_idle=1,
        keepalive_expiry=30.0,
        connect_timeout=5.0,
        read_timeout=30.0,
        pool_timeout=5.0,
    )
    loop = asyncio.get_running_loop()

    async def one(face: str) -> float:
        sink = sinks.get(face)

        async def drop(data: bytes, *, last: bool = False) -> None:
            if sink is not None:
                sink.append(data)

        conn = _Connection(loop, ("engine", 1))
        conn.connection_made(cast(asyncio.Transport, _NoNetwork()))
        conn.send([b""])
        conn.data_received(_HEAD)
        await pool._slots.acquire()  # released by the response's aclose, as in WirePool.post
        stream = EngineStream(WireResponse(pool, conn, 200), 1 << 20, first_deadline=None)
        record = state.admit(MODEL, time.perf_counter(), FACES[face])
        parser = state.parser_factory(tools=None, tool_choice=None, starts_in_reasoning=True)
        relay = Relay(engine=stream, parser=parser, differ=TextDiffer(), record=record)
        make_encoder, keepalive_s = encoders[face]
        task = loop.create_task(relay.stream(drop, encoder=make_encoder(), keepalive_s=keepalive_s))
        await asyncio.sleep(0)
        started = time.process_time()
        for chunk in chunks:
            conn.data_received(chunk)
            await asyncio.sleep(0)  # one event-loop turn per network read
        await task
        elapsed = time.process_time() - started
        state.release()
        return elapsed / tokens * 1e6

    per_event: dict[str, list[float]] = {face: [] for face in FACES}
    for i in range(rounds):
        for face in _ORDERS[i % len(_ORDERS)]:
            per_event[face].append(await one(face))
    return per_event


def measure(
    tokens: int,
    rounds: int,
    sink: list[bytes] | None = None,
    *,
    messages_sink: list[bytes] | None = None,
    responses_sink: list[bytes] | None = None,
) -> dict[str, float]:
    """The OpenAI face's figures as before (`median_us_per_event`, `best_us_per_event`), the
    Messages face's under `messages_` and the Responses face's under `responses_`, each with
    its ratios to OpenAI (`<face>_over_openai_median`, `_best`). `sink`, `messages_sink` and
    `responses_sink` collect what each face's relay sent (tests check them)."""
    results: dict[str, list[float]] = {}
    given = {"openai": sink, "messages": messages_sink, "responses": responses_sink}
    sinks = {face: collected for face, collected in given.items() if collected is not None}

    async def run() -> None:
        results.update(await _measure(tokens, rounds, sinks))

    uvloop.run(run())
    openai = results["openai"]
    figures: dict[str, float] = {
        "tokens": tokens,
        "median_us_per_event": percentile(openai, 50),
        "best_us_per_event": min(openai),
    }
    for face in ("messages", "responses"):
        times = results[face]
        figures[f"{face}_median_us_per_event"] = percentile(times, 50)
        figures[f"{face}_best_us_per_event"] = min(times)
        figures[f"{face}_over_openai_median"] = ratio(percentile(times, 50), percentile(openai, 50))
        figures[f"{face}_over_openai_best"] = ratio(min(times), min(openai))
    return figures


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench relay", description=__doc__)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None, help="write results JSON here")
    return parser.parse_args(argv)


def _line(result: dict[str, float]) -> str:
    return (
        f"{result['tokens']:.0f}-token answers: {result['median_us_per_event']:.1f} µs CPU per "
        f"engine event (median), {result['best_us_per_event']:.1f} µs best (OpenAI face, "
        f"ChunkBuilder); Messages face (MessageStream): "
        f"{result['messages_median_us_per_event']:.1f} µs median, "
        f"{result['messages_best_us_per_event']:.1f} µs best; Messages / OpenAI "
        f"{result['messages_over_openai_median']:.2f} (median), "
        f"{result['messages_over_openai_best']:.2f} (best); Responses face (ResponseStream): "
        f"{result['responses_median_us_per_event']:.1f} µs median, "
        f"{result['responses_best_us_per_event']:.1f} µs best; Responses / OpenAI "
        f"{result['responses_over_openai_median']:.2f} (median), "
        f"{result['responses_over_openai_best']:.2f} (best)"
    )


def main(argv: list[str]) -> int:
    args = _parse(argv)
    result = measure(args.tokens, args.rounds)
    print(_line(result))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2))
    return 0


def report(out_dir: Path) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    args = _parse([])
    result = measure(args.tokens, args.rounds)
    (out_dir / "relay.json").write_text(json.dumps(result, indent=2))
    return f"## The relay's own CPU per engine event (in-process, warm)\n\n{_line(result)}\n"
