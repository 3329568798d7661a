"""The prefix-cache patch's model-independent parts, live in the real sglang-kt scheduler.

GLM-5-Next cannot run on a CPU, so the tiny hybrid model (Qwen3-Next) stands in for it: with
FLASHBOX_CPU_GLM_TREE=1 the CPU shims (scripts/engine_cpu/shims/hybrid_patches.py) run the
patch's opt-in for it and let its scheduler build the patch's tree (`GlmMambaRadixCache`:
256-token unit, prompt-head checkpoints); the chunk-cut and head-cut wrappers are the patch's
own, unchanged. The same requests go to that engine and to one with the cache off
(`--disable-radix-cache`), greedy with `ignore_eos`:

- a multi-turn conversation (turn N+1 is turn N's prompt, its output and more tokens; one
  turn is long enough to be prefilled in two chunks): the outputs must be the same token for
  token, and every later turn must restore a prefix that is a multiple of 256 and covers the
  previous turn's prompt (rounded down to 256);
- prompt heads: a conversation that declares its head (`flashbox_head_tokens`) leaves a
  checkpoint at the head's aligned end, which a second, different conversation with the same
  head restores; the gateway's warm (`max_new_tokens` 0 and the head field) leaves one too,
  also when its prompt runs past the head (then only the head cut can save it).

Needs the engine virtualenv (python -m scripts.engine_cpu --prepare-only builds it); skipped
without it. Both engines start side by side, about a minute on two busy cores.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bench.procs import free_port
from scripts.engine_cpu import __main__ as runner
from tests.support.engines import EngineProc, selected_kinds, wait_healthy

pytestmark = [
    pytest.mark.timeout(900),
    # A minute or more of two real engines: under make test-engine, not make test.
    pytest.mark.skipif(
        "sglang" not in selected_kinds(), reason="the real engine runs under make test-engine"
    ),
]

UNIT = 256
# The tiny model's vocabulary is 960 tokens; prompts are token ids drawn below it.
TOKEN_RANGE = (10, 900)
REQUEST_TIMEOUT_S = 300.0


def _tokens(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(*TOKEN_RANGE) for _ in range(n)]


def _align(n: int) -> int:
    return n // UNIT * UNIT


# --- the engines -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine_python() -> Path:
    python = runner.venv_python()
    if not python.exists():
        pytest.skip("no engine virtualenv (python -m scripts.engine_cpu --prepare-only builds it)")
    runner.ensure_venv()  # the .pth files that load the engine patches, as the image has them
    return python


def _cache_off_profile(directory: Path) -> Path:
    """The CPU hybrid profile with the prefix cache off and the radix cache disabled."""
    data: dict[str, Any] = yaml.safe_load(runner.PROFILES["hybrid"].read_text(encoding="utf-8"))
    data["name"] = "cpu-tiny-hybrid-cache-off"
    data["prefix_cache"] = {"enabled": False}
    data["extra_args"] = [*data.get("extra_args", []), "--disable-radix-cache"]
    path = directory / "cpu-tiny-hybrid-cache-off.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _spawn(python: Path, model: Path, profile: Path, name: str, env: dict[str, str]) -> EngineProc:
    port = free_port()
    log = Path(tempfile.mkstemp(prefix=f"sglang-cpu-{name}-", suffix=".log")[1])
    argv = [*runner.launch_command(python, "hybrid", port, model), "--no-flag-check"]
    argv[argv.index("--profile") + 1] = str(profile)
    with log.open("wb") as out:
        popen = subprocess.Popen(
            argv,
            cwd=runner.REPO_ROOT,
            env=runner.launch_env({**env, "PYTHONUNBUFFERED": "1"}),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return EngineProc(popen=popen, port=port, log_path=log)


@pytest.fixture(scope="module")
def engines(engine_python: Path) -> Iterator[dict[str, EngineProc]]:
    """`tree`: the patch's tree and wrappers; `off`: no prefix cache at all."""
    model = runner.make_model(engine_python, "hybrid")
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLASHBOX_")}
    procs: dict[str, EngineProc] = {}
    with tempfile.TemporaryDirectory(prefix="live-prefix-tree-") as tmp:
        try:
            procs["tree"] = _spawn(
                engine_python,
                model,
                runner.PROFILES["hybrid"],
                "tree",
                {**base, "FLASHBOX_CPU_GLM_TREE": "1", "FLASHBOX_PREFIX_CACHE": "1"},
            )
            procs["off"] = _spawn(engine_python, model, _cache_off_profile(Path(tmp)), "off", base)
            for proc in procs.values():
                wait_healthy(proc)
            yield procs
        finally:
            for proc in procs.values():
                proc.stop()
            for proc in procs.values():
                with contextlib.suppress(OSError):
                    proc.log_path.unlink()


