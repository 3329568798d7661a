"""bench abandon-soak: a few seconds of it, and the gateway is idle again afterwards."""

from __future__ import annotations

import pytest

from bench.abandon_soak import abandon_soak, dechunk, markdown
from gateway.observability.metrics import IDLE_GAUGES


def test_a_short_soak_abandons_requests_and_leaves_the_gateway_idle() -> None:
    # Half abandoned, so four clients leave some requests even in a few seconds.
    summary = abandon_soak(4, 4.0, abandon=0.5, seed=1, warmup_s=1.0, settle_s=5.0)
    metrics = summary["metrics"]
    assert summary["errors"] == 0, summary["error_samples"]
    assert summary["done"] > 0
    assert summary["abandoned"] > 0
    assert summary["gateway_alive"]
    assert metrics["missing_gauges"] == []
    assert metrics["idle"], (metrics["gauges"], metrics["engine_gauges"])
    # Every gauge read was 0, and the connection pools were among them.
    assert set(metrics["gauges"].values()) == {0.0}
    assert 'flashbox_upstream_connections_in_use{pool="generation"}' in metrics["gauges"]
    assert set(metrics["engine_gauges"].values()) == {0.0}
    text = markdown(summary, "test")
    assert "idle after the run: **yes**" in text
    assert all(name in text for name in IDLE_GAUGES)


def test_a_chunked_body_is_read_whole() -> None:
    assert dechunk(b"5\r\nhello\r\n6;x=1\r\n world\r\n0\r\n\r\n") == b"hello world"


@pytest.mark.parametrize("cut", [b"5\r\nhel", b"5\r\nhello\r\n"])
def test_a_chunked_body_cut_short_is_an_error_not_an_answer(cut: bytes) -> None:
    with pytest.raises(ValueError, match="cut"):
        dechunk(cut)
