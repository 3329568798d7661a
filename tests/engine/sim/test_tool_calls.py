"""Tool calls: the simulator reads the tools from a prompt rendered by the model's reference
template and emits GLM tool-call markup whose arguments follow each tool's JSON schema."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.sim.output import OutputControls, plan_output
from engine.sim.tools import find_tools
from tests.engine.sim.helpers import generate
from tests.support.procs import Proc
from tests.support.reference import reference_file

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "search_files",
            "description": "Search.",
            "parameters": {
                "type": "object",
                "required": ["pattern", "limit"],
                "properties": {
                    "pattern": {"type": "string"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 50},
                    "ratio": {"type": "number"},
                    "recursive": {"type": "boolean"},
                    "mode": {"type": "string", "enum": ["fast", "exact"]},
                    "cursor": {"type": "null"},
                    "filters": {"type": "object", "properties": {"ext": {"type": "string"}}},
                    "paths": {"type": "array", "items": {"type": "string"}},
                    "depth": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_tabs",
            "description": "No arguments.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "Weather.",
            "parameters": {
                "type": "object",
                "required": ["city"],
                "properties": {"city": {"type": "string"}},
            },
        },
    },
]
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_ARG = re.compile(r"<arg_key>(.*?)</arg_key><arg_value>(.*?)</arg_value>", re.DOTALL)


def render_prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    path = reference_file("glm-5.3-flash", "chat_template.jinja")
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: Any = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(path.read_text())
    return template.render(messages=messages, tools=tools, add_generation_prompt=True)


def parse_calls(text: str) -> list[tuple[str, dict[str, str]]]:
    calls = []
    for body in _CALL.findall(text):
        name, _, rest = body.partition("<arg_key>")
        calls.append((name, dict(_ARG.findall("<arg_key>" + rest if rest else ""))))
    return calls


def check_value(raw: str, schema: dict[str, Any]) -> None:
    if "enum" in schema:
        assert raw in schema["enum"]
        return
    if "anyOf" in schema:
        value = json.loads(raw)
        assert value is None or isinstance(value, int)
        return
    kind = schema["type"]
    if kind == "string":
        assert "<" not in raw  # raw text, not JSON
        return
    value = json.loads(raw)
    types: dict[str, type | tuple[type, ...]] = {
        "integer": int,
        "number": (int, float),
        "boolean": bool,
        "null": type(None),
        "object": dict,
        "array": list,
    }
    expected = types[kind]
    assert isinstance(value, expected), (raw, kind)
    if kind == "integer":
        assert not isinstance(value, bool)
        assert schema.get("minimum", value) <= value <= schema.get("maximum", value)


def test_tools_found_in_rendered_prompt() -> None:
    prompt = render_prompt([{"role": "user", "content": "find it"}], TOOLS)
    assert prompt.endswith("<|assistant|><think>")
    assert [t.name for t in find_tools(prompt)] == ["search_files", "list_tabs", "weather"]


def test_arguments_follow_schemas_over_many_seeds() -> None:
    prompt = render_prompt([{"role": "user", "content": "find it"}], TOOLS)
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    controls = OutputControls(
        reasoning_tokens=4, content_tokens=4, tool_calls=3, max_auto_tool_calls=2
    )
    seen_zero_arg = False
    for seed in range(60):
        text = "".join(plan_output(prompt, controls, random.Random(seed), 4))
        _reasoning, sep, after = text.partition("</think>")
        assert sep
        calls = parse_calls(after)
        assert len(calls) == 3
        for name, args in calls:
            schema = schemas[name]
            assert set(schema.get("required", [])) <= set(args) <= set(schema["properties"])
            for key, raw in args.items():
                check_value(raw, schema["properties"][key])
            seen_zero_arg |= name == "list_tabs" and not args
    assert seen_zero_arg


def test_no_tools_no_calls_and_auto_is_deterministic() -> None:
    controls = OutputControls(
        reasoning_tokens=4, content_tokens=4, tool_calls=None, max_auto_tool_calls=2
    )
    plain = "".join(plan_output("<|user|>hi<|assistant|><think>", controls, random.Random(1), 4))
    assert "<tool_call>" not in plain
    prompt = render_prompt([{"role": "user", "content": "x"}], TOOLS)
    runs = {"".join(plan_output(prompt, controls, random.Random(5), 4)) for _ in range(3)}
    assert len(runs) == 1


def test_tool_calls_through_the_api(sim: Proc) -> None:
    prompt = render_prompt([{"role": "user", "content": "weather in Paris?"}], TOOLS)
    body = {
        "text": prompt,
        "sampling_params": {"max_new_tokens": 2000},
        "custom_params": {"sim": {"tool_calls": 2, "reasoning_tokens": 5, "content_tokens": 0}},
    }
    result = generate(sim.url, body).json()
    assert result["meta_info"]["finish_reason"]["type"] == "stop"
    assert len(parse_calls(result["text"])) == 2
    explicit = {
        "text": prompt,
        "sampling_params": {"max_new_tokens": 2000},
        "custom_params": {
            "sim": {
                "tool_call_list": [
                    {"name": "weather", "arguments": {"city": "Paris", "days": 3, "x": None}},
                    {"name": "list_tabs"},
                ]
            }
        },
    }
    text = generate(sim.url, explicit).json()["text"]
    assert text.endswith(
        "<tool_call>weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
        "<arg_key>days</arg_key><arg_value>3</arg_value>"
        "<arg_key>x</arg_key><arg_value>null</arg_value></tool_call><tool_call>list_tabs</tool_call>"
    )
