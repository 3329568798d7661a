"""The OpenAI Responses face end to end: the official `openai` client (3.51.0) and raw SSE against
real gateway and simulator processes on loopback.

The prefix property is checked on the engine's side, as tests/e2e/test_anthropic.py does: the
main simulator checkpoints every token (`--track-interval 1`) and keeps a checkpoint of each
request's whole sequence (prompt + generated text), so a turn-2 prompt that starts with turn 1's
prompt and output byte for byte has `input_tokens_details.cached_tokens` exactly
(turn-1 prompt bytes + output bytes) // 4 (`docs/simulator.md`, Tokens); a prompt that differs
anywhere after turn 1's prompt restores at most turn 1's prompt checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import GATEWAY_ENV, metric_sum, sim_and_gateway, sim_body, wait_for
from tests.gateway.parsers.support import render_call
from tests.support.procs import Proc, start_gateway
from tests.support.responses_events import Checked, check_stream, check_usage, parse_sse

MODEL = "gpt-5.3-codex"  # any name is served, and echoed back
ABORTS = "sglang:num_aborted_requests_total"
SMALL_CONTEXT = 512
WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "strict": True,
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "opts": {"type": "object"},
        },
        "required": ["city"],
    },
}
DOCS: Any = {
    "type": "namespace",
    "name": "mcp__docs__",
    "description": "The docs MCP server",
    "tools": [
        {
            "type": "function",
            "name": "search",
            "description": "Search the docs",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        }
    ],
}
PATCH: Any = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files with a patch.",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /(.|\\n)+/"},
}
CODEX_TOOLS: Any = [WEATHER, DOCS, PATCH, {"type": "web_search", "external_web_access": False}]
PATCH_TEXT = '*** Begin Patch\n*** Add File: notes.txt\n+São Paulo "SP" \\ 🎉\n*** End Patch\n'


@pytest.fixture(scope="module")
def main() -> Iterator[tuple[Proc, Proc]]:
    yield from sim_and_gateway("--track-interval", "1")


@pytest.fixture(scope="module")
def sim(main: tuple[Proc, Proc]) -> Proc:
    return main[0]


@pytest.fixture(scope="module")
def gateway(main: tuple[Proc, Proc]) -> Proc:
    return main[1]


def client_for(proc: Proc, api_key: str = "unused", **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=proc.url + "/v1", api_key=api_key, max_retries=0, **kwargs)


@pytest.fixture
def client(gateway: Proc) -> Iterator[openai.OpenAI]:
    with client_for(gateway) as c:
        yield c


def raw_stream(
    proc: Proc, body: dict[str, Any], headers: dict[str, str] | None = None
) -> list[Any]:
    """POST a streamed request and read the SSE as it is on the wire."""
    with httpx.stream(
        "POST",
        proc.url + "/v1/responses",
        json={"model": MODEL, "input": "Hello there", **body, "stream": True},
        headers=headers,
        timeout=60,
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-request-id"]
        return parse_sse(b"".join(response.iter_bytes()))


def checked(proc: Proc, body: dict[str, Any], headers: dict[str, str] | None = None) -> Checked:
    return check_stream(raw_stream(proc, body, headers))


def dumped(response: openai.types.responses.Response) -> dict[str, Any]:
    """The response as JSON, as a client would replay or compare it."""
    return response.model_dump(mode="json", exclude_none=True)


def comparable(output: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What must agree between two answers to one prompt (ids and tokens may differ)."""
    out: list[tuple[Any, ...]] = []
    for item in output:
        kind = item["type"]
        if kind == "reasoning" or kind == "message":
            out.append((kind, item["content"][0]["text"]))
        elif kind == "function_call":
            out.append((kind, item.get("namespace"), item["name"], item["arguments"]))
        else:
            out.append((kind, item["name"], item["input"]))
    return out


