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

The seam: the engine's state after a finished request covers its prompt and output tokens but
the last (prompt + output - 1). This simulator cuts text into fixed-size byte chunks, so a
prompt whose last chunk is partial shares that chunk with the output's first bytes when the
next turn's prompt carries both, as does every output token shorter than a chunk (the last one,
one whose characters take several bytes), so the sequence has fewer chunks than the counts say.
When that moves the sequence's last boundary down an interval, the boundary the counts promise is
kept as a seam (the sequence's bytes), and made a checkpoint the first time a prompt extends
those bytes (`match`): the next turn restores what the engine would restore, as a real
tokenizer, whose generation prompt ends in a special token, leaves no such seam.

Prompt heads (docs/prefix-cache.md): a request may declare that its first tokens are a head
many sessions share. The head's boundary is then saved too, and a head checkpoint ages as a
leaf: never demoted, and moved to the most recently used end whenever a prompt restores from
it or runs through it, as the patched engine does.
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
        # The head checkpoints among the entries: key -> boundary (a subset of _entries).
        self._heads: dict[bytes, int] = {}
        # Seams (above): a finished sequence's bytes -> the boundary its counts promise.
        self._seams: OrderedDict[bytes, int] = OrderedDict()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def usage(self) -> float:
        return len(self._entries) / self.slots if self.slots else 0.0

    @property
    def head_count(self) -> int:
        return len(self._heads)

    def is_head(self, key: bytes | None) -> bool:
        return key is not None and key in self._heads

    def lookup(self, prompt: TokenSeq) -> int:
        """Tokens covered by the longest checkpoint the prompt extends (0 if none).

        At least one prompt token is always left to compute, as in the engine.
        """
        return self.match(prompt)[0]

    def match(self, prompt: TokenSeq) -> tuple[int, bytes | None]:
        """`lookup`, plus the key of the checkpoint restored from (None on a miss)."""
        limit = min(prompt.full_tokens, prompt.count - 1)
        self._close_seams(prompt, limit)
        if not self._entries:
            return 0, None
        best_key: bytes | None = None
        best = 0
        heads: list[bytes] = []
        for k, key in prefix_keys(prompt, self.track_interval, limit):
            if key in self._entries:
                best, best_key = k, key
                if key in self._heads:
                    heads.append(key)
        if best_key is not None:
            self._entries.move_to_end(best_key)
        self._touch(heads)
        return best, best_key

    def save(self, seq: TokenSeq, tokens: int | None = None) -> bytes | None:
        """Checkpoint seq at its last interval boundary; returns its key (None: too short).
        `tokens`: the engine's count of the state (a finished request's prompt + output - 1),
        when its boundary lies past the sequence's chunks (the seam, above)."""
        if self.slots == 0:
            return None
        boundary = self.boundary(seq)
        promised = (tokens or 0) // self.track_interval * self.track_interval
        # A prompt must still carry the whole sequence, byte for byte, to be given it.
        if boundary < promised:
            self._seams[seq.data] = promised
            while len(self._seams) > self.slots:
                self._seams.popitem(last=False)
        if boundary == 0:
            return None
        key = self._put(seq, boundary)
        # The heads this sequence runs through were just used.
        points = {point for point in self._heads.values() if point < boundary}
        self._touch([k for k in (prefix_key(seq, p) for p in sorted(points)) if k in self._heads])
        return key

    def boundary(self, seq: TokenSeq) -> int:
        """Where `save` checkpoints seq: its last interval boundary."""
        return (seq.full_tokens // self.track_interval) * self.track_interval

    def head_point(self, head_tokens: int) -> int:
        """A declared head aligned down to the track interval (0: too short to save)."""
        return (head_tokens // self.track_interval) * self.track_interval

    def head_cut(self, prompt: TokenSeq, head_tokens: int, cached: int) -> int | None:
        """Where the engine cuts this prompt's prefill to save its head, or None.

        Only a head between the restored prefix and the prompt's own checkpoint needs a cut
        (and a checkpoint of its own); at either end the existing checkpoint is the head.
        """
        point = self.head_point(head_tokens)
        return point if cached < point < self.boundary(prompt) else None

    def save_head(self, prompt: TokenSeq, head_tokens: int, cached: int) -> bool:
        """Make the prompt's head a head checkpoint after its prefill; True when it became one.

        Below the prompt's own checkpoint it takes a slot of its own; at the prompt's own
        checkpoint, or at the checkpoint the prompt restored, that checkpoint becomes the head.
        Call after `save(prompt)`.
        """
        if self.slots == 0:
            return False
        point = self.head_point(head_tokens)
        if point == 0 or point < cached or point > self.boundary(prompt):
            return False
        key = prefix_key(prompt, point)
        if self.head_cut(prompt, head_tokens, cached) is not None:
            self._put(prompt, point)
        elif key not in self._entries:
            return False  # the checkpoint it would name is already evicted
        new = key not in self._heads
        self._heads[key] = point
        self._touch([key])
        return new

    def demote(self, key: bytes) -> None:
        """Make a checkpoint the next to be evicted (superseded by a longer one); a head
        checkpoint is never superseded, since new sessions start from it."""
        if key in self._entries and key not in self._heads:
            self._entries.move_to_end(key, last=False)

    def clear(self) -> None:
        self._entries.clear()
        self._heads.clear()

    def _close_seams(self, prompt: TokenSeq, limit: int) -> None:
        """Seams this prompt carries whole become checkpoints at their promised boundary."""
        if not self._seams:
            return
        data = prompt.data
        closed = [
            (seam, point)
            for seam, point in self._seams.items()
            if point <= limit and data.startswith(seam)
        ]
        for seam, point in closed:
            del self._seams[seam]
            self._put(prompt, point)

    def _put(self, seq: TokenSeq, boundary: int) -> bytes:
        key = prefix_key(seq, boundary)
        if key in self._entries:
            self._entries.move_to_end(key)
            return key
        while len(self._entries) >= self.slots:
            evicted, _ = self._entries.popitem(last=False)
            self._heads.pop(evicted, None)
            self.evictions += 1
        self._entries[key] = boundary
        return key

    def _touch(self, heads: list[bytes]) -> None:
        """Heads a prompt restored from or ran through: most recently used, deepest last."""
        for key in heads:
            self._entries.move_to_end(key)
