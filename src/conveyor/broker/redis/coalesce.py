"""Opt-in auto-batching of one-job enqueues (issue 18): ``?batch_enqueue=<ms>`` in the URL.

A web app enqueues one job per request, from many threads: each call is one script call, and a
script call's fixed cost (the request itself: ~9 µs of Redis CPU, more than the script's own
work) is paid per job. With ``batch_enqueue`` the one-job enqueues of all the threads of a
process that arrive within ``<ms>`` milliseconds (or until ``batch_enqueue_max`` jobs, default
100) travel as ONE enqueue script call per queue, the bulk path (~4-5 µs of Redis CPU per job).

Each caller still gets its own answer: its job's ``EnqueueResult`` (id, duplicate flag, state),
or its own exception. A batch is stored all or none, so a refusal that names one job (a custom
id that exists: ``DuplicateJob``) is raised to that job's caller only and the rest of the batch
is sent again; any other error (Redis unavailable, out of memory) is raised to every caller of
the batch, none of whose jobs was stored. Two callers of one batch with the same idempotency
key get what two calls one after the other get: the first is stored, the second is told the
first's id. The first caller of a window waits up to ``<ms>`` for company, then sends; the
others wait for its answer. Only synchronous ``enqueue`` calls of one job are batched
(``enqueue_many`` is a batch already; ``enqueue_async`` runs on its event loop's client).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from ...core.job import Job
from ...errors import BrokerUnavailable, DuplicateJob
from ..base import EnqueueResult
from . import codec

DEFAULT_MAX = 100

#: ``send(jobs, now, payloads, fresh_ids)``: one enqueue script call (``RedisBroker._enqueue``)
Send = Callable[[Sequence[Job], float, Sequence[bytes] | None, bool], list[EnqueueResult]]


class _Item:
    """One caller's job and, once the batch ran, its answer."""

    __slots__ = ("done", "error", "fresh", "job", "now", "payload", "result")

    def __init__(self, job: Job, now: float, payload: bytes | None, fresh: bool) -> None:
        self.job, self.now, self.payload, self.fresh = job, now, payload, fresh
        self.result: EnqueueResult | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()


class Coalescer:
    """Gathers the one-job enqueues of a process's threads into batches (module docstring)."""

    def __init__(self, linger: float, max_jobs: int = DEFAULT_MAX) -> None:
        self.linger, self.max_jobs = linger, max_jobs
        self._cond = threading.Condition()
        self._pending: list[_Item] = []
        self._leading = False

    def submit(
        self, send: Send, job: Job, now: float, payload: bytes | None, fresh: bool
    ) -> EnqueueResult:
        """Enqueue ``job`` in the current batch; return its result or raise its error."""
        item = _Item(job, now, payload, fresh)
        with self._cond:
            self._pending.append(item)
            lead = not self._leading
            if lead:
                self._leading = True
                end = time.monotonic() + self.linger
                while len(self._pending) < self.max_jobs:
                    left = end - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                batch, self._pending, self._leading = self._pending, [], False
            elif len(self._pending) >= self.max_jobs:
                self._cond.notify_all()  # a full batch: the leader sends it now
        if lead:
            run(send, batch)
        item.done.wait()
        if item.error is not None:
            raise item.error
        assert item.result is not None
        return item.result


def run(send: Send, batch: list[_Item]) -> None:
    """Send ``batch`` (one call per queue) and hand every item its answer; whatever happens
    (even an interrupt of the sending thread), no caller is left waiting."""
    queues: dict[str, list[_Item]] = {}
    for item in batch:
        queues.setdefault(item.job.queue, []).append(item)
    try:
        for items in queues.values():
            _send_queue(send, items)
    finally:
        for item in batch:
            if item.result is None and item.error is None:
                item.error = BrokerUnavailable(
                    "the enqueue batch was interrupted: the job may or may not be stored"
                )
            item.done.set()


def _send_queue(send: Send, items: list[_Item]) -> None:
    """One queue's items: send them; a refusal naming one job fails that job and the rest is
    sent again (a batch is all or none, so nothing of it was stored)."""
    while items:
        jobs = [item.job for item in items]
        payloads = [codec.envelope(i.job) if i.payload is None else i.payload for i in items]
        now, fresh = max(item.now for item in items), all(item.fresh for item in items)
        try:
            results = send(jobs, now, payloads, fresh)
        except DuplicateJob as exc:
            items = _drop_duplicate(items, exc)
            continue
        except Exception as exc:  # every caller of the batch gets it
            for item in items:
                item.error = exc
            return
        for item, result in zip(items, results, strict=True):
            item.result = result
        return


def _drop_duplicate(items: list[_Item], exc: DuplicateJob) -> list[_Item]:
    """The items to send again after ``exc``: without the refused id's caller. When several
    callers of the batch used that id, the first is sent again (as if the calls came one after
    another: it may be stored, the others are duplicates of it)."""
    same = [item for item in items if item.job.id == exc.job_id]
    if not same:  # not one of ours (cannot happen): every caller gets it, nothing loops
        for item in items:
            item.error = exc
        return []
    refused = same[1:] if len(same) > 1 else same
    for item in refused:
        item.error = DuplicateJob(exc.job_id)
    gone = {id(item) for item in refused}
    return [item for item in items if id(item) not in gone]
