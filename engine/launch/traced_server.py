"""`python -m engine.launch.traced_server ARGS...`: SGLang's server (`sglang.launch_server ARGS`)
with its trace level set before it starts; the launcher runs this in its place when an engine
profile turns tracing on (engine/launch/plan.py).

sglang-kt 0.7.2 starts at trace level 3, a span for every decode step of every request, and has
no flag to lower it, only POST /set_trace_level once the server runs. The level lives in the
server process: each request's trace context takes it there and carries it to the scheduler
processes, so setting it here, before the server starts, covers every request.
"""

from __future__ import annotations

import importlib
import os
import runpy
import sys

LEVEL_ENV = "FLASHBOX_ENGINE_TRACE_LEVEL"
SERVER_MODULE = "sglang.launch_server"


def main() -> None:
    level = int(os.environ.get(LEVEL_ENV, "2"))
    # The engine's own virtualenv has it (the test virtualenv, where mypy runs, never does).
    trace = importlib.import_module("sglang.srt.observability.trace")
    trace.set_global_trace_level(level)
    sys.argv = [SERVER_MODULE, *sys.argv[1:]]
    # As `python -m sglang.launch_server`: its __main__ block runs, and multiprocessing's
    # spawned children import the same module by name.
    runpy.run_module(SERVER_MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