def codex_items(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Output items as Codex replays them: no ids, no statuses, nothing the SDK added."""
    keep = {
        "reasoning": {"type", "summary", "content", "encrypted_content"},
        "message": {"type", "role", "content"},
        "function_call": {"type", "call_id", "name", "namespace", "arguments"},
        "custom_tool_call": {"type", "call_id", "name", "input"},
    }
    items = []
    for item in output:
        kept = {k: v for k, v in item.items() if k in keep[item["type"]]}
        if item["type"] == "message":
            kept["content"] = [
                {"type": "output_text", "text": part["text"]} for part in item["content"]
            ]
        items.append(kept)
    return items


def tool_outputs(output: list[dict[str, Any]], text: str = "31C, sunny") -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for item in output:
        if item["type"] == "function_call":
            results.append(
                {"type": "function_call_output", "call_id": item["call_id"], "output": text}
            )
        elif item["type"] == "custom_tool_call":
            parts = [
                {"type": "input_text", "text": "Success. "},
                {"type": "input_text", "text": text},
            ]
            results.append(
                {"type": "custom_tool_call_output", "call_id": item["call_id"], "output": parts}
            )
    return results


def codex_request(**fields: Any) -> dict[str, Any]:
    """What Codex sends (AGENT_APIS.md section 3.2), with `fields` on top."""
    return {
        "model": MODEL,
        "instructions": "You are a coding agent running in the Codex CLI.",
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "<permissions>read-only</permissions>"}],
            },
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Weather in São Paulo for 3 days?"}],
            },
        ],
        "tools": CODEX_TOOLS,
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"effort": "high", "summary": "auto"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "conv-e2e",
        "text": {"verbosity": "medium"},
        **fields,
    }


def create(client: openai.OpenAI, body: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """responses.create with a raw body (as Codex builds it), the result as JSON."""
    fields = {k: v for k, v in body.items() if k != "model"}
    response = client.responses.create(model=body["model"], extra_body={**fields, **extra})
    assert isinstance(response, openai.types.responses.Response)
    return dumped(response)


# -- create and stream ----------------------------------------------------------------------------


def test_create(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model=MODEL, input="Hello", extra_body=sim_body(reasoning_tokens=8, content_tokens=8)
    )
    assert response.id.startswith("resp_")
    assert response.object == "response"
    assert response.status == "completed"
    assert response.model == MODEL
    assert [item.type for item in response.output] == ["reasoning", "message"]
    reasoning = response.output[0]
    assert reasoning.type == "reasoning"
    assert reasoning.summary == []
    assert reasoning.encrypted_content is None  # include did not ask for it
    assert reasoning.content is not None
    assert reasoning.content[0].text
    assert response.output_text
    assert response.error is None
    assert response.incomplete_details is None
    assert response.usage is not None
    assert response.usage.output_tokens > 0
    assert response.usage.output_tokens_details.reasoning_tokens > 0
    assert response._request_id


def test_include_is_honoured(client: openai.OpenAI) -> None:
    short = sim_body(reasoning_tokens=8, content_tokens=8)
    asked = client.responses.create(
        model=MODEL, input="Hello", include=["reasoning.encrypted_content"], extra_body=short
    )
    reasoning = asked.output[0]
    assert reasoning.type == "reasoning"
    assert reasoning.encrypted_content is not None
    assert reasoning.encrypted_content.startswith("fbx1.")
    # An entry for a tool this server does not run asks for nothing that can appear: served.
    other = client.responses.create(
        model=MODEL, input="Hello", include=["file_search_call.results"], extra_body=short
    )
    assert other.output[0].type == "reasoning"
    assert other.output[0].encrypted_content is None
    # Log probabilities are not served: said, not silently left out.
    with pytest.raises(openai.BadRequestError, match=r"message\.output_text\.logprobs"):
        client.responses.create(
            model=MODEL, input="Hello", include=["message.output_text.logprobs"]
        )


def test_input_tokens_equals_what_the_request_then_takes(
    client: openai.OpenAI, gateway: Proc
) -> None:
    """POST /v1/responses/input_tokens (the openai package's responses.input_tokens.count):
    the count before sending is the usage the same request then reports."""
    tool = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    request: dict[str, Any] = {
        "model": MODEL,
        "instructions": "You count.",
        "input": [{"role": "user", "content": "How many tokens is this?"}],
        "tools": [tool],
        "reasoning": {"effort": "low"},
    }
    counted = client.responses.input_tokens.count(**request)
    assert counted.object == "response.input_tokens"
    answer = client.responses.create(
        **request, max_output_tokens=32, extra_body=sim_body(reasoning_tokens=2, content_tokens=2)
    )
    assert answer.usage is not None
    assert counted.input_tokens == answer.usage.input_tokens
    # The request's own mistakes are the same 400s as on /v1/responses.
    bad = httpx.post(
        gateway.url + "/v1/responses/input_tokens",
        json={"model": MODEL, "input": "x", "reasoning": {"effort": "turbo"}},
    )
    assert openai_error(bad, 400)["param"] == "reasoning.effort"


def test_the_raw_body(gateway: Proc) -> None:
    body = {"model": MODEL, "input": "Hi", **sim_body(reasoning_tokens=4, content_tokens=4)}
    response = httpx.post(gateway.url + "/v1/responses", json=body, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-flashbox-replica"]
    answer = response.json()
    check_usage(answer["usage"])
    assert answer["object"] == "response"
    assert answer["status"] == "completed"
    assert answer["error"] is None
    assert answer["incomplete_details"] is None
    assert answer["tools"] == []
    assert answer["tool_choice"] == "auto"
    assert answer["store"] is True
    assert [item["type"] for item in answer["output"]] == ["reasoning", "message"]


def test_every_stream_keeps_the_grammar(gateway: Proc) -> None:
    cases: list[tuple[dict[str, Any], str, list[str]]] = [
        (sim_body(reasoning_tokens=6, content_tokens=6), "completed", ["reasoning", "message"]),
        (
            {"tools": [WEATHER], **sim_body(tool_calls=2, content_tokens=4)},
            "completed",
            ["reasoning", "message", "function_call", "function_call"],
        ),
        ({"max_output_tokens": 5, **sim_body(reasoning_tokens=30)}, "incomplete", ["reasoning"]),
        (
            {"reasoning": {"effort": "none"}, **sim_body(reasoning_tokens=5, content_tokens=6)},
            "completed",
            ["message"],
        ),
        ({"input": [], "instructions": "Say hi.", **sim_body(content_tokens=2)}, "completed", []),
    ]
    for body, status, kinds in cases:
        response = checked(gateway, body).response
        assert response["status"] == status, body
        assert response["model"] == MODEL
        if kinds:
            assert [item["type"] for item in response["output"]] == kinds, body


def test_sequence_numbers_have_no_gaps(gateway: Proc) -> None:
    events = raw_stream(gateway, sim_body(reasoning_tokens=2, content_tokens=2))
    assert [e.data["sequence_number"] for e in events] == list(range(len(events)))


@pytest.mark.parametrize("tools", [False, True], ids=["text", "tools"])
def test_the_final_response_of_a_stream_equals_create(client: openai.OpenAI, tools: bool) -> None:
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "input": f"Compare me ({tools})",
        "extra_body": sim_body(tool_calls=2) if tools else {},
    }
    if tools:
        kwargs["tools"] = [WEATHER]
    created = client.responses.create(**kwargs)
    with client.responses.stream(**kwargs) as stream:
        names = [event.type for event in stream]
        final = stream.get_final_response()
    assert names[0] == "response.created"
    assert names[-1] == "response.completed"
    assert comparable(dumped(final)["output"]) == comparable(dumped(created)["output"])
    assert final.status == created.status == "completed"
    assert final.usage is not None
    assert created.usage is not None
    assert final.usage.output_tokens == created.usage.output_tokens
    # The second request may read the first's checkpoint: the split differs, not the total.
    assert final.usage.input_tokens == created.usage.input_tokens
    assert final.model == created.model == MODEL
    assert final.output_text == created.output_text


def test_text_deltas_add_up_to_the_final_text(client: openai.OpenAI) -> None:
    with client.responses.stream(
        model=MODEL,
        input="Stream text",
        extra_body=sim_body(reasoning_tokens=6, content_tokens=12),
    ) as stream:
        text = ""
        reasoning = ""
        for event in stream:
            if event.type == "response.output_text.delta":
                text += event.delta
                assert event.snapshot == text
            elif event.type == "response.reasoning_text.delta":
                reasoning += event.delta
        final = stream.get_final_response()
    assert text
    assert text == final.output_text
    first = final.output[0]
    assert first.type == "reasoning"
    assert first.content is not None
    assert reasoning == first.content[0].text


def test_unknown_model_names_are_served_and_echoed(client: openai.OpenAI, gateway: Proc) -> None:
    response = client.responses.create(model="no-such-model-anywhere", input="hi")
    assert response.model == "no-such-model-anywhere"
    events = checked(gateway, {"model": "o9-preview"})
    assert events.response["model"] == "o9-preview"


# -- tools ----------------------------------------------------------------------------------------

HARD_ARGUMENTS = {
    "city": 'São Paulo "SP"\nBR \\ x 🎉',
    "days": 3,
    "opts": {"a": [1, "é", {"b": None}], "c": {}},
}
TOOLS_OUTPUT = (
    "Three kinds of tools.</think>"
    + "On it."
    + render_call("get_weather", HARD_ARGUMENTS)
    + render_call("mcp__docs__search", {"q": 'weather <api> & "quotes"'})
    + render_call("apply_patch", {"input": PATCH_TEXT})
)


def test_function_namespaced_and_custom_calls_stream_and_create_alike(
    client: openai.OpenAI, gateway: Proc
) -> None:
    body = codex_request(**sim_body(output=TOOLS_OUTPUT))
    created = create(client, body)
    with client.responses.stream(
        model=MODEL,
        input=body["input"],
        instructions=body["instructions"],
        tools=CODEX_TOOLS,
        extra_body=sim_body(output=TOOLS_OUTPUT),
    ) as stream:
        final = dumped(stream.get_final_response())
    raw = checked(gateway, body)
    for response in (created, final, raw.response):
        output = response["output"]
        assert [i["type"] for i in output] == [
            "reasoning",
            "message",
            "function_call",
            "function_call",
            "custom_tool_call",
        ]
        weather, search, patch = output[2:]
        assert weather["name"] == "get_weather"
        assert "namespace" not in weather
        assert json.loads(weather["arguments"]) == HARD_ARGUMENTS
        assert (search["namespace"], search["name"]) == ("mcp__docs__", "search")
        assert json.loads(search["arguments"]) == {"q": 'weather <api> & "quotes"'}
        assert patch["name"] == "apply_patch"
        assert patch["input"] == PATCH_TEXT
        assert len({i["call_id"] for i in output[2:]}) == 3
        assert response["status"] == "completed"
    assert comparable(created["output"]) == comparable(final["output"])
    names = raw.names
    assert "response.custom_tool_call_input.delta" in names
    assert "response.custom_tool_call_input.done" in names
    assert names.count("response.function_call_arguments.done") == 2


def test_strict_function_arguments_are_parsed_by_the_sdk(client: openai.OpenAI) -> None:
    output = "go</think>" + render_call("get_weather", HARD_ARGUMENTS)
    with client.responses.stream(
        model=MODEL, input="weather", tools=[WEATHER], extra_body=sim_body(output=output)
    ) as stream:
        final = stream.get_final_response()
    (call,) = [item for item in final.output if item.type == "function_call"]
    assert call.parsed_arguments == HARD_ARGUMENTS


def test_tool_outputs_over_several_turns(client: openai.OpenAI) -> None:
    """Codex's loop: the whole history every turn, tool outputs in both forms, store false."""
    body = codex_request()
    history: list[dict[str, Any]] = list(body["input"])
    plans = [
        "first</think>" + render_call("get_weather", {"city": "Oslo"}),
        "second</think>Searching."
        + render_call("mcp__docs__search", {"q": "x"})
        + render_call("apply_patch", {"input": "*** Begin Patch\n*** End Patch\n"}),
        "third</think>" + render_call("get_weather", {"city": "Lima", "days": 2}),
        None,  # the simulator's own answer: it may call tools or not
    ]
    for turn, plan in enumerate(plans):
        steer = sim_body(output=plan) if plan else sim_body(reasoning_tokens=4, content_tokens=6)
        response = create(
            client,
            {**body, "input": history},
            **steer,
        )
        assert response["status"] == "completed", turn
        output = response["output"]
        assert output, turn
        history += codex_items(output)
        history += tool_outputs(output, f"result of turn {turn}")
    kinds = [item["type"] for item in history]
    assert kinds.count("function_call_output") >= 3
    assert kinds.count("custom_tool_call_output") >= 1


def test_tools_array_empty_and_tools_only_of_kinds_we_drop(client: openai.OpenAI) -> None:
    dropped: Any = [{"type": "web_search"}, {"type": "tool_search"}, {"type": "local_shell"}]
    tools: Any
    for tools in ([], dropped):
        response = client.responses.create(
            model=MODEL,
            input="hi",
            tools=tools,
            tool_choice="auto",
            extra_body=sim_body(tool_calls=1, content_tokens=3),
        )
        assert response.status == "completed"
        assert all(item.type != "function_call" for item in response.output)


def test_json_schema_output(client: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    response = client.responses.create(
        model=MODEL,
        input="Answer in JSON",
        text={"format": {"type": "json_schema", "name": "out", "strict": True, "schema": schema}},
    )
    assert response.status == "completed"


# -- the round trip and the prefix property -------------------------------------------------------

REASONING = 'The user asks about São Paulo; call "get_weather", search, patch.\n'
TURN1_OUTPUT = (
    REASONING
    + "</think>"
    + "I'll check."
    + render_call(
        "get_weather", {"city": 'São Paulo "SP"\nBR \\ x', "days": 3, "opts": {"a": [1, "é"]}}
    )
    + render_call("mcp__docs__search", {"q": "weather"})
    + render_call("apply_patch", {"input": PATCH_TEXT})
)


def _conversation(tag: str) -> list[dict[str, Any]]:
    """Codex's first input, made unique per test: a turn 2 must find only its own turn 1 in the
    simulator's cache, not the turn 2 of another test with the same conversation."""
    return [
        *codex_request()["input"][:-1],
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": f"Weather in São Paulo? ({tag})"}],
        },
    ]


def _turn1(client: openai.OpenAI, stream: bool, tag: str, **fields: Any) -> dict[str, Any]:
    body = codex_request(input=_conversation(tag), **fields)
    if not stream:
        return create(client, body, **sim_body(output=TURN1_OUTPUT))
    with client.responses.stream(
        model=MODEL,
        input=body["input"],
        instructions=body["instructions"],
        tools=CODEX_TOOLS,
        tool_choice="auto",
        reasoning={"effort": "high", "summary": "auto"},
        store=body["store"],
        include=["reasoning.encrypted_content"],
        prompt_cache_key="conv-e2e",
        parallel_tool_calls=True,
        text={"verbosity": "medium"},
        extra_body=sim_body(output=TURN1_OUTPUT),
    ) as s:
        return dumped(s.get_final_response())


def _turn2(client: openai.OpenAI, tag: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    body = codex_request(input=[*_conversation(tag), *items, *tool_outputs(items)])
    return create(client, body, **sim_body(reasoning_tokens=4, content_tokens=4))


def _sequence_hits(turn1_prompt_tokens: int, turn1_output_tokens: int) -> set[int]:
    """The cached tokens of a turn 2 that extends turn 1's prompt and output byte for byte:
    the engine's state after turn 1 (prompt + output - 1 tokens), or the sequence's whole
    4-byte chunks where those are more (the prompt's bytes are known to 4, the output's
    exactly; the simulator's seam, engine/sim/checkpoints.py)."""
    output_bytes = len(TURN1_OUTPUT.encode())
    low = 4 * (turn1_prompt_tokens - 1) + 1
    state = turn1_prompt_tokens + turn1_output_tokens - 1
    chunks = {(size + output_bytes) // 4 for size in range(low, 4 * turn1_prompt_tokens + 1)}
    return {max(state, n) for n in chunks}


def _reasoning(items: list[dict[str, Any]], **changes: Any) -> list[dict[str, Any]]:
    return [{**i, **changes} if i["type"] == "reasoning" else i for i in items]


def _tamper(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**i, "encrypted_content": i["encrypted_content"][:-4] + "AAAA"}
        if i["type"] == "reasoning"
        else i
        for i in items
    ]


def _cached(response: dict[str, Any]) -> int:
    cached: int = response["usage"]["input_tokens_details"]["cached_tokens"]
    return cached


@pytest.mark.parametrize("stream", [False, True], ids=["created", "streamed"])
@pytest.mark.parametrize(
    "change", ["as-codex-sends", "as-the-sdk-dumps", "content-edited", "token-tampered"]
)
def test_turn_two_extends_turn_one_on_the_engine(
    client: openai.OpenAI, stream: bool, change: str
) -> None:
    tag = f"{stream}-{change}"
    first = _turn1(client, stream, tag)
    output = first["output"]
    assert [i["type"] for i in output] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
        "custom_tool_call",
    ]
    assert output[0]["content"][0]["text"] == REASONING
    items = codex_items(output)
    if change == "as-the-sdk-dumps":
        items = output  # ids, statuses and all
    elif change == "content-edited":
        # Our token restores the reasoning the model wrote, whatever the visible text says.
        items = _reasoning(items, content=[], summary=[{"type": "summary_text", "text": "Hm."}])
    elif change == "token-tampered":
        # Not ours any more: still 200, and the visible text (intact here) is what renders.
        items = _tamper(items)
    second = _turn2(client, tag, items)
    first_prompt = first["usage"]["input_tokens"]
    cached = _cached(second)
    assert cached > first_prompt, "turn 2 did not extend turn 1's prompt + output"
    assert cached in _sequence_hits(first_prompt, first["usage"]["output_tokens"])
    assert second["usage"]["input_tokens"] >= cached


def test_the_control_edited_reasoning_without_our_token_misses(client: openai.OpenAI) -> None:
    first = _turn1(client, False, "control")
    items = _reasoning(
        _tamper(codex_items(first["output"])),
        content=[{"type": "reasoning_text", "text": "A summary the client rewrote."}],
    )
    second = _turn2(client, "control", items)
    assert _cached(second) <= first["usage"]["input_tokens"]


def test_previous_response_id_extends_the_stored_turn(client: openai.OpenAI) -> None:
    first = _turn1(client, True, "previous", store=True)
    stored = client.responses.retrieve(first["id"])
    assert comparable(dumped(stored)["output"]) == comparable(first["output"])
    outputs: Any = tool_outputs(first["output"])
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first["id"],
        instructions=codex_request()["instructions"],
        input=outputs,
        tools=CODEX_TOOLS,
        reasoning={"effort": "high"},
        text={"verbosity": "medium"},
        extra_body=sim_body(reasoning_tokens=4, content_tokens=4),
    )
    assert second.status == "completed"
    assert second.previous_response_id == first["id"]
    hits = _sequence_hits(first["usage"]["input_tokens"], first["usage"]["output_tokens"])
    assert _cached(dumped(second)) in hits


# -- the store: previous_response_id, GET, DELETE -------------------------------------------------


def test_get_and_delete_a_stored_response(client: openai.OpenAI) -> None:
    created = client.responses.create(
        model=MODEL, input="keep me", extra_body=sim_body(reasoning_tokens=3, content_tokens=3)
    )
    assert dumped(created)["store"] is True  # a field the pinned SDK does not model
    got = client.responses.retrieve(created.id)
    assert dumped(got) == dumped(created)
    raw = httpx.get(f"{client.base_url}responses/{created.id}").json()
    assert raw["output"] == dumped(created)["output"]
    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.retrieve(created.id)
    assert created.id in info.value.message
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model=MODEL, input="more", previous_response_id=created.id)
    assert bad.value.code == "previous_response_not_found"


