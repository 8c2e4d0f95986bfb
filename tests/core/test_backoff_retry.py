"""Backoff strategies (exact under a seeded rng; bounds as properties) and retry decisions."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conveyor.core.backoff import Backoff
from conveyor.core.job import ErrorKind
from conveyor.core.retry import RetryPolicy, decide, max_attempts_from
from conveyor.errors import JobTimeout, PermanentError, Retry, ValidationError


def test_exponential_without_jitter_is_exact() -> None:
    b = Backoff.exponential(base=1, factor=2, max=10, jitter=0)
    assert [b.delay(n, random.Random(0)) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


def test_exponential_jitter_is_exact_under_seed() -> None:
    b = Backoff.exponential(base=1, factor=2, max=3600, jitter=0.1)
    expected = random.Random(3)
    got = [b.delay(n, random.Random(3)) for n in (1, 2, 3)]
    assert got[0] == pytest.approx(1 * expected.uniform(0.9, 1.1))
    assert got[2] == pytest.approx(4 * random.Random(3).uniform(0.9, 1.1))


def test_fixed() -> None:
    assert Backoff.fixed(5).delay(9, random.Random(1)) == 5


@given(
    st.integers(1, 5000),
    st.floats(0, 100),
    st.floats(1, 10),
    st.floats(0, 1e5),
    st.floats(0, 1),
    st.integers(0, 2**32),
)
def test_exponential_bounds(
    n: int, base: float, factor: float, cap: float, jitter: float, seed: int
) -> None:
    b = Backoff.exponential(base=base, factor=factor, max=cap, jitter=jitter)
    d = b.delay(n, random.Random(seed))
    try:
        raw = min(cap, base * factor ** (n - 1))
    except OverflowError:
        raw = cap
    assert 0 <= d <= cap
    assert d >= raw * (1 - jitter) - 1e-9


@given(st.integers(1, 50), st.floats(0.01, 10), st.floats(1, 1000), st.integers(0, 2**32))
def test_decorrelated_bounds(n: int, base: float, cap: float, seed: int) -> None:
    d = Backoff.decorrelated(base=base, max=cap).delay(n, random.Random(seed))
    assert min(base, cap) <= d + 1e-9 and d <= cap + 1e-9


def test_invalid_backoff() -> None:
    with pytest.raises(ValidationError, match="factor"):
        Backoff.exponential(factor=0.5)
    with pytest.raises(ValidationError, match="jitter"):
        Backoff.exponential(jitter=2)


POLICY = RetryPolicy(
    max_attempts=3,
    backoff=Backoff.fixed(10),
    retry_on=(OSError,),
    dead_on=(PermanentError, KeyError),
)


@pytest.mark.parametrize(
    ("exc", "attempts", "kind", "retry_at"),
    [
        (OSError("x"), 1, ErrorKind.ERROR, 110.0),
        (OSError("x"), 3, ErrorKind.ERROR, None),  # out of attempts
        (PermanentError("x"), 1, ErrorKind.PERMANENT, None),
        (KeyError("x"), 1, ErrorKind.PERMANENT, None),  # dead_on
        (ValueError("x"), 1, ErrorKind.PERMANENT, None),  # outside retry_on
        (Retry(delay=3), 1, ErrorKind.RETRY, 103.0),
        (Retry(delay=3), 3, ErrorKind.RETRY, None),
        (JobTimeout("slow"), 1, ErrorKind.TIMEOUT, 110.0),
    ],
)
def test_decide(exc: BaseException, attempts: int, kind: ErrorKind, retry_at: float | None) -> None:
    d = decide(
        exc, attempts=attempts, max_attempts=3, policy=POLICY, now=100.0, rng=random.Random(0)
    )
    assert (d.kind, d.retry_at, d.dead) == (kind, retry_at, retry_at is None)
    assert d.exc_type == type(exc).__name__


def test_max_retries_synonym() -> None:
    assert max_attempts_from(None, 3) == 4
    assert max_attempts_from(7, None) == 7
    with pytest.raises(ValidationError, match="max_retries"):
        max_attempts_from(None, -1)


@given(st.floats(0.01, 10), st.floats(1, 1000), st.integers(0, 2**32), st.integers(1, 30))
def test_decorrelated_grows_from_the_previous_delay(
    base: float, cap: float, seed: int, n: int
) -> None:
    b = Backoff.decorrelated(base=base, max=cap)
    rng = random.Random(seed)
    previous = None
    for _ in range(n):
        d = b.delay(1, rng, previous=previous)
        prev = base if previous is None else previous
        assert min(base, cap) - 1e-9 <= d <= min(cap, 3 * prev) + 1e-9
        previous = d


def test_decorrelated_is_exact_under_the_injected_rng() -> None:
    b = Backoff.decorrelated(base=1, max=100)
    expected = random.Random(5)
    first = expected.uniform(1, 3)
    second = min(100.0, expected.uniform(1, first * 3))
    rng = random.Random(5)
    assert b.delay(1, rng) == first
    assert b.delay(2, rng, previous=first) == second


def test_decide_passes_the_previous_delay_to_decorrelated() -> None:
    policy = RetryPolicy(backoff=Backoff.decorrelated(base=1, max=1000))
    got = decide(
        ValueError("x"),
        attempts=3,
        max_attempts=9,
        policy=policy,
        now=10.0,
        rng=random.Random(1),
        previous_delay=200.0,
    )
    assert got.retry_at is not None and 10.0 + 1 <= got.retry_at <= 10.0 + 600
    assert got.retry_at == 10.0 + random.Random(1).uniform(1, 600)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Backoff.exponential(base=float("nan")), "backoff.base"),
        (lambda: Backoff.exponential(base=float("inf")), "backoff.base"),
        (lambda: Backoff.exponential(factor=float("nan")), "backoff.factor"),
        (lambda: Backoff.exponential(max=float("inf")), "backoff.max"),  # inf delays: never
        (lambda: Backoff.exponential(max=float("nan")), "backoff.max"),
        (lambda: Backoff.exponential(base="1"), "backoff.base"),  # was a raw TypeError
        (lambda: Backoff.exponential(jitter="x"), "backoff.jitter"),
        (lambda: Backoff.exponential(factor=True), "backoff.factor"),
        (lambda: Backoff.fixed(float("nan")), "backoff.base"),  # was 0 s
        (lambda: Backoff.fixed(float("inf")), "backoff.base"),  # was never retried
        (lambda: Backoff.fixed("2"), "backoff.base"),
        (lambda: Backoff.decorrelated(base=float("inf")), "backoff.base"),
    ],
)
def test_backoff_numbers_must_be_finite_numbers(make: Any, field: str) -> None:
    with pytest.raises(ValidationError, match=rf"^{field}: must be a finite number"):
        make()


def test_decide_never_raises_on_odd_retry_fields() -> None:
    """A handler's Retry/RateLimited subclass that skipped ``__init__`` (or set junk after
    it) falls back to the policy's backoff / 1 s; an exception whose str() raises is noted."""

    class NoDelay(Retry):
        def __init__(self) -> None:
            Exception.__init__(self)

    class Junk(Retry):
        def __init__(self) -> None:
            super().__init__(5)
            self.delay = "soon"  # type: ignore[assignment]

    class Mute(Exception):
        def __str__(self) -> str:
            raise RuntimeError

    policy = RetryPolicy(max_attempts=3, backoff=Backoff.fixed(7))
    for exc in (NoDelay(), Junk()):
        d = decide(exc, attempts=1, max_attempts=3, policy=policy, now=100.0, rng=random.Random(1))
        assert d.retry_at == 107.0
    d = decide(Mute(), attempts=1, max_attempts=3, policy=policy, now=100.0, rng=random.Random(1))
    assert d.message == "<str() failed: RuntimeError>" and d.retry_at == 107.0


