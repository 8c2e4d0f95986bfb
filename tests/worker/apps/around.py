"""An app whose middleware wraps every handler (``around_process``) and a process-pool task.

The pool's child imports this module to find ``proc_probe``, and with it the app and its
middleware: the child enters the hook around the handler, on the handler's thread.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from conveyor import Conveyor, Middleware
from conveyor.core.job import Job
from conveyor.middleware import WorkerView

#: Set by the hook, read by the handler.
SEEN: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("seen", default=None)


class Probe(Middleware):
    """Sets ``SEEN`` to the hook's thread, job and worker around each handler."""

    @contextmanager
    def around_process(self, worker: WorkerView, job: Job) -> Iterator[None]:
        """Enter: note where the hook runs; exit: restore."""
        token = SEEN.set({"thread": threading.get_ident(), "job": job.id, "worker": worker.id})
        try:
            yield
        finally:
            SEEN.reset(token)


app = Conveyor("memory://", middleware=[Probe()])


def probe() -> dict[str, Any]:
    """What the handler sees: its own thread and what the hook set."""
    return {"thread": threading.get_ident(), "seen": SEEN.get()}


@app.task(executor="process")
def proc_probe() -> dict[str, Any]:
    """``probe`` in a pool child."""
    return probe()
