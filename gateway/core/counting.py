"""Token counts for the counting endpoints (Anthropic's count_tokens, Responses' input_tokens).

A count is the rendered prompt's tokens from an up engine's own /tokenize, plus what the
request's images add. Counting is cheap for the client and not for us (a render here, a
tokenizer pass there), so it is bounded three ways:
- the rendered prompt is at most limits.max_prompt_ratio x the bytes the request sent +
  limits.expansion_floor_bytes (a 400 past it, gateway.core.bounds, as for generation): what
  a small body may make the engine read;
- counts are cached by the rendered prompt's digest, and at most limits.max_concurrent_counts
  /tokenize calls run at once (gateway.core.prompt_counts, AppState.prompt_counts). Only the
  text is cached: an image is one marker in the prompt, and its tokens are worked out afresh
  from the checked image each time, so the key needs no image identity.
"""

from __future__ import annotations

from gateway.core.bounds import check_prompt_expansion, utf8_length
from gateway.core.request import CoreRequest
from gateway.core.run import extra_tokens, render_prompt, resolve_images
from gateway.errors import NoReplicaError
from gateway.state import AppState


async def count_prompt_tokens(state: AppState, request: CoreRequest) -> int:
    """The tokens `request`'s prompt would take, images included: rendered here, counted by
    an up engine's own tokenizer (Anthropic's count_tokens, Responses' input_tokens)."""
    checked = await resolve_images(state, request)
    prompt, order = await render_prompt(state, request)
    check_prompt_expansion(utf8_length(prompt), request.body_bytes, state.settings.limits)

    async def tokenize(text: str) -> int:
        replica = next((r for r in state.picker.replicas if r.healthy), None)
        if replica is None:
            raise NoReplicaError("No engine replica is up to count tokens; retry shortly.")
        return await state.engine.count_prompt_tokens(replica, text)

    count = await state.prompt_counts.count(prompt, tokenize)
    return count + extra_tokens([checked[i] for i in order])
