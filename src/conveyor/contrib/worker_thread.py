"""A worker run on a background thread of a web process (the small-deployment mode).

Web frameworks own the process's signals and its main thread, so the embedded worker runs with
``handle_signals=False`` on a daemon thread and is drained by the framework's shutdown hook
(``stop()``): running jobs get ``shutdown_timeout`` seconds, then their leases are handed back,
so nothing is lost when the web process exits. Used by ``contrib.starlette`` and
``contrib.flask``; separate worker processes (``conveyor worker``) remain the recommended way
beyond one small web process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..app import Conveyor
    from ..worker.loop import Worker

log = logging.getLogger("conveyor.contrib")


class WorkerThread:
    """One ``Worker`` of ``app`` on a daemon thread: ``start()``, then ``stop()`` to drain."""

    def __init__(
        self,
        app: Conveyor,
        queues: Sequence[str] | str | None = None,
        **options: Any,
    ) -> None:
        options.setdefault("handle_signals", False)  # the web server owns the signals
        self.worker: Worker = app.worker(queues, **options)
        self.exit_code: int | None = None
        #: what ended the worker's run() with an exception (None while it runs or returned)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="conveyor-worker", daemon=True)

    def _run(self) -> None:
        try:
            self.exit_code = self.worker.run()
        except BaseException as exc:  # kept for start() to raise: a dead thread says nothing
            self.error = exc
            log.error("embedded worker crashed", exc_info=exc)

    @property
    def alive(self) -> bool:
        """True while the worker's thread runs."""
        return self._thread.is_alive()

    def start(self, timeout: float = 10.0) -> WorkerThread:
        """Start the thread; returns once the worker claims jobs (or its run ended early).

        A run() that raised before claiming (a bad option) raises its error here, so the web
        process fails at start-up instead of serving without a worker.
        """
        self._thread.start()
        deadline = time.monotonic() + timeout
        # started_at is set by run() before its first claim; a failed start ends the thread.
        while self.worker.started_at is None and self._thread.is_alive():
            if time.monotonic() > deadline:
                raise RuntimeError("the embedded Conveyor worker did not start")
            time.sleep(0.005)
        if self.worker.started_at is None and self.error is not None:
            self._thread.join()
            raise self.error
        if self.exit_code not in (None, 0):
            log.error("embedded worker exited at start-up with code %s", self.exit_code)
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Drain: no new claims, running jobs get ``timeout`` s, then the thread ends."""
        if self._thread.ident is None:
            return  # never started
        self.worker.stop(timeout)
        self._thread.join(self.worker.shutdown_timeout + 5.0)