def test_a_streamed_response_is_stored_as_it_ended(client: openai.OpenAI) -> None:
    with client.responses.stream(
        model=MODEL, input="stream and keep", extra_body=sim_body(content_tokens=4)
    ) as stream:
        final = stream.get_final_response()
    got = client.responses.retrieve(final.id)
    assert comparable(dumped(got)["output"]) == comparable(dumped(final)["output"])
    assert got.usage == final.usage


def test_store_false_is_not_retrievable(client: openai.OpenAI) -> None:
    created = client.responses.create(model=MODEL, input="forget me", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input="more", previous_response_id=created.id)
    assert info.value.code == "previous_response_not_found"


def test_an_unknown_previous_response_id_is_a_400_saying_so(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input="x", previous_response_id="resp_never")
    body: Any = info.value.body
    assert body["code"] == "previous_response_not_found"
    assert body["param"] == "previous_response_id"
    assert "resp_never" in body["message"]
    with (
        pytest.raises(openai.BadRequestError),
        client.responses.stream(
            model=MODEL, input="x", previous_response_id="resp_never"
        ) as stream,
    ):
        stream.get_final_response()


@pytest.fixture(scope="module")
def one_entry(sim: Proc) -> Iterator[Proc]:
    env = {**GATEWAY_ENV, "FLASHBOX_RESPONSES__STORE_MAX_ENTRIES": "1"}
    proc = start_gateway([sim.url], env=env)
    try:
        yield proc
    finally:
        proc.stop()


