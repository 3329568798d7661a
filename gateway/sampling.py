"""The core request -> SGLang /generate body (FACTS.md section 5)."""

from __future__ import annotations

from typing import Any

from gateway.core.request import CoreRequest, Sampling
from gateway.errors import InvalidRequestError
from gateway.parsers.constraints import DecodingConstraint
from gateway.settings import Settings

# Sampling field -> SGLang sampling_params name, for values passed through unchanged.
_PASSTHROUGH = (
    ("temperature", "temperature"),
    ("top_p", "top_p"),
    ("top_k", "top_k"),
    ("min_p", "min_p"),
    ("presence_penalty", "presence_penalty"),
    ("frequency_penalty", "frequency_penalty"),
    ("repetition_penalty", "repetition_penalty"),
    ("seed", "sampling_seed"),
)


def sampling_params(sampling: Sampling, settings: Settings) -> dict[str, Any]:
    stops = list(settings.model.stop)
    stops += [stop for stop in sampling.stop if stop not in stops]
    params: dict[str, Any] = {
        # SGLang's default is 128 tokens: never leave it to the engine.
        "max_new_tokens": sampling.max_tokens or settings.limits.default_max_tokens,
        "stop": stops,
        "skip_special_tokens": settings.model.skip_special_tokens,
    }
    for ours, theirs in _PASSTHROUGH:
        value = getattr(sampling, ours)
        if value is not None:
            params[theirs] = value
    if sampling.json_schema is not None:
        params["json_schema"] = sampling.json_schema
    return params


def generate_body(
    request: CoreRequest, prompt: str, rid: str, settings: Settings
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "text": prompt,
        "sampling_params": sampling_params(request.sampling, settings),
        "stream": True,
        "rid": rid,
    }
    if settings.upstream.forward_custom_params and request.custom_params is not None:
        body["custom_params"] = request.custom_params
    return body


def add_constraint(body: dict[str, Any], constraint: DecodingConstraint) -> None:
    """Merge what enforces tool_choice into the /generate body (SGLang takes one grammar)."""
    if constraint.is_empty:
        return
    params = body["sampling_params"]
    if "json_schema" in params and constraint.sampling_params:
        raise InvalidRequestError(
            "A response format cannot be combined with a forced tool call (tool_choice "
            "'required', 'any' or a named tool): the engine enforces one grammar at a time.",
            param="response_format",
        )
    params.update(constraint.sampling_params)
    body.update(constraint.request_fields)
    if constraint.kept_stop is not None and constraint.kept_stop not in params["stop"]:
        params["stop"] = [*params["stop"], constraint.kept_stop]
