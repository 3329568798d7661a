"""The engine patches install in the real sglang-kt 0.7.2, loaded the way the image loads them.

Runs the engine virtualenv's interpreter (make engine-cpu builds it; skipped without it): the
`.pth` files import `engine.patches.autoload` at start-up, and importing sglang's modules the
way the server does must leave every prefix-cache patch in place. The hook on `fla.kda` once
failed here ("partially initialized module": it imported the GLM backend, which was itself
importing `fla.kda`) and undid all of them, silently to everyone but the engine's log.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from scripts.engine_cpu import __main__ as runner
from tests.support.engines import selected_kinds

pytestmark = pytest.mark.skipif(
    "sglang" not in selected_kinds(),
    reason="the real engine's wheel is checked under make test-engine",
)

PROBE = """
import json


def ours(fn):
    # Patched by engine.patches (a test-only shim may wrap the same function too).
    while fn is not None:
        if getattr(fn, "__module__", "").startswith("engine.patches"):
            return True
        fn = getattr(fn, "__wrapped__", None)
    return False


import sglang.srt.layers.attention.linear.glm5_next_kda_backend as backend
import sglang.srt.layers.attention.fla.kda as kda
import sglang.srt.managers.schedule_batch as batch
import sglang.srt.managers.schedule_policy as policy
import sglang.srt.managers.scheduler as scheduler
import sglang.srt.server_args as server_args
print("PATCHES " + json.dumps({
    "kda_backend": backend.Glm5NextKDAAttnBackend.__name__,
    "fla_kda": ours(kda.chunk_gated_delta_rule_fwd_h),
    "server_args": ours(server_args.ServerArgs._validate_glm5_next_session_ab_boundary),
    "scheduler": ours(scheduler.Scheduler.init_cache_with_memory_pool),
    "policy": ours(policy.PrefillAdder.add_one_req),
    "batch": ours(batch.ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend),
}))
"""


@pytest.fixture(scope="module")
def engine_python() -> str:
    python = runner.venv_python()
    if not python.exists():
        pytest.skip("no engine virtualenv (python -m scripts.engine_cpu --prepare-only builds it)")
    runner.ensure_venv()  # the .pth files, as the image has them
    return str(python)


def _installed(python: str, switch: str) -> dict[str, object]:
    env = {
        **runner.launch_env(dict(os.environ)),
        "FLASHBOX_PREFIX_CACHE": switch,
        "FLASHBOX_KERNELS": "0",
        "SGLANG_USE_CPU_ENGINE": "1",
    }
    done = subprocess.run(
        [python, "-c", PROBE],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=runner.REPO_ROOT,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("PATCHES ")]
    assert done.returncode == 0, done.stderr[-3000:]
    assert lines, done.stderr[-3000:]
    assert "patch failed" not in done.stderr, done.stderr[-3000:]
    result: dict[str, object] = json.loads(lines[-1].removeprefix("PATCHES "))
    return result


def test_every_prefix_cache_patch_installs_in_the_real_wheel(engine_python: str) -> None:
    assert _installed(engine_python, "1") == {
        "kda_backend": "SnapshotKDAAttnBackend",
        "fla_kda": True,
        "server_args": True,
        "scheduler": True,
        "policy": True,
        "batch": True,
    }


def test_switched_off_nothing_is_patched(engine_python: str) -> None:
    installed = _installed(engine_python, "0")
    assert installed["kda_backend"] == "Glm5NextKDAAttnBackend"
    assert not any(v for k, v in installed.items() if k != "kda_backend")