def test_retry_delay_takes_any_real_number_and_refuses_the_rest() -> None:
    from fractions import Fraction

    policy = RetryPolicy(max_attempts=3)
    exc = Retry(delay=Fraction(3, 2))  # numbers.Real, like numpy's numbers: accepted as before
    d = decide(exc, attempts=1, max_attempts=3, policy=policy, now=100.0, rng=random.Random(1))
    assert d.retry_at == 101.5
    assert Retry(delay=-5).delay == -5  # negative: at once
    for bad in ("5", float("nan"), float("inf"), True, [1]):
        with pytest.raises(ValidationError, match=r"^delay: must be a finite number"):
            Retry(delay=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("policy_retry_on", "job_retry_on", "job_dead_on", "kind"),
    [
        ((Exception,), None, None, ErrorKind.ERROR),  # the default policy: retried
        ((ValueError,), None, None, ErrorKind.PERMANENT),  # a narrowed retry_on: as any other
        ((Exception,), ["builtins.Exception"], None, ErrorKind.ERROR),
        ((Exception,), ["builtins.ValueError"], None, ErrorKind.PERMANENT),
        ((Exception,), None, ["asyncio.exceptions.CancelledError"], ErrorKind.PERMANENT),
    ],
)
def test_a_cancelled_error_reaching_decide_is_classified_as_an_exception(
    policy_retry_on: tuple[type[BaseException], ...],
    job_retry_on: list[str] | None,
    job_dead_on: list[str] | None,
    kind: ErrorKind,
) -> None:
    """The job's own CancelledError (real cancellations never reach ``decide``) was outside
    the default ``retry_on`` (a BaseException) and dead-lettered as permanent."""
    import asyncio

    d = decide(
        asyncio.CancelledError(),
        attempts=1,
        max_attempts=3,
        policy=RetryPolicy(retry_on=policy_retry_on),
        now=0.0,
        rng=random.Random(0),
        retry_on=job_retry_on,
        dead_on=job_dead_on,
    )
    assert d.kind is kind
    assert d.dead is (kind is ErrorKind.PERMANENT)
