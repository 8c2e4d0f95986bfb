"""Deterministic tests of the worker's hot-path shortcuts: each must decide exactly as before."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from conveyor import Conveyor
from conveyor.task import SHAPE_CACHE_MAX


def _bind_reason(fn: Any, args: list[Any], kwargs: dict[str, Any]) -> str | None:
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as exc:
        return str(exc)
    return None


def f(a: int, b: int = 2, /, c: int = 3, *, d: int = 4) -> None:
    """Positional-only, normal and keyword-only parameters."""


def g(a: int, *rest: int, **extra: int) -> None:
    """Variadic."""


CALLS = [
    ([], {}), ([1], {}), ([1, 2], {}), ([1, 2, 3], {}), ([1, 2, 3, 4], {}),
    ([1], {"c": 1}), ([1], {"d": 1}), ([1], {"a": 1}), ([1], {"e": 1}),
    ([1], {"e": 1, "z": 2}), ([1], {"z": 2, "e": 1}), ([1, 2, 3], {"c": 1}),
    ([], {"a": 1}), ([1], {"c": 1, "d": 2}), ([1], {"d": 2, "c": 1}),
]  # fmt: skip


@pytest.mark.parametrize("fn", [f, g])
def test_cached_argument_check_matches_signature_bind(fn: Any) -> None:
    task = Conveyor("memory://").task()(fn)
    for _ in range(3):  # first call binds, later ones come from the cache
        for args, kwargs in CALLS:
            assert task.check_arguments(args, kwargs) == _bind_reason(fn, args, kwargs)


def test_cached_verdict_ignores_values_but_not_shape() -> None:
    task = Conveyor("memory://").task()(f)
    assert task.check_arguments([1], {"c": 5}) is None
    assert task.check_arguments(["x"], {"c": object()}) is None  # values never matter to bind
    assert task.check_arguments([1], {"e": 5}) == "got an unexpected keyword argument 'e'"
    assert task.check_arguments([1, 2, 3, 4], {}) == "too many positional arguments"


def test_shape_cache_is_bounded() -> None:
    task = Conveyor("memory://").task()(g)
    for i in range(SHAPE_CACHE_MAX * 3):
        assert task.check_arguments([1], {f"k{i}": i}) is None
    assert len(task._shapes) <= SHAPE_CACHE_MAX
    assert task.check_arguments([], {"k1": 1}) == "missing a required argument: 'a'"
