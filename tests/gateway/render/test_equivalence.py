"""The proof: the bundled template and the production renderer match the model's own template.

For every seeded random conversation (tests/gateway/render/conversations.py):
- the bundled template equals the reference rendered by the same engine, in Jinja2 configured as
  transformers configures it and in MiniJinja, and raises where the reference raises;
- the production renderer (build_renderer defaults: auto engine + Python pre-pass) equals the
  reference in transformers' Jinja2, the output the model was trained on.
`make test` runs a seeded subset; `make test-full` runs 15,000 cases.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest

from bench.template_render import conversation as parallel_calls
from gateway.errors import TemplateInputError
from gateway.render import RenderSettings, build_renderer
from gateway.render.plain import is_plain
from gateway.render.renderers import AutoRenderer, MiniJinjaRenderer, template_context
from tests.gateway.render.conversations import generate
from tests.gateway.render.oracle import Engines, Outcome, bundled_source, engines, outcome

DEFAULT_CASES = 4_000
FULL_CASES = 15_000


@dataclass
class Report:
    mismatches: list[str] = field(default_factory=list)
    seen: Counter[str] = field(default_factory=Counter)

    def compare(self, what: str, seed: int, expected: Outcome, got: Outcome) -> None:
        if not expected.same_as(got):
            self.mismatches.append(f"seed {seed}: {what}: expected {expected!r}, got {got!r}")


def run_cases(seeds: range, oracle: Engines) -> Report:
    report = Report()
    bundled = bundled_source()
    production = build_renderer(RenderSettings(), source=bundled)
    assert isinstance(production, AutoRenderer)
    for seed in seeds:
        case = generate(seed)
        ref_j2 = outcome(oracle.reference_jinja2, case)
        ref_mj = outcome(oracle.reference_minijinja, case)
        report.compare("template/jinja2", seed, ref_j2, outcome(oracle.template_jinja2, case))
        report.compare("template/minijinja", seed, ref_mj, outcome(oracle.template_minijinja, case))
        report.compare("production", seed, ref_j2, outcome(production, case))
        report.seen["cases"] += 1
        report.seen["raises" if ref_j2.error else "renders"] += 1
        if not ref_j2.same_as(ref_mj):
            report.seen["engines differ on the reference"] += 1
        try:
            context = template_context(
                bundled, case.messages, case.tools, case.kwargs, prepass=True
            )
        except TemplateInputError:
            report.seen["rejected before rendering"] += 1
            continue
        if isinstance(production.engine_for(context), MiniJinjaRenderer):
            report.seen["production used minijinja"] += 1
        order = context.get("flashbox_tool_order") or []
        for run in order:
            if run is not None:
                report.seen["tool runs ordered by the pre-pass"] += 1
                if run != sorted(run):
                    report.seen["tool runs reordered"] += 1
    return report


def check(report: Report, cases: int) -> None:
    assert not report.mismatches, "\n".join(report.mismatches[:5])
    seen = report.seen
    assert seen["cases"] == cases
    # The generator reaches every branch that matters, or the proof would be hollow.
    for key in (
        "raises",
        "renders",
        "engines differ on the reference",
        "production used minijinja",
        "tool runs ordered by the pre-pass",
        "tool runs reordered",
    ):
        assert seen[key] > 0, f"no case covered: {key} ({dict(seen)})"


def test_seeded_subset_matches_reference() -> None:
    check(run_cases(range(DEFAULT_CASES), engines()), DEFAULT_CASES)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_fifteen_thousand_cases_match_reference() -> None:
    check(run_cases(range(FULL_CASES), engines()), FULL_CASES)


@pytest.mark.parametrize("n", [1, 2, 50, 120])
def test_parallel_calls_match_reference(n: int) -> None:
    oracle = engines()
    messages, tools = parallel_calls(n, seed=n)
    expected = oracle.reference_jinja2.render(messages, tools, {})
    production = build_renderer(RenderSettings(), source=bundled_source())
    assert production.render(messages, tools, {}) == expected
    assert oracle.template_jinja2.render(messages, tools, {}) == expected
    assert oracle.template_minijinja.render(messages, tools, {}) == expected
    context = template_context(bundled_source(), messages, tools, {}, prepass=True)
    assert is_plain(context)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_eight_hundred_parallel_calls_match_reference() -> None:
    oracle = engines()
    messages, tools = parallel_calls(800, seed=800)
    expected = oracle.reference_jinja2.render(messages, tools, {})
    production = build_renderer(RenderSettings(), source=bundled_source())
    assert production.render(messages, tools, {}) == expected
    assert oracle.template_jinja2.render(messages, tools, {}) == expected
    assert oracle.template_minijinja.render(messages, tools, {}) == expected
    assert expected.index(">r0<") < expected.index(">r799<")
