"""``BoundedCache``: the one bounded memo of the hot paths (names, templates, queue keys)."""

from __future__ import annotations

import pytest

from conveyor.core.cache import BoundedCache


def test_put_returns_the_value_and_reads_like_a_dict() -> None:
    cache: BoundedCache[str, int] = BoundedCache(3)
    assert cache.put("a", 1) == 1
    assert cache["a"] == 1 and cache.get("b") is None and "a" in cache
    assert cache.max_size == 3


def test_a_full_cache_empties_itself_before_it_grows() -> None:
    cache: BoundedCache[int, int] = BoundedCache(3)
    for i in range(3):
        cache.put(i, i)
    assert len(cache) == 3
    cache.put(3, 3)
    assert dict(cache) == {3: 3}
    cache.put(3, 4)  # a key already there: still counted once
    assert len(cache) == 1
    for i in range(1000):
        cache.put(i, i)
        assert len(cache) <= 3


def test_make_room_empties_unless_a_batch_fits() -> None:
    cache: BoundedCache[int, int] = BoundedCache(4)
    cache.put(1, 1)
    cache.put(2, 2)
    cache.make_room(2)  # 2 + 2 <= 4: kept
    assert len(cache) == 2
    cache.make_room(3)  # 2 + 3 > 4: emptied
    assert len(cache) == 0


def test_the_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_size"):
        BoundedCache(0)
