"""Images on a real engine: the checks that need a GPU host with the model running.

`python -m bench images-device --engine URL [--gateway URL] [--api-key KEY] [--repeats N]
[--out FILE.json] [--skip-colour]` (scripts/device-checks.sh runs it when ENGINE_URL is set):

a. prompt tokens per image size against the gateway's formula (gateway/media/tokens.py), at
   the max_pixels the engine's /server_info reports: the image's tokens measured as the
   difference between the same prompt with and without it; on a real engine the gateway's own
   estimate of the whole prompt must equal the engine's count too;
b. the time an image adds before the first token, per size (medians of --repeats), the hybrid
   prefill rate, and the simulator profile's `images:` fields they calibrate
   (bench/images_calibrate.py);
c. through the gateway (--gateway): two tool results out of call order, a red and a blue
   image, the model asked for call_a's colour (bench/images_colour.py); `--skip-colour` sends
   the requests without judging the answers (for the simulator, which sees no colours).

Exit status 1 when a step failed; a markdown summary on stdout; every figure in --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import httpx

from bench.images_calibrate import calibrate, profile_snippet
from bench.images_colour import ColourCase, ask, cases, first_model
from bench.images_engine import EngineInfo, ProbeError, PromptBuilder, engine_info
from bench.images_report import Outcome, markdown
from bench.images_steps import measure_sizes, probe_hybrid, warm_up

# 224^2 (the smallest common case), VGA, 720p, 1080p, a tall page (aspect 10, within the
# engine's 200), and a phone photo above any max_pixels the engine accepts (the resize rule).
DEFAULT_SIZES = "224x224,640x480,1280x720,1920x1080,300x3000,4032x3024"
CONNECT_TIMEOUT_S = 10.0


def _sizes(text: str) -> list[tuple[int, int]]:
    sizes = []
    for item in text.split(","):
        width, _, height = item.strip().partition("x")
        sizes.append((int(width), int(height)))
    return sizes


def _headers(key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"} if key else {}


def _timeout(args: argparse.Namespace) -> httpx.Timeout:
    return httpx.Timeout(args.timeout, connect=CONNECT_TIMEOUT_S)


def _ask_all(
    client: httpx.Client,
    url: str,
    key: str | None,
    model: str,
    judge: bool,
    args: argparse.Namespace,
    max_pixels: int,
) -> list[ColourCase]:
    return [
        ask(
            client,
            url,
            _headers(key),
            model,
            case,
            judge=judge,
            max_tokens=args.colour_max_tokens,
            max_pixels=max_pixels,
        )
        for case in cases()
    ]


def run_colour(
    args: argparse.Namespace, info: EngineInfo
) -> tuple[list[ColourCase] | None, list[ColourCase] | None, str]:
    """Step c: (the gateway's cases, the engine's own chat server's cases, a note)."""
    if args.gateway is None:
        return None, None, "Skipped: no --gateway (GATEWAY_URL for make device-checks)."
    judge = not args.skip_colour
    try:
        with httpx.Client(timeout=_timeout(args)) as client:
            model = first_model(client, args.gateway, _headers(args.api_key))
            url = args.gateway + "/v1/chat/completions"
            through = _ask_all(client, url, args.api_key, model, judge, args, info.max_pixels)
            own = None
            if judge:
                # For the record: MEDIA.md 3.4 read from SGLang's code that its chat server
                # fills image_data in message order; this shows it on a live server.
                url = args.engine + "/v1/chat/completions"
                own = _ask_all(client, url, args.engine_api_key, model, True, args, info.max_pixels)
    except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as exc:
        return [], None, f"Failed before an answer: {type(exc).__name__}: {exc}"
    note = "" if judge else "Plumbing only: the answers are not judged (--skip-colour)."
    return through, own, note


def _json(outcome: Outcome, args: argparse.Namespace) -> dict[str, Any]:
    def items(cases: list[ColourCase] | None) -> list[dict[str, Any]] | None:
        return None if cases is None else [dataclasses.asdict(case) for case in cases]

    return {
        "engine": args.engine,
        "gateway": args.gateway,
        "info": dataclasses.asdict(outcome.info),
        "repeats": outcome.repeats,
        "ok": {
            "tokens": outcome.tokens_ok,
            "vision": outcome.vision_ok,
            "colour": outcome.colour_ok,
        },
        "tokens": [dataclasses.asdict(row) for row in outcome.rows],
        "probe": dataclasses.asdict(outcome.probe),
        "calibration": dataclasses.asdict(outcome.calibration),
        "profile_snippet": profile_snippet(outcome.calibration, outcome.info, outcome.tokens_ok),
        "colour": items(outcome.colour),
        "colour_judged": outcome.colour_judged,
        "colour_note": outcome.colour_note,
        "engine_chat_colour": items(outcome.engine_colour),
    }


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench images-device")
    p.add_argument("--engine", required=True, help="a running sglang-kt engine's base URL")
    p.add_argument("--gateway", help="a flashbox gateway in front of that engine (step c)")
    p.add_argument("--api-key", help="the gateway's API key, when it has keys")
    p.add_argument("--engine-api-key", help="the engine's --api-key, when it has one")
    p.add_argument("--repeats", type=int, default=3, help="timed requests per size (median)")
    p.add_argument("--sizes", type=_sizes, default=_sizes(DEFAULT_SIZES), help="WxH,WxH,...")
    p.add_argument(
        "--probe-words", type=int, default=1500, help="filler words of the long probe text"
    )
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request (read)")
    p.add_argument(
        "--colour-max-tokens", type=int, default=1024, help="max_tokens of step c's answers"
    )
    p.add_argument("--out", type=Path, help="write every figure here as JSON")
    p.add_argument("--skip-colour", action="store_true", help="send step c, do not judge it")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    args.engine = args.engine.rstrip("/")
    args.gateway = args.gateway.rstrip("/") if args.gateway else None
    if args.repeats < 1 or args.probe_words < 1:
        print("--repeats and --probe-words must be at least 1", file=sys.stderr)
        return 2
    with httpx.Client(timeout=_timeout(args), headers=_headers(args.engine_api_key)) as client:
        try:
            info = engine_info(client, args.engine)
            builder = PromptBuilder(info)
            warm_up(client, args.engine, builder)
        except (ProbeError, httpx.HTTPError) as exc:
            print(f"The engine at {args.engine} cannot serve an image request: {exc}")
            return 1
        rows = measure_sizes(client, args.engine, builder, info, args.sizes, args.repeats)
        probe = probe_hybrid(client, args.engine, builder, args.repeats, args.probe_words)
    colour, own, note = run_colour(args, info)
    outcome = Outcome(
        info=info,
        repeats=args.repeats,
        rows=rows,
        probe=probe,
        calibration=calibrate(rows, probe, info),
        colour=colour,
        engine_colour=own,
        colour_note=note,
        colour_judged=not args.skip_colour,
    )
    print(markdown(outcome))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(_json(outcome, args), indent=2) + "\n")
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
