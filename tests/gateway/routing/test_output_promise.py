"""The output promise: a turn that sends the previous output back verbatim is also checked
against the checkpoint of the previous prompt and output together (gateway.routing.affinity).
Its hit or miss is the prompt's; the output's checkpoint is counted apart, because the engine
restores it only when the answer's text tokenizes back to the tokens it sampled."""

from __future__ import annotations

from collections import Counter

from gateway.routing import AffinityPicker, Outcome, RequestContext, TurnOutput
from gateway.routing.replica import Replica
from gateway.settings import RoutingSettings

# GLM's generation prompt ends with <think>; the output starts with the reasoning.
PROMPT_1 = "<|system|>rules" + "x" * 20_000 + "<|user|>fix the bug<|assistant|><think>"
OUTPUT_1 = "The bug is in the loop.</think>Fixed it." + "y" * 3_000
PROMPT_1_TOKENS, OUTPUT_1_TOKENS = 5_000, 760


class Rig:
    def __init__(self) -> None:
        self.replica = Replica.from_url("http://r0:1")
        self.replica.healthy = True
        self.counts: Counter[str] = Counter()
        self.outputs: Counter[str] = Counter()
        self.picker = AffinityPicker(
            [self.replica],
            RoutingSettings(),
            lambda outcome, kind: self.counts.update([outcome]),
            output_checkpoint=lambda outcome: self.outputs.update([outcome]),
        )
        self._rid = 0

    def turn(self, prompt: str, cached: int, output: TurnOutput | None = None) -> None:
        self._rid += 1
        ctx = RequestContext(f"rid-{self._rid}", "session", prompt, lineage="main")
        pick = self.picker.pick(ctx)
        self.picker.report(
            ctx,
            pick.replica,
            Outcome.OK,
            prompt_tokens=len(prompt) // 4,
            cached_tokens=cached,
            output=output,
        )


def _first_turn(rig: Rig) -> None:
    rig.turn(PROMPT_1, 0, TurnOutput(OUTPUT_1, OUTPUT_1_TOKENS))


SEQUENCE = (len(PROMPT_1) // 4 + OUTPUT_1_TOKENS - 1) // 256 * 256
PROMPT_ONLY = len(PROMPT_1) // 4 // 256 * 256


def test_a_turn_that_carries_the_output_is_promised_prompt_and_output() -> None:
    rig = Rig()
    _first_turn(rig)
    carried = PROMPT_1 + OUTPUT_1 + "<|user|>thanks<|assistant|><think>"
    rig.turn(carried, SEQUENCE)
    assert rig.counts == {"new": 1, "hit": 1}
    assert rig.outputs == {"restored": 1}


def test_an_output_checkpoint_not_restored_is_still_the_prompts_hit() -> None:
    """The real engine restored the prompt's checkpoint but not the later one of prompt and
    answer: the answer's text tokenized to other tokens than it sampled (docs/affinity.md,
    "Verification"). The turn landed where its checkpoint lives: a hit, the output counted
    lost."""
    rig = Rig()
    _first_turn(rig)
    rig.turn(PROMPT_1 + OUTPUT_1 + "<|user|>thanks<|assistant|><think>", PROMPT_ONLY)
    assert rig.counts == {"new": 1, "hit": 1}
    assert rig.outputs == {"lost": 1}


def test_the_output_promise_leaves_out_the_last_generated_token() -> None:
    """The engine's state ends at the last generated token's input: an answer that ends on a
    track point leaves its checkpoint one interval earlier (a promise of prompt + output would
    count this turn lost)."""
    prompt_tokens = len(PROMPT_1) // 4
    output_tokens = (prompt_tokens // 256 + 3) * 256 - prompt_tokens
    promised = prompt_tokens + output_tokens - 256
    for cached, outcome in ((promised - 1, "lost"), (promised, "restored")):
        rig = Rig()
        rig.turn(PROMPT_1, 0, TurnOutput(OUTPUT_1, output_tokens))
        rig.turn(PROMPT_1 + OUTPUT_1 + "<|user|>thanks<|assistant|><think>", cached)
        assert rig.counts == {"new": 1, "hit": 1}
        assert rig.outputs == {outcome: 1}


def test_a_turn_short_of_the_prompts_checkpoint_is_a_miss_whatever_it_carried() -> None:
    rig = Rig()
    _first_turn(rig)
    rig.turn(PROMPT_1 + OUTPUT_1 + "<|user|>thanks<|assistant|><think>", PROMPT_ONLY - 1)
    assert rig.counts == {"new": 1, "verified_miss": 1}
    assert not rig.outputs


def test_an_output_within_the_prompts_interval_promises_nothing_more() -> None:
    """A short answer that ends before the next track point leaves no later checkpoint."""
    rig = Rig()
    rig.turn(PROMPT_1, 0, TurnOutput("ok.", 2))
    rig.turn(PROMPT_1 + "ok.<|user|>thanks<|assistant|><think>", PROMPT_ONLY)
    assert rig.counts == {"new": 1, "hit": 1}
    assert not rig.outputs


def test_a_turn_without_the_output_is_promised_the_prompt() -> None:
    """Reasoning dropped or content rewritten by the client: the sequence's checkpoint cannot
    be restored, and the previous prompt's is what the engine has."""
    rig = Rig()
    _first_turn(rig)
    rig.turn(PROMPT_1 + "</think>Fixed it.<|user|>thanks<|assistant|><think>", PROMPT_ONLY)
    assert rig.counts == {"new": 1, "hit": 1}
    assert not rig.outputs


def test_no_output_known_falls_back_to_the_prompt() -> None:
    """A turn that ended without output (an error), or that another gateway served."""
    rig = Rig()
    rig.turn(PROMPT_1, 0, None)
    rig.turn(PROMPT_1 + OUTPUT_1 + "<|user|>thanks", PROMPT_ONLY)
    assert rig.counts == {"new": 1, "hit": 1}


def test_a_later_turn_from_the_shared_store_drops_the_output_seen_here() -> None:
    """In a fleet, another gateway served the lineage's next turn: the output this gateway
    saw is no longer the last one, so its promise falls back to the store's prompt tokens."""
    rig = Rig()
    _first_turn(rig)
    pin = rig.picker.pins.peek("main")
    assert pin is not None
    assert pin.sequence_tokens > 0
    rig.picker.pins.adopt("main", pin.replica, 0.0, kind="main", last_prompt_tokens=9_000)
    assert pin.sequence_tokens == 0
    assert pin.last_prompt_tokens == 9_000
