"""The pin table: hashed lineage key -> replica name, bounded in size and idle time.

An OrderedDict kept in last-use order gives O(1) lookup, touch and eviction: the least recently
used pin is always at the head, so expired pins are swept from there and the table never grows
past `max_size` (the oldest pin goes first). Per-replica counts of live durable pins (main and
subagent lineages: they come back) are kept alongside, for the capacity budget.

Some checkpoints are not expected back but still sit in the pool: a lineage that spilled left
its latest one behind; a side request (a title, a summary) leaves one; a retired lineage
(compacted, or replaced by a new root) leaves its last one; a prompt head's checkpoint ages like
a leaf. Under LRU such a checkpoint outlives the older ones of lineages still pinned there, so it
takes a budget slot as surely as a live lineage does. The replica stays charged for it
(`charged`) until every durable lineage pinned there has started a turn since; from then on it
is the least recently used entry and goes first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(slots=True)
class Pin:
    replica: str
    last_used: float
    # Prompt tokens of this lineage's last successful turn on `replica` (0: none yet).
    last_prompt_tokens: int = 0
    # main, subagent or side (gateway.routing.lineage).
    kind: str = "main"
    # Digests of the images of the last turn (a turn that adds one resets the cache).
    images: tuple[str, ...] = ()
    # The last turn's output (affinity.py, "the output promise"): where it would start in the
    # next prompt (the last prompt's characters), its characters and digest, and the tokens of
    # prompt and output together (0: no output known here).
    output_at: int = 0
    output_chars: int = 0
    output_digest: bytes = b""
    sequence_tokens: int = 0
    # The last prompt's length in characters and a digest of its tail (affinity.py,
    # "rewritten"): whether the next prompt still extends it (0: not known here).
    prompt_chars: int = 0
    prompt_tail: bytes = b""
    # A fleet's gateway (gateway.routing.fleet): the epoch of its move watch in which the
    # shared store last confirmed this pin's replica (0: not confirmed since it last heard).
    confirmed: int = 0

    @property
    def durable(self) -> bool:
        """Main and subagent lineages come back; a side request usually does not."""
        return self.kind != "side"


class PinTable:
    def __init__(self, max_size: int, idle_ttl_s: float) -> None:
        self.max_size = max_size
        self.idle_ttl_s = idle_ttl_s
        self._pins: OrderedDict[str, Pin] = OrderedDict()
        self._counts: dict[str, int] = {}
        # replica -> {session key: when it moved away}, for checkpoints left behind by spills.
        self._left: dict[str, dict[str, float]] = {}
        # Durable pins that expired for idleness, newest last, bounded like the pins: a user
        # back from lunch finds the conversation where its checkpoint may still be (`revive`).
        self._expired: OrderedDict[str, Pin] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pins)

    def live(self, replica: str) -> int:
        return self._counts.get(replica, 0)

    def charged(self, replica: str) -> int:
        """Checkpoints that take `replica`'s budget: its live durable pins plus those left
        behind (spills, side requests, retired lineages, heads) while durable pins older than
        them remain."""
        left = self._left.get(replica)
        if not left:
            return self.live(replica)
        oldest = next(
            (p.last_used for p in self._pins.values() if p.replica == replica and p.durable),
            None,
        )
        for key, moved_at in list(left.items()):
            if oldest is None or oldest > moved_at:
                del left[key]
        if not left:
            del self._left[replica]
        return self.live(replica) + len(left)

    def leave(self, replica: str, ident: str, when: float) -> None:
        """A checkpoint on `replica` that no live pin stands for (see the module docstring)."""
        self._left.setdefault(replica, {})[ident] = when

    def retire(self, key: str) -> Pin | None:
        """A lineage that will not come back: its pin goes, its checkpoint stays charged."""
        pin = self._pins.pop(key, None)
        if pin is not None:
            if pin.durable:
                self._count(pin.replica, -1)
            self.leave(pin.replica, key, pin.last_used)
        return pin

    def drop(self, key: str) -> None:
        """A pin made for a request the engine never took (gateway.routing.affinity.forget):
        it goes, and nothing stays charged, since no checkpoint was made for it."""
        pin = self._pins.pop(key, None)
        if pin is None:
            return
        if pin.durable:
            self._count(pin.replica, -1)
        left = self._left.get(pin.replica)
        if left is not None and left.pop(key, None) is not None and not left:
            del self._left[pin.replica]

    def get(self, key: str, now: float) -> Pin | None:
        """The live pin for `key`, touched; None when there is none or it expired."""
        self.sweep(now)
        pin = self._pins.get(key)
        if pin is None:
            return None
        pin.last_used = now
        self._pins.move_to_end(key)
        if not pin.durable:
            self.leave(pin.replica, key, now)
        return pin

    def peek(self, key: str) -> Pin | None:
        return self._pins.get(key)

    def expired(self, key: str) -> Pin | None:
        """The pin `key` had before it expired for idleness (None: none remembered)."""
        return self._expired.get(key)

    def revive(self, key: str, now: float) -> Pin | None:
        """The expired pin of `key` live again where it was, as it was (its prompt tokens
        verify the turn, its output promise is counted); None when none is remembered."""
        pin = self._expired.pop(key, None)
        if pin is None:
            return None
        pin.last_used = now
        self._pins[key] = pin
        self._count(pin.replica, +1)
        return pin

    def put(
        self,
        key: str,
        replica: str,
        now: float,
        *,
        leaves_checkpoint: bool = False,
        kind: str = "main",
    ) -> Pin:
        """Pin `key` to `replica` (a new pin, or a moved one that starts over). With
        `leaves_checkpoint` (a spill from a replica that is up), the replica it leaves stays
        charged for the lineage's checkpoint there (see `charged`). A side lineage is charged
        only as a left-behind checkpoint."""
        self._expired.pop(key, None)
        old = self._pins.pop(key, None)
        if old is not None:
            if old.durable:
                self._count(old.replica, -1)
            if leaves_checkpoint and old.replica != replica:
                self.leave(old.replica, key, now)
        left_here = self._left.get(replica)
        if left_here is not None and left_here.pop(key, None) is not None and not left_here:
            del self._left[replica]  # back where its checkpoint is: a live pin again
        pin = Pin(replica=replica, last_used=now, kind=kind)
        self._pins[key] = pin
        if pin.durable:
            self._count(replica, +1)
        else:
            self.leave(replica, key, now)
        while len(self._pins) > self.max_size:
            _, evicted = self._pins.popitem(last=False)
            if evicted.durable:
                self._count(evicted.replica, -1)
        return pin

    def adopt(
        self,
        key: str,
        replica: str,
        now: float,
        *,
        kind: str,
        last_prompt_tokens: int = 0,
        images: tuple[str, ...] = (),
    ) -> Pin:
        """A pin as the shared store holds it (another gateway may have made or moved it;
        gateway.routing.fleet). Moving it here leaves nothing charged where it was: the
        gateway that moved it charged that in the store. The prompt tokens only grow within a
        lineage, so a report of this gateway's not yet in the store is not undone."""
        pin = self._pins.get(key)
        if pin is None or pin.replica != replica or pin.kind != kind:
            pin = self.put(key, replica, now, kind=kind)
        else:
            pin.last_used = max(pin.last_used, now)
            self._pins.move_to_end(key)
        if last_prompt_tokens > pin.last_prompt_tokens:
            pin.last_prompt_tokens, pin.images = last_prompt_tokens, images
            # A later turn served elsewhere: the output and prompt this gateway saw are not the
            # last ones.
            pin.sequence_tokens = 0
            pin.prompt_chars = 0
        return pin

    def sweep(self, now: float) -> None:
        while self._pins:
            key, pin = next(iter(self._pins.items()))
            if now - pin.last_used < self.idle_ttl_s:
                return
            del self._pins[key]
            if pin.durable:
                self._count(pin.replica, -1)
                self._expired[key] = pin
                while len(self._expired) > self.max_size:
                    self._expired.popitem(last=False)

    def _count(self, replica: str, delta: int) -> None:
        count = self._counts.get(replica, 0) + delta
        if count:
            self._counts[replica] = count
        else:
            self._counts.pop(replica, None)
