"""Each injected fault, per request (header or custom_params) and per process (flags)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson
import pytest

from tests.engine.sim.helpers import GLM_PROMPT, generate, metric, sse_events, stream
from tests.support.procs import Proc, start_sim

BODY: dict[str, Any] = {"text": GLM_PROMPT, "sampling_params": {"max_new_tokens": 200}}


def _raw_stream(
    url: str, fault: str, read_timeout: float = 30.0
) -> tuple[list[bytes], Exception | None]:
    """Data lines received before the stream ended or failed, and the failure."""
    lines: list[bytes] = []
    timeout = httpx.Timeout(30.0, read=read_timeout)
    try:
        with httpx.stream(
            "POST",
            url + "/generate",
            json={**BODY, "stream": True},
            headers={"x-sim-fault": fault},
            timeout=timeout,
        ) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if line:
                    lines.append(line.encode())
    except (httpx.RemoteProtocolError, httpx.ReadTimeout, httpx.ReadError) as exc:
        return lines, exc
    return lines, None


def test_503_before_first_token(sim: Proc) -> None:
    response = generate(sim.url, BODY, headers={"x-sim-fault": "503"})
    assert response.status_code == 503
    assert "fault injection" in response.json()["error"]["message"]
    via_params = generate(sim.url, {**BODY, "custom_params": {"sim": {"fault": "503"}}})
    assert via_params.status_code == 503


def test_die_mid_stream_closes_the_connection(sim: Proc) -> None:
    lines, error = _raw_stream(sim.url, "die:3")
    assert isinstance(error, httpx.RemoteProtocolError)
    assert len(lines) == 3
    assert b"[DONE]" not in b"".join(lines)


def test_die_without_streaming(sim: Proc) -> None:
    with pytest.raises(httpx.RemoteProtocolError):
        generate(sim.url, BODY, headers={"x-sim-fault": "die:1"})


def test_in_stream_error_event(sim: Proc) -> None:
    events = stream(sim.url, {**BODY, "custom_params": {"sim": {"fault": "error:2"}}})
    assert [e["meta_info"]["completion_tokens"] for e in events[:2]] == [1, 2]
    assert set(events[2]) == {"error"}
    assert events[2]["error"]["message"]
    assert events[3:] == ["[DONE]"]
    plain = generate(sim.url, BODY, headers={"x-sim-fault": "error:0"})
    assert plain.status_code == 500
    assert "error" in plain.json()


def test_malformed_sse(sim: Proc) -> None:
    lines, error = _raw_stream(sim.url, "malformed:1")
    assert error is None
    assert lines[-1] == b"data: [DONE]"
    orjson.loads(lines[0][len(b"data: ") :])
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(lines[1][len(b"data: ") :])


def test_stall_before_first_token_then_disconnect_aborts(sim: Proc) -> None:
    before = metric(sim.url, "sglang:num_aborted_requests_total")
    lines, error = _raw_stream(sim.url, "stall_first", read_timeout=0.5)
    assert isinstance(error, httpx.ReadTimeout)
    assert lines == []
    deadline = time.monotonic() + 10
    while metric(sim.url, "sglang:num_aborted_requests_total") < before + 1:
        assert time.monotonic() < deadline, "disconnect was not counted as an abort"
        time.sleep(0.05)


def test_stall_mid_stream(sim: Proc) -> None:
    lines, error = _raw_stream(sim.url, "stall:4", read_timeout=0.5)
    assert isinstance(error, httpx.ReadTimeout)
    assert len(lines) == 4


def test_bad_fault_spec_is_a_400(sim: Proc) -> None:
    response = generate(sim.url, BODY, headers={"x-sim-fault": "explode"})
    assert response.status_code == 400
    assert "unknown fault" in response.json()["error"]["message"]


def test_still_healthy_after_faults(sim: Proc) -> None:
    assert httpx.get(sim.url + "/health").status_code == 200
    assert generate(sim.url, BODY).status_code == 200


def test_process_wide_fault_flag_and_runtime_switch() -> None:
    proc = start_sim("--fault", "503", name="faulty")
    try:
        assert generate(proc.url, BODY).status_code == 503
        httpx.post(proc.url + "/sim/config", json={"fault": None})
        assert generate(proc.url, BODY).status_code == 200
        httpx.post(proc.url + "/sim/config", json={"healthy": False})
        assert httpx.get(proc.url + "/health").status_code == 503
        httpx.post(proc.url + "/sim/config", json={"healthy": True, "fault": "error:1"})
        events = stream(proc.url, BODY)
        assert "error" in events[1]
        assert httpx.post(proc.url + "/sim/config", json={"fault": "nope"}).status_code == 400
    finally:
        proc.stop()


def test_crash_mid_stream_ends_the_process() -> None:
    proc = start_sim("--fault", "crash:2", name="crashing")
    try:
        lines, error = _raw_stream(proc.url, "crash:2")
        assert error is not None
        assert len(lines) <= 2
        proc.popen.wait(10)
        assert proc.popen.returncode == 17
    finally:
        proc.stop()


def test_sse_events_of_error_stream_parse(sim: Proc) -> None:
    body = generate(sim.url, {**BODY, "stream": True}, headers={"x-sim-fault": "error:0"}).text
    assert sse_events(body)[0]["error"]["code"] == 500