def test_previous_response_id_beyond_the_store_s_bounds(one_entry: Proc) -> None:
    with client_for(one_entry) as client:
        first = client.responses.create(
            model=MODEL, input="one", extra_body=sim_body(content_tokens=2)
        )
        follow = client.responses.create(
            model=MODEL,
            input="two",
            previous_response_id=first.id,
            extra_body=sim_body(content_tokens=2),
        )
        assert follow.status == "completed"
        # Storing `follow` evicted `first`: the store holds one entry.
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(model=MODEL, input="three", previous_response_id=first.id)
        assert info.value.code == "previous_response_not_found"
        assert "evicted" in info.value.message
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(first.id)
        assert client.responses.retrieve(follow.id).id == follow.id
        third = client.responses.create(model=MODEL, input="three", previous_response_id=follow.id)
        assert third.status == "completed"
    assert metric_sum(one_entry, "flashbox_response_store_entries") == 1


# -- errors ---------------------------------------------------------------------------------------


def openai_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]
    assert response.headers["x-request-id"]
    error: dict[str, Any] = body["error"]
    return error


def test_bad_json_and_an_oversized_body(gateway: Proc) -> None:
    response = httpx.post(
        gateway.url + "/v1/responses",
        content=b'{"model": "m", "input": [',
        headers={"content-type": "application/json"},
    )
    error = openai_error(response, 400)
    assert error["code"] == "invalid_json"
    assert error["type"] == "invalid_request_error"
    response = httpx.post(gateway.url + "/v1/responses", content=b"[1, 2]")
    assert openai_error(response, 400)["code"] == "invalid_json"
    big = {"model": MODEL, "input": "x" * 300_000}
    response = httpx.post(gateway.url + "/v1/responses", json=big)
    assert openai_error(response, 413)["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("change", "where", "says"),
    [
        ({"temperature": "warm"}, "temperature", "number"),
        ({"temperature": 3}, "temperature", "less than or equal to 2"),
        ({"max_output_tokens": 0}, "max_output_tokens", "greater than or equal to 1"),
        ({"input": 5}, "input", "valid list"),
        ({"input": ["just a string"]}, "input.0", "valid dictionary"),
        ({"tool_choice": 5}, "tool_choice", "dictionary"),
        ({"tools": "all"}, "tools", "valid list"),
        ({"store": "yes"}, "store", "boolean"),
        ({"reasoning": {"effort": 3}}, "reasoning.effort", "'low', 'medium', 'high'"),
        ({"reasoning": {"effort": "turbo"}}, "reasoning.effort", "'none', 'minimal', 'low'"),
        ({"reasoning": {"summary": "brief"}}, "reasoning.summary", "'auto', 'concise'"),
        ({"text": {"format": {"type": 1}}}, "text.format.type", "'json_schema'"),
        ({"include": ["reasoning.everything"]}, "include.0", "'reasoning.encrypted_content'"),
        ({"truncation": "middle"}, "truncation", "'auto' or 'disabled'"),
        ({"model": None}, "model", "string"),
    ],
    ids=[
        "temperature-type",
        "temperature-range",
        "max_output_tokens",
        "input-type",
        "input-item",
        "tool_choice",
        "tools",
        "store",
        "effort",
        "effort-unknown",
        "summary-unknown",
        "text-format",
        "include-unknown",
        "truncation-unknown",
        "model",
    ],
)
def test_a_schema_violation_is_a_400_naming_the_field(
    gateway: Proc, change: dict[str, Any], where: str, says: str
) -> None:
    body = {"model": MODEL, "input": "hi", **change}
    error = openai_error(httpx.post(gateway.url + "/v1/responses", json=body), 400)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == where
    assert f"'{where}'" in error["message"]
    assert says in error["message"]
    assert ".str" not in error["message"]
    assert "list[" not in error["message"]
    with client_for(gateway) as client, pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input="hi", extra_body=change)
    assert info.value.param == where


