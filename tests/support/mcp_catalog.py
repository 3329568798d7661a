"""A stdio MCP server with many tools, for the agent CLIs' tool search (run as a module).

    python -m tests.support.mcp_catalog [--tools N]

Speaks the Model Context Protocol's JSON-RPC over stdio, one message per line: `initialize`,
`tools/list` (N tools, `lookup_000` ... with realistic descriptions and schemas, so that all of
them in a prompt cost tens of thousands of tokens) and `tools/call` (answers
`"<tool>: <arguments as JSON>"`). Enough of the protocol for Claude Code to list and call the
tools; nothing else.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

PROTOCOL_VERSION = "2025-06-18"
SERVER = "catalog"
TOPICS = (
    "invoices", "shipments", "tickets", "deployments", "customers", "alerts", "builds",
    "backups", "certificates", "releases",
)  # fmt: skip


def tool_name(index: int) -> str:
    return f"lookup_{index:03d}"


def tools(count: int) -> list[dict[str, Any]]:
    out = []
    for index in range(count):
        topic = TOPICS[index % len(TOPICS)]
        out.append(
            {
                "name": tool_name(index),
                "description": (
                    f"Looks up {topic} record set number {index} in the catalog service and "
                    f"returns the matching {topic} with their identifiers, owners, states and "
                    "the time each one last changed. Use it when the user asks about "
                    f"{topic} of group {index}; it never changes anything."
                ),
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": f"Words to match in {topic}"},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 50},
                        "include_closed": {"type": "boolean"},
                    },
                    "required": ["query"],
                },
            }
        )
    return out


def answer(message: dict[str, Any], count: int) -> dict[str, Any] | None:
    method, ident = message.get("method"), message.get("id")
    if ident is None:  # a notification
        return None
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": message.get("params", {}).get("protocolVersion", PROTOCOL_VERSION),
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": SERVER, "version": "1.0.0"},
        }
    elif method == "tools/list":
        result = {"tools": tools(count)}
    elif method == "tools/call":
        params = message.get("params", {})
        text = f"{params.get('name')}: {json.dumps(params.get('arguments', {}), sort_keys=True)}"
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    elif method == "ping":
        result = {}
    else:
        return {
            "jsonrpc": "2.0",
            "id": ident,
            "error": {"code": -32601, "message": f"no method {method}"},
        }
    return {"jsonrpc": "2.0", "id": ident, "result": result}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tools", type=int, default=100)
    args = parser.parse_args()
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = answer(json.loads(line), args.tools)
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
