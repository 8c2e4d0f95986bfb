"""Claims skip the queues known to be empty (issue 18: cheap empty claims on shards).

A worker of several queues (every sharded queue is several: ``events`` with 3
shards is 4 queues, the logical name included) reads them one script call each, in turn, one
round trip after the other, until its free slots are filled. When the queue is shallow
(workers outpace producers) a claim round after a wake-up finds one job in one shard: the
other calls find nothing and cost a round trip and a script each.

``IdleQueues`` remembers which queues the broker's last claims left empty (claim.lua answered
``CODE_NO`` with fewer jobs than asked: nothing ready remains) and their ``next_due``. A later
claim reads those queues' wake-up lists first, all in one pipeline (one round trip per master,
in parallel), and skips every queue whose list is empty. That is exact, not a guess: claim.lua
empties the queue's wake list in the same atomic step that found it empty, and everything that
makes a job ready afterwards (enqueue, release, retry, requeue, a promotion or reaping by
another process, a freed flow slot, resume) pushes a marker there in its own script; a claim
that leaves jobs behind pushes one again. What no marker announces is time: a delayed job
becoming due, a lease expiring, a throttled flow group. So a queue is skipped only until its
own ``next_due`` (as reported by the claim) and for at most ``FRESH_S`` seconds after that
claim (a lease another worker took meanwhile may expire: the worker's reaper pass covers it
sooner anyway, and reaping pushes markers).

Workers of several queues use it, on Cluster and on a single Redis alike. On Cluster they wait
on the global wake-up list, which leaves the queues' own markers in place. On a single Redis
(and for a Cluster worker of one queue) the wait pops the woken queue's own marker, so its
wake list may be empty by the time the claim looks: the wait reports the queue whose marker
it popped (``woken``) and that queue is never skipped. A claim call that finds a queue empty
while another thread's wait pops a marker of it does not put it back on the list (``seen``:
the pops counted before the call). A worker of one queue has nothing to skip.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .plumbing import RedisBase

#: longest time a queue is skipped on the strength of one empty claim
FRESH_S = 1.0


class IdleQueues:
    """Queues the last claims left empty: queue -> (skip until, its ``next_due`` or None)."""

    def __init__(self) -> None:
        self._idle: dict[str, tuple[float, float | None]] = {}
        self._woken: dict[str, int] = {}  # queue -> markers popped by this process's waits

    def seen(self, queue: str) -> int:
        """How many of ``queue``'s markers a wait popped so far (read before a claim call)."""
        return self._woken.get(queue, 0)

    def note(
        self, queue: str, now: float, empty: bool, next_due: float | None, seen: int = 0
    ) -> None:
        """What a claim call on ``queue`` left: ``empty`` (nothing ready remains) or not.
        ``seen``: ``seen(queue)`` before that call; a marker popped since (by another
        thread's wait, whose claim is still to come) means it is not known empty."""
        if empty and self._woken.get(queue, 0) != seen:
            return
        if empty:
            until = now + FRESH_S if next_due is None else min(now + FRESH_S, next_due)
            self._idle[queue] = (until, next_due)
        else:
            self._idle.pop(queue, None)

    def woken(self, queue: str) -> None:
        """A wait popped ``queue``'s marker: claim it, even if its wake list is now empty."""
        self._woken[queue] = self._woken.get(queue, 0) + 1
        self._idle.pop(queue, None)

    def candidates(self, queues: Sequence[str], now: float) -> list[str]:
        """The queues of ``queues`` that may be skipped if their wake list is empty."""
        get = self._idle.get  # .get: another thread's claim may note a queue meanwhile
        return [q for q in queues if (get(q) or (0.0, None))[0] > now]

    def skip(self, client: Any, wake_keys: Sequence[str], queues: Sequence[str]) -> set[str]:
        """Of ``queues`` (candidates), those whose wake list (``wake_keys``, same order) is
        empty: one pipeline, one round trip per master."""
        pipe = client.pipeline(transaction=False)
        for key in wake_keys:
            pipe.llen(key)
        return {q for q, n in zip(queues, pipe.execute(), strict=True) if not n}

    def next_due(self, skipped: set[str]) -> float | None:
        """The earliest ``next_due`` of the ``skipped`` queues (the claim reports it)."""
        get = self._idle.get
        times = [(get(q) or (0.0, None))[1] for q in skipped]
        best = min((t for t in times if t is not None), default=math.inf)
        return None if best == math.inf else best

    def clear(self) -> None:
        """Forget everything (``flush_all``)."""
        self._idle.clear()
        self._woken.clear()


def skip_idle(b: RedisBase, queues: Sequence[str], now: float) -> tuple[set[str], float | None]:
    """(queues a claim of ``b`` skips, their earliest ``next_due``): a claim of several
    queues skips those its last claims left empty while no marker came."""
    if len(queues) < 2:
        return set(), None
    if b._idle is None:
        b._idle = IdleQueues()
    maybe = b._idle.candidates(queues, now)
    if not maybe:
        return set(), None
    wake = [b.keys.queue_key(q, "wake") for q in maybe]
    skip = b._idle.skip(b.client, wake, maybe)
    return skip, b._idle.next_due(skip)
