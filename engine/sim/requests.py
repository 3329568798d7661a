"""Validation of a `/generate` body into typed parameters; every mistake is a SimRequestError.

SGLang accepts many more fields than the simulator uses; unknown ones are ignored, but the
ones it reads are type-checked so a client bug shows up as a 400 that names the field.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.sim.faults import Fault, FaultSpecError, parse_fault
from engine.sim.tokens import MAX_TOKEN_ID

DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's default
# sampling_params.custom_params field: how many prompt tokens the client's fixed head spans
# (the gateway's contract with the patched engine, docs/prefix-cache.md "Prompt heads").
HEAD_TOKENS_PARAM = "flashbox_head_tokens"


class SimRequestError(ValueError):
    """The client's fault: answered with 400 and this message."""

    # True for what sglang-kt checks inside its tokenizer manager (sampling values, the
    # context): a streamed request gets its 200 and then the refusal as the first event,
    # where a malformed body is a plain 400 either way.
    in_stream = False

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status


class SimRefusal(SimRequestError):
    """A refusal sglang-kt sends in the stream when the request streams."""

    in_stream = True


@dataclass(frozen=True)
class SimOverrides:
    """custom_params {"sim": {...}}: per-request control of the simulated output."""

    reasoning_tokens: int | None = None
    content_tokens: int | None = None
    tool_calls: int | None = None
    tool_call_list: tuple[tuple[str, dict[str, Any]], ...] | None = None
    output: str | None = None
    fault: Fault | None = None


@dataclass(frozen=True)
class RawMedia:
    """The multimodal fields as sent; engine/sim/media.py checks them as the engine does."""

    image_data: Any = None
    video_data: Any = None
    audio_data: Any = None


@dataclass(frozen=True)
class GenerateParams:
    rid: str
    text: str | None
    input_ids: list[int] | None
    stream: bool
    max_new_tokens: int
    temperature: float
    stop: tuple[str, ...]
    stop_token_ids: frozenset[int]
    ignore_eos: bool
    sampling_seed: int | None
    no_stop_trim: bool
    sim: SimOverrides = field(default_factory=SimOverrides)
    # Tool names a tool-call grammar (sampling_params.ebnf) allows; None without a grammar.
    grammar_tools: tuple[str, ...] | None = None
    # The x-request-id header the request came with (a router's or a client's id), for
    # /sim/timings; SGLang itself ignores it.
    request_id: str | None = None
    # image_data, video_data, audio_data; None when the body has none of them.
    media: RawMedia | None = None
    # sampling_params.custom_params.flashbox_head_tokens: where the prompt's head ends.
    head_tokens: int | None = None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _opt_int(obj: dict[str, Any], key: str, where: str, minimum: int = 0) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if not _is_int(value) or value < minimum:
        raise SimRequestError(f"{where}{key} must be an integer >= {minimum}", f"{where}{key}")
    return int(value)


def _opt_bool(obj: dict[str, Any], key: str, where: str) -> bool:
    value = obj.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise SimRequestError(f"{where}{key} must be a boolean", f"{where}{key}")
    return value


def _opt_number(obj: dict[str, Any], key: str, where: str, default: float) -> float:
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise SimRequestError(f"{where}{key} must be a number >= 0", f"{where}{key}")
    return float(value)


