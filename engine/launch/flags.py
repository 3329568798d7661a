"""Check the launcher's flag names against the SGLang that is installed.

The profile is written for sglang-kt 0.7.2. Upstream SGLang renamed a few flags since; when the
installed version only knows the new name, the flag is renamed (and the rename reported), and a
flag it knows under no name stops the launch before SGLang fails minutes into startup.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

SGLANG_MODULE = "sglang.launch_server"
HELP_TIMEOUT_S = 180.0

# Exact renames, then prefix renames (old prefix -> new prefix), as published upstream.
KNOWN_RENAMES: dict[str, str] = {
    "--mamba-scheduler-strategy": "--mamba-radix-cache-strategy",
}
PREFIX_RENAMES: dict[str, str] = {
    "--nsa-": "--dsa-",
}

_FLAG = re.compile(r"(?<![\w-])--[a-z0-9][a-z0-9-]*")


@dataclass(frozen=True)
class FlagCheck:
    argv: tuple[str, ...]
    renamed: tuple[tuple[str, str], ...]
    unknown: tuple[str, ...]


def accepted_flags(help_text: str) -> frozenset[str]:
    """Every long option named in `--help` output (or in argparse source text)."""
    return frozenset(_FLAG.findall(help_text))


def candidate_names(flag: str) -> list[str]:
    """The flag itself, then the names upstream may know it by."""
    names = [flag]
    if flag in KNOWN_RENAMES:
        names.append(KNOWN_RENAMES[flag])
    for old, new in PREFIX_RENAMES.items():
        if flag.startswith(old):
            names.append(new + flag[len(old) :])
    return names


def reconcile(argv: Sequence[str], accepted: frozenset[str]) -> FlagCheck:
    """Map each `--flag` in argv to a name `accepted` knows; values are left alone."""
    out: list[str] = []
    renamed: list[tuple[str, str]] = []
    unknown: list[str] = []
    for token in argv:
        if not token.startswith("--"):
            out.append(token)
            continue
        flag, eq, value = token.partition("=")
        match = next((name for name in candidate_names(flag) if name in accepted), None)
        if match is None:
            unknown.append(flag)
            out.append(token)
            continue
        if match != flag:
            renamed.append((flag, match))
        out.append(match + eq + value)
    return FlagCheck(argv=tuple(out), renamed=tuple(renamed), unknown=tuple(unknown))


def sglang_help(python: str, timeout_s: float = HELP_TIMEOUT_S) -> str | None:
    """`python -m sglang.launch_server --help`, or None when SGLang is not installed here."""
    if importlib.util.find_spec("sglang") is None:
        return None
    try:
        done = subprocess.run(
            [python, "-m", SGLANG_MODULE, "--help"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 and done.stdout else None
