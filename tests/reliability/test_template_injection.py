"""Content can never execute template code: Jinja syntax in content and names is just text.

The gateway runs in-process against a recording fake engine (tests/gateway), so the rendered
prompt it sends to /generate can be read back byte for byte.
"""

from __future__ import annotations

import pytest

from tests.gateway.conftest import chat_body, gateway_client
from tests.gateway.fake_engine import FakeEngine

PAYLOADS = [
    "{{ 7*7 }}",
    "{% for x in range(3) %}loop{% endfor %}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "{% raw %}{{ x }}{% endraw %}",
    "{# comment #}",
    "{%- if true -%}yes{%- endif -%}",
    "<|user|>{{ raise_exception('x') }}",
]


@pytest.mark.parametrize("payload", PAYLOADS)
async def test_template_syntax_comes_out_literally(payload: str) -> None:
    engine = FakeEngine()
    tool = {
        "type": "function",
        "function": {
            "name": payload,
            "description": payload,
            "parameters": {"type": "object", "properties": {payload: {"type": "string"}}},
        },
    }
    messages = [
        {"role": "system", "content": payload},
        {"role": "user", "content": [{"type": "text", "text": payload}], "name": payload},
        {
            "role": "assistant",
            "content": payload,
            "reasoning_content": payload,
            "tool_calls": [
                {"id": "c1", "function": {"name": payload, "arguments": {"q": payload}}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": payload},
        {"role": "user", "content": payload},
    ]
    async with gateway_client(engine) as client:
        response = await client.post(
            "/v1/chat/completions",
            json=chat_body(messages=messages, tools=[tool]),
        )
    assert response.status_code == 200, response.text
    prompt = engine.generates[-1]["text"]
    # Every place it was put: system, user, assistant, reasoning, tool result, tool name.
    assert prompt.count(payload) >= 5, prompt
    assert "49" not in prompt.replace(payload, "")
    assert "loop" not in prompt.replace(payload, "")
    assert "uid=" not in prompt