def _stop_strings(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return tuple(s for s in value if s)
    raise SimRequestError("sampling_params.stop must be a string or a list of strings", "stop")


def _stop_ids(value: Any) -> frozenset[int]:
    if value is None:
        return frozenset()
    if isinstance(value, list) and all(_is_int(i) for i in value):
        return frozenset(value)
    raise SimRequestError(
        "sampling_params.stop_token_ids must be a list of integers", "stop_token_ids"
    )


def _tool_call_list(value: Any) -> tuple[tuple[str, dict[str, Any]], ...] | None:
    if value is None:
        return None
    where = "custom_params.sim.tool_call_list"
    if not isinstance(value, list):
        raise SimRequestError(f"{where} must be a list of {{name, arguments}}", where)
    calls = []
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise SimRequestError(f"{where} items need a string 'name'", where)
        args = item.get("arguments", {})
        if not isinstance(args, dict):
            raise SimRequestError(f"{where} 'arguments' must be an object", where)
        calls.append((item["name"], args))
    return tuple(calls)


def parse_overrides(custom_params: Any, header_fault: str | None) -> SimOverrides:
    sim: Any = {}
    if custom_params is not None:
        if not isinstance(custom_params, dict):
            raise SimRequestError("custom_params must be an object", "custom_params")
        sim = custom_params.get("sim") or {}
        if not isinstance(sim, dict):
            raise SimRequestError("custom_params.sim must be an object", "custom_params.sim")
    where = "custom_params.sim."
    output = sim.get("output")
    if output is not None and not isinstance(output, str):
        raise SimRequestError(f"{where}output must be a string", f"{where}output")
    fault_spec = header_fault or sim.get("fault")
    fault = None
    if fault_spec is not None:
        if not isinstance(fault_spec, str):
            raise SimRequestError(f"{where}fault must be a string", f"{where}fault")
        try:
            fault = parse_fault(fault_spec)
        except FaultSpecError as exc:
            raise SimRequestError(str(exc), f"{where}fault") from None
    return SimOverrides(
        reasoning_tokens=_opt_int(sim, "reasoning_tokens", where),
        content_tokens=_opt_int(sim, "content_tokens", where),
        tool_calls=_opt_int(sim, "tool_calls", where),
        tool_call_list=_tool_call_list(sim.get("tool_call_list")),
        output=output,
        fault=fault,
    )


def _head_tokens(sampling: dict[str, Any]) -> int | None:
    """SGLang passes sampling_params.custom_params through untouched; the simulator reads the
    prompt-head field from it, as the patched engine does."""
    custom = sampling.get("custom_params")
    if custom is None:
        return None
    where = "sampling_params.custom_params"
    if not isinstance(custom, dict):
        raise SimRequestError(f"{where} must be an object", where)
    return _opt_int(custom, HEAD_TOKENS_PARAM, f"{where}.")


def _prompt(body: dict[str, Any]) -> tuple[str | None, list[int] | None]:
    text, input_ids = body.get("text"), body.get("input_ids")
    if text is not None and input_ids is not None:
        raise SimRequestError("send either text or input_ids, not both", "text")
    if text is not None:
        if isinstance(text, list):
            raise SimRequestError("batch requests (a list of texts) are not supported", "text")
        if not isinstance(text, str):
            raise SimRequestError("text must be a string", "text")
        if not text:
            raise SimRequestError("text must not be empty", "text")
        return text, None
    if input_ids is not None:
        if not isinstance(input_ids, list) or not all(
            _is_int(i) and 0 <= i <= MAX_TOKEN_ID for i in input_ids
        ):
            raise SimRequestError(
                "input_ids must be a list of token ids (integers >= 0)", "input_ids"
            )
        if not input_ids:
            raise SimRequestError("input_ids must not be empty", "input_ids")
        return None, list(input_ids)
    raise SimRequestError("the request needs text or input_ids", "text")


def parse_generate(
    body: Any, header_fault: str | None = None, request_id: str | None = None
) -> GenerateParams:
    if not isinstance(body, dict):
        raise SimRequestError("the body must be a JSON object")
    text, input_ids = _prompt(body)
    rid = body.get("rid")
    if rid is None:
        rid = uuid.uuid4().hex
    elif not isinstance(rid, str) or not rid:
        raise SimRequestError("rid must be a non-empty string", "rid")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise SimRequestError("stream must be a boolean", "stream")
    sampling = body.get("sampling_params") or {}
    if not isinstance(sampling, dict):
        raise SimRequestError("sampling_params must be an object", "sampling_params")
    where = "sampling_params."
    max_new = _opt_int(sampling, "max_new_tokens", where)
    n = _opt_int(sampling, "n", where, minimum=1)
    if n is not None and n != 1:
        raise SimRequestError("sampling_params.n > 1 is not supported", "n")
    seed = sampling.get("sampling_seed")
    if seed is not None and not _is_int(seed):
        raise SimRequestError("sampling_params.sampling_seed must be an integer", "sampling_seed")
    for key in ("top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty"):
        value = sampling.get(key)
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)):
            raise SimRequestError(f"{where}{key} must be a number", f"{where}{key}")
    _check_ranges(sampling)
    return GenerateParams(
        rid=rid,
        text=text,
        input_ids=input_ids,
        stream=stream,
        max_new_tokens=DEFAULT_MAX_NEW_TOKENS if max_new is None else max_new,
        temperature=_opt_number(sampling, "temperature", where, 1.0),
        stop=_stop_strings(sampling.get("stop")),
        stop_token_ids=_stop_ids(sampling.get("stop_token_ids")),
        ignore_eos=_opt_bool(sampling, "ignore_eos", where),
        sampling_seed=None if seed is None else int(seed),
        no_stop_trim=_opt_bool(sampling, "no_stop_trim", where),
        sim=parse_overrides(body.get("custom_params"), header_fault),
        grammar_tools=_grammar_tools(sampling.get("ebnf")),
        request_id=request_id,
        media=_media(body),
        head_tokens=_head_tokens(sampling),
    )


