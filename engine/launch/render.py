"""The dry-run text: a copy-pasteable shell command, with notes and problems as comments."""

from __future__ import annotations

import shlex

from engine.launch.host import HostFacts
from engine.launch.plan import LaunchPlan

REDACTED = "<redacted>"


def describe_host(host: HostFacts) -> str:
    parts: list[str] = []
    if host.gpus:
        g = host.gpus[0]
        parts.append(f"{len(host.gpus)}x {g.name} ({g.sm}, {g.memory_mib} MiB)")
    else:
        parts.append("no GPU")
    cpu = host.cpu
    if cpu is not None:
        parts.append(
            f"{cpu.sockets}x {cpu.model_name}, {cpu.physical_cores} physical cores, "
            f"kt-kernel {cpu.kt_variant}"
        )
    if host.numa:
        parts.append("NUMA nodes " + ",".join(str(n.id) for n in host.numa))
    else:
        parts.append("no NUMA information")
    if host.memory is not None:
        parts.append(f"{host.memory.total_gib:.0f} GiB RAM")
    return "; ".join(parts)


def render_plan(plan: LaunchPlan, *, profile_name: str, host: HostFacts) -> str:
    lines = [f"# engine profile {profile_name}", f"# host: {describe_host(host)}"]
    lines += [f"# note: {note}" for note in plan.notes]
    lines += [f"# PROBLEM: {problem}" for problem in plan.problems]

    def show(token: str) -> str:
        return shlex.quote(REDACTED if token in plan.secrets else token)

    body = ["env"] + [f"  {k}={show(v)}" for k, v in plan.env.items()]
    body.append("  " + " ".join(show(t) for t in plan.argv[:3]))
    # One flag per line with its values, so a diff of two plans reads flag by flag.
    current: list[str] = []
    for token in plan.argv[3:]:
        if token.startswith("--") and current:
            body.append("  " + " ".join(current))
            current = []
        current.append(show(token))
    if current:
        body.append("  " + " ".join(current))
    lines.append(" \\\n".join(body))
    return "\n".join(lines) + "\n"
