"""Start and stop a running worker's helper threads: recorder, watchdog, lease keeper, heartbeat.

``start_helpers`` runs when ``Worker.run()`` starts (and warms the process pool if a task uses
it); ``stop_helpers`` runs when it returns: the recorder writes what is left, the other helpers
stop, and the executors shut down (running daemon threads die with the process). The worker
hands over what they need explicitly (``Wiring``): the helpers never see the worker itself.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..broker.base import Broker
from ..errors import BrokerConfigError
from .cancel import JobWatcher
from .lease_keeper import LeaseKeeper
from .presence import Heartbeat
from .recorder import JOIN_TIMEOUT, Recorder
from .timeouts import Watchdog

if TYPE_CHECKING:
    from .execute import Outcome
    from .executors import Executor
    from .jobctx import JobBoard
    from .running import Running

log = logging.getLogger("conveyor.worker")


@dataclass(frozen=True)
class Wiring:
    """The collaborators of a running worker's helper threads."""

    broker: Broker
    now: Callable[[], float]
    worker_id: str
    running_jobs: Callable[[], list[Running]]
    done: queue.SimpleQueue[tuple[Running, Outcome] | None]  # outcomes for the recorder
    recorded: Callable[[list[Running]], None]  # the recorder wrote these
    on_deadline: Callable[[Running], None]
    on_stuck: Callable[[Running], None]
    describe: Callable[[], Mapping[str, Any]] | None  # the registry record; None: no heartbeat
    timeout_grace: float
    heartbeat_interval: float
    visibility_timeout: float
    warm_pool: Callable[[], None] | None = None  # start the process pool before the first job
    on_command: Callable[[str], None] | None = None  # a control command (quiet / stop) arrived
    on_cancel: Callable[[Running], None] | None = None  # an operator cancelled a running job
    board: JobBoard | None = None  # the running jobs' contexts (progress), see worker/jobctx.py


@dataclass
class Helpers:
    """The started helper threads (``stop_helpers`` stops them)."""

    recorder: threading.Thread
    watchdog: Watchdog
    others: list[Any] = field(default_factory=list)


def broker_accepts(broker: Broker, worker_id: str) -> bool:
    """Probe the broker before starting: False (logged) when it refuses the configuration.

    A refused password or database (``BrokerConfigError``) is permanent: the worker exits
    instead of retrying forever. An unavailable broker is transient: the claim loop retries.
    """
    try:
        broker.server_time()
    except BrokerConfigError as exc:
        log.error("worker %s cannot start: %s", worker_id, exc)
        return False
    except Exception:
        log.debug("broker probe failed", exc_info=True)
    return True


def start_helpers(recorder: Recorder, w: Wiring) -> Helpers:
    """Start the helper threads; returns them for ``stop_helpers``."""
    thread = recorder.start(w.done, w.recorded)
    watchdog = Watchdog(w.running_jobs, w.on_deadline, w.on_stuck, w.timeout_grace)
    keeper = LeaseKeeper(w.broker, w.now, w.running_jobs, w.visibility_timeout, recorder.lease_lost)
    helpers = Helpers(thread, watchdog, [watchdog, keeper])
    if w.describe is not None:
        helpers.others.append(
            Heartbeat(w.broker, w.worker_id, w.now, w.describe, w.heartbeat_interval, w.on_command)
        )
    if w.on_cancel is not None and w.board is not None:
        helpers.others.append(JobWatcher(w.broker, w.now, w.running_jobs, w.on_cancel, w.board))
    for helper in helpers.others:
        helper.start()
    if w.warm_pool is not None:
        try:
            w.warm_pool()
        except Exception:
            log.exception("cannot start the process pool")
    return helpers


def stop_helpers(
    helpers: Helpers,
    done: queue.SimpleQueue[tuple[Running, Outcome] | None],
    executors: dict[str, Executor],
) -> None:
    """Let the recorder finish, stop the other helpers, shut the executors down."""
    done.put(None)
    helpers.recorder.join(JOIN_TIMEOUT)
    for helper in helpers.others:
        helper.stop()
    for ex in executors.values():
        try:
            ex.shutdown()
        except Exception:
            log.exception("executor shutdown failed")
    executors.clear()
