"""Sentry for Conveyor (extra ``sentry``): failed jobs reported with their job context.

``SentryMiddleware`` reports a failed job's exception once its fate is known (``after_process``,
on the worker), tagged ``conveyor.task``, ``conveyor.queue``, ``conveyor.attempt``,
``conveyor.job_id`` and ``conveyor.outcome``, with a ``conveyor job`` context (id, task, queue,
attempt, max attempts, worker, and an arguments summary). By default (``report="final"``) only
the last failure is reported — the job went to the dead-letter queue (out of attempts, a
permanent error, a timeout on its last attempt) — so a job retried four times is one report,
not four; ``report="every"`` reports every failed attempt. Lost leases and releases are not
failures of the job and are never reported.

Around the handler, on the handler's own thread (``around_process``), it opens a Sentry
isolation scope with the same tags: what the handler's own code captures (``capture_message``,
``logger.error`` through Sentry's logging integration) carries the job's tags too.

Argument VALUES are personal data more often than not: they are sent only when
``include_args=True`` or, by default, when the Sentry client has ``send_default_pii=True``;
otherwise the summary holds their types and keyword names. Each value is cut to
``max_arg_chars``. (Sentry itself also sends the local variables of stack frames, arguments
included, unless ``sentry_sdk.init(include_local_variables=False)``.)

Initialise Sentry (``sentry_sdk.init``) in every process that runs jobs, as usual.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import sentry_sdk

from ..core.job import Job
from ..middleware import Middleware, WorkerView

#: Outcomes reported under each ``report`` policy.
REPORTED = {
    "final": frozenset({"dead_letter"}),
    "every": frozenset({"dead_letter", "retry_scheduled"}),
}
MAX_ARGS = 20  # arguments summarised (the rest are counted)


class SentryMiddleware(Middleware):
    """Report failed jobs to Sentry with their job context (see the module docstring)."""

    def __init__(
        self,
        *,
        report: Literal["final", "every"] = "final",
        include_args: bool | None = None,
        max_arg_chars: int = 200,
    ) -> None:
        if report not in REPORTED:
            raise ValueError("report must be 'final' or 'every'")
        self.report = report
        self.include_args = include_args
        self.max_arg_chars = max_arg_chars

    @contextmanager
    def around_process(self, worker: WorkerView, job: Job) -> Iterator[None]:
        """A Sentry isolation scope with the job's tags, on the handler's thread."""
        with sentry_sdk.isolation_scope() as scope:
            self._describe(scope, worker, job)
            yield

    def after_process(
        self,
        worker: WorkerView,
        job: Job,
        *,
        outcome: str,
        duration: float,
        error: BaseException | None,
    ) -> None:
        """Report ``error`` when the outcome is one the ``report`` policy covers."""
        if error is None or outcome not in REPORTED[self.report]:
            return
        with sentry_sdk.new_scope() as scope:
            self._describe(scope, worker, job)
            scope.set_tag("conveyor.outcome", outcome)
            sentry_sdk.capture_exception(error)

    def _describe(self, scope: Any, worker: WorkerView, job: Job) -> None:
        scope.set_tags(
            {
                "conveyor.task": job.task,
                "conveyor.queue": job.queue,
                "conveyor.attempt": str(job.attempts),
                "conveyor.job_id": job.id,
            }
        )
        scope.set_context(
            "conveyor job",
            {
                "id": job.id,
                "task": job.task,
                "queue": job.queue,
                "attempt": job.attempts,
                "max_attempts": job.max_attempts,
                "worker": worker.id,
                **args_summary(job, self._values(), self.max_arg_chars),
            },
        )

    def _values(self) -> bool:
        if self.include_args is not None:
            return self.include_args
        return bool(sentry_sdk.get_client().should_send_default_pii())


def args_summary(job: Job, values: bool, limit: int = 200) -> dict[str, Any]:
    """``args`` and ``kwargs`` of a job for an error report: each value's ``repr`` cut to
    ``limit`` characters (``values=True``), else its type name only; at most ``MAX_ARGS``."""

    def show(value: Any) -> str:
        if not values:
            return type(value).__name__
        text = repr(value)
        return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"

    args = [show(a) for a in job.args[:MAX_ARGS]]
    if len(job.args) > MAX_ARGS:
        args.append(f"... {len(job.args) - MAX_ARGS} more")
    kwargs = {str(k)[:limit]: show(v) for k, v in list(job.kwargs.items())[:MAX_ARGS]}
    return {"args": args, "kwargs": kwargs}
