"""Scripted answers (engine/sim/script.py): the plan is read from prompts the gateway renders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.sim.script import Script, ScriptError, load_script, parse_script
from scripts.session_shape import bundled_renderer
from tests.engine.sim.helpers import generate
from tests.support.procs import start_sim

READ = {"name": "Read", "arguments": {"file_path": "/w/notes.txt"}}
AGENT = {"name": "Agent", "arguments": {"prompt": "Check todo.txt"}}
DOCUMENT: dict[str, Any] = {
    "max_calls": 10,
    "rules": [
        {"when_no_tools": True, "final": "SUMMARY"},
        {"when": "Survey the folder", "steps": [[READ], [AGENT, AGENT]], "final": "SURVEYED"},
        {"when": "Check todo.txt", "steps": [[READ]], "final": "CHECKED"},
        {"steps": [[READ]], "final": "DEFAULT"},
    ],
}


def _tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


TOOLS = [_tool("Read"), _tool("Agent")]


def _prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = TOOLS) -> str:
    return bundled_renderer().render(messages, tools, {})


def _call_turn(name: str, n: int) -> list[dict[str, Any]]:
    calls = [
        {"id": f"c{n}{i}", "type": "function", "function": {"name": name, "arguments": "{}"}}
        for i in range(1 + (name == "Agent"))
    ]
    results = [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls]
    return [{"role": "assistant", "content": "", "tool_calls": calls}, *results]


def test_a_user_turn_walks_its_plan_step_by_step() -> None:
    script = parse_script(DOCUMENT)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Survey the folder please"}]
    assert script.answer(_prompt(messages)).calls == (("Read", READ["arguments"]),)
    messages += _call_turn("Read", 1)
    answer = script.answer(_prompt(messages))
    assert [name for name, _ in answer.calls] == ["Agent", "Agent"]  # two at once
    messages += _call_turn("Agent", 2)
    assert script.answer(_prompt(messages)).final == "SURVEYED"
    assert script.calls_left == 10 - 3


def test_the_latest_user_turn_picks_the_rule_and_call_arguments_do_not_count() -> None:
    script = parse_script(DOCUMENT)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Survey the folder"}]
    messages += _call_turn("Read", 1)
    # The agent call's arguments hold another rule's text: still the survey's plan.
    agent_call = {
        "id": "a",
        "type": "function",
        "function": {"name": "Agent", "arguments": json.dumps({"prompt": "Check todo.txt"})},
    }
    messages += [
        {"role": "assistant", "content": "", "tool_calls": [agent_call]},
        {"role": "tool", "tool_call_id": "a", "content": "Check todo.txt: done"},
    ]
    assert script.answer(_prompt(messages)).final == "SURVEYED"
    # A resumed session's next prompt starts its own plan from the top.
    messages += [
        {"role": "assistant", "content": "SURVEYED"},
        {"role": "user", "content": "Survey the folder again"},
    ]
    assert script.answer(_prompt(messages)).calls == (("Read", READ["arguments"]),)


def test_tools_not_offered_are_left_out_and_a_request_without_tools_gets_the_summary() -> None:
    script = parse_script(DOCUMENT)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Survey the folder"}]
    messages += _call_turn("Read", 1)
    # A subagent without the Agent tool: the step has nothing left, so the final text.
    assert script.answer(_prompt(messages, [_tool("Read")])).final == "SURVEYED"
    assert script.answer(_prompt(messages, None)).final == "SUMMARY"


def test_the_call_budget_ends_in_text() -> None:
    script = parse_script({**DOCUMENT, "max_calls": 1})
    prompt = _prompt([{"role": "user", "content": "hello"}])
    assert script.answer(prompt).calls
    assert script.answer(prompt).final == "DEFAULT"


@pytest.mark.parametrize(
    ("document", "where"),
    [
        ([], "a script is an object"),
        ({"rules": []}, "rules:"),
        ({"rules": [{"when": ""}]}, "rules.0.when"),
        ({"rules": [{"steps": [[]]}]}, "rules.0.steps.0"),
        ({"rules": [{"steps": [[{"arguments": {}}]]}]}, "rules.0.steps.0.0"),
        ({"rules": [{"fianl": "x"}]}, "rules.0: unknown keys ['fianl']"),
        ({"rules": [{}], "max_calls": -1}, "max_calls"),
    ],
)
def test_a_bad_script_says_where(document: Any, where: str) -> None:
    with pytest.raises(ScriptError, match=rf"^{where.replace('[', '.').replace(']', '.')}"):
        parse_script(document)


def test_the_simulator_answers_by_its_script(tmp_path: Path) -> None:
    path = tmp_path / "script.yaml"
    path.write_text(json.dumps(DOCUMENT))
    assert isinstance(load_script(path), Script)
    sim = start_sim("--script", str(path))
    try:
        text = _prompt([{"role": "user", "content": "Survey the folder"}])
        answer = generate(sim.url, {"text": text, "sampling_params": {"max_new_tokens": 200}})
        assert answer.status_code == 200, answer.text
        output = answer.json()["text"]
        assert "<tool_call>Read<arg_key>file_path</arg_key><arg_value>/w/notes.txt" in output
        plain = _prompt([{"role": "user", "content": "Survey"}], None)
        final = generate(sim.url, {"text": plain, "sampling_params": {"max_new_tokens": 200}})
        assert final.json()["text"].endswith("SUMMARY")
    finally:
        sim.stop()
