"""`make demo` as a new user runs it: scripts.demo's own processes (two simulated replicas and the
gateway), then the model card's image request sent with curl (a data URL where the card has a
remote one), in both of the card's part forms; Ctrl-C stops everything."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.test_images import png, tokens_of
from tests.support.procs import REPO_ROOT, free_port


@pytest.fixture(scope="module")
def demo() -> Iterator[str]:
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("FLASHBOX_")},
        "FLASHBOX_PORT": str(port),
        "DEMO_SIM_PORTS": f"{free_port()},{free_port()}",
        "DEMO_TIME_SCALE": "0.001",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "scripts.demo"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "the demo exited before it was up"
            try:
                if httpx.get(base + "/health", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the demo's gateway never answered /health"
            time.sleep(0.2)
        yield base
    finally:
        # Ctrl-C, as a user stops it: every process goes.
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise


def curl(url: str, body: dict[str, Any]) -> dict[str, Any]:
    found = shutil.which("curl")
    if found is None:
        pytest.skip("curl is not installed")
    done = subprocess.run(
        [found, "-sS", "--max-time", "60", url, "-H", "content-type: application/json",
         "-d", "@-"],
        input=json.dumps(body).encode(),
        capture_output=True,
        timeout=90,
        check=True,
    )  # fmt: skip
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


@pytest.mark.parametrize(
    "part",
    [
        lambda url: {"type": "image_url", "image_url": {"url": url}},
        lambda url: {"type": "image", "url": url},
    ],
    ids=["image_url", "image"],
)
def test_the_model_cards_image_request_answers_through_the_demo(demo: str, part: Any) -> None:
    body = {
        "model": "glm-5.3-flash",
        "messages": [
            {
                "role": "user",
                "content": [
                    part(png(640, 480)),
                    {"type": "text", "text": "Describe this image in detail."},
                ],
            }
        ],
        "max_tokens": 32,
    }
    answer = curl(demo + "/v1/chat/completions", body)
    assert answer["object"] == "chat.completion", answer
    assert answer["choices"][0]["message"]["content"]
    # The image's own tokens are in the prompt the engine counted.
    assert answer["usage"]["prompt_tokens"] > tokens_of(640, 480)
