"""Running a PostgreSQL write transaction again when the server rolled it back as the loser of
a lock conflict: a deadlock victim (SQLSTATE 40P01), a serialization failure (40001) or a lock
wait cut short by the session's ``lock_timeout`` (55P03); also a transaction whose prepared
statements a schema change outdated (0A000, "cached plan must not change result type": the
rollback forgot them, the next attempt prepares again).

Such a transaction was rolled back whole before anything committed, so running it again is
safe: it re-reads the rows it needs (a completion whose lease expired meanwhile finds no row
and answers False, as it would have). Conveyor's own transactions lock job rows in ``rid``
order where they take several, but an application's transaction, the lease keeper's
``extend`` (rows in lease order) or a workflow release may not, and every write with events
ends on the ``meta`` counter row. The broker owns the retry, not its callers: the worker's
recorder, lease keeper, claim loop, reaper and the operator's actions all get it, none of them
logs it as a lost connection, and the retry costs milliseconds, not the recorder's back-off.

``retry_transient`` wraps one whole transaction (a broker method); it makes at most
``Retry.attempts`` attempts, pausing a random time in ``[0, min(MAX_PAUSE, FIRST_PAUSE *
2**n)]`` before the n-th retry (full jitter: two victims of one deadlock do not collide
again). The random source and the sleep are the broker's ``retry`` attribute (``Retry``),
which tests replace. The last failure propagates as the ``BrokerUnavailable`` it was.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar, cast

from ...errors import BrokerUnavailable

log = logging.getLogger("conveyor.postgres")
P = ParamSpec("P")
T = TypeVar("T")

#: SQLSTATEs of a transaction PostgreSQL rolled back because of another one, and what to say
TRANSIENT = {
    "40P01": "a deadlock victim",
    "40001": "a serialization failure",
    "55P03": "refused a lock (lock_timeout)",
    # only ever raised as BrokerUnavailable for "cached plan must not change result type"
    # (``PgStore._write``): a schema change under prepared statements the rollback forgot
    "0A000": "a prepared plan outdated by a schema change",
}
ATTEMPTS = 5  # attempts in all, the first included
FIRST_PAUSE = 0.01  # s, the upper bound of the first retry's random pause
MAX_PAUSE = 0.25  # s, the bound never grows past this


class Retry:
    """The retry policy of one broker: how many attempts, and the pauses' random source."""

    def __init__(
        self,
        rng: random.Random | None = None,
        sleep: Callable[[float], object] = time.sleep,
        attempts: int = ATTEMPTS,
    ) -> None:
        self.rng = rng or random.Random()
        self.sleep = sleep
        self.attempts = attempts

    def pause(self, retry: int) -> float:
        """The random pause before the ``retry``-th retry (1-based), in seconds."""
        return self.rng.uniform(0.0, min(MAX_PAUSE, FIRST_PAUSE * 2 ** (retry - 1)))


class HasRetry(Protocol):
    """A broker with a retry policy."""

    retry: Retry


def transient(exc: BaseException) -> str | None:
    """What ``exc`` (or the psycopg error it was raised from) says about a transaction that lost
    a lock conflict (``TRANSIENT``); None for any other error."""
    for err in (exc, exc.__cause__):
        found = TRANSIENT.get(getattr(err, "sqlstate", None) or "")
        if found is not None:
            return found
    return None


B = TypeVar("B", bound=HasRetry)


def retry_transient(fn: Callable[Concatenate[B, P], T]) -> Callable[Concatenate[B, P], T]:
    """Run the broker method ``fn`` (one whole transaction) again when it lost a lock
    conflict (see the module docstring); any other error propagates at once."""

    @functools.wraps(fn)
    def run(self: B, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return _retrying(self.retry, fn.__name__, lambda: fn(self, *args, **kwargs))

    return run


def retried(fn: Callable[P, T]) -> Callable[P, T]:
    """``retry_transient`` for an inherited method taken as it is (``fail =
    retried(SqlLeaseTransitions.fail)`` in the class body): the signature is not written again."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        broker = cast(HasRetry, args[0])  # self: a PostgresBroker
        policy = broker.retry
        return _retrying(policy, fn.__name__, lambda: fn(*args, **kwargs))

    return run


def retrying(policy: Retry, name: str, call: Callable[[], T]) -> T:
    """Run ``call`` (one whole transaction of the broker's own, named ``name`` in the log) again
    under ``policy`` when it lost a lock conflict: ``retry_transient`` for a transaction that
    is not a whole broker method (the queue registration of an enqueue on the caller's
    connection, ``enqueue.insert_jobs``)."""
    return _retrying(policy, name, call)


def _retrying(policy: Retry, name: str, call: Callable[[], T]) -> T:
    retry = 0
    while True:
        try:
            return call()
        except BrokerUnavailable as exc:
            why = transient(exc)
            retry += 1
            if why is None or retry >= policy.attempts:
                raise
            pause = policy.pause(retry)
            # one line, no traceback: the server resolved a lock conflict, nothing is down
            log.info(
                "%s was %s; running it again in %.0f ms (attempt %d of %d)",
                name,
                why,
                pause * 1000,
                retry + 1,
                policy.attempts,
            )
            policy.sleep(pause)
