"""`python -m bench <suite> [args]`: one entry point for every benchmark.

Each suite is a module under bench/ with `main(argv: list[str]) -> int` (its own flags) and
`report(out_dir: Path) -> str` (the CPU-feasible run that `make bench` does, returning a
markdown section; figures and JSON go to out_dir). `python -m bench all --out DIR` runs every
suite's report and writes DIR/report.md.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import textwrap
import time
from pathlib import Path

# suite name -> module; a suite whose module is not there yet is skipped by `all`.
SUITES: dict[str, str] = {
    "sim": "bench.sim_lag",
    "template": "bench.template_render",
    "parsers": "bench.parser_cost",
    "overhead": "bench.overhead",
    "tracing": "bench.tracing_overhead",
    "steps": "bench.hop_steps",
    "relay": "bench.relay_cost",
    "affinity": "bench.affinity",
    "fleet": "bench.fleet",
    "keepalive": "bench.keepalive",
    "fairness": "bench.fairness",
    "serve": "bench.serve",
    "sessions": "bench.sessions",
    "synth-shape": "bench.shape_synth",
    "soak": "bench.soak",
    "abandon-soak": "bench.abandon_soak",
    "kernels": "bench.kernels_device",
    "media": "bench.media",
    "media-load": "bench.media_load",
    "images-device": "bench.images_device",
    "hostile_connections": "bench.hostile_connections",
}


def _run_all(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench all")
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    parser.add_argument(
        "--only",
        nargs="*",
        default=None,
        choices=list(SUITES),
        metavar="SUITE",
        help="suite names to run (default: all)",
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    sections = [f"# flashbox benchmark report\n\n{time.strftime('%Y-%m-%d %H:%M %Z')}\n"]
    for name, module_name in SUITES.items():
        if args.only is not None and name not in args.only:
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        if not hasattr(module, "report"):
            continue
        print(f"== {name}", flush=True)
        sections.append(module.report(args.out / name))
    (args.out / "report.md").write_text("\n\n".join(sections) + "\n")
    print(f"report: {args.out / 'report.md'}")
    return 0


def _usage() -> str:
    suites = textwrap.fill(
        ", ".join(SUITES), 88, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False
    )
    return (
        "usage: python -m bench SUITE [args]\n\n"
        "  all      every suite's CPU report into --out DIR (make bench)\n"
        f"{suites}\n\n"
        "`python -m bench SUITE --help` gives a suite's flags.\n"
    )


def main(argv: list[str]) -> int:
    if argv and argv[0] in {"-h", "--help"}:
        print(_usage(), end="")
        return 0
    if not argv:
        print(_usage() + "\npython -m bench: error: name a suite", file=sys.stderr)
        return 2
    suite, rest = argv[0], argv[1:]
    if suite == "all":
        return _run_all(rest)
    if suite not in SUITES:
        print(f"unknown suite {suite!r}; choose from: all, {', '.join(SUITES)}", file=sys.stderr)
        return 2
    module = importlib.import_module(SUITES[suite])
    code: int = module.main(rest)
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