@pytest.mark.parametrize(
    ("input_", "where", "says"),
    [
        (
            # An image the media stage cannot read (it names the part and says why).
            [{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}],
            "input.0.content.0",
            "data:",
        ),
        ([{"type": "compaction_summary", "x": 1}], "input.0", "compaction_summary"),
        ([{"type": "message", "role": "robot", "content": "x"}], "input.0.role", "robot"),
    ],
    ids=["image", "unknown-item", "role"],
)
def test_what_the_face_cannot_read_is_a_400_naming_it(
    client: openai.OpenAI, input_: Any, where: str, says: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input=input_)
    assert info.value.param == where
    assert where in info.value.message
    assert says in info.value.message


@pytest.fixture(scope="module")
def keyed(sim: Proc) -> Iterator[Proc]:
    proc = start_gateway([sim.url], env={**GATEWAY_ENV, "FLASHBOX_API_KEYS": "key-one"})
    try:
        yield proc
    finally:
        proc.stop()


def test_a_wrong_key_is_a_401_on_every_route(keyed: Proc) -> None:
    with client_for(keyed, api_key="wrong") as bad:
        with pytest.raises(openai.AuthenticationError):
            bad.responses.create(model=MODEL, input="hi")
        with pytest.raises(openai.AuthenticationError):
            bad.responses.retrieve("resp_x")
        with pytest.raises(openai.AuthenticationError):
            bad.responses.delete("resp_x")
    with client_for(keyed, api_key="key-one") as good:
        created = good.responses.create(model=MODEL, input="hi")
        assert good.responses.retrieve(created.id).id == created.id
    assert metric_sum(keyed, "flashbox_requests_total", {"api": "responses", "code": "401"}) >= 1


