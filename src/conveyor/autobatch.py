"""The auto-batching producer: single-job enqueues of many threads and tasks, one broker call.

Opt-in (``Conveyor(url, autobatch=AutoBatch(max_jobs=100, max_delay=0))`` or
``CONVEYOR_AUTOBATCH_MAX_JOBS``; docs/design.md#auto-batching-producer). The producer builds,
validates and encodes each job on its caller's thread as always (so a bad argument or an
oversized payload is raised there, before anything is buffered), then hands the encoded job
to ``AutoBatcher.write`` (threads) or ``submit`` (event loops, through ``asyncio.wrap_future``).
One writer thread per app gathers what arrives (``core.autobatch.FlushBuffer`` decides when a
batch is due) and stores it with ONE ``Broker.enqueue`` call. Each caller is answered only
after that call returned, with its own ``EnqueueResult``:

* the combined call is atomic (all or none), so a refusal of one job (a taken ``job_id``:
  ``DuplicateJob``) stored nothing; the batch is then written again one job per call, in
  arrival order, so the error reaches that caller only and the others are stored exactly as
  sequential calls would have stored them;
* a lost connection (``outage.is_connection_error``), a full store (``StorageFull``) or a
  refused configuration (``BrokerConfigError``) is about the broker, not a job: it reaches
  every caller of the batch;
* idempotency keys repeated inside a batch are resolved by the broker in order (the second
  caller gets the first's job, ``duplicate=True``), as for two sequential calls;
* an async caller cancelled while its job waits in the buffer: the job is dropped, never
  stored; once its batch's write has begun it is stored (as when any call is cancelled
  while its request is on the wire, cancelling does not prove the job was not stored).

The writer starts on first use, ``close()`` (``app.close()``, and at interpreter exit) writes
what is buffered and stops it; a forked child starts with an empty buffer and no writer (the
parent's callers do not exist there), so apps preloaded before gunicorn forks work. When no
thread can start (a thread or pids limit; an ``atexit`` handler on Python >= 3.12) the caller
writes the buffer on its own thread: its job is stored and later calls do not wait for a
writer that never ran.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, NamedTuple, Protocol

from .broker.base import Broker, EnqueueResult
from .core.autobatch import AutoBatch, FlushBuffer
from .core.job import Job
from .errors import BrokerConfigError, StorageFull
from .outage import is_connection_error


class HasBroker(Protocol):
    """What the batcher uses of its app: the broker of the moment (read at each write)."""

    broker: Broker


class Entry(NamedTuple):
    """One buffered enqueue: the job, its envelope, its caller's time and answer."""

    job: Job
    payload: bytes
    now: float
    fresh: bool  # the id was minted by ``new_ulid`` for this enqueue (``Broker.enqueue``)
    future: Future[EnqueueResult]


#: seconds an empty batcher's writer thread waits before it exits: apps that stop enqueueing
#: (or are dropped without ``close()``) keep no thread alive
IDLE_EXIT_S = 1.0


