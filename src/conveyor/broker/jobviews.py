"""The read and operator halves of the job protocol: ``JobReads`` and ``JobAdmin``.

Split out of ``broker/base.py`` (which re-exports both): ``JobStore`` composes them with the
transitions, and the inspector, dashboard, CLI and ``Conveyor`` admin methods call them.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

from ..core.job import Job
from ..core.state import JobState
from ..errors import ValidationError
from .records import Page, SearchQuery


class JobReads(abc.ABC):
    """Read-only views of jobs and queues (inspector, dashboard, CLI)."""

    @abc.abstractmethod
    def get(self, job_id: str) -> Job | None:
        """A fresh snapshot of the job, or None."""

    # -------------------------------------------------------- flow control (issue 15)
    def replace_waiting(self, job_id: str, job: Job, now: float) -> bool:
        """``debounce``: a job that still waits takes ``job``'s arguments (and metadata); a
        scheduled one also its ``run_at`` (its delay restarts). False when it no longer waits."""
        raise ValidationError("debounce", f"{type(self).__name__} cannot replace waiting jobs")

    def flow_set_limit(self, name: str, spec: list[float] | None) -> None:
        """Override a limiter's limit at run time (``[tokens, per, burst]`` or ``[n]``; None
        clears); workers pick it up on their next claim. Backends with ``supports_flow``."""
        raise ValidationError("limits", f"{type(self).__name__} has no flow control")

    def flow_status(self, now: float) -> dict[str, Any]:
        """``limits`` (run-time overrides), ``buckets`` (tokens), ``running`` (job ids per
        slot), ``groups`` (queue, group, waiting, why) of flow control."""
        return {"limits": {}, "buckets": {}, "running": {}, "groups": []}

    @abc.abstractmethod
    def paused_queues(self) -> set[str]:
        """Names of paused queues."""

    @abc.abstractmethod
    def queues(self) -> list[str]:
        """Every queue that has ever held a job (or is paused), sorted."""

    @abc.abstractmethod
    def counts(self) -> dict[str, dict[str, int]]:
        """Per queue, the number of jobs in each ``JobState`` (all states present)."""

    @abc.abstractmethod
    def peek(self, queue: str, n: int = 10) -> list[Job]:
        """The next ``n`` ready jobs of ``queue`` in claim order, without claiming them."""

    @abc.abstractmethod
    def search(self, query: SearchQuery) -> Page:
        """Jobs matching every given filter, newest first, one page."""

    @abc.abstractmethod
    def oldest_pending(self, queue: str) -> float | None:
        """The ready time (run_at, or created_at) of the oldest pending job of ``queue``."""


class JobAdmin(abc.ABC):
    """Operator actions on jobs and queues (CLI, dashboard, ``Conveyor`` admin methods)."""

    @abc.abstractmethod
    def cancel(self, job_id: str, now: float) -> bool:
        """Cancel a job that has not started (scheduled/pending/retry_scheduled)."""

    @abc.abstractmethod
    def requeue(self, job_id: str, now: float) -> bool:
        """Revive a dead_letter or cancelled job: pending now, attempts and lost reset to 0.

        Errors are kept; the requeue is recorded in the history.
        """

    @abc.abstractmethod
    def purge(
        self,
        now: float,
        *,
        state: JobState = JobState.DEAD_LETTER,
        older_than: float | None = None,
        queue: str | None = None,
        ids: Sequence[str] | None = None,
    ) -> int:
        """Delete terminal jobs in ``state`` finished more than ``older_than`` s ago."""

    @abc.abstractmethod
    def clear_queue(self, queue: str, now: float) -> int:
        """Delete every waiting job of ``queue`` (pending, scheduled, retry_scheduled) in one
        atomic step per batch; returns how many. Active jobs keep their lease and finished
        jobs stay: a job claimed before the clear is never touched by it. A workflow node is
        cancelled instead of deleted (its dependants end as on ``cancel``; one released into
        this queue is cancelled in turn) and counted (docs/workflows.md)."""

    @abc.abstractmethod
    def run_now(self, job_id: str, now: float) -> bool:
        """Make a scheduled or retry_scheduled job due now: pending, ``run_at = now``.

        Attempts, errors and history are kept; False (nothing changed) in any other state.
        """

    @abc.abstractmethod
    def delete_job(self, job_id: str, now: float) -> bool:
        """Delete one job that is not running (any state but active), for good.

        False when the job does not exist or is active (a running job cannot be deleted).
        """

    @abc.abstractmethod
    def pause(self, queue: str) -> None:
        """Stop handing out jobs of ``queue`` (running jobs finish)."""

    @abc.abstractmethod
    def resume(self, queue: str) -> None:
        """Undo ``pause``."""
