"""A stand-in Anthropic and OpenAI Responses API that records every request an agent CLI sends.

    python -m scripts.record_agent_requests --port P --out DIR [--read-file PATH | --tool-call JSON]

Each request is written to DIR as `NNN-<method>-<path>.json` holding {"method", "path",
"headers", "body", "received_at", "answer"}: the path keeps its query, credential headers keep
their names but not their values, the body is the parsed JSON (or the raw text when it is not
JSON), `received_at` is the wall-clock time (epoch seconds) its headers arrived, and `answer`
(model answers only) says what was answered: `{"tool_calls": N, "output_chars": N}`, the
characters of reasoning, text, tool names and arguments. In tests, `serving(out_dir, tool_call)`
runs the same server from a thread on a free port.

With a script (scripts/script_answers.py; `serving(..., script=...)`, used by
scripts/record_session_shape.py) every model answer below follows the script instead of the one
tool call: several tool rounds, parallel calls, a summary for compaction requests.

Answers follow the Anthropic Messages API and, under `/v1/responses`, OpenAI's Responses API:
- `HEAD /api/hello` (and GET): 200, empty.
- `POST /v1/messages/count_tokens`: `{"input_tokens": len(body) // 4}`.
- `POST /v1/messages` (any query): an SSE stream, or one JSON message when `stream` is false
  (scripts/messages_answers.py). A request that offers the configured tool and whose last
  message carries no `tool_result` gets a `thinking` block then a `tool_use` of that tool: by
  default Read of `--read-file`, which Claude Code runs without asking. Every other request
  (the turn that carries the tool_result, a subagent without the tool, auxiliary calls) gets
  one `text` block.
- `POST /v1/responses`: streamed or not (scripts/responses_answers.py). A request that offers
  the configured tool gets a reasoning item then a call of it: a `function_call` (the `input`
  object as JSON `arguments`, with the call's `namespace` if it names one) or, for a string
  `input`, a `custom_tool_call`. The request carrying that call's output, and every other one,
  gets one assistant message.
- `POST /v1/chat/completions`: an OpenAI chat completion, streamed or not
  (scripts/chat_answers.py): reasoning_content then tool_calls, or text; the one tool call is
  a one-step script here.
- `GET /v1/models`: an OpenAI model list holding the served model.
- anything else: 404 with Anthropic's error envelope (OpenAI's under `/v1/responses`).

The first line printed to stdout is `listening on http://HOST:PORT` once the socket is bound.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import re
import threading
import time
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from scripts import chat_answers, messages_answers, responses_answers
from scripts.script_answers import Call, Script, ScriptRun, output_chars

# Credentials never reach the recording: which header carried one is kept, its value is not.
CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "proxy-authorization", "cookie"})
REDACTED = "<redacted>"
MODEL = "glm-5.3-flash"


def _sse(event: Mapping[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def _file_name(seq: int, method: str, path: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "_", path.split("?", 1)[0]).strip("_") or "root"
    return f"{seq:03d}-{method.lower()}-{slug}.json"


class RecordingServer(ThreadingHTTPServer):
    """Serves RecordingHandler; writes one numbered file per request into out_dir."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        out_dir: Path,
        tool_call: dict[str, Any],
        script: Script | None = None,
    ) -> None:
        super().__init__(address, RecordingHandler)
        out_dir.mkdir(parents=True, exist_ok=True)
        self.out_dir = out_dir
        self.tool_call = tool_call
        self.script = ScriptRun(script) if script is not None else None
        one_call = Call(tool_call["name"], tool_call["input"], tool_call.get("namespace"))
        # Chat completions came after the one-call mode: there it is a one-step script.
        self.chat_script = self.script or ScriptRun(Script([[one_call]]))
        self._counter = itertools.count(1)
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def record(
        self, method: str, path: str, headers: dict[str, str], body: Any, received_at: float
    ) -> Path:
        with self._lock:
            seq = next(self._counter)
        record = {
            "method": method,
            "path": path,
            "headers": headers,
            "body": body,
            "received_at": received_at,
        }
        written = self.out_dir / _file_name(seq, method, path)
        written.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        return written

    def note_answer(self, written: Path, tool_calls: int, output: Any) -> None:
        """Add what was answered to a request's record: the number of tool calls, and the size
        of the generated part (reasoning, text, tool names and arguments) in characters."""
        record = json.loads(written.read_text())
        record["answer"] = {"tool_calls": tool_calls, "output_chars": output_chars(output)}
        written.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")


class RecordingHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RecordingServer

    def log_message(self, format: str, *args: Any) -> None:
        print(f"{self.command} {self.path} -> {args[1] if len(args) > 1 else ''}", flush=True)

    def _read_and_record(self) -> tuple[Any, int]:
        """The request's body (parsed JSON, text, or None) and its length in bytes."""
        received_at = time.time()
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode(errors="replace")
        headers = {
            name.lower(): REDACTED if name.lower() in CREDENTIAL_HEADERS else value
            for name, value in self.headers.items()
        }
        self.recorded = self.server.record(self.command, self.path, headers, body, received_at)
        self.request_headers = headers
        return body, len(raw)

    def _start(self, status: int, content_type: str, length: int) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(length))
        self.send_header("request-id", f"req_recorder{time.time_ns()}")
        self.end_headers()

    def _send(self, status: int, payload: bytes, content_type: str = "application/json") -> None:
        self._start(status, content_type, len(payload))
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _not_found(self) -> None:
        message = f"no route for {self.path}"
        error: dict[str, Any] = {"type": "error", "error": {"type": "not_found_error"}}
        if self.path.startswith("/v1/responses"):
            error = {"error": {"type": "invalid_request_error", "param": None, "code": None}}
        error["error"]["message"] = message
        self._send(404, json.dumps(error).encode())

    def _stream(self, events: Iterator[Mapping[str, Any]]) -> None:
        frames = [_sse(event) for event in events]
        # Frame by frame, as a live stream arrives (the length is known, so no chunking).
        self._start(200, "text/event-stream", sum(len(frame) for frame in frames))
        for frame in frames:
            self.wfile.write(frame)

    def do_HEAD(self) -> None:
        self._read_and_record()
        route = self.path.split("?", 1)[0]
        if route == "/api/hello":
            self._send(200, b"")
        elif route == "/v1/models":
            model = {"id": MODEL, "object": "model", "created": 0, "owned_by": "flashbox"}
            self._send(200, json.dumps({"object": "list", "data": [model]}).encode())
        else:
            self._not_found()

    def do_GET(self) -> None:
        self.do_HEAD()

    def do_POST(self) -> None:
        body, length = self._read_and_record()
        route = self.path.split("?", 1)[0]
        if route == "/v1/messages/count_tokens":
            self._send(200, json.dumps({"input_tokens": length // 4}).encode())
        elif route == "/v1/messages" and isinstance(body, dict):
            self._answer_messages(body, input_tokens=length // 4)
        elif route == "/v1/responses" and isinstance(body, dict):
            self._answer_responses(body, input_tokens=length // 4)
        elif route == "/v1/chat/completions" and isinstance(body, dict):
            self._answer_chat(body, prompt_tokens=length // 4)
        else:
            self._not_found()

    def _answer_messages(self, body: dict[str, Any], input_tokens: int) -> None:
        run = self.server.script
        if run is None:
            blocks, stop_reason = messages_answers.answer_blocks(body, self.server.tool_call)
        else:
            blocks, stop_reason = messages_answers.scripted_blocks(body, self.request_headers, run)
        calls = sum(block["type"] == "tool_use" for block in blocks)
        self.server.note_answer(self.recorded, calls, blocks)
        model = str(body.get("model", "unknown"))
        message_id = f"msg_recorder{time.time_ns()}"
        if body.get("stream"):
            events = messages_answers.stream_events(
                message_id, model, blocks, stop_reason, input_tokens
            )
            self._stream(events)
            return
        message = messages_answers.message_object(
            message_id, model, blocks, stop_reason, input_tokens
        )
        self._send(200, json.dumps(message).encode())

    def _answer_responses(self, body: dict[str, Any], input_tokens: int) -> None:
        run = self.server.script
        if run is None:
            items = responses_answers.answer_items(body, self.server.tool_call)
        else:
            items = responses_answers.scripted_items(body, self.request_headers, run)
        calls = sum(item["type"] in ("function_call", "custom_tool_call") for item in items)
        generated = [{k: v for k, v in item.items() if k != "encrypted_content"} for item in items]
        self.server.note_answer(self.recorded, calls, generated)
        response_id = f"resp_recorder{time.time_ns()}"
        if body.get("stream"):
            self._stream(responses_answers.stream_events(response_id, body, items, input_tokens))
            return
        usage = responses_answers.response_usage(input_tokens, items)
        response = responses_answers.response_object(response_id, body, "completed", items, usage)
        self._send(200, json.dumps(response).encode())

    def _answer_chat(self, body: dict[str, Any], prompt_tokens: int) -> None:
        message, finish = chat_answers.scripted_message(
            body, self.request_headers, self.server.chat_script
        )
        self.server.note_answer(self.recorded, len(message.get("tool_calls") or []), message)
        completion_id = f"chatcmpl-recorder{time.time_ns()}"
        if not body.get("stream"):
            model = str(body.get("model", "unknown"))
            answer = chat_answers.completion_object(
                completion_id, model, message, finish, prompt_tokens
            )
            self._send(200, json.dumps(answer).encode())
            return
        chunks = chat_answers.stream_chunks(completion_id, body, message, finish, prompt_tokens)
        frames = [f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks]
        frames.append(b"data: [DONE]\n\n")
        self._start(200, "text/event-stream", sum(len(frame) for frame in frames))
        for frame in frames:
            self.wfile.write(frame)


@contextlib.contextmanager
def serving(
    out_dir: Path, tool_call: dict[str, Any], script: Script | None = None
) -> Iterator[RecordingServer]:
    """A RecordingServer on a free loopback port, served from a thread while the block runs."""
    server = RecordingServer(("127.0.0.1", 0), out_dir, tool_call, script)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True, help="0 picks a free port")
    parser.add_argument("--out", type=Path, required=True, help="folder for the recordings")
    parser.add_argument(
        "--read-file",
        default="README.md",
        help="file_path of the Read call in the first answer (absolute, as Read wants it)",
    )
    parser.add_argument(
        "--tool-call",
        type=json.loads,
        help=(
            'the first answer\'s tool call instead of Read, as JSON: {"name": ..., "input": ...};'
            ' for /v1/responses also "namespace", and a string input makes a custom tool call'
        ),
    )
    args = parser.parse_args()
    tool_call = args.tool_call or {"name": "Read", "input": {"file_path": args.read_file}}
    server = RecordingServer((args.host, args.port), args.out, tool_call)
    print(f"listening on {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
