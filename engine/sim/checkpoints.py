"""The pool of recurrent-state checkpoints: the hybrid model's whole prefix cache.

A checkpoint is the recurrent state after the first k tokens of a sequence, k a multiple of
the track interval. When a prefill ends, the prompt's last interval boundary is saved; when a
request finishes, its whole sequence's (prompt + output) last boundary is saved, and both the
prompt's checkpoint and the one the request restored from are demoted to be evicted first: they
are now internal nodes of the session's path, whose states SGLang's hybrid radix cache frees
before any leaf's (ENGINE.md A, `evict_mamba`). So N slots hold the latest turn of N sessions.
Each takes one slot; the least recently used checkpoint is evicted when the slots are full.
A prompt that extends a checkpointed prefix restores the longest such checkpoint and prefills
only the rest.
"""

from __future__ import annotations

from collections import OrderedDict

from engine.sim.tokens import TokenSeq, prefix_key, prefix_keys


class CheckpointPool:
    def __init__(self, slots: int, track_interval: int) -> None:
        if slots < 0 or track_interval <= 0:
            raise ValueError("checkpoint slots must be >= 0 and the track interval > 0")
        self.slots = slots
        self.track_interval = track_interval
        self._entries: OrderedDict[bytes, int] = OrderedDict()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def usage(self) -> float:
        return len(self._entries) / self.slots if self.slots else 0.0

    def lookup(self, prompt: TokenSeq) -> int:
        """Tokens covered by the longest checkpoint the prompt extends (0 if none).

        At least one prompt token is always left to compute, as in the engine.
        """
        return self.match(prompt)[0]

    def match(self, prompt: TokenSeq) -> tuple[int, bytes | None]:
        """`lookup`, plus the key of the checkpoint restored from (None on a miss)."""
        if not self._entries:
            return 0, None
        limit = min(prompt.full_tokens, prompt.count - 1)
        best_key: bytes | None = None
        best = 0
        for k, key in prefix_keys(prompt, self.track_interval, limit):
            if key in self._entries:
                best, best_key = k, key
        if best_key is not None:
            self._entries.move_to_end(best_key)
        return best, best_key

    def save(self, seq: TokenSeq) -> bytes | None:
        """Checkpoint seq at its last interval boundary; returns its key (None: too short)."""
        if self.slots == 0:
            return None
        boundary = (seq.full_tokens // self.track_interval) * self.track_interval
        if boundary == 0:
            return None
        key = prefix_key(seq, boundary)
        if key in self._entries:
            self._entries.move_to_end(key)
            return key
        while len(self._entries) >= self.slots:
            self._entries.popitem(last=False)
            self.evictions += 1
        self._entries[key] = boundary
        return key

    def demote(self, key: bytes) -> None:
        """Make a checkpoint the next to be evicted (superseded by a longer one)."""
        if key in self._entries:
            self._entries.move_to_end(key, last=False)

    def clear(self) -> None:
        self._entries.clear()
