"""Figures from a shape replay (bench/replay.py): per lineage kind and per router, as markdown.

- Checkpoint hits of eligible turns (turns that extend an answered one), per kind: main,
  subagent, side.
- Misses of main turns sent after a side request of their session (none allowed: a side
  request must not move or evict the main conversation's checkpoint).
- TTFT p50/p95 of turns >= 2 (of their lineage), per kind.
- Head reuse: TTFT p50 of a session's first request when another session had prefilled its
  head before it was sent (a checkpoint at the head's end turns ~22 s of cold 30k prefill into
  a restore and the user's message); and the hits of roots whose head was prefilled before, in
  all and per kind (the gateway saves no checkpoint for heads under routing.min_head_tokens,
  such as the side requests' small ones).
"""

from __future__ import annotations

import math
from typing import Any

from bench.replay import RequestResult
from bench.shapes import KINDS
from bench.stats import ratio, summarize

# How many error messages a summary keeps (the JSON under --out has every request).
ERROR_SAMPLES = 5


def _ttfts(results: list[RequestResult], scaled: bool = False) -> list[float]:
    values = (r.ttft_scaled if scaled else r.ttft for r in results if r.ok)
    return [v for v in values if v is not None]


def summarize_replay(results: list[RequestResult]) -> dict[str, Any]:
    by_kind: dict[str, Any] = {}
    for kind in KINDS:
        rs = [r for r in results if r.kind == kind]
        eligible = [r for r in rs if r.eligible]
        later = [r for r in rs if r.turn >= 2]
        heads = [r for r in rs if r.head_eligible]
        by_kind[kind] = {
            "requests": len(rs),
            "errors": sum(not r.ok for r in rs),
            "eligible": len(eligible),
            "hits": sum(r.hit for r in eligible),
            "hit_ratio": ratio(sum(r.hit for r in eligible), len(eligible)),
            "ttft_later_turns": summarize(_ttfts(later)),
            "ttft_later_turns_scaled": summarize(_ttfts(later, scaled=True)),
            "head_hits": {
                "eligible": len(heads),
                "hits": sum(r.head_hit for r in heads),
                "hit_ratio": ratio(sum(r.head_hit for r in heads), len(heads)),
            },
        }
    heads = [r for r in results if r.head_eligible]
    after_side = [r for r in results if r.after_side and r.eligible]
    firsts = [r for r in results if r.index == 0]
    return {
        "requests": len(results),
        "errors": sum(not r.ok for r in results),
        "error_samples": [f"{r.session}#{r.index}: {r.error}" for r in results if not r.ok][
            :ERROR_SAMPLES
        ],
        "by_kind": by_kind,
        "head_hits": {
            "eligible": len(heads),
            "hits": sum(r.head_hit for r in heads),
            "hit_ratio": ratio(sum(r.head_hit for r in heads), len(heads)),
        },
        "head_reuse_ttft": summarize(_ttfts([r for r in firsts if r.head_reuse])),
        "first_turn_cold_ttft": summarize(_ttfts([r for r in firsts if not r.head_reuse])),
        "main_after_side": {
            "turns": len(after_side),
            "misses": sum(not r.hit for r in after_side),
        },
    }


def _f(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f}"


def _hits(part: dict[str, Any]) -> str:
    if not part["eligible"]:
        return "-"
    return f"{part['hit_ratio']:.1%} ({part['hits']}/{part['eligible']})"


def markdown(summaries: dict[str, dict[str, Any]], walls: dict[str, float] | None = None) -> str:
    """Two tables: per router and kind, then per router (head reuse, side requests, errors)."""
    lines = [
        "| router | kind | requests | checkpoint hits (eligible turns) "
        "| TTFT p50 s, turns >= 2 | TTFT p95 s, turns >= 2 | roots' head hits |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in summaries.items():
        for kind, k in s["by_kind"].items():
            if not k["requests"]:
                continue
            ttft = k["ttft_later_turns"]
            lines.append(
                f"| {name} | {kind} | {k['requests']} | {_hits(k)} "
                f"| {_f(ttft['p50'])} | {_f(ttft['p95'])} | {_hits(k['head_hits'])} |"
            )
    lines += [
        "",
        "| router | head reuse: first-request TTFT p50 s (n) | other first requests: "
        "TTFT p50 s (n) | roots' head hits | main turns after a side request: misses / turns "
        "| errors | wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in summaries.items():
        reuse, cold = s["head_reuse_ttft"], s["first_turn_cold_ttft"]
        side = s["main_after_side"]
        wall = (walls or {}).get(name, math.nan)
        lines.append(
            f"| {name} | {_f(reuse['p50'])} ({reuse['count']:.0f}) "
            f"| {_f(cold['p50'])} ({cold['count']:.0f}) | {_hits(s['head_hits'])} "
            f"| {side['misses']} / {side['turns']} | {s['errors']} | {_f(wall)} |"
        )
    return "\n".join(lines)


def goals(summaries: dict[str, dict[str, Any]], today: str = "today") -> list[str]:
    """The issue's goals, for flashbox against the gateway as it was (`today`)."""
    fb = summaries.get("flashbox")
    if fb is None:
        return []
    out = []
    side = fb["main_after_side"]
    out.append(
        f"- flashbox: {side['misses']} misses of {side['turns']} main turns sent after a side "
        "request (goal: none)."
    )
    base = summaries.get(today)
    now, then = fb["head_reuse_ttft"]["p50"], (base or {}).get("head_reuse_ttft", {}).get("p50")
    if then is not None and now > 0 and not math.isnan(now) and not math.isnan(then):
        out.append(
            f"- Head reuse, first-request TTFT p50: {today} {then:.1f} s, flashbox {now:.1f} s: "
            f"{then / now:.1f}x (goal >= 3x)."
        )
    return out
