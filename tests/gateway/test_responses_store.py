"""The bounded response store behind `store`, `previous_response_id` and GET/DELETE
(gateway/responses_store.py): entries and bytes capped, a TTL, oldest evicted first."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.responses_store import ResponseStore
from tests.support.clock import Clock


def response(n: int, text: str = "x") -> dict[str, Any]:
    return {"id": f"resp_{n}", "object": "response", "output": [{"type": "message", "t": text}]}


def conversation(text: str = "hello") -> list[Any]:
    return [{"role": "user", "content": text}]


def size_of(n: int, text: str = "x", said: str = "hello") -> int:
    return len(orjson.dumps(response(n, text))) + len(orjson.dumps(conversation(said)))


def store(
    *, entries: int = 10, max_bytes: int = 1 << 20, ttl: float = 60.0, clock: Clock | None = None
) -> ResponseStore:
    return ResponseStore(
        max_entries=entries, max_bytes=max_bytes, ttl_s=ttl, clock=clock or Clock()
    )


def ids(s: ResponseStore, upto: int) -> list[int]:
    return [n for n in range(upto) if s.get(f"resp_{n}") is not None]


def test_put_get_keeps_the_response_and_its_conversation() -> None:
    s = store()
    assert s.put(response(1), conversation("hi"))
    stored = s.get("resp_1")
    assert stored is not None
    assert stored.response == response(1)
    assert stored.conversation == conversation("hi")
    assert stored.size == size_of(1, said="hi")
    assert len(s) == 1
    assert s.bytes == stored.size
    assert s.get("resp_2") is None


def test_the_entry_cap_evicts_the_oldest_first() -> None:
    s = store(entries=3)
    for n in range(5):
        assert s.put(response(n), conversation())
    assert len(s) == 3
    assert ids(s, 5) == [2, 3, 4]
    assert s.bytes == sum(size_of(n) for n in (2, 3, 4))


def test_reading_an_entry_does_not_keep_it_longer() -> None:
    # First in, first out: a GET is not a use that would reorder eviction.
    s = store(entries=2)
    s.put(response(0), conversation())
    s.put(response(1), conversation())
    assert s.get("resp_0") is not None
    s.put(response(2), conversation())
    assert ids(s, 3) == [1, 2]


def test_the_byte_cap_evicts_the_oldest_until_it_fits() -> None:
    one = size_of(0)
    s = store(max_bytes=3 * one + one // 2)
    for n in range(3):
        s.put(response(n), conversation())
    assert ids(s, 3) == [0, 1, 2]
    big = "y" * one
    assert s.put(response(3, big), conversation())
    # 3 is twice the size of one entry: 0 and 1 go, 2 and 3 stay.
    assert ids(s, 4) == [2, 3]
    assert s.bytes == size_of(2) + size_of(3, big)
    assert s.bytes <= 3 * one + one // 2


def test_an_entry_over_the_byte_cap_alone_is_not_kept_and_evicts_nothing() -> None:
    one = size_of(0)
    s = store(max_bytes=2 * one)
    s.put(response(0), conversation())
    assert not s.put(response(1, "z" * (2 * one)), conversation())
    assert ids(s, 2) == [0]
    assert s.bytes == one
    assert len(s) == 1


def test_entries_expire_after_the_ttl() -> None:
    clock = Clock()
    s = store(ttl=60.0, clock=clock)
    s.put(response(0), conversation())
    clock.now += 30
    s.put(response(1), conversation())
    clock.now += 30  # 0 is exactly 60 s old: still there
    assert ids(s, 2) == [0, 1]
    clock.now += 0.5
    assert s.get("resp_0") is None
    assert s.get("resp_1") is not None
    assert len(s) == 1
    assert s.bytes == size_of(1)
    clock.now += 60
    assert s.get("resp_1") is None
    assert len(s) == 0
    assert s.bytes == 0


def test_storing_drops_what_expired() -> None:
    clock = Clock()
    s = store(ttl=60.0, clock=clock)
    s.put(response(0), conversation())
    clock.now += 61
    s.put(response(1), conversation())
    assert len(s) == 1
    assert s.bytes == size_of(1)


def test_delete() -> None:
    s = store()
    s.put(response(0), conversation())
    s.put(response(1), conversation())
    assert s.delete("resp_0")
    assert not s.delete("resp_0")
    assert not s.delete("resp_unknown")
    assert ids(s, 2) == [1]
    assert s.bytes == size_of(1)


def test_storing_an_id_again_replaces_it_and_makes_it_the_newest() -> None:
    s = store(entries=2)
    s.put(response(0), conversation())
    s.put(response(1), conversation())
    s.put(response(0, "new"), conversation())
    s.put(response(2), conversation())
    assert ids(s, 3) == [0, 2]
    stored = s.get("resp_0")
    assert stored is not None
    assert stored.response["output"][0]["t"] == "new"
    assert s.bytes == size_of(0, "new") + size_of(2)


@pytest.mark.parametrize(("entries", "max_bytes"), [(0, 1 << 20), (5, 0)])
def test_a_store_of_size_zero_keeps_nothing(entries: int, max_bytes: int) -> None:
    s = store(entries=entries, max_bytes=max_bytes)
    s.put(response(0), conversation())
    assert s.get("resp_0") is None
    assert len(s) == 0
    assert s.bytes == 0


def test_bytes_never_pass_the_cap_under_churn() -> None:
    cap = 5 * size_of(0)
    s = store(entries=1000, max_bytes=cap)
    for n in range(200):
        s.put(response(n, "w" * (n % 17)), conversation("c" * (n % 5)))
        assert s.bytes <= cap
        assert len(s) <= 1000
    kept = ids(s, 200)
    assert kept == list(range(kept[0], 200))  # the newest, contiguous: oldest went first