@pytest.fixture(scope="module")
def small() -> Iterator[tuple[Proc, Proc]]:
    """A simulator with a 512-token context."""
    yield from sim_and_gateway("--context-length", str(SMALL_CONTEXT))


def test_an_overlong_prompt_is_context_length_exceeded(small: tuple[Proc, Proc]) -> None:
    _, gateway = small
    long_input = "word " * 1000
    with client_for(gateway) as client:
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(model=MODEL, input=long_input)
        assert info.value.code == "context_length_exceeded"
        assert info.value.type == "invalid_request_error"
        with (
            pytest.raises(openai.BadRequestError) as streamed,
            client.responses.stream(model=MODEL, input=long_input) as stream,
        ):
            stream.get_final_response()
        assert streamed.value.code == "context_length_exceeded"
        # A max_output_tokens past what is left of the context is lowered to fit, not refused.
        fits = client.responses.create(
            model=MODEL,
            input="hi",
            max_output_tokens=100_000,
            extra_body=sim_body(reasoning_tokens=4, content_tokens=4),
        )
        assert fits.status == "completed"


def test_max_output_tokens_reached_is_incomplete(client: openai.OpenAI, gateway: Proc) -> None:
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "input": "Think long",
        "max_output_tokens": 5,
        "extra_body": sim_body(reasoning_tokens=40),
    }
    response = client.responses.create(**kwargs)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None
    assert response.usage.output_tokens == 5
    raw = checked(gateway, {"max_output_tokens": 5, **sim_body(reasoning_tokens=40)})
    assert raw.names[-1] == "response.incomplete"
    assert raw.response["incomplete_details"] == {"reason": "max_output_tokens"}
    with client.responses.stream(**kwargs) as stream:
        names = [event.type for event in stream]
        assert names[-1] == "response.incomplete"
        with pytest.raises(RuntimeError, match=r"response\.completed"):
            stream.get_final_response()


