"""Sessions that hold several conversations: lineages, side requests, compaction, prompt heads,
and turns that add an image (gateway.routing.affinity with gateway.routing.lineage)."""

from __future__ import annotations

from collections import Counter

from gateway.routing import AffinityPicker, Outcome, Replica, RequestContext
from gateway.routing.rendezvous import ranked
from gateway.settings import RoutingSettings
from tests.support.clock import Clock


class Rig:
    def __init__(self, n: int = 3, **settings: object) -> None:
        self.replicas = [Replica.from_url(f"http://r{i}:1") for i in range(n)]
        for replica in self.replicas:
            replica.healthy = True
        self.counts: Counter[tuple[str, str]] = Counter()
        self.clock = Clock()
        self.picker = AffinityPicker(
            self.replicas,
            RoutingSettings.model_validate(settings),
            lambda outcome, kind: self.counts.update([(outcome, kind)]),
            self.clock,
        )
        self._rid = 0

    def ctx(self, session: str, lineage: str, **fields: object) -> RequestContext:
        self._rid += 1
        prompt = str(fields.pop("prompt", "p"))
        return RequestContext(f"rid-{self._rid}", session, prompt, lineage=lineage, **fields)  # type: ignore[arg-type]

    def turn(
        self, session: str, lineage: str, prompt_tokens: int, cached: int, **fields: object
    ) -> Replica:
        c = self.ctx(session, lineage, **fields)
        replica = self.picker.pick(c).replica
        self.picker.report(
            c, replica, Outcome.OK, prompt_tokens=prompt_tokens, cached_tokens=cached
        )
        self.clock.now += 1
        return replica

    def outcomes(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for (outcome, _), n in self.counts.items():
            out[outcome] += n
        return dict(out)


def test_a_title_request_is_a_side_lineage_not_a_miss_of_the_agent() -> None:
    """opencode sends its title request (another system prompt, no tools) under the session id
    of its agent turns; the agent's turns are verified against their own previous prompt."""
    rig = Rig()
    main = rig.turn("oc", "agent", 20_000, 0, head="agent-head")
    rig.turn("oc", "title", 600, 0, head="title-head", tools=False)
    assert rig.turn("oc", "agent", 21_000, 19_968, head="agent-head") is main
    assert rig.counts == {("new", "main"): 1, ("new", "side"): 1, ("hit", "main"): 1}


def test_a_title_request_that_comes_first_stops_holding_budget_when_the_agent_starts() -> None:
    rig = Rig(n=1)
    replica = rig.replicas[0]
    rig.turn("oc", "title", 600, 0, head="title-head", tools=False)
    rig.turn("oc", "agent", 20_000, 0, head="agent-head")
    # The tool-less conversation that came first was a side request: retired, not a live lineage.
    assert rig.picker.pins.live(replica.name) == 1
    assert rig.picker.pins.peek("title") is None
    assert rig.turn("oc", "agent", 21_000, 19_968, head="agent-head") is replica
    assert rig.outcomes() == {"new": 2, "hit": 1}


def test_side_requests_between_turns_never_turn_into_misses() -> None:
    rig = Rig()
    previous = 30_000
    rig.turn("cc", "main", previous, 0, head="h")
    for turn in range(2, 6):
        rig.turn("cc", f"side-{turn}", 800, 0, head="summary", tools=False)
        rig.turn("cc", "main", previous + 1000, previous // 256 * 256, head="h")
        previous += 1000
    assert rig.counts[("verified_miss", "main")] == 0
    assert rig.counts[("hit", "main")] == 4
    assert rig.counts[("new", "side")] == 4


def test_parallel_subagents_each_hit_their_own_checkpoint() -> None:
    rig = Rig()
    rig.turn("cc", "main", 30_000, 0, head="h")
    agents = [f"agent-{i}" for i in range(4)]
    first = {}
    # Four subagents at once: every first turn is picked before any of them ends.
    contexts = [rig.ctx("cc", a, kind="subagent", head=f"sub-{a}") for a in agents]
    picks = [rig.picker.pick(c).replica for c in contexts]
    for c, replica, a in zip(contexts, picks, agents, strict=True):
        rig.picker.report(c, replica, Outcome.OK, prompt_tokens=12_000, cached_tokens=0)
        first[a] = replica
    for a in agents:
        assert rig.turn("cc", a, 14_000, 11_776, kind="subagent", head=f"sub-{a}") is first[a]
    assert rig.counts[("new", "subagent")] == 4
    assert rig.counts[("hit", "subagent")] == 4
    assert rig.counts[("verified_miss", "subagent")] == 0
    # Each subagent is a live lineage of its own: the budget counts five conversations.
    assert sum(rig.picker.pins.live(r.name) for r in rig.replicas) == 5


def test_compaction_frees_the_old_lineage() -> None:
    rig = Rig(n=1)
    replica = rig.replicas[0]
    rig.turn("cc", "before", 90_000, 0, head="h")
    rig.turn("cc2", "other", 20_000, 0, head="h2")  # another session's main conversation
    assert rig.picker.pins.live(replica.name) == 2
    # The conversation restarts from a summary: a new root with the same head.
    rig.turn("cc", "after", 8_000, 0, head="h")
    assert rig.picker.pins.peek("before") is None
    assert rig.picker.pins.live(replica.name) == 2
    # Its old checkpoint is charged only until every live lineage there has moved on since.
    rig.turn("cc2", "other", 21_000, 19_968, head="h2")
    rig.turn("cc", "after", 9_000, 7_936, head="h")
    assert rig.picker.pins.charged(replica.name) == 2


def test_the_compaction_header_retires_the_main_lineage_whatever_its_head() -> None:
    rig = Rig(n=1)
    rig.turn("cc", "before", 90_000, 0, head="h")
    rig.turn("cc", "after", 8_000, 0, head="summary-head", compacted=True)
    assert rig.picker.pins.peek("before") is None


def test_a_new_main_lineage_with_another_head_keeps_the_first() -> None:
    """opencode's plan and build agents: two main conversations of one session."""
    rig = Rig(n=1)
    rig.turn("oc", "plan", 20_000, 0, head="plan-head")
    rig.turn("oc", "build", 20_000, 0, head="build-head")
    assert rig.picker.pins.peek("plan") is not None
    assert rig.picker.pins.live(rig.replicas[0].name) == 2


def _head_turn(rig: Rig, session: str, head: dict[str, object]) -> tuple[Replica, str]:
    """A new session's first turn; the engine restores the head where it was saved."""
    c = rig.ctx(session, f"{session}-main", **head)
    pick = rig.picker.pick(c)
    cached = 29_952 if pick.affinity == "head" else 0
    rig.picker.report(c, pick.replica, Outcome.OK, prompt_tokens=33_000, cached_tokens=cached)
    rig.clock.now += 1
    return pick.replica, pick.affinity


def test_a_new_session_goes_where_its_head_checkpoint_is() -> None:
    rig = Rig()
    head = {"head": "cc-head", "head_tokens": 30_100, "save_head": True}
    first, _ = _head_turn(rig, "s1", head)
    # A session whose own rendezvous choice is elsewhere still starts where the head is.
    other = next(
        f"s{i}" for i in range(2, 60) if ranked(f"s{i}-main", rig.replicas)[0] is not first
    )
    assert _head_turn(rig, other, head) == (first, "head")
    assert rig.counts == {("new", "main"): 1, ("head_hit", "main"): 1}


def test_a_head_checkpoint_the_engine_lost_is_a_head_miss() -> None:
    rig = Rig()
    head = {"head": "cc-head", "head_tokens": 30_100, "save_head": True}
    rig.turn("s1", "s1-main", 34_000, 0, **head)
    rig.turn("s2", "s2-main", 33_000, 0, **head)
    assert rig.counts[("head_miss", "main")] == 1


def test_sessions_of_one_project_share_heads_and_stay_balanced() -> None:
    """Every session of one project has the same head; they must not all pile onto the replica
    that saw it first: past its share, the next choice takes them and saves the head there
    too, after which every new session starts from a head checkpoint."""
    rig = Rig(checkpoint_slots=64, max_running_requests=4)
    head = {"head": "cc-head", "head_tokens": 30_100, "save_head": True}
    turns = [_head_turn(rig, f"s{i}", head) for i in range(60)]
    placed = Counter(replica.name for replica, _ in turns)
    # One cold head per replica; every other session restores one.
    assert sum(1 for _, affinity in turns if affinity == "new") == 3
    assert rig.counts[("head_hit", "main")] == 57
    # Each replica near its share (20; the bound: 20 x 1.1, + 1 for a head, + its slot).
    assert max(placed.values()) <= 24, placed
    assert min(placed.values()) >= 16, placed


def test_a_turn_that_adds_an_image_is_a_media_reset() -> None:
    rig = Rig()
    rig.turn("s", "l", 5_000, 0, images=("a",))
    # The same image again: verified as usual.
    rig.turn("s", "l", 6_000, 4_864, images=("a",))
    # A second image while the first remains: the engine's image bundle changes (MEDIA.md 3.5).
    rig.turn("s", "l", 8_000, 512, images=("a", "b"))
    # An image in a conversation that had none: verified as usual.
    rig.turn("s", "m", 5_000, 0)
    rig.turn("s", "m", 6_000, 4_864, images=("c",))
    assert rig.outcomes() == {"new": 2, "hit": 2, "media_reset": 1}


def test_a_pinned_turn_does_not_claim_a_head_it_never_computed() -> None:
    """Once a head is shared, every request with it asks the engine to save it; a session's
    later turn restores from its own checkpoint past the head, so the engine computes no head
    state there, and the replica must not be taken for a holder of the head."""
    rig = Rig()
    head = {"head": "cc-head", "head_tokens": 30_100, "save_head": True}
    first = rig.turn("s1", "s1-main", 33_000, 0, head="cc-head", head_tokens=30_100)
    # s1's next turn, after the head became shared: restored from s1's own checkpoint.
    assert rig.turn("s1", "s1-main", 36_000, 32_768, **head) is first
    assert rig.picker.heads.replicas("cc-head", rig.clock.now) == []
    # The next session saves it (a cold prefill through the head's end) and is a holder.
    saver = rig.turn("s2", "s2-main", 33_000, 0, **head)
    assert rig.picker.heads.replicas("cc-head", rig.clock.now) == [saver.name]


# 33k tokens at RoutingSettings.chars_per_token (4).
PROMPT_33K = "p" * 132_000


def _queued_head_rig() -> tuple[Rig, dict[str, object], Replica]:
    rig = Rig()
    head = {"head": "cc-head", "head_tokens": 30_100, "save_head": True}
    holder, _ = _head_turn(rig, "s0", head)
    return rig, head, holder


def test_a_new_session_goes_cold_when_the_heads_queue_costs_more() -> None:
    """The engine prefills one batch at a time: behind three cold prefills at the head's
    replica (~70 s), restoring the head costs more than prefilling it on an idle replica."""
    rig, head, holder = _queued_head_rig()
    # No idle replica (which would take the session and save the head there too).
    for replica in rig.replicas:
        replica.prefill_s = 1.0
    holder.prefill_s = 70.0
    c = rig.ctx("s1", "s1-main", prompt=PROMPT_33K, **head)
    pick = rig.picker.pick(c)
    assert pick.replica is not holder
    assert pick.affinity == "new"
    # What it adds to its replica's queue: a cold prefill of the whole prompt.
    assert pick.prefill_s == 33_000 / RoutingSettings().prefill_tokens_per_s
    # A short queue is worth waiting for: the head saves ~16 s of prefill.
    holder.prefill_s = 5.0
    c = rig.ctx("s2", "s2-main", prompt=PROMPT_33K, **head)
    assert rig.picker.pick(c).replica is holder


def test_among_head_holders_the_shortest_queue_wins() -> None:
    rig, head, holder = _queued_head_rig()
    # A second holder: a session placed elsewhere saved the head there too.
    other = next(r for r in rig.replicas if r is not holder)
    c = rig.ctx("s1", "s1-main", prompt=PROMPT_33K, **head)
    rig.picker.heads.put("cc-head", other.name, rig.clock.now)
    third = next(r for r in rig.replicas if r not in (holder, other))
    third.prefill_s = 5.0  # not idle: no reason to save the head a third time
    holder.prefill_s, other.prefill_s = 30.0, 10.0
    pick = rig.picker.pick(c)
    assert (pick.replica, pick.affinity) == (other, "head")
    holder.prefill_s, other.prefill_s = 10.0, 30.0
    c = rig.ctx("s2", "s2-main", prompt=PROMPT_33K, **head)
    assert rig.picker.pick(c).replica is holder


def test_a_shared_head_whose_holders_are_busy_is_saved_on_an_idle_replica() -> None:
    """One holder per head puts a project's new sessions behind each other's prefills; when
    every holder has one queued, longer than a cold prefill saves (30 s of queue and a 10 s
    restore against ~26 s for 33k tokens at 1,273 tokens/s), an idle replica takes the session
    cold and saves the head."""
    rig, head, holder = _queued_head_rig()
    holder.prefill_s = 30.0
    c = rig.ctx("s1", "s1-main", prompt=PROMPT_33K, **head)
    pick = rig.picker.pick(c)
    assert (pick.replica is not holder, pick.affinity) == (True, "new")
    rig.picker.report(c, pick.replica, Outcome.OK, prompt_tokens=33_000, cached_tokens=0)
    assert set(rig.picker.heads.replicas("cc-head", rig.clock.now)) == {
        holder.name,
        pick.replica.name,
    }
    # A shorter queue: the restore behind it still ends first, so the lineage waits there.
    for r in rig.replicas:
        r.prefill_s = 0.0
    holder.prefill_s = 10.0
    c = rig.ctx("s3", "s3-main", prompt=PROMPT_33K, **head)
    assert rig.picker.pick(c).affinity == "head"
    # A head not yet shared (not saved anywhere new): the lineage waits at the holder.
    c = rig.ctx("s2", "s2-main", prompt=PROMPT_33K, head="cc-head", head_tokens=30_100)
    for r in rig.replicas:
        r.prefill_s = 10.0 if r.name in rig.picker.heads.replicas("cc-head", 0) else 0.0
    assert rig.picker.pick(c).affinity == "head"


def test_an_idle_holder_takes_a_new_session_past_its_share_while_the_others_prefill() -> None:
    """The share keeps a burst of cold first turns off the replica the hash favours; it must
    not send a head restore behind a forward in progress while a holder idles (its own
    sessions thinking). The budget still binds."""
    rig = Rig(checkpoint_slots=40, max_running_requests=4)
    idle, *busy = rig.replicas
    for r in rig.replicas:
        rig.picker.heads.put("cc-head", r.name, rig.clock.now)
    for i in range(20):  # far past a third of the sessions
        rig.picker.pins.put(f"x{i}", idle.name, rig.clock.now, kind="main")
    for r in busy:
        r.prefill_s = 10.0
    head = {"head": "cc-head", "head_tokens": 30_100, "save_head": True}
    c = rig.ctx("s1", "s1-main", prompt=PROMPT_33K, **head)
    pick = rig.picker.pick(c)
    assert (pick.replica, pick.affinity) == (idle, "head")
    # Busy (a running slot free, but a prefill queued): the share decides again.
    idle.prefill_s = 5.0
    c = rig.ctx("s2", "s2-main", prompt=PROMPT_33K, **head)
    assert rig.picker.pick(c).replica in busy
    # Nothing queued at the others, but every running slot taken: a restore there waits for
    # a slot, so the idle holder takes it.
    idle.prefill_s = 0.0
    for r in busy:
        r.prefill_s, r.in_flight = 0.0, 4
    c = rig.ctx("s2b", "s2b-main", prompt=PROMPT_33K, **head)
    assert rig.picker.pick(c).replica is idle
    for r in busy:
        r.prefill_s, r.in_flight = 10.0, 0
    # Idle but without room in its budget ((40 - 4 - 1) + 1 = 36 sessions): not there.
    idle.prefill_s = 0.0
    for i in range(20, 40):
        rig.picker.pins.put(f"x{i}", idle.name, rig.clock.now, kind="main")
    c = rig.ctx("s3", "s3-main", prompt=PROMPT_33K, **head)
    assert rig.picker.pick(c).replica in busy


def test_lineages_started_together_do_not_queue_behind_each_other() -> None:
    """Claude Code sends a session's first turn and its title request at once, and starts
    subagents in parallel: none restores another's checkpoint, so the next one goes where no
    prefill is queued rather than with its session."""
    rig = Rig()
    main = rig.ctx("s", "s-main")
    first = rig.picker.pick(main).replica
    first.prefill_s = 25.0  # its cold prefill, not answered yet
    title = rig.picker.pick(rig.ctx("s", "s-title", kind="side")).replica
    assert title is not first
    title.prefill_s = 6.4
    sub = rig.picker.pick(rig.ctx("s", "s-agent-1", kind="subagent")).replica
    assert sub not in (first, title)
    # Nothing queued anywhere: a session's lineages stay together.
    for replica in rig.replicas:
        replica.prefill_s = 0.0
    assert rig.picker.pick(rig.ctx("s", "s-agent-2", kind="subagent")).replica is sub


def test_a_lineage_back_after_its_pin_expired_goes_where_it_was() -> None:
    """A user back after more than routing.pin_idle_ttl_s: the pin expired, but the
    checkpoint may still be in that replica's pool. The lineage goes back there, verified
    against its last turn, rather than to a head holder elsewhere (which could restore only
    its head)."""
    rig = Rig(pin_idle_ttl_s=60)
    head = {"head": "cc-head", "head_tokens": 30_100, "save_head": True}
    home = rig.turn("s1", "s1-main", 40_000, 0, **head)
    # The head is held everywhere (warmed), and home has a prefill queued: as a new lineage,
    # the session would restore its head on another replica.
    for r in rig.replicas:
        rig.picker.heads.put("cc-head", r.name, rig.clock.now)
    home.prefill_s = 10.0
    rig.clock.now += 120
    assert rig.picker.pins.peek("s1-main") is not None  # not swept until asked
    back = rig.turn("s1", "s1-main", 41_000, 39_936, **head)
    assert back is home
    assert rig.counts[("hit", "main")] == 1
    assert rig.picker.pins.live(home.name) == 1
    # Where it was can no longer take it (drained): placed as new, and not revived later.
    rig.clock.now += 120
    home.draining = True
    elsewhere = rig.turn("s1", "s1-main", 42_000, 29_952, **head)
    assert elsewhere is not home
    assert rig.picker.pins.expired("s1-main") is None


def test_a_conversation_rewritten_under_the_same_root_is_restarted_not_a_miss() -> None:
    """Codex compacts without saying so: the head and the first user message stay (so the
    lineage key does), and what follows becomes a summary. The prompt no longer extends the
    lineage's last one, so nothing is promised for it: a restart, never a verified miss."""
    rig = Rig(n=1)
    head = "system and tools " * 100
    history = head + "first prompt " + "turn " * 2000
    rig.turn("cx", "main", 30_000, 0, prompt=history)
    rig.turn("cx", "main", 31_000, 29_952, prompt=history + "tool output " * 50)
    compacted = head + "first prompt " + "summary " * 300
    rig.turn("cx", "main", 4_000, 1_024, prompt=compacted)
    assert rig.counts == {("new", "main"): 1, ("hit", "main"): 1, ("restarted", "main"): 1}
    # The next turn extends the compacted prompt: verified against it again.
    rig.turn("cx", "main", 4_500, 3_840, prompt=compacted + "next turn " * 40)
    rig.turn("cx", "main", 5_000, 0, prompt=compacted + "next turn " * 40 + "more " * 40)
    assert rig.counts[("hit", "main")] == 2
    assert rig.counts[("verified_miss", "main")] == 1


def test_a_turn_that_drops_the_last_reasoning_opener_still_extends() -> None:
    # The comparison stops short of the previous prompt's end: a client that does not send
    # the generation prompt's `<think>` back is verified as before.
    rig = Rig(n=1)
    prompt = "history " * 3000 + "<|assistant|><think>"
    rig.turn("s", "main", 6_000, 0, prompt=prompt)
    rig.turn("s", "main", 6_100, 5_888, prompt=prompt[:-7] + "</think>answer<|user|>next")
    assert rig.counts == {("new", "main"): 1, ("hit", "main"): 1}
