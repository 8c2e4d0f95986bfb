"""Start and stop a running worker's helper threads: recorder, watchdog, lease keeper, heartbeat.

``start_helpers`` runs when ``Worker.run()`` starts (and warms the process pool if a task uses
it); ``stop_helpers`` runs when it returns: the recorder writes what is left, the other helpers
stop, and the executors shut down (running daemon threads die with the process).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..errors import BrokerConfigError
from .lease_keeper import LeaseKeeper
from .recorder import JOIN_TIMEOUT
from .registry import Heartbeat
from .timeouts import Watchdog

if TYPE_CHECKING:
    from .loop import Worker

log = logging.getLogger("conveyor.worker")


def broker_accepts(worker: Worker) -> bool:
    """Probe the broker before starting: False (logged) when it refuses the configuration.

    A refused password or database (``BrokerConfigError``) is permanent: the worker exits
    instead of retrying forever. An unavailable broker is transient: the claim loop retries.
    """
    try:
        worker.broker.server_time()
    except BrokerConfigError as exc:
        log.error("worker %s cannot start: %s", worker.id, exc)
        return False
    except Exception:
        log.debug("broker probe failed", exc_info=True)
    return True


def start_helpers(worker: Worker) -> list[Any]:
    """Start the helper threads; returns them for ``stop_helpers`` (the recorder first)."""
    w = worker
    recorder = w.recorder.start(w._done, w._recorded)
    w._watchdog = Watchdog(w.running_jobs, w._on_deadline, w._on_stuck,
                           w.app.settings.timeout_grace)  # fmt: skip
    keeper = LeaseKeeper(w.broker, w.app.now, w.running_jobs, w.visibility_timeout,
                         w.recorder.lease_lost)  # fmt: skip
    helpers: list[Any] = [recorder, w._watchdog, keeper]
    if w.heartbeat:
        helpers.append(Heartbeat(w.broker, w.id, w.app.now, w.describe,
                                 w.app.settings.heartbeat_interval))  # fmt: skip
    for helper in helpers[1:]:
        helper.start()
    if any(t.executor == "process" for t in w.app.tasks.values()):
        try:
            w._executor("process").submit([])  # warm the pool before the first job
        except Exception:
            log.exception("cannot start the process pool")
    return helpers


def stop_helpers(worker: Worker, helpers: list[Any]) -> None:
    """Let the recorder finish, stop the other helpers, shut the executors down."""
    recorder, *others = helpers
    worker._done.put(None)
    recorder.join(JOIN_TIMEOUT)
    for helper in others:
        helper.stop()
    for ex in worker._executors.values():
        try:
            ex.shutdown()
        except Exception:
            log.exception("executor shutdown failed")
    worker._executors.clear()
