"""The opt-in inside GLM's validator: accepts the good launch, refuses each bad one clearly."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from engine.patches.prefix_cache.config import (
    UNIT_ATTR,
    PrefixCacheConfigError,
    config_problems,
)
from tests.engine.prefix_cache.builders import prefix_cache_on, server_args

STRATEGY = "needs --mamba-scheduler-strategy extra_buffer"
INTERVAL = "--mamba-track-interval must be a positive multiple of 256"
CHUNK = "--chunked-prefill-size must be a positive multiple of 256"


@pytest.fixture
def patched() -> Iterator[None]:
    with prefix_cache_on():
        yield


def _validate(**overrides: Any) -> Any:
    args = server_args(**overrides)
    args._validate_glm5_next_session_ab_boundary()
    return args


@pytest.mark.usefixtures("patched")
def test_good_launch_switches_the_radix_cache_on_with_a_256_unit() -> None:
    args = _validate()
    assert args.disable_radix_cache is False
    assert getattr(args, UNIT_ATTR) == 256
    # Prefill snapshot points and the branching point follow this value.
    assert args.mamba_cache_chunk_size == 256


@pytest.mark.usefixtures("patched")
def test_the_later_revalidation_keeps_it_on() -> None:
    args = _validate()
    args._validate_glm5_next_session_ab_boundary()
    assert args.disable_radix_cache is False
    assert args.mamba_cache_chunk_size == 256


@pytest.mark.usefixtures("patched")
def test_other_models_keep_the_stock_chunk_size() -> None:
    args = server_args(page_size=64)
    assert args.mamba_cache_chunk_size == 64


@pytest.mark.usefixtures("patched")
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"mamba_scheduler_strategy": "no_buffer"}, STRATEGY),
        ({"mamba_scheduler_strategy": "auto"}, STRATEGY),
        ({"mamba_track_interval": 64}, INTERVAL),
        ({"mamba_track_interval": 384}, INTERVAL),
        ({"chunked_prefill_size": 2000}, CHUNK),
        ({"chunked_prefill_size": -1}, CHUNK),
        ({"chunked_prefill_size": None}, "--chunked-prefill-size must be a positive multiple"),
        ({"page_size": 96}, "page size 96 does not divide the 256-token cache unit"),
        ({"disable_radix_cache": True}, "conflicts with --disable-radix-cache"),
    ],
)
def test_each_bad_launch_is_refused_with_what_to_change(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(PrefixCacheConfigError, match="FLASHBOX_PREFIX_CACHE=1") as info:
        _validate(**overrides)
    assert message in str(info.value)


@pytest.mark.usefixtures("patched")
@pytest.mark.parametrize(
    ("overrides", "stock_message"),
    [
        ({"speculative_algorithm": "EAGLE"}, "speculative decoding"),
        ({"enable_hierarchical_cache": True}, "HiCache"),
    ],
)
def test_stock_refusals_still_come_first(overrides: dict[str, Any], stock_message: str) -> None:
    with pytest.raises(ValueError, match=stock_message):
        _validate(**overrides)


def test_our_own_check_refuses_speculative_decoding_and_hicache_too() -> None:
    # The stock validator refuses both today; ours does not rely on that staying true.
    problems = config_problems(
        server_args(speculative_algorithm="EAGLE", enable_hierarchical_cache=True)
    )
    assert any("speculative decoding is not supported" in p for p in problems)
    assert any("HiCache" in p for p in problems)
    assert config_problems(server_args()) == []


def test_all_problems_are_reported_at_once() -> None:
    problems = config_problems(
        server_args(mamba_scheduler_strategy="no_buffer", mamba_track_interval=100)
    )
    assert len(problems) == 2
