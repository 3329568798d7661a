"""The shape mode of `python -m bench affinity` (bench.affinity_shape, bench.routers): its
flags, and the baseline gateway's git worktree, which is created outside the repo and removed."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.affinity import build_parser, shape_config_from_args
from bench.affinity_shape import DEFAULT_TODAY_REV, SHAPE_ROUTERS, gateway_env
from bench.procs import REPO_ROOT
from bench.routers import today_worktree
from gateway.settings import RoutingSettings


def test_shape_flags_default_to_the_issue_s_routers() -> None:
    args = build_parser().parse_args(
        ["--shape", "s.json", "--slots", "192", "--max-running", "16", "--scale", "4"]
    )
    cfg = shape_config_from_args(args)
    assert cfg.routers == SHAPE_ROUTERS == ("flashbox", "today", "round_robin", "smg:cache_aware")
    assert cfg.slots == (192, 192, 192)
    assert cfg.max_running == 16
    assert cfg.scale == 4
    assert cfg.today_rev == DEFAULT_TODAY_REV
    assert cfg.ramp_s == 400.0  # one mean pause, as the uniform workload starts its sessions


def _worktrees() -> str:
    return subprocess.run(
        ["git", "-C", str(REPO_ROOT), "worktree", "list"], capture_output=True, text=True
    ).stdout


def test_the_baseline_runs_from_a_temporary_worktree_that_is_removed() -> None:
    with today_worktree("HEAD") as root:
        assert (root / "gateway" / "__main__.py").is_file()
        assert not root.is_relative_to(REPO_ROOT)
        assert str(root) in _worktrees()
    assert not Path(root).exists()
    assert str(root) not in _worktrees()


def test_the_gateways_idle_times_run_at_the_simulators_scale() -> None:
    env = gateway_env("flashbox", time_scale=0.02)
    assert env["FLASHBOX_UPSTREAM__FORWARD_CUSTOM_PARAMS"] == "true"
    assert float(env["FLASHBOX_ROUTING__PIN_IDLE_TTL_S"]) == RoutingSettings().pin_idle_ttl_s * 0.02
    assert "FLASHBOX_ROUTING__HEAD_IDLE_TTL_S" in env
    # The baseline's settings have no head table and refuse keys they do not know.
    assert "FLASHBOX_ROUTING__HEAD_IDLE_TTL_S" not in gateway_env("today", time_scale=0.02)
