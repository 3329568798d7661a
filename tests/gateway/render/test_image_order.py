"""Images go to the engine in the order the model's own template shows them, in a prompt equal
to the model's template rendering the original request (gateway.core.images).

For seeded random conversations with image parts everywhere the generator puts them (user,
system, assistant before and after reasoning, tool part lists, reordered tool runs), each image
given its own URL: the production path (sentinel parts, render, place) must give the reference
template's text for the original request (Jinja2, as transformers renders it; and the bundled
template in MiniJinja against the reference in MiniJinja), and the images' order must be the order
in which the reference shows them (found by rendering it with a distinct text per image).
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from gateway.core.images import ImageSlots
from gateway.errors import InvalidRequestError, TemplateInputError
from gateway.faces.openai_chat.input import _with_image_slots
from gateway.render import RenderSettings, build_renderer
from gateway.settings import ModelSettings
from tests.gateway.render.conversations import Case, generate
from tests.gateway.render.oracle import bundled_source, engines

CASES = 1_500
MARKER = ModelSettings().image_marker


def _numbered(case: Case) -> tuple[list[Any], list[Any], int]:
    """The case's messages with a distinct URL per image part, and the same messages with a
    distinct text in place of each image (the order oracle); and the number of images."""
    messages = copy.deepcopy(case.messages)
    tagged = copy.deepcopy(case.messages)
    count = 0
    for message, twin in zip(messages, tagged, strict=True):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") in ("image_url", "image"):
                url = f"data:image/png;base64,IMG{count}"
                if part["type"] == "image":
                    part["url"] = url  # the model card's form
                else:
                    part["image_url"] = {"url": url}
                twin["content"][j] = {"type": "text", "text": f"\u2063IMG{count}\u2063"}
                count += 1
    return messages, tagged, count


def test_images_follow_the_reference_templates_order() -> None:
    oracle = engines()  # skips without the reference template
    production = build_renderer(RenderSettings(), source=bundled_source())
    checked = with_images = 0
    for seed in range(CASES):
        case = generate(seed)
        messages, tagged, count = _numbered(case)
        if not count:
            continue
        with_images += 1
        try:
            expected = oracle.reference_jinja2.render(messages, case.tools, case.kwargs)
            shown = oracle.reference_jinja2.render(tagged, case.tools, case.kwargs)
        except TemplateInputError:
            continue
        expected_order = [int(n) for n in re.findall("\u2063IMG(\\d+)\u2063", shown)]
        sent, slots = _with_image_slots(messages)
        assert isinstance(slots, ImageSlots)
        if len(expected_order) != count:
            prompt = production.render(sent, case.tools, case.kwargs)
            # The template left an image out: the gateway refuses instead of dropping it.
            with pytest.raises(InvalidRequestError, match="does not show an image"):
                slots.place(prompt, MARKER)
            continue
        wanted = [f"data:image/png;base64,IMG{n}" for n in expected_order]
        placed, order = slots.place(production.render(sent, case.tools, case.kwargs), MARKER)
        assert placed == expected, f"seed {seed}"
        assert [slots.slots[i].url for i in order] == wanted, f"seed {seed}"
        # The bundled template in MiniJinja against the reference in MiniJinja (the two engines
        # may differ from each other on the reference itself: test_equivalence.py counts that).
        try:
            reference_mj = oracle.reference_minijinja.render(messages, case.tools, case.kwargs)
            shown_mj = oracle.reference_minijinja.render(tagged, case.tools, case.kwargs)
        except TemplateInputError:
            continue
        order_ref = [int(n) for n in re.findall("\u2063IMG(\\d+)\u2063", shown_mj)]
        if len(order_ref) != count:
            continue  # MiniJinja's reference drops one: the Jinja2 check above covered the case
        template_mj = oracle.template_minijinja.render(sent, case.tools, case.kwargs)
        placed_mj, order_mj = slots.place(template_mj, MARKER)
        assert placed_mj == reference_mj, f"seed {seed}: minijinja"
        assert [slots.slots[i].url for i in order_mj] == [
            f"data:image/png;base64,IMG{n}" for n in order_ref
        ], f"seed {seed}: minijinja"
        checked += 1
    assert with_images > 100
    assert checked > 50
