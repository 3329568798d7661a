"""OpenAI request -> SGLang /generate body (FACTS.md section 5)."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import InvalidRequestError
from gateway.parsers.constraints import DecodingConstraint
from gateway.protocol import ChatCompletionRequest
from gateway.settings import Settings

# OpenAI name -> SGLang sampling_params name, for values passed through unchanged.
_PASSTHROUGH = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "repetition_penalty": "repetition_penalty",
    "seed": "sampling_seed",
}


def sampling_params(request: ChatCompletionRequest, settings: Settings) -> dict[str, Any]:
    stops = list(settings.model.stop)
    stops += [stop for stop in request.stop_list if stop not in stops]
    params: dict[str, Any] = {
        # SGLang's default is 128 tokens: never leave it to the engine.
        "max_new_tokens": request.requested_max_tokens or settings.limits.default_max_tokens,
        "stop": stops,
        "skip_special_tokens": settings.model.skip_special_tokens,
    }
    for ours, theirs in _PASSTHROUGH.items():
        value = getattr(request, ours)
        if value is not None:
            params[theirs] = value
    fmt = request.response_format
    if fmt is not None and fmt.type == "json_schema" and fmt.json_schema is not None:
        schema = fmt.json_schema.schema_ or {"type": "object"}
        params["json_schema"] = orjson.dumps(schema).decode()
    elif fmt is not None and fmt.type == "json_object":
        params["json_schema"] = '{"type": "object"}'
    return params


def generate_body(
    request: ChatCompletionRequest, prompt: str, rid: str, settings: Settings
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "text": prompt,
        "sampling_params": sampling_params(request, settings),
        "stream": True,
        "rid": rid,
    }
    extra = request.model_extra or {}
    if settings.upstream.forward_custom_params and "custom_params" in extra:
        body["custom_params"] = extra["custom_params"]
    return body


def template_kwargs(request: ChatCompletionRequest) -> dict[str, Any]:
    kwargs = dict(request.chat_template_kwargs or {})
    if request.reasoning_effort is not None:
        kwargs["reasoning_effort"] = request.reasoning_effort
    return kwargs


def add_constraint(body: dict[str, Any], constraint: DecodingConstraint) -> None:
    """Merge what enforces tool_choice into the /generate body (SGLang takes one grammar)."""
    if constraint.is_empty:
        return
    params = body["sampling_params"]
    if "json_schema" in params and constraint.sampling_params:
        raise InvalidRequestError(
            "response_format cannot be combined with tool_choice 'required' or a named "
            "function: the engine enforces one grammar at a time.",
            param="response_format",
        )
    params.update(constraint.sampling_params)
    body.update(constraint.request_fields)