def served(client: openai.OpenAI) -> None:
    """A request that succeeds: the replica's circuit breaker counts failures in a row, and
    these tests fail on purpose (routing.breaker_failures)."""
    assert client.responses.create(model=MODEL, input="ok").status == "completed"


@pytest.mark.parametrize("fault", ["error:3", "die:3", "malformed:3"])
def test_an_engine_failure_mid_stream_is_response_failed(
    client: openai.OpenAI, gateway: Proc, fault: str
) -> None:
    raw = checked(gateway, {"input": "fail me", **sim_body(reasoning_tokens=10, fault=fault)})
    assert raw.names[-1] == "response.failed"
    error = raw.response["error"]
    assert error["code"] == "engine_stream_error"
    assert error["message"]
    assert raw.response["output"]  # what was sent before the failure, closed
    served(client)
    with client.responses.stream(
        model=MODEL, input="fail me", extra_body=sim_body(fault=fault)
    ) as stream:
        names = [event.type for event in stream]
        assert names[-1] == "response.failed"
        with pytest.raises(RuntimeError, match=r"response\.completed"):
            stream.get_final_response()
    served(client)
    with pytest.raises(openai.APIStatusError) as info:
        client.responses.create(model=MODEL, input="fail me", extra_body=sim_body(fault=fault))
    assert info.value.status_code == 502
    served(client)


def test_an_engine_abort_mid_stream_is_response_failed(sim: Proc, gateway: Proc) -> None:
    body = {"model": MODEL, "input": "hi", "stream": True, **sim_body(fault="stall:3")}
    with httpx.stream("POST", gateway.url + "/v1/responses", json=body, timeout=30) as response:
        lines = response.iter_lines()
        assert next(line for line in lines if ".delta" in line)
        aborted = httpx.post(sim.url + "/abort_request", json={"abort_all": True}).json()
        assert aborted["aborted"] >= 1
        rest = "\n".join(lines)
    assert "event: response.failed" in rest
    assert "response.completed" not in rest
    with client_for(gateway) as client:
        served(client)


@pytest.fixture(scope="module")
def one_slot(sim: Proc) -> Iterator[Proc]:
    env = {
        **GATEWAY_ENV,
        "FLASHBOX_ADMISSION__MAX_IN_FLIGHT": "1",
        "FLASHBOX_ADMISSION__MAX_QUEUE": "0",
    }
    proc = start_gateway([sim.url], env=env)
    try:
        yield proc
    finally:
        proc.stop()


def test_admission_overload_is_a_429_with_an_integer_retry_after(one_slot: Proc) -> None:
    with client_for(one_slot) as client:
        holder = client.responses.create(
            model=MODEL, input="hold", stream=True, extra_body=sim_body(fault="stall_first")
        )
        try:
            with pytest.raises(openai.RateLimitError) as info:
                client.responses.create(model=MODEL, input="hi")
            assert info.value.response.headers["retry-after"].isdigit()
            body: Any = info.value.body
            assert body["type"] == "rate_limit_error"
            # Reading the store takes no generation slot.
            with pytest.raises(openai.NotFoundError):
                client.responses.retrieve("resp_none")
        finally:
            holder.close()

        def served() -> bool:
            try:
                client.responses.create(model=MODEL, input="hi")
            except openai.RateLimitError:
                return False
            return True

        assert wait_for(served)


# -- tolerance ------------------------------------------------------------------------------------


