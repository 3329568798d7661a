"""What the real-client tests (Claude Code, Codex) share: a text-only simulator behind a keyed
gateway, and the check that a face answered nothing but 200s."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx

from tests.support.procs import Proc, start_gateway, start_sim

# The sim answers in text only: a CLI's task ends after one turn, whatever it asked.
SIM_FLAGS = ("--tool-calls", "0", "--reasoning-tokens", "16", "--content-tokens", "24")


@contextlib.contextmanager
def agent_stack(key: str) -> Iterator[Proc]:
    """A gateway (API key `key`) in front of one text-only simulator."""
    sim = start_sim(*SIM_FLAGS)
    try:
        env = {"FLASHBOX_API_KEYS": key, "FLASHBOX_HEALTH__INTERVAL_S": "0.2"}
        gateway = start_gateway([sim.url], env=env)
        try:
            yield gateway
        finally:
            gateway.stop()
    finally:
        sim.stop()


def refused(gateway: Proc, api: str) -> list[str]:
    """The face's request counters with a code other than 200 and a count above zero."""
    text = httpx.get(gateway.url + "/metrics", timeout=5).text
    return [
        line
        for line in text.splitlines()
        if line.startswith("flashbox_requests_total")
        and f'api="{api}"' in line
        and 'code="200"' not in line
        and not line.endswith(" 0.0")
    ]
