"""Claude Code against gateway + simulator: recorded request bodies, and the real CLI headless.

The fixtures are Claude Code 2.1.332's own requests (tests/fixtures/claude_code/README.md says
how they were recorded and made synthetic): each must be served, streamed as it was sent, with
the billing block kept out of the prompt. The CLI runs are skipped, saying why, where npm or the
registry is missing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.agent_stack import agent_stack, refused
from tests.e2e.conftest import metric_sum
from tests.support.agent_cli import (
    INSTALL_TIMEOUT_S,
    claude_code_or_skip,
    headless_env,
    run_headless,
)
from tests.support.procs import REPO_ROOT, Proc

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "claude_code"
KEY = "cc-test-key-0123456789abcdef"
CREDENTIALS = {"authorization", "x-api-key"}


def _fixtures() -> list[Path]:
    return sorted(FIXTURES.glob("*/*.json"))


@pytest.fixture(scope="module")
def gateway() -> Iterator[Proc]:
    with agent_stack(KEY) as proc:
        yield proc


def _events(text: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for frame in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
        if "event" in lines:
            out.append((lines["event"], json.loads(lines["data"])))
    return out


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_recorded_claude_code_requests_are_served(gateway: Proc, path: Path) -> None:
    recorded = json.loads(path.read_text())
    headers = {k: v for k, v in recorded["headers"].items() if k not in CREDENTIALS}
    headers.pop("accept-encoding", None)
    headers["x-api-key"] = KEY
    response = httpx.post(
        gateway.url + recorded["path"], json=recorded["body"], headers=headers, timeout=60
    )
    assert response.status_code == 200, response.text
    assert response.headers["request-id"]
    events = _events(response.text)
    assert events[0][0] == "message_start"
    assert events[-1][0] == "message_stop"
    (delta,) = [data for name, data in events if name == "message_delta"]
    assert delta["delta"]["stop_reason"] == "end_turn"
    assert delta["usage"]["input_tokens"] + delta["usage"]["cache_read_input_tokens"] > 0
    assert recorded["body"]["model"] == events[0][1]["message"]["model"]


def test_the_billing_block_is_not_rendered(gateway: Proc) -> None:
    """Two conversations whose billing blocks differ render the same prompt head: the count of
    one equals the count of the other (same length otherwise), and a count without the block
    at all is the same too."""
    recorded = json.loads((FIXTURES / "read" / "001-post-v1_messages.json").read_text())
    body = {k: recorded["body"][k] for k in ("model", "messages", "system", "tools")}
    assert body["system"][0]["text"].startswith("x-anthropic-billing-header:")
    other = json.loads(json.dumps(body))
    other["system"][0]["text"] = "x-anthropic-billing-header: cc_version=9.9.9.zzz; x=y;" * 3
    without = {**body, "system": body["system"][1:]}
    counts = []
    for variant in (body, other, without):
        response = httpx.post(
            gateway.url + "/v1/messages/count_tokens",
            json=variant,
            headers={"x-api-key": KEY},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        counts.append(response.json()["input_tokens"])
    assert counts[0] == counts[1] == counts[2] > 0


@pytest.fixture(scope="module")
def claude() -> Path:
    return claude_code_or_skip()


@pytest.mark.timeout(INSTALL_TIMEOUT_S + 180)
def test_the_real_cli_runs_headless_against_the_gateway(
    claude: Path, gateway: Proc, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("line one\nline two\n")
    before = metric_sum(gateway, "flashbox_requests_total", {"api": "anthropic", "code": "200"})
    env = headless_env(tmp_path / "home", gateway.url, KEY)
    run = run_headless(claude, "Summarise notes.txt in one line.", env=env, cwd=work)
    assert run.returncode == 0, (run.stdout, run.stderr)
    assert run.result is not None, run.stdout
    assert run.result.get("is_error") is False, run.result
    assert run.result["result"].strip()
    served = metric_sum(gateway, "flashbox_requests_total", {"api": "anthropic", "code": "200"})
    assert served > before
    assert not refused(gateway, "anthropic")
