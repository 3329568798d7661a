"""A conversation re-sent from an earlier point: a client's retry, or an SDK that sends the same
messages twice (the Vercel AI SDK's generateText then streamText). Such a prompt does not extend
the lineage's last one, so it is never promised that one's checkpoint (docs/affinity.md,
Verification)."""

from __future__ import annotations

from gateway.routing import Outcome
from tests.gateway.routing.test_lineages import Rig

TRACK = 256  # RoutingSettings.track_interval, which these replicas report (none: the default)
HISTORY = "system and tools " * 200 + "first question " * 40


def _conversation() -> tuple[str, str, str]:
    """Three prompts of one conversation, each extending the one before by less than the
    256 characters `_rewritten` leaves uncompared at the end."""
    turn1 = HISTORY + "<|assistant|><think>"
    turn2 = turn1 + "</think>an answer<|user|>go on<|assistant|><think>"
    turn3 = turn2 + "</think>more<|user|>and then<|assistant|><think>"
    assert len(turn3) - len(turn2) < 256
    return turn1, turn2, turn3


def test_an_earlier_turn_re_sent_is_restarted_not_a_miss() -> None:
    """Turn 2 re-sent after turn 3 answered: the engine still holds turn 2's own checkpoint
    (768 of its 1,000 tokens) but not turn 3's 1,024, which the prompt does not reach. Before,
    the re-send was promised turn 3's 1,024 and counted a verified miss."""
    rig = Rig(n=1)
    turn1, turn2, turn3 = _conversation()
    rig.turn("s", "main", 700, 0, prompt=turn1)
    rig.turn("s", "main", 1_000, 512, prompt=turn2)
    rig.turn("s", "main", 1_100, 768, prompt=turn3)
    again = rig.ctx("s", "main", prompt=turn2)
    pick = rig.picker.pick(again)
    # Nothing of turn 3's checkpoint is promised, so nothing of it is priced in the prefill.
    assert pick.prefill_s == rig.picker._prefill_s(again, 0)
    rig.picker.report(again, pick.replica, Outcome.OK, prompt_tokens=1_000, cached_tokens=768)
    assert rig.counts == {("new", "main"): 1, ("hit", "main"): 2, ("restarted", "main"): 1}
    # The conversation goes on from the re-sent turn: verified against it, not against turn 3.
    retry = turn2 + "</think>another answer<|user|>go<|assistant|><think>"
    rig.turn("s", "main", 1_090, 768, prompt=retry)
    assert rig.counts[("hit", "main")] == 3
    assert rig.counts[("verified_miss", "main")] == 0


def test_a_turn_cut_back_by_less_than_the_margin_is_restarted() -> None:
    """The same, one character shorter than the last prompt: still not an extension."""
    rig = Rig(n=1)
    turn1, turn2, _ = _conversation()
    rig.turn("s", "main", 700, 0, prompt=turn1)
    rig.turn("s", "main", 1_030, 512, prompt=turn2)
    rig.turn("s", "main", 1_029, 768, prompt=turn2[:-1])
    assert rig.counts == {("new", "main"): 1, ("hit", "main"): 1, ("restarted", "main"): 1}


def test_the_same_prompt_sent_twice_is_a_hit_on_its_own_checkpoint() -> None:
    """An identical re-send extends the last prompt by nothing: the pinned turn finds its own
    checkpoint, so it is a hit. The engine always computes the last prompt token, so a prompt of
    exactly 1,024 tokens restores 768, not 1,024 (before, it was promised 1,024: a miss)."""
    rig = Rig(n=1)
    turn1, turn2, _ = _conversation()
    rig.turn("s", "main", 700, 0, prompt=turn1)
    rig.turn("s", "main", 1_024, 512, prompt=turn2)
    rig.turn("s", "main", 1_024, 768, prompt=turn2)
    assert rig.counts == {("new", "main"): 1, ("hit", "main"): 2}
    # One that is not aligned restores its whole last interval, as promised.
    rig.turn("s", "main", 1_024 + 1, 1_024, prompt=turn2 + "x")
    rig.turn("s", "main", 1_025, 1_024, prompt=turn2 + "x")
    assert rig.counts == {("new", "main"): 1, ("hit", "main"): 4}


def test_an_identical_re_send_that_misses_is_still_a_miss() -> None:
    """The honest promise is kept: an engine that lost the prompt's checkpoint is a miss."""
    rig = Rig(n=1)
    turn1, turn2, _ = _conversation()
    rig.turn("s", "main", 700, 0, prompt=turn1)
    rig.turn("s", "main", 1_000, 512, prompt=turn2)
    rig.turn("s", "main", 1_000, 0, prompt=turn2)
    assert rig.counts[("verified_miss", "main")] == 1


def test_an_earlier_turn_re_sent_with_another_last_message_is_restarted() -> None:
    """A retry that edits turn 2's message, by fewer characters than turn 3 added: shorter than
    the last prompt, so it diverges from it; before, it was promised turn 3's checkpoint."""
    rig = Rig(n=1)
    turn1, turn2, turn3 = _conversation()
    rig.turn("s", "main", 700, 0, prompt=turn1)
    rig.turn("s", "main", 1_000, 512, prompt=turn2)
    rig.turn("s", "main", 1_100, 768, prompt=turn3)
    edited = turn1 + "</think>an answer<|user|>go on, quickly<|assistant|><think>"
    rig.turn("s", "main", 1_003, 512, prompt=edited)
    assert rig.counts == {("new", "main"): 1, ("hit", "main"): 2, ("restarted", "main"): 1}
