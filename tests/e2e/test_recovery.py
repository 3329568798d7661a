"""Engine down -> 503 in OpenAI's shape; the gateway serves again once the engine is back."""

from __future__ import annotations

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.e2e.conftest import GATEWAY_ENV, MODEL, client_for, wait_for
from tests.support.procs import start_gateway, start_process, start_sim

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "x"}]


def test_engine_down_then_back() -> None:
    sim = start_sim(name="flaky")
    gateway = start_gateway([sim.url], env=GATEWAY_ENV)
    try:
        with client_for(gateway) as client:
            assert client.chat.completions.create(model=MODEL, messages=MESSAGES).choices
            sim.kill()
            with pytest.raises(openai.APIStatusError) as info:
                client.chat.completions.create(model=MODEL, messages=MESSAGES)
            assert info.value.status_code == 503
            assert httpx.get(gateway.url + "/ready").status_code == 503
            args = ["--host", "127.0.0.1", "--port", "{port}", "--time-scale", "0.001"]
            sim = start_process("engine.sim", args, port=sim.port)
            assert wait_for(lambda: httpx.get(gateway.url + "/ready").status_code == 200)
            completion = client.chat.completions.create(model=MODEL, messages=MESSAGES)
            assert completion.choices[0].finish_reason == "stop"
    finally:
        gateway.stop()
        sim.stop()
