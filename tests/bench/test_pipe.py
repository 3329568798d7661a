"""bench.pipe, the floor hop of `bench overhead --floor`: a real simulator behind it."""

from __future__ import annotations

import httpx

from tests.support.procs import start_process, start_sim


def test_the_pipe_relays_requests_and_streams_byte_for_byte() -> None:
    sim = start_sim()
    try:
        pipe = start_process("bench.pipe", ["--port", "{port}", "--upstream-port", str(sim.port)])
        try:
            body = {"text": "hello", "stream": True, "sampling_params": {"max_new_tokens": 8}}
            with httpx.Client(timeout=30.0) as client:
                # Two requests on one kept-alive client connection, the first streamed.
                with client.stream("POST", pipe.url + "/generate", json=body) as response:
                    events = [line for line in response.iter_lines() if line.startswith("data:")]
                info = client.get(pipe.url + "/model_info")
            assert response.status_code == 200
            assert events[-1] == "data: [DONE]"
            assert len(events) >= 2
            assert info.status_code == 200
        finally:
            pipe.stop()
    finally:
        sim.stop()
