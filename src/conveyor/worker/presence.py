"""Worker presence (the worker registry): a heartbeat document per worker process, which expires
when it dies.

Every ``heartbeat_interval`` the worker writes ``broker.docs.put("workers", id, doc, now,
ttl=2 * heartbeat_interval)`` with its id, host, pid, queues, concurrency, running job ids,
start time, processed / failed counts and resident memory. ``app.workers()`` and
``conveyor status`` read the collection; a worker killed with ``kill -9`` disappears within two
intervals, and a clean exit deletes its document at once. ``worker_up`` / ``worker_down`` events
go to the event stream. Each beat also reads the worker's control flag (``control.py``: quiet or
stop, set from the dashboard) and hands it to the worker, so a command takes one beat at most;
a process started by ``conveyor worker``'s supervisor also reads its group's flag and publishes
``group`` (``procutil.GROUP_ENV``) and ``processes`` in its record.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ..broker.side import SideStores
from ..outage import OutageLog
from . import control
from .procutil import GROUP_ENV, PROCESSES_ENV, rss_bytes

if TYPE_CHECKING:
    from .running import Running

log = logging.getLogger("conveyor.worker")
COLLECTION = "workers"


class Describable(Protocol):
    """The public state of a worker that its registry record shows."""

    id: str
    concurrency: int
    started_at: float | None

    @property
    def queues(self) -> list[str]:
        """Queue names."""

    @property
    def processed(self) -> int:
        """Jobs completed."""

    @property
    def failed(self) -> int:
        """Attempts failed."""

    @property
    def draining(self) -> bool:
        """Asked to stop."""

    @property
    def quiet(self) -> bool:
        """Asked to stop claiming (running jobs finish)."""

    def running_jobs(self) -> list[Running]:
        """In-flight attempts."""


def describe(worker: Describable) -> dict[str, Any]:
    """The registry record of a running worker."""
    running = worker.running_jobs()
    return {
        "id": worker.id,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "queues": worker.queues,
        "concurrency": worker.concurrency,
        "running": [r.job.id for r in running],
        "jobs": [  # the running jobs, for the dashboard's workers page
            {"id": j.id, "task": j.task, "queue": j.queue, "started_at": j.started_at}
            for j in (r.job for r in running)
        ],
        "started_at": worker.started_at,
        "processed": worker.processed,
        "failed": worker.failed,
        "rss": rss_bytes(),
        "state": "draining" if worker.draining else "quiet" if worker.quiet else "running",
        **_group_fields(),
    }


def _group_fields() -> dict[str, Any]:
    """``group`` and ``processes`` of a process the supervisor started (else nothing)."""
    group = os.environ.get(GROUP_ENV)
    if not group:
        return {}
    try:
        processes: int | None = int(os.environ.get(PROCESSES_ENV, ""))
    except ValueError:
        processes = None
    return {"group": group, "processes": processes}


class Streaks:
    """Failures of a beat's duties that are not outages, logged once per streak: the first
    failure's traceback, then one line when the duty works again (as the lease keeper does),
    not a traceback every beat for as long as the worker runs."""

    def __init__(self) -> None:
        self.failures: dict[str, int] = {}

    def failed(self, duty: str) -> None:
        """Count a failure of ``duty``; log its traceback if it starts a streak."""
        count = self.failures.get(duty, 0)
        self.failures[duty] = count + 1
        if count == 0:
            log.warning(
                "heartbeat: could not %s; retrying every beat (logged once until it works)",
                duty,
                exc_info=True,
            )

    def worked(self, duty: str) -> None:
        """``duty`` succeeded: log the end of a streak."""
        count = self.failures.pop(duty, 0) if self.failures else 0
        if count:
            log.info("heartbeat: %s works again after %d failure(s)", _ING[duty], count)


_PUBLISH, _POLL = "publish the worker record", "read the control flag"
_ING = {_PUBLISH: "publishing the worker record", _POLL: "reading the control flag"}


class Heartbeat:
    """Publishes ``describe()`` every ``interval`` seconds from its own thread; before each
    write it reads the control flag and passes a command to ``on_command``."""

    def __init__(
        self,
        broker: SideStores,
        worker_id: str,
        now: Callable[[], float],
        describe: Callable[[], Mapping[str, Any]],
        interval: float,
        on_command: Callable[[str], None] | None = None,
    ) -> None:
        self.broker = broker
        self._on_command = on_command
        self.worker_id = worker_id
        self._now = now
        self._describe = describe
        self.interval = interval
        self.group = os.environ.get(GROUP_ENV) or None  # its supervisor's group, if any
        self._streaks = Streaks()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="conveyor-heartbeat", daemon=True)

    def start(self) -> None:
        """Publish the first record, announce ``worker_up`` and start beating."""
        self.publish()
        self._event("worker_up")
        self._thread.start()

    def stop(self) -> None:
        """Stop beating, delete the record and announce ``worker_down``."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)
        try:
            self.broker.docs.delete(COLLECTION, self.worker_id)
        except Exception:
            log.warning("heartbeat: could not delete the worker record", exc_info=True)
        if self._on_command is not None:
            try:
                control.clear(self.broker, self.worker_id)
            except Exception:
                log.warning("heartbeat: could not clear the control flag", exc_info=True)
        self._event("worker_down")

    def publish(self) -> None:
        """Apply a pending command, then write the record (errors are logged; the next beat
        retries)."""
        self.poll_command()
        try:
            doc = dict(self._describe())
            doc["heartbeat_at"] = now = self._now()
            self.broker.docs.put(COLLECTION, self.worker_id, doc, now, ttl=2 * self.interval)
        except Exception as exc:
            if not OutageLog.shared(self.broker).failed(exc, "heartbeat", log):
                self._streaks.failed(_PUBLISH)
            return
        OutageLog.shared(self.broker).succeeded(log)
        self._streaks.worked(_PUBLISH)

    def poll_command(self) -> None:
        """Read the control flag and hand a command to the worker (each beat)."""
        if self._on_command is None:
            return
        try:
            now = self._now()
            command = control.read(self.broker, self.worker_id, now)
            if self.group is not None and command != control.STOP:  # a Stop of the group
                group = control.read(self.broker, control.group_key(self.group), now)
                command = control.strongest(command, group)
        except Exception as exc:
            if not OutageLog.shared(self.broker).failed(exc, "control flag", log):
                self._streaks.failed(_POLL)
            return
        self._streaks.worked(_POLL)
        if command is not None:
            self._on_command(command)

    def _main(self) -> None:
        while not self._stop.wait(self.interval):
            self.publish()

    def _event(self, kind: str) -> None:
        try:
            self.broker.events.add(
                [{"type": kind, "worker": self.worker_id, "at": self._now(), "pid": os.getpid()}]
            )
        except Exception:
            log.warning("heartbeat: could not record %s", kind, exc_info=True)
