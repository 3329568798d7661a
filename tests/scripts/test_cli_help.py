"""Every command answers `--help` with its usage and refuses a bad argument with exit 2 and a
message on stderr, as real processes, without starting anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from bench.__main__ import SUITES
from tests.support.procs import REPO_ROOT

# A command that ignored its arguments would serve until killed: well past this.
TIMEOUT_S = 20

COMMANDS = {
    "gateway": ["gateway"],
    "sim": ["engine.sim"],
    "launch": ["engine.launch"],
    "doctor": ["engine.doctor"],
    "bench": ["bench"],
    "bench-all": ["bench", "all"],
}


def _env() -> dict[str, str]:
    # The caller's FLASHBOX_* settings are not what these runs are about.
    return {k: v for k, v in os.environ.items() if not k.startswith("FLASHBOX_")}


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=REPO_ROOT,
        env={**_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


@pytest.mark.parametrize("name", COMMANDS)
def test_help_prints_usage_and_exits_0(name: str) -> None:
    done = _run(*COMMANDS[name], "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m " + " ".join(COMMANDS[name]))
    if name == "gateway":
        for variable in ("FLASHBOX_CONFIG", "FLASHBOX_ENGINES", "FLASHBOX_HOST", "FLASHBOX_PORT"):
            assert variable in done.stdout
        assert "config/gateway.yaml" in done.stdout


@pytest.mark.parametrize("name", COMMANDS)
def test_an_unknown_flag_exits_2_with_a_message(name: str) -> None:
    done = _run(*COMMANDS[name], "--nope")
    assert done.returncode == 2
    assert "--nope" in done.stderr or "required" in done.stderr, done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (["--port", "99999"], {}, "99999 is not a TCP port"),
        (["--config", "no/such.yaml"], {}, "no/such.yaml is not a file"),
        ([], {"FLASHBOX_PORT": "eighty"}, "invalid settings"),
    ],
)
def test_the_gateway_refuses_bad_settings_before_serving(
    args: list[str], env: dict[str, str], said: str
) -> None:
    done = _run("gateway", *args, env=env)
    assert done.returncode == 2
    assert said in done.stderr
    assert "Traceback" not in done.stderr


def test_bench_without_a_suite_is_an_error() -> None:
    done = _run("bench")
    assert done.returncode == 2
    assert "usage: python -m bench" in done.stderr


def test_bench_all_refuses_an_unknown_suite() -> None:
    done = _run("bench", "all", "--only", "nosuch")
    assert done.returncode == 2
    assert "nosuch" in done.stderr


# Each suite's own parser, through the real dispatcher: one interpreter for all of them, since
# importing a suite costs up to seconds (torch for kernels) and forty starts would take minutes.
_SUITES_SCRIPT = """
import contextlib, io, json, sys
from bench.__main__ import SUITES, main
results = {}
for suite in SUITES:
    for flag in ("--help", "--nope"):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([suite, flag])
            except SystemExit as exc:
                code = exc.code
        results[suite + " " + flag] = [code, out.getvalue(), err.getvalue()]
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def suite_runs() -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _SUITES_SCRIPT],
        cwd=REPO_ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    runs: dict[str, Any] = json.loads(done.stdout)
    return runs


@pytest.mark.parametrize("suite", SUITES)
def test_each_bench_suite_has_help(suite: str, suite_runs: dict[str, Any]) -> None:
    code, out, err = suite_runs[f"{suite} --help"]
    assert code == 0, err
    assert out.startswith(f"usage: python -m bench {suite}")


@pytest.mark.parametrize("suite", SUITES)
def test_each_bench_suite_refuses_an_unknown_flag(suite: str, suite_runs: dict[str, Any]) -> None:
    code, out, err = suite_runs[f"{suite} --nope"]
    assert code == 2
    assert "--nope" in err or "required" in err, err
    assert out == ""
