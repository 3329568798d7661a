"""bench fleet --cpu-burn: the burners run for the block and are gone after it."""

from __future__ import annotations

from bench.fleet import build_parser, config_from_args, cpu_burn


def test_cpu_burn_keeps_one_process_per_core_busy_and_stops_them() -> None:
    with cpu_burn(2) as burners:
        assert len(burners) == 2
        assert all(burner.poll() is None for burner in burners)  # still running
    assert all(burner.poll() is not None for burner in burners)  # killed and reaped


def test_the_flag_runs_every_mode_saturated_too() -> None:
    cfg = config_from_args(build_parser().parse_args(["--cpu-burn", "--modes", "one"]))
    assert cfg.cpu_burn
    assert not config_from_args(build_parser().parse_args([])).cpu_burn