# --- the requests ----------------------------------------------------------------------------


def _generate(
    client: httpx.Client, ids: list[int], max_new: int, head: int | None = None
) -> dict[str, Any]:
    params: dict[str, Any] = {"temperature": 0, "max_new_tokens": max_new, "ignore_eos": True}
    if head is not None:
        params["custom_params"] = {"flashbox_head_tokens": head}
    response = client.post("/generate", json={"input_ids": ids, "sampling_params": params})
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return {
        "prompt": len(ids),
        "output": body["output_ids"],
        "cached": body["meta_info"]["cached_tokens"],
    }


# Tokens added after each turn's output; the third makes a prompt over the 2048-token chunk.
FOLLOW_UPS = (300, 300, 2400, 100)
# name: (head length, tail length, seed of the tail, max_new_tokens); the head's seed is shared.
HEADS = {
    # A 700-token head (checkpoint at 512); each prompt's own checkpoint is at 1024.
    "head_first": (700, 500, 8, 8),
    "head_second": (700, 450, 9, 8),
    # The gateway's warm: the head's own tokens, nothing generated (its checkpoint is the head).
    "warm": (900, 0, 0, 0),
    "after_warm": (900, 300, 19, 8),
    # A warm past its head: only the head cut leaves a checkpoint at 768 (the prompt's own is
    # at 1024).
    "long_warm": (800, 400, 28, 0),
    "after_long_warm": (800, 200, 29, 8),
}


def _session(url: str) -> dict[str, list[dict[str, Any]] | dict[str, dict[str, Any]]]:
    turns: list[dict[str, Any]] = []
    heads: dict[str, dict[str, Any]] = {}
    with httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT_S) as client:
        prompt = _tokens(600, 1)
        for turn in range(len(FOLLOW_UPS) + 1):
            result = _generate(client, prompt, 24)
            turns.append(result)
            if turn < len(FOLLOW_UPS):
                prompt = prompt + result["output"] + _tokens(FOLLOW_UPS[turn], 100 + turn)
        for name, (head, tail, seed, max_new) in HEADS.items():
            ids = _tokens(head, head) + _tokens(tail, seed)
            heads[name] = _generate(client, ids, max_new, head)
    return {"turns": turns, "heads": heads}


@pytest.fixture(scope="module")
def results(engines: dict[str, EngineProc]) -> dict[str, Any]:
    with ThreadPoolExecutor(len(engines)) as pool:
        futures = {name: pool.submit(_session, proc.url) for name, proc in engines.items()}
        out = {name: future.result() for name, future in futures.items()}
    for name, proc in engines.items():
        log = proc.log()
        assert "Traceback" not in log, f"{name}: {log[-4000:]}"
        assert "patch failed" not in log, f"{name}: {log[-4000:]}"
    return out


# --- the checks ------------------------------------------------------------------------------


def test_outputs_match_the_engine_without_a_cache(results: dict[str, Any]) -> None:
    tree, off = results["tree"], results["off"]
    for i, (warm, cold) in enumerate(zip(tree["turns"], off["turns"], strict=True)):
        assert warm["output"] == cold["output"], f"turn {i}"
        assert len(warm["output"]) == 24
    for name in HEADS:
        assert tree["heads"][name]["output"] == off["heads"][name]["output"], name
    # The comparison is against a cold engine.
    assert all(t["cached"] == 0 for t in off["turns"])
    assert all(h["cached"] == 0 for h in off["heads"].values())


def test_every_later_turn_restores_a_256_aligned_prefix(results: dict[str, Any]) -> None:
    turns = results["tree"]["turns"]
    assert turns[0]["cached"] == 0
    for before, turn in itertools.pairwise(turns):
        cached = turn["cached"]
        assert cached % UNIT == 0, turns
        # At least the previous prompt's own checkpoint, at most what the previous turn saw.
        assert _align(before["prompt"]) <= cached <= before["prompt"] + len(before["output"])
        assert cached > 0


def test_a_declared_head_is_restored_by_another_conversation(results: dict[str, Any]) -> None:
    heads = results["tree"]["heads"]
    assert heads["head_first"]["cached"] == 0
    assert heads["head_second"]["cached"] == _align(700) == 512


def test_the_gateways_warm_saves_the_head(results: dict[str, Any]) -> None:
    heads = results["tree"]["heads"]
    assert heads["warm"]["output"] == []
    assert heads["after_warm"]["cached"] == _align(900) == 768
    # Its prompt's own checkpoint (1024) is past the head: 768 comes from the head cut.
    assert heads["long_warm"]["output"] == []
    assert heads["after_long_warm"]["cached"] == _align(800) == 768
