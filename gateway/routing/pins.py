"""The pin table: hashed session key -> replica name, bounded in size and idle time.

An OrderedDict kept in last-use order gives O(1) lookup, touch and eviction: the least recently
used pin is always at the head, so expired pins are swept from there and the table never grows
past `max_size` (the oldest pin goes first). Per-replica counts of live pins are kept alongside,
for the capacity budget.

A session that spills leaves its latest checkpoint behind in the pool it left, and under LRU that
checkpoint outlives the older ones of sessions still pinned there: it takes a budget slot as
surely as a live session does. So the replica it left stays charged for it (`charged`) until
every session pinned there has started a turn since the move; from then on the stale checkpoint
is the least recently used one and goes first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(slots=True)
class Pin:
    replica: str
    last_used: float
    # Prompt tokens of this session's last successful turn on `replica` (0: none yet).
    last_prompt_tokens: int = 0


class PinTable:
    def __init__(self, max_size: int, idle_ttl_s: float) -> None:
        self.max_size = max_size
        self.idle_ttl_s = idle_ttl_s
        self._pins: OrderedDict[str, Pin] = OrderedDict()
        self._counts: dict[str, int] = {}
        # replica -> {session key: when it moved away}, for checkpoints left behind by spills.
        self._left: dict[str, dict[str, float]] = {}

    def __len__(self) -> int:
        return len(self._pins)

    def live(self, replica: str) -> int:
        return self._counts.get(replica, 0)

    def charged(self, replica: str) -> int:
        """Sessions whose checkpoints take `replica`'s budget: its live pins plus the sessions
        that spilled away while pinned sessions older than the move remain."""
        left = self._left.get(replica)
        if not left:
            return self.live(replica)
        oldest = next((p.last_used for p in self._pins.values() if p.replica == replica), None)
        for key, moved_at in list(left.items()):
            if oldest is None or oldest > moved_at:
                del left[key]
        if not left:
            del self._left[replica]
        return self.live(replica) + len(left)

    def get(self, key: str, now: float) -> Pin | None:
        """The live pin for `key`, touched; None when there is none or it expired."""
        self.sweep(now)
        pin = self._pins.get(key)
        if pin is None:
            return None
        pin.last_used = now
        self._pins.move_to_end(key)
        return pin

    def peek(self, key: str) -> Pin | None:
        return self._pins.get(key)

    def put(self, key: str, replica: str, now: float, *, leaves_checkpoint: bool = False) -> Pin:
        """Pin `key` to `replica` (a new pin, or a moved one that starts over). With
        `leaves_checkpoint` (a spill from a replica that is up), the replica it leaves stays
        charged for the session's checkpoint there (see `charged`)."""
        old = self._pins.pop(key, None)
        if old is not None:
            self._count(old.replica, -1)
            if leaves_checkpoint and old.replica != replica:
                self._left.setdefault(old.replica, {})[key] = now
        left_here = self._left.get(replica)
        if left_here is not None and left_here.pop(key, None) is not None and not left_here:
            del self._left[replica]  # back where its checkpoint is: a live pin again
        pin = Pin(replica=replica, last_used=now)
        self._pins[key] = pin
        self._count(replica, +1)
        while len(self._pins) > self.max_size:
            _, evicted = self._pins.popitem(last=False)
            self._count(evicted.replica, -1)
        return pin

    def sweep(self, now: float) -> None:
        while self._pins:
            key, pin = next(iter(self._pins.items()))
            if now - pin.last_used < self.idle_ttl_s:
                return
            del self._pins[key]
            self._count(pin.replica, -1)

    def _count(self, replica: str, delta: int) -> None:
        count = self._counts.get(replica, 0) + delta
        if count:
            self._counts[replica] = count
        else:
            self._counts.pop(replica, None)
