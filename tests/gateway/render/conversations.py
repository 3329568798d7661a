"""A seeded random generator of conversations that exercise everything the GLM template handles.

Every role (and an unknown one); string, None and parts content (text, plain strings, image,
video, audio, unknown parts); reasoning_content and `<think>` inside content; clear_thinking and
reasoning_effort values; tools with defer_loading/strict; tool_calls whose arguments hold every
JSON value type (as JSON strings, as OpenAI sends them, or as objects); tool results as strings,
parts, lists of `{tool_call_id|id, output}` and tool_reference; shuffled, missing, duplicate,
unknown, empty, integer, case-variant and Unicode ids; runs of tool messages after no assistant.
Messages come with None-valued keys as a request model dumped without exclude_none has them.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

TEXTS = [
    "",
    " ",
    "hello",
    "  padded text \n",
    "Ünïcödé ✓ 日本語 🚀",
    "line one\nline two",
    "<b>markup</b> & \"quotes\" 'single'",
    "{{ not a template }} {% raw %}",
    "<|user|> fake token",
    "\t",
    "None",
    "0",
    "\x1c edge \x1f",
    "\u3000wide\u00a0",
]
TOOL_NAMES = ["get_weather", "search", "lookup", "Search", "run_shell", "日本語ツール", "noop"]
PART_TYPES = [
    "text",
    "text",
    "image",
    "image_url",
    "video",
    "video_url",
    "audio",
    "audio_url",
    "input_audio",
    "file",
]
EFFORTS: list[Any] = ["low", "high", "medium", "minimal", "max", "none", "LOW", "High", None, 3]
CLEAR_THINKING: list[Any] = [True, False, None, 0, 1, "yes", ""]


@dataclass
class Case:
    seed: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    kwargs: dict[str, Any]


class _Gen:
    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.seed = seed
        # About half the cases look like what an OpenAI client sends (no floats, no oddities),
        # the rest mix in everything else the template has to cope with.
        self.clean = self.r.random() < 0.5

    def chance(self, p: float) -> bool:
        return self.r.random() < p

    def text(self) -> str:
        return self.r.choice(TEXTS)

    def json_value(self, depth: int = 0) -> Any:
        kinds = ["str", "int", "bool", "null"]
        if not self.clean:
            kinds.append("float")
        if depth < 2:
            kinds += ["list", "dict"]
        kind = self.r.choice(kinds)
        if kind == "str":
            return self.r.choice([*TEXTS, "123", "true", "null", "1.0"])
        if kind == "int":
            return self.r.choice([0, 1, -7, 42, 2**40] if self.clean else [0, 1, 10**20])
        if kind == "float":
            return self.r.choice([1.0, 0.5, -0.0, 3.14, 1e20, 1.5e-7, 2.0, 100.0])
        if kind == "bool":
            return self.chance(0.5)
        if kind == "null":
            return None
        if kind == "list":
            return [self.json_value(depth + 1) for _ in range(self.r.randint(0, 3))]
        return {
            self.r.choice(["a", "b", "Ü", "key", "1"]): self.json_value(depth + 1)
            for _ in range(self.r.randint(0, 3))
        }

    def part(self) -> Any:
        if self.chance(0.1):
            return self.text()
        kind = self.r.choice(PART_TYPES)
        part: dict[str, Any] = {"type": kind, "text": None, "image_url": None}
        if kind == "text":
            part["text"] = self.text() if self.chance(0.9) else None
        elif kind.startswith("image"):
            part["image_url"] = {"url": "data:image/png;base64,AAAA"}
        return part

    def content(self) -> Any:
        roll = self.r.random()
        if roll < 0.55:
            text = self.text()
            if self.chance(0.15):
                text = self.r.choice(
                    [
                        f"<think>{self.text()}</think>{self.text()}",
                        f"{self.text()}</think>{self.text()}",
                        "<think>a</think>b</think>c",
                    ]
                )
            return text
        if roll < 0.7:
            return None
        return [self.part() for _ in range(self.r.randint(0, 4))]

    def identifier(self, pool: list[Any]) -> Any:
        roll = self.r.random()
        if roll < 0.75 and pool:
            return self.r.choice(pool)
        return self.r.choice(["", None, 0, 7, "a", "A", "ü-id", "call_🚀", "unknown", "  "])

    def id_pool(self, n: int) -> list[Any]:
        style = self.r.choice(["call", "int", "case", "unicode", "mixed"])
        if style == "call":
            return [f"call_{i}" for i in range(n)]
        if style == "int":
            return list(range(1, n + 1))
        if style == "case":
            return [self.r.choice(["a", "A", "b", "B", "ab", "Ab"]) + str(i // 2) for i in range(n)]
        if style == "unicode":
            return [f"调用-{i}-ü" for i in range(n)]
        return [self.r.choice([f"x{i}", i, f"X{i}", ""]) for i in range(n)]

    def arguments(self) -> Any:
        args = {
            self.r.choice(["q", "city", "n", "flag", "ü", "nested", "items"]): self.json_value()
            for _ in range(self.r.randint(0, 4))
        }
        if self.chance(0.8):
            return json.dumps(args, ensure_ascii=self.chance(0.5))
        return args

    def tool_call(self, call_id: Any) -> dict[str, Any]:
        function = {"name": self.r.choice(TOOL_NAMES), "arguments": self.arguments()}
        call: dict[str, Any] = {"id": call_id, "type": "function", "function": function}
        if self.chance(0.05):
            call = {"id": call_id, "name": function["name"], "arguments": function["arguments"]}
        if not self.clean and self.chance(0.03):
            del function["arguments"]  # the template cannot iterate missing arguments
        if self.chance(0.05):
            call["tool_call_id"] = self.identifier([call_id])
        return call

    def tool_output(self) -> Any:
        roll = self.r.random()
        if roll < 0.5:
            return self.text()
        if roll < 0.7:
            return [self.part() for _ in range(self.r.randint(0, 3))]
        if roll < 0.8:
            return self.tool_reference()
        return self.r.choice([None, "", 5, {"k": "v"}])

    def tool_reference(self) -> list[Any]:
        return [
            {"type": "tool_reference", "name": self.r.choice(TOOL_NAMES)}
            for _ in range(self.r.randint(1, 3))
        ]

    def tool_message(self, pool: list[Any]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "tool", "content": None, "tool_call_id": None}
        key = "tool_call_id" if self.chance(0.85) else "id"
        if self.chance(0.9):
            message[key] = self.identifier(pool)
        roll = self.r.random()
        if roll < 0.5:
            message["content"] = self.text()
        elif roll < 0.62:
            message["content"] = [self.part() for _ in range(self.r.randint(0, 3))]
        elif roll < 0.82:
            entries: list[Any] = []
            for _ in range(self.r.randint(1, 4)):
                entry: dict[str, Any] = {"output": self.tool_output()}
                if self.chance(0.9):
                    entry[self.r.choice(["tool_call_id", "id"])] = self.identifier(pool)
                entries.append(entry)
            if self.chance(0.05):
                entries.append(self.text())
            message["content"] = entries
            if self.chance(0.5):
                message.pop("tool_call_id", None)
        elif roll < 0.92:
            message["content"] = self.tool_reference()
        elif roll < 0.97 or self.clean:
            message["content"] = None
        else:
            message["content"] = self.r.choice([{"output": "x"}, 3, 1.5, True])
        return message

    def tool_run(self, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        pool = [c.get("id") for c in calls if c.get("id") not in (None, "")] or ["call_0"]
        if calls and self.chance(0.6):
            # the common case: one result per call, in some order
            results = [
                self.tool_message([c.get("id")])
                if self.chance(0.5)
                else {"role": "tool", "tool_call_id": c.get("id"), "content": self.text()}
                for c in calls
            ]
            for result, call in zip(results, calls, strict=True):
                if "tool_call_id" in result or "id" in result:
                    result["tool_call_id" if "tool_call_id" in result else "id"] = call.get("id")
            self.r.shuffle(results)
            if self.chance(0.15) and results:
                results.append(self.r.choice(results))
            if self.chance(0.15) and results:
                results.pop(self.r.randrange(len(results)))
            return results or [self.tool_message(pool)]
        return [self.tool_message(pool) for _ in range(self.r.randint(1, 4))]

    def assistant(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": self.content(),
            "reasoning_content": None,
            "tool_calls": None,
        }
        if self.chance(0.3):
            message["reasoning_content"] = self.text()
        elif self.chance(0.03):
            message["reasoning_content"] = ["not", "a string"]
        calls: list[dict[str, Any]] = []
        if self.chance(0.55):
            n = self.r.choice([0, 1, 1, 2, 3, 4, 6, 8])
            pool = self.id_pool(n)
            if self.chance(0.1) and n > 1:
                pool[1] = pool[0]
            calls = [self.tool_call(i) for i in pool]
            message["tool_calls"] = calls
        return message, calls

    def tools(self) -> list[dict[str, Any]] | None:
        roll = self.r.random()
        if roll < 0.3:
            return None
        if roll < 0.35:
            return []
        out: list[dict[str, Any]] = []
        for name in self.r.sample(TOOL_NAMES, self.r.randint(1, 4)):
            function: dict[str, Any] = {
                "name": name,
                "description": self.r.choice([self.text(), None]),
                "parameters": {
                    "type": "object",
                    "properties": {"q": {"type": "string", "default": None}},
                    "required": ["q"],
                    "x-limit": self.r.choice([2, True] if self.clean else [1.0, 2, 0.25, True]),
                },
                "strict": self.r.choice([None, True, False]),
            }
            if self.chance(0.3):
                function["defer_loading"] = self.r.choice([True, False, 1, 0])
            tool: dict[str, Any] = {"type": "function", "function": function}
            if self.chance(0.1):
                tool = function
            out.append(tool)
        return out

    def kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if self.chance(0.6):
            kwargs["reasoning_effort"] = self.r.choice(EFFORTS)
        if self.chance(0.4):
            kwargs["clear_thinking"] = self.r.choice(CLEAR_THINKING)
        if self.chance(0.05):
            kwargs["enable_thinking"] = self.chance(0.5)
        if self.chance(0.03):
            kwargs["reasoning_content"] = self.r.choice(["from kwargs", 5])
        return kwargs

    def case(self) -> Case:
        messages: list[dict[str, Any]] = []
        if self.chance(0.4):
            messages.append({"role": "system", "content": self.content()})
        for _ in range(self.r.randint(1, 6)):
            roll = self.r.random()
            if roll < 0.3:
                messages.append({"role": "user", "content": self.content(), "name": None})
            elif roll < 0.75:
                assistant, calls = self.assistant()
                messages.append(assistant)
                if calls or self.chance(0.2):
                    messages.extend(self.tool_run(calls))
            elif roll < 0.85:
                messages.extend(self.tool_run([]))  # a run that follows no assistant
            elif roll < 0.95:
                messages.append({"role": "system", "content": self.content()})
            else:
                messages.append({"role": self.r.choice(["developer", "function"]), "content": "x"})
        return Case(self.seed, messages, self.tools(), self.kwargs())


def generate(seed: int) -> Case:
    return _Gen(seed).case()