class AutoBatcher:
    """Gathers single-job enqueues and stores them in combined broker calls (module doc)."""

    def __init__(
        self,
        host: HasBroker,
        config: AutoBatch,
        *,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self.host = host
        self.config = config
        self.timer = timer
        #: combined broker calls made and jobs they carried (observability, tests)
        self.writes = 0
        self.jobs = 0
        self._reset()
        _LIVE.add(self)

    def _reset(self) -> None:
        """A fresh buffer, lock and no writer (construction, and in a forked child)."""
        self._cond = threading.Condition(threading.Lock())
        self._buffer: FlushBuffer[Entry] = FlushBuffer(self.config)
        self._writer: threading.Thread | None = None
        self._closing = False

    @property
    def waiting(self) -> int:
        """How many enqueues wait in the buffer now (not counting a write in progress)."""
        return len(self._buffer)

    # ------------------------------------------------------------------ callers
    def submit(self, job: Job, payload: bytes, now: float, fresh: bool) -> Future[EnqueueResult]:
        """Buffer one encoded job; the future resolves once the broker stored it (or refused)."""
        future: Future[EnqueueResult] = Future()
        entry = Entry(job, payload, now, fresh, future)
        with self._cond:
            if self._buffer.add(entry, self.timer()):
                self._cond.notify()
            started = self._writer is not None or self._start_writer()
        if not started:  # no thread can start: this caller writes the buffer itself
            self._drain_here()
        return future

    def _start_writer(self) -> bool:
        """Start the writer thread (lock held); False when no thread can start."""
        writer = threading.Thread(target=self._run, name="conveyor-autobatch", daemon=True)
        try:
            writer.start()
        except RuntimeError:  # a thread limit, or an atexit handler on Python >= 3.12
            return False
        self._writer = writer  # only a started thread: close() joins it
        return True

    def write(self, job: Job, payload: bytes, now: float, fresh: bool) -> EnqueueResult:
        """Store one encoded job with the others waiting; blocks until it is stored."""
        return self.submit(job, payload, now, fresh).result()

    def close(self) -> None:
        """Write everything buffered and stop the writer (a later enqueue starts a new one)."""
        with self._cond:
            writer = self._writer
            if writer is None:
                return
            self._closing = True
            self._cond.notify()
        if writer is not threading.current_thread():
            writer.join()

    # ------------------------------------------------------------------ the writer
    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            self._write_batch(batch)

    def _drain_here(self) -> None:
        """Write everything buffered on the calling thread (no writer thread could start)."""
        while True:
            with self._cond:
                if not self._buffer.items:
                    return
                batch = self._buffer.take()
            self._write_batch(batch)

    def _write_batch(self, batch: list[Entry]) -> None:
        try:
            self._write(batch)
        except BaseException as exc:  # never leave a caller waiting for ever
            _fail([e for e in batch if not e.future.done()], exc)

    def _next_batch(self) -> list[Entry] | None:
        """Wait until a batch is due (or the batcher closes); None: the writer stops."""
        with self._cond:
            while True:
                buffer = self._buffer
                if buffer.items and (self._closing or buffer.due(self.timer())):
                    return buffer.take()
                if self._closing:
                    self._writer, self._closing = None, False
                    return None
                wait = buffer.wait_time(self.timer())
                if wait is None:  # empty: an idle writer goes away (the next submit starts one)
                    if not self._cond.wait(IDLE_EXIT_S) and not buffer.items:
                        self._writer = None
                        return None
                    continue
                self._cond.wait(wait)

    def _write(self, batch: list[Entry]) -> None:
        # a task cancelled while its job waited is dropped (never stored); the others can no
        # longer be cancelled, so their answers below always land
        batch = [e for e in batch if e.future.set_running_or_notify_cancel()]
        if not batch:
            return
        broker = self.host.broker
        if getattr(broker, "cluster", False):  # one script call stays in one slot (one queue)
            groups: dict[str, list[Entry]] = {}
            for entry in batch:
                groups.setdefault(entry.job.queue, []).append(entry)
            parts = list(groups.values())
        else:
            parts = [batch]
        for part in parts:
            self._write_part(broker, part)

    def _write_part(self, broker: Broker, part: list[Entry]) -> None:
        jobs = [e.job for e in part]
        payloads = [e.payload for e in part]
        now = max(e.now for e in part)
        try:
            results = broker.enqueue(jobs, now, payloads, fresh_ids=all(e.fresh for e in part))
        except Exception as exc:
            self.writes += 1
            if len(part) == 1 or _batch_wide(exc):
                _fail(part, exc)
            else:  # nothing stored (atomic): find the refused job(s) one call each
                self._one_by_one(broker, part)
            return
        self.writes += 1
        self.jobs += len(part)
        for entry, res in zip(part, results, strict=True):
            entry.future.set_result(res)

    def _one_by_one(self, broker: Broker, part: list[Entry]) -> None:
        """Store each job alone, in arrival order: a refusal reaches its own caller only."""
        for i, e in enumerate(part):
            try:
                res = broker.enqueue([e.job], e.now, [e.payload], fresh_ids=e.fresh)
            except Exception as exc:
                self.writes += 1
                if _batch_wide(exc):
                    _fail(part[i:], exc)
                    return
                e.future.set_exception(exc)
                continue
            self.writes += 1
            self.jobs += 1
            e.future.set_result(res[0])


def _batch_wide(exc: BaseException) -> bool:
    """True for an error about the broker (every job of the batch would get it)."""
    return is_connection_error(exc) or isinstance(exc, StorageFull | BrokerConfigError)


def _fail(entries: list[Entry], exc: BaseException) -> None:
    for entry in entries:
        entry.future.set_exception(exc)


def from_option(host: HasBroker, option: AutoBatch | bool | None) -> AutoBatcher | None:
    """The batcher ``Conveyor(autobatch=...)`` asks for: True means ``AutoBatch()``."""
    if option is None or option is False:
        return None
    config = AutoBatch() if option is True else option
    if not isinstance(config, AutoBatch):
        kind = type(option).__name__
        from .errors import ValidationError

        raise ValidationError("autobatch", f"must be an AutoBatch, True or False, got {kind}")
    return AutoBatcher(host, config)


def from_settings(host: HasBroker, settings: Any) -> AutoBatcher | None:
    """The batcher ``CONVEYOR_AUTOBATCH_MAX_JOBS`` (> 0) and ``..._MAX_DELAY`` ask for."""
    max_jobs = getattr(settings, "autobatch_max_jobs", 0)
    if not max_jobs:
        return None
    return AutoBatcher(host, AutoBatch(max_jobs, settings.autobatch_max_delay))


_LIVE: weakref.WeakSet[AutoBatcher] = weakref.WeakSet()


def _close_all() -> None:
    """At interpreter exit: write what daemon threads and tasks left buffered."""
    for batcher in list(_LIVE):
        batcher.close()


def _after_fork() -> None:
    """In a forked child: empty buffers and no writers (the parent's callers are not here)."""
    for batcher in list(_LIVE):
        batcher._reset()


atexit.register(_close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
