"""When a request is done: SGLang's finish rules, and the stop-string holdback."""

from __future__ import annotations

from typing import Any

from engine.sim.state import SimRequest


def check_finish(
    req: SimRequest, piece: str, token: int, natural_end: bool
) -> tuple[dict[str, Any] | None, int]:
    """SGLang's order: length, then stop token, then stop string; plus stop holdback."""
    params = req.params
    text = req.text
    if len(req.ids) >= params.max_new_tokens:
        return {"type": "length", "length": params.max_new_tokens}, len(text)
    if natural_end or token in params.stop_token_ids:
        return {"type": "stop", "matched": token}, len(text)
    if not params.stop:
        return None, len(text)
    longest = max(len(s) for s in params.stop)
    window_start = max(0, len(text) - len(piece) - longest + 1)
    hits = [(i, s) for s in params.stop if (i := text.find(s, window_start)) >= 0]
    if hits:
        index, matched = min(hits)
        end = index + len(matched) if params.no_stop_trim else index
        return {"type": "stop", "matched": matched}, end
    # Hold back a tail that may still become a stop string, so text never shrinks.
    held = 0
    for stop in params.stop:
        for size in range(min(len(stop) - 1, len(text)), held, -1):
            if text.endswith(stop[:size]):
                held = size
                break
    return None, len(text) - held