def _media(body: dict[str, Any]) -> RawMedia | None:
    media = RawMedia(body.get("image_data"), body.get("video_data"), body.get("audio_data"))
    return None if media == RawMedia() else media


# sglang-kt 0.7.2's SamplingParams.verify, in its order and words (the real server showed the
# gateway passing these through: they must be refused here as there).
_RANGES: tuple[tuple[str, float, Callable[[float], bool], str], ...] = (
    ("temperature", 1.0, lambda v: v >= 0.0, "temperature must be non-negative, got {}."),
    ("top_p", 1.0, lambda v: 0.0 < v <= 1.0, "top_p must be in (0, 1], got {}."),
    ("min_p", 0.0, lambda v: 0.0 <= v <= 1.0, "min_p must be in [0, 1], got {}."),
    (
        "top_k",
        -1,
        lambda v: v == -1 or v >= 1,
        "top_k must be -1 (disable) or at least 1, got {}.",
    ),
    (
        "frequency_penalty",
        0.0,
        lambda v: -2.0 <= v <= 2.0,
        "frequency_penalty must be in [-2, 2], got {}.",
    ),
    (
        "presence_penalty",
        0.0,
        lambda v: -2.0 <= v <= 2.0,
        "presence_penalty must be in [-2, 2], got {}.",
    ),
    (
        "repetition_penalty",
        1.0,
        lambda v: 0.0 <= v <= 2.0,
        "repetition_penalty must be in [0, 2], got {}.",
    ),
)


def _check_ranges(sampling: dict[str, Any]) -> None:
    greedy = sampling.get("temperature") == 0
    for key, default, valid, message in _RANGES:
        if greedy and key == "top_k":
            continue  # SGLang turns temperature 0 into top_k 1 before it checks top_k
        value = sampling.get(key, default)
        if isinstance(value, int | float) and not isinstance(value, bool) and not valid(value):
            raise SimRefusal(message.format(value), f"sampling_params.{key}")


# A grammar that forces GLM tool calls spells each allowed call as `<tool_call> "NAME"`
# (the marker as a token, as the gateway writes it; the quoted-text form an older gateway
# wrote is read too).
_GRAMMAR_CALL = re.compile(r'(?:"<tool_call>"|<tool_call>)\s*"((?:[^"\\]|\\.)+)"')


def _grammar_tools(ebnf: Any) -> tuple[str, ...] | None:
    """Which tools a constrained decode may call. The simulator does not run grammars; it
    honours the one effect the gateway relies on: with a tool-call grammar the answer is
    nothing but calls to the tools the grammar names."""
    if ebnf is None:
        return None
    if not isinstance(ebnf, str):
        raise SimRequestError("sampling_params.ebnf must be a string", "ebnf")
    names = tuple(dict.fromkeys(_GRAMMAR_CALL.findall(ebnf)))
    return names or None
