"""One request's life in the simulated engine: what it was asked, what it has produced."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import orjson

from engine.sim.faults import Fault
from engine.sim.images import ImageSize
from engine.sim.requests import GenerateParams
from engine.sim.tokens import TokenSeq


class Phase(Enum):
    QUEUED = "queued"
    PREFILL = "prefill"
    DECODE = "decode"
    PARKED = "parked"  # stalled by a fault: holds no slot, waits for abort or disconnect
    FINISHED = "finished"


@dataclass
class ModelTimes:
    """Modelled timeline in reference-hardware seconds (before --time-scale)."""

    arrival: float = 0.0
    prefill_start: float | None = None
    prefill_seconds: float = 0.0
    first_token: float | None = None
    finish: float | None = None
    decode_steps: int = 0
    decode_seconds: float = 0.0
    # "hybrid" when the prefill batch held an image request (all its members), else "layerwise".
    prefill_path: str = "layerwise"
    image_tokens: tuple[int, ...] = ()
    # Parts of prefill_seconds: the vision tower (skipped when the cached prefix covers every
    # image) and the images' preprocessing.
    vision_seconds: float = 0.0
    preprocess_seconds: float = 0.0

    def summary(self, time_scale: float) -> dict[str, Any]:
        def since(t: float | None) -> float | None:
            return None if t is None else round(t - self.arrival, 6)

        queue = None if self.prefill_start is None else self.prefill_start - self.arrival
        return {
            "time_scale": time_scale,
            "queue_s": None if queue is None else round(queue, 6),
            "prefill_s": round(self.prefill_seconds, 6),
            "ttft_s": since(self.first_token),
            "decode_steps": self.decode_steps,
            "decode_s": round(self.decode_seconds, 6),
            "ms_per_step": (
                round(1000 * self.decode_seconds / self.decode_steps, 4)
                if self.decode_steps
                else None
            ),
            "e2e_s": since(self.finish),
            "prefill_path": self.prefill_path,
            "image_tokens": list(self.image_tokens),
            "vision_s": round(self.vision_seconds, 6),
            "preprocess_s": round(self.preprocess_seconds, 6),
        }


@dataclass
class SimRequest:
    params: GenerateParams
    prompt: TokenSeq
    plan: list[str]
    rng: random.Random
    fault: Fault | None
    # The request's images in prompt order, and where their tokens end in the prompt.
    images: tuple[ImageSize, ...] = ()
    images_end: int = 0
    phase: Phase = Phase.QUEUED
    cached_tokens: int = 0
    prompt_checkpoint: bytes | None = None
    restored_checkpoint: bytes | None = None
    ids: list[int] = field(default_factory=list)
    # Per emitted token: how much of `text` a client may see after it (stop-string holdback).
    visible: list[int] = field(default_factory=list)
    text: str = ""
    plan_pos: int = 0
    finish_reason: dict[str, Any] | None = None
    # True when the finish came with the last token; False when it needs an event of its own.
    finish_on_token: bool = False
    model: ModelTimes = field(default_factory=ModelTimes)
    wall_arrival: float = 0.0
    perf_arrival: float = 0.0
    wall_first_token: float | None = None
    wall_last_token: float | None = None
    wall_finish: float | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    # output_ids as comma-joined JSON, and where it ends after each token: events reuse it
    # instead of serialising the whole list again for every token.
    ids_json: bytearray = field(default_factory=bytearray)
    ids_json_ends: list[int] = field(default_factory=list)
    prompt_tokens: int = field(init=False)

    def __post_init__(self) -> None:
        self.prompt_tokens = self.prompt.count
        self.model.image_tokens = tuple(image.tokens for image in self.images)

    def add_token(self, token: int, piece: str) -> None:
        if self.ids:
            self.ids_json += b","
        self.ids_json += str(token).encode()
        self.ids_json_ends.append(len(self.ids_json))
        self.ids.append(token)
        self.text += piece

    @property
    def rid(self) -> str:
        return self.params.rid

    @property
    def completion_tokens(self) -> int:
        return len(self.ids)

    @property
    def context_tokens(self) -> int:
        return self.prompt_tokens + len(self.ids)

    @property
    def done(self) -> bool:
        return self.phase is Phase.FINISHED

    def meta_info(self, tokens: int, final: bool, time_scale: float) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": self.rid,
            "finish_reason": self.finish_reason if final else None,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": tokens,
            "cached_tokens": self.cached_tokens,
        }
        if final:
            end = self.wall_finish if self.wall_finish is not None else self.wall_arrival
            meta["e2e_latency"] = round(end - self.wall_arrival, 6)
            meta["sim"] = self.model.summary(time_scale)
        return meta

    def encode_event(self, tokens: int, since: int = 0) -> bytes:
        """`data: {event}` for a not-yet-final event, built without re-serialising the ids;
        its output_ids are those after the first `since` (SGLang's --stream-output)."""
        visible = self.visible[tokens - 1] if tokens else 0
        start = self.ids_json_ends[since - 1] + 1 if since else 0
        ids = self.ids_json[start : self.ids_json_ends[tokens - 1]] if tokens > since else b""
        return b"".join(
            (
                b'data: {"text":',
                orjson.dumps(self.text[:visible]),
                b',"output_ids":[',
                ids,
                b'],"meta_info":{"id":',
                orjson.dumps(self.rid),
                b',"finish_reason":null,"prompt_tokens":%d,"completion_tokens":%d,'
                b'"cached_tokens":%d}}\n\n' % (self.prompt_tokens, tokens, self.cached_tokens),
            )
        )

    def event(self, tokens: int, final: bool, time_scale: float, since: int = 0) -> dict[str, Any]:
        """The output after `tokens` tokens, as SGLang streams it: cumulative text, and the
        output_ids after the first `since` (all of them unless --stream-output)."""
        visible = self.visible[tokens - 1] if tokens else 0
        return {
            "text": self.text[:visible],
            "output_ids": self.ids[since:tokens],
            "meta_info": self.meta_info(tokens, final, time_scale),
        }
