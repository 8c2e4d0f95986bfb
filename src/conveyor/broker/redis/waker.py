"""The Cluster-wide wake-up marker, pushed off the caller's path (issue 18).

In Cluster mode a worker of several queues (every sharded queue is several) blocks on one
global wake-up list (``KeySchema.global_wake``): a BLPOP cannot span hash slots, and a
queue's script cannot write a key of another slot. So whatever makes a job ready (an
enqueue, a release, a claim that left jobs behind) must also push that list, a second round
trip that always lands on the same master.

``Waker`` takes that push off the caller's path: ``wake()`` only sets a flag and signals one
background thread, which pushes the marker (LPUSH + LTRIM, one pipelined round trip). Requests
that arrive while a push is on its way are served by one more push after it (group commit):
never late by more than one round trip, and one push per round trip at most however many
producer threads enqueue. Nothing is lost: a marker is pushed after every request. If the push
fails (Redis unreachable) the marker is dropped, as the synchronous push's error used to be
reported by the enqueue while its job was already stored: waiting workers then find the job
at their next poll (``poll_interval``) or their next wake-up.

The thread starts on first use and exits after ``IDLE_EXIT_S`` without requests; a forked
child starts without one (the parent's thread does not exist there); ``close`` pushes what is
pending and stops it. When no thread can start, the caller pushes the marker itself.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable

log = logging.getLogger("conveyor.redis")

#: seconds the waker's thread waits for a request before it exits (an idle process keeps none)
IDLE_EXIT_S = 1.0


class Waker:
    """Coalesced background pushes of the global wake-up marker (module docstring)."""

    def __init__(self, push: Callable[[], None]) -> None:
        self._push = push
        self._reset()
        _ALL.add(self)

    def _reset(self) -> None:
        """A fresh state (also in a forked child: the parent's thread, and maybe its lock
        held at the fork, do not exist there)."""
        self._cond = threading.Condition()
        self._pending = False
        self._thread: threading.Thread | None = None

    def wake(self) -> None:
        """Ask for one push; returns at once."""
        with self._cond:
            self._pending = True
            if self._thread is not None:
                self._cond.notify()
                return
            thread = threading.Thread(target=self._run, name="conveyor-redis-waker", daemon=True)
            try:
                thread.start()
            except RuntimeError:  # no thread can start (a thread limit, interpreter exit)
                self._pending = False
            else:
                self._thread = thread  # only a started thread: close() joins it
                return
        self._push_safely()  # on the caller's thread: the marker is not lost

    def close(self) -> None:
        """Push what is pending (on this thread) and let the background thread go."""
        with self._cond:
            pending, self._pending = self._pending, False
            thread, self._thread = self._thread, None
            self._cond.notify()
        if pending:
            self._push_safely()
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)

    def _run(self) -> None:
        me = threading.current_thread()
        while True:
            with self._cond:
                while not self._pending:
                    if self._thread is not me:  # closed (or replaced after a fork)
                        return
                    if not self._cond.wait(IDLE_EXIT_S) and not self._pending:
                        if self._thread is me:
                            self._thread = None
                        return
                self._pending = False
            self._push_safely()

    def _push_safely(self) -> None:
        try:
            self._push()
        except Exception:  # a lost marker costs a waiting worker one poll, never a job
            log.debug("pushing the global wake-up marker failed", exc_info=True)


_ALL: weakref.WeakSet[Waker] = weakref.WeakSet()


def _after_fork() -> None:
    for waker in list(_ALL):
        waker._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
