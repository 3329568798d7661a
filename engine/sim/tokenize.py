"""SGLang's POST /tokenize (and /v1/tokenize): a prompt's tokens, counted as /generate counts them.

sglang-kt 0.7.2 answers `{"tokens", "count", "max_model_len"}` for a body `{"prompt": str |
list[str], "add_special_tokens": bool, "model": str}` (a list prompt gives a list per field).
The simulator's tokenizer has no special tokens, so `add_special_tokens` is checked and has no
effect; `count` is the `prompt_tokens` /generate reports for the same text.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from engine.sim.engine import SimEngine
from engine.sim.errors import error_response, read_json
from engine.sim.requests import SimRequestError
from engine.sim.tokens import token_ids


def parse_tokenize(body: Any) -> str | list[str]:
    """The prompt of a /tokenize body; the other fields SGLang reads are type-checked."""
    if not isinstance(body, dict):
        raise SimRequestError("the body must be a JSON object")
    prompt = body.get("prompt")
    if prompt is None:
        raise SimRequestError(
            "the request needs a prompt (a string or a list of strings)", "prompt"
        )
    if not isinstance(prompt, str) and not (
        isinstance(prompt, list) and all(isinstance(p, str) for p in prompt)
    ):
        raise SimRequestError("prompt must be a string or a list of strings", "prompt")
    if not isinstance(body.get("add_special_tokens", True), bool):
        raise SimRequestError("add_special_tokens must be a boolean", "add_special_tokens")
    if not isinstance(body.get("model", ""), str):
        raise SimRequestError("model must be a string", "model")
    return prompt


async def tokenize(request: Request) -> Response:
    engine: SimEngine = request.app.state.engine
    try:
        prompt = parse_tokenize(await read_json(request, engine))
    except SimRequestError as exc:
        return error_response(exc.status, exc.message, "invalid_request_error", exc.param)
    # SGLang reports its tokenizer's model_max_length; the simulator's is the context length.
    max_model_len = engine.settings.profile.context_length
    answer: dict[str, Any]
    if isinstance(prompt, str):
        seq = engine.tokenize(prompt)
        answer = {"tokens": token_ids(seq), "count": seq.count, "max_model_len": max_model_len}
    else:
        seqs = [engine.tokenize(text) for text in prompt]
        answer = {
            "tokens": [token_ids(seq) for seq in seqs],
            "count": [seq.count for seq in seqs],
            "max_model_len": max_model_len,
        }
    # orjson: a long prompt's answer lists every token id.
    return Response(orjson.dumps(answer), media_type="application/json")
