"""A deterministic, prefix-stable tokenizer: one token per fixed-size chunk of UTF-8 bytes.

Text prompts are split into `bytes_per_token`-byte chunks (the last may be shorter), so the
token count of a prompt is ceil(bytes / size) and two prompts that share their first k*size
bytes share their first k tokens. `input_ids` prompts keep the caller's ids (each packed as
4 little-endian bytes), so an ASCII text and the ids of its 4-byte chunks hash the same.
Generated text is cut into pieces of at most `bytes_per_token` bytes on character boundaries:
one piece is one output token and one streamed event.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterator
from dataclasses import dataclass

ID_BYTES = 4
MAX_TOKEN_ID = 2**32 - 1


@dataclass(frozen=True)
class TokenSeq:
    """A prompt (or prompt + output) as bytes, `unit` bytes per token."""

    data: bytes
    unit: int

    @property
    def count(self) -> int:
        return -(-len(self.data) // self.unit)

    @property
    def full_tokens(self) -> int:
        return len(self.data) // self.unit

    def extend_text(self, text: str) -> TokenSeq:
        return TokenSeq(self.data + text.encode(), self.unit)

    def extend_ids(self, ids: list[int]) -> TokenSeq:
        return TokenSeq(self.data + pack_ids(ids), self.unit)


def from_text(text: str, bytes_per_token: int) -> TokenSeq:
    return TokenSeq(text.encode(), bytes_per_token)


def pack_ids(ids: list[int]) -> bytes:
    packed = array("I", ids)
    if packed.itemsize != ID_BYTES:  # pragma: no cover - every supported platform has 4
        packed = array("L", ids)
    if array("I", [1]).tobytes()[0] != 1:  # pragma: no cover - big-endian hosts
        packed.byteswap()
    return packed.tobytes()


def from_ids(ids: list[int]) -> TokenSeq:
    return TokenSeq(pack_ids(ids), ID_BYTES)


def prefix_keys(seq: TokenSeq, interval: int, limit_tokens: int) -> Iterator[tuple[int, bytes]]:
    """(k, key of the first k tokens) for k = interval, 2*interval, ... <= limit_tokens."""
    hasher = hashlib.blake2b(digest_size=16)
    done = 0
    for k in range(interval, limit_tokens + 1, interval):
        end = k * seq.unit
        hasher.update(seq.data[done:end])
        done = end
        yield k, hasher.copy().digest()


def prefix_key(seq: TokenSeq, tokens: int) -> bytes:
    """The key of the first `tokens` tokens (equal to what prefix_keys yields for them)."""
    return hashlib.blake2b(seq.data[: tokens * seq.unit], digest_size=16).digest()


def split_pieces(text: str, bytes_per_token: int) -> list[str]:
    """Cut generated text into tokens of at most bytes_per_token UTF-8 bytes."""
    if text.isascii():
        return [text[i : i + bytes_per_token] for i in range(0, len(text), bytes_per_token)]
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for char in text:
        width = len(char.encode())
        if current and size + width > bytes_per_token:
            pieces.append("".join(current))
            current, size = [], 0
        current.append(char)
        size += width
    if current:
        pieces.append("".join(current))
    return pieces


def piece_id(piece: str) -> int:
    return _bytes_id(piece.encode())


def token_ids(seq: TokenSeq) -> list[int]:
    """One id per token of `seq`, read from its bytes as piece_id reads a piece: at 4 bytes per
    token the ids of an ASCII text are input_ids that key the same as the text itself."""
    data, unit = seq.data, seq.unit
    return [_bytes_id(data[i : i + unit]) for i in range(0, len(data), unit)]


def _bytes_id(data: bytes) -> int:
    return int.from_bytes(data[:ID_BYTES].ljust(ID_BYTES, b"\0"), "little")