def test_codex_requests_and_headers_are_accepted(client: openai.OpenAI, gateway: Proc) -> None:
    body = codex_request(
        service_tier="auto",
        client_metadata={"x": "y"},
        some_future_field={"x": 1},
        metadata={"purpose": "test"},
        **sim_body(reasoning_tokens=2, content_tokens=2),
    )
    body["input"] = [
        *body["input"],
        {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "Earlier."}],
            "content": [{"type": "reasoning_text", "text": "earlier reasoning"}],
            "encrypted_content": "gAAAAAB-a-token-from-another-server",
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "ok"}],
        },
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go on"}]},
    ]
    headers = {
        "session_id": "conv-e2e",
        "originator": "codex_cli_rs",
        "openai-beta": "responses=experimental",
    }
    response = httpx.post(gateway.url + "/v1/responses", json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    assert response.json()["metadata"] == {"purpose": "test"}
    streamed = checked(gateway, body, headers)
    assert streamed.response["status"] == "completed"
    assert streamed.response["store"] is False


# -- keepalive, disconnects, metrics --------------------------------------------------------------


@pytest.fixture(scope="module")
def slow() -> Iterator[tuple[Proc, Proc]]:
    """A modelled prefill of ~0.65 s (the 6.5 s floor at a tenth), keepalives every 0.1 s."""
    yield from sim_and_gateway(time_scale=0.1, env={"FLASHBOX_RESPONSES__KEEPALIVE_S": "0.1"})


def test_in_progress_events_keep_a_slow_prefill_alive(slow: tuple[Proc, Proc]) -> None:
    _, gateway = slow
    raw = checked(gateway, sim_body(reasoning_tokens=2, content_tokens=2))
    before = raw.before_first_item()
    assert before[0] == "response.created"
    assert before.count("response.in_progress") >= 2, before
    assert set(before[1:]) == {"response.in_progress"}
    with (
        client_for(gateway) as client,
        client.responses.stream(
            model=MODEL, input="hi", extra_body=sim_body(content_tokens=2)
        ) as stream,
    ):
        names = [event.type for event in stream]
        assert stream.get_final_response().status == "completed"
    assert names.count("response.in_progress") >= 2


def gateway_aborts(gateway: Proc, phase: str) -> float:
    return metric_sum(gateway, "flashbox_upstream_aborts_total", {"phase": phase})


def test_a_client_leaving_mid_stream_aborts_the_engine(
    sim: Proc, gateway: Proc, client: openai.OpenAI
) -> None:
    before, streaming = metric_sum(sim, ABORTS), gateway_aborts(gateway, "streaming")
    with client.responses.stream(
        model=MODEL, input="hi", extra_body=sim_body(fault="stall:4")
    ) as stream:
        for event in stream:
            if event.type.endswith(".delta"):
                break
    assert wait_for(lambda: metric_sum(sim, ABORTS) >= before + 1)
    assert wait_for(lambda: gateway_aborts(gateway, "streaming") >= streaming + 1)


def test_a_client_leaving_before_the_first_token_aborts_the_engine(
    sim: Proc, gateway: Proc
) -> None:
    before, waiting = metric_sum(sim, ABORTS), gateway_aborts(gateway, "before_first_token")
    body = {"model": MODEL, "input": "hi", "stream": True, **sim_body(fault="stall_first")}
    with httpx.stream("POST", gateway.url + "/v1/responses", json=body, timeout=30) as response:
        assert next(response.iter_lines()) == "event: response.created"
    assert wait_for(lambda: metric_sum(sim, ABORTS) >= before + 1)
    assert wait_for(lambda: gateway_aborts(gateway, "before_first_token") >= waiting + 1)


def test_a_client_leaving_a_non_streamed_request_aborts_the_engine(
    sim: Proc, gateway: Proc
) -> None:
    before, waiting = metric_sum(sim, ABORTS), gateway_aborts(gateway, "non_streaming")
    with client_for(gateway, timeout=0.5) as client, pytest.raises(openai.APITimeoutError):
        client.responses.create(model=MODEL, input="hi", extra_body=sim_body(fault="stall_first"))
    assert wait_for(lambda: metric_sum(sim, ABORTS) >= before + 1)
    assert wait_for(lambda: gateway_aborts(gateway, "non_streaming") >= waiting + 1)


def test_metrics_carry_the_responses_label_and_the_store_size(
    gateway: Proc, client: openai.OpenAI
) -> None:
    requests = {"api": "responses", "code": "200"}
    before = metric_sum(gateway, "flashbox_requests_total", requests)
    entries = metric_sum(gateway, "flashbox_response_store_entries")
    size = metric_sum(gateway, "flashbox_response_store_bytes")
    created = client.responses.create(model=MODEL, input="count me", store=True)
    assert wait_for(lambda: metric_sum(gateway, "flashbox_requests_total", requests) > before)
    assert metric_sum(gateway, "flashbox_ttft_seconds_count", {"api": "responses"}) > 0
    assert metric_sum(gateway, "flashbox_response_store_entries") == entries + 1
    assert metric_sum(gateway, "flashbox_response_store_bytes") > size
    client.responses.delete(created.id)
    assert metric_sum(gateway, "flashbox_response_store_entries") == entries
    assert metric_sum(gateway, "flashbox_response_store_bytes") == size
    refused = {"api": "responses", "code": "400"}
    before_refused = metric_sum(gateway, "flashbox_requests_total", refused)
    httpx.post(gateway.url + "/v1/responses", json={"model": MODEL, "temperature": "x"})
    assert metric_sum(gateway, "flashbox_requests_total", refused) == before_refused + 1
    assert metric_sum(gateway, "flashbox_errors_total", {"api": "responses"}) > 0
    assert metric_sum(gateway, "flashbox_requests_total", {"api": "anthropic"}) == 0
