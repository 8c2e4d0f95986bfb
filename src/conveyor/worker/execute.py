"""Run one leased job and turn what happened into an Outcome (pure decision, no broker calls).

The caller records the outcome with the broker: successes are coalesced into ``complete``
batches, failures go through ``fail``. Unknown tasks and bad arguments are permanent failures with
their own error kinds; a result that cannot be stored is the recorder's business (the job is
completed without it, see ``Recorder._ack``); nothing here can raise.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from ..core.job import ErrorKind, Job
from ..core.retry import Decision, RetryPolicy, decide, describe, previous_delay
from ..middleware import hooked as hooked  # re-exported for the worker loop
from .leanlog import text_safe
from .logs import job_context
from .running import Running, choose_executor, effective_timeout
from .timeouts import timeout_error

log = logging.getLogger("conveyor.worker")

if TYPE_CHECKING:
    from ..broker.base import Lease
    from ..middleware import Around
    from ..task import Task


@dataclass(frozen=True)
class Outcome:
    """The result of one attempt: success with ``result``, or a failure ``decision``."""

    ok: bool
    result: Any = None
    decision: Decision | None = None
    error: BaseException | None = None  # the exception, for after_process hooks
    #: an operator cancelled the running job and it stopped: recorded as ``cancelled``
    #: (``Broker.cancel_running``), never retried
    cancelled: bool = False
    #: when the failure was decided: the entry's ``at``, so ``run_at - at`` is the delay the
    #: decision asked for (``previous_delay``); the recorder writes it later (None: its time)
    failed_at: float | None = None

    def error_entry(self, job: Job, now: float, worker_id: str) -> Mapping[str, Any]:
        """The ``errors`` entry to store for a failed attempt."""
        assert self.decision is not None
        d = self.decision
        if self.failed_at is not None:
            now = self.failed_at
        return {
            "attempt": job.attempts,
            "kind": str(d.kind),
            "type": safe_text(_short_type(d.exc_type)),
            "message": safe_text(d.message[:2000]),
            "traceback": safe_text(d.traceback),
            "worker": worker_id,
            "at": now,
        }


def _short_type(name: str) -> str:
    """An exception's type name as stored: at most 200 characters (a generated class may
    have any name; the message is cut at 2,000)."""
    return name if len(name) <= 200 else name[:200] + "…"


def safe_text(text: str) -> str:
    """``text`` with lone surrogates (``os.listdir`` on non-UTF-8 names) written as ``\\udcff``,
    so an error message can always be stored as JSON."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


class Unreceived:
    """The result of a process-pool job that the worker could not unpickle: ``problem`` says
    why; the recorder completes the job without a result and notes it (``Recorder._ack``)."""

    __slots__ = ("problem",)

    def __init__(self, problem: str) -> None:
        self.problem = problem


#: The outcome of a job that returned None: shared, nothing to check or classify.
OK = Outcome(True)


def permanent(kind: ErrorKind, exc_type: str, message: str) -> Outcome:
    """A failure that goes straight to the dead-letter queue."""
    return Outcome(False, decision=Decision(kind, None, exc_type, message, ""))


def precheck(task: Task[..., Any] | None, job: Job) -> Outcome | None:
    """Refuse jobs that must never run: unknown task names, arguments that do not fit."""
    if task is None:
        return permanent(
            ErrorKind.UNKNOWN_TASK,
            "UnknownTask",
            f"no task named {job.task!r} is registered in this worker",
        )
    reason = task.check_arguments(job.args, job.kwargs)
    if reason is not None:
        return permanent(ErrorKind.BAD_ARGUMENTS, "TypeError", reason)
    return None


#: (task, executor, its own timeout, fewest and most positional arguments): ``runs_of``
Plan = tuple["Task[..., Any]", str, float | None, int, float]


def runs_of(
    leases: Sequence[Lease], tasks: Mapping[str, Task[..., Any]]
) -> tuple[list[Running], list[tuple[Running, Outcome]]]:
    """The attempts of a claim, in order, and those refused (``precheck``) with their outcome.

    A task's executor, timeout and accepted positional-argument count are worked out once per
    claim, not per job: a job of a known task with positional arguments only, of an accepted
    count, starts with two comparisons; any other goes through ``precheck``.
    """
    runs: list[Running] = []
    refused: list[tuple[Running, Outcome]] = []
    plans: dict[str, Plan | None] = {}
    for lease in leases:
        job = lease.job
        name = job.task
        plan = plans.get(name)
        if plan is None and name not in plans:  # the first job of this task in the claim
            plan = plans[name] = _plan(tasks.get(name))
        if plan is not None and not job.kwargs and plan[3] <= len(job.args) <= plan[4]:
            timeout = plan[2] if job.timeout is None else effective_timeout(plan[0], job)
            runs.append(Running(lease, plan[0], plan[1], timeout))
            continue
        task = tasks.get(name)
        rejected = precheck(task, job)
        if rejected is None and task is not None:
            runs.append(Running(lease, task, choose_executor(task), effective_timeout(task, job)))
        else:
            assert rejected is not None
            runs.append(Running(lease, task, "none", None))
            refused.append((runs[-1], rejected))
    return runs, refused


def _plan(task: Task[..., Any] | None) -> Plan | None:
    """(task, executor, its own timeout, fewest and most positional arguments) of a task."""
    if task is None:
        return None
    timeout = float(task.timeout) if task.timeout else None
    return task, choose_executor(task), timeout, task.binder.min_pos, task.binder.max_pos


def outcome_of_call(
    task: Task[..., Any], job: Job, call: Any, now: float, rng: random.Random
) -> Outcome:
    """Run ``call()`` (which runs the job) and classify what it did."""
    try:
        result = call()
        return success(result)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):  # Ctrl-C stops an inline caller; SystemExit
            raise  # from a job is an ordinary (retryable) error, as on every executor

        return failure(task.policy, job, exc, now, rng)


def success(result: Any) -> Outcome:
    """A returned value. The recorder checks it can be stored (``result_problem``) and, when
    it cannot, completes the job without it: the work happened, it must not run again."""
    return Outcome(True, result=result)


def failure(
    policy: RetryPolicy, job: Job, exc: BaseException, now: float, rng: random.Random
) -> Outcome:
    """Classify an exception under the task's policy and the job's attempt budget."""
    # MAX_ATTEMPTS_UNSET (0): enqueued by name where the task is unknown; the task's value applies
    max_attempts = job.max_attempts or policy.max_attempts
    decision = decide(
        exc,
        attempts=job.attempts,
        max_attempts=max_attempts,
        policy=policy,
        now=now,
        rng=rng,
        previous_delay=previous_delay(job),
        retry_on=job.retry_on,
        dead_on=job.dead_on,
    )
    return Outcome(False, decision=decision, error=exc, failed_at=now)


#: the wait before the next attempt when even classifying a failure failed (``reported``)
FALLBACK_DELAY = 60.0


def reported(
    run: Running,
    result: Any,
    exc: BaseException | None,
    remote_traceback: str | None,
    now: float,
    rng: random.Random,
) -> Outcome:
    """The outcome of what an executor reported: a cancelled job that stopped by raising
    (the injected ``JobCancelled``, a cancelled task, a killed child) ends cancelled; an
    interrupted one that raised (or never stopped: ``stuck``) is otherwise a timeout, and one
    that returned is completed (it caught its ``JobTimeout`` to clean up, as Celery's soft
    time limit allows, or finished before the interruption landed).

    Never raises: should classifying fail (a custom ``Backoff`` that raises, say), the attempt
    is still recorded as an ``error``, retried after ``FALLBACK_DELAY`` while attempts remain,
    so the job is not left running and its slot is freed.
    """
    try:
        return _reported(run, result, exc, remote_traceback, now, rng)
    except Exception as failed:
        log.exception("job %s: classifying its outcome failed", text_safe(run.job.id))
        job = run.job
        left = job.attempts < (
            job.max_attempts or (run.task.policy.max_attempts if run.task else 1)
        )
        message = f"classifying the outcome failed: {type(failed).__name__}: {describe(failed)}"
        decision = Decision(
            ErrorKind.ERROR,
            now + FALLBACK_DELAY if left else None,
            type(exc).__name__ if exc is not None else "Result",
            message,
            format_exc(failed),
        )
        return Outcome(False, decision=decision, error=exc, failed_at=now)


def _reported(
    run: Running,
    result: Any,
    exc: BaseException | None,
    remote_traceback: str | None,
    now: float,
    rng: random.Random,
) -> Outcome:
    task = run.task
    assert task is not None
    if run.cancel_requested:  # stopped on request (it raised, or ignored it past the grace)
        if exc is not None or run.stuck:
            return Outcome(False, error=exc, cancelled=True)
        return success(result)  # it finished its work anyway: completed
    if exc is None and not run.stuck:  # it returned, even past its deadline (it caught the
        return success(result)  # JobTimeout to clean up, or finished first): its work is done
    if run.interrupted:  # it raised after the interruption, or ignored it past the grace
        exc, remote_traceback = timeout_error(run), None
    elif exc is None:
        return success(result)
    outcome = failure(task.policy, run.job, exc, now, rng)
    if remote_traceback and outcome.decision is not None:
        decision = dataclasses.replace(outcome.decision, traceback=remote_traceback)
        outcome = dataclasses.replace(outcome, decision=decision)
    return outcome


def call_inline(task: Task[..., Any], job: Job, around: Around | None = None) -> Any:
    """Call the task function in this thread (async functions get a fresh event loop), inside
    the job context (``worker/logs.py``) and the ``around_process`` hooks."""
    token = job_context.set(job)
    try:
        if around is not None:
            return around.call(job, partial(_call, task, job))
        return _call(task, job)
    finally:
        job_context.reset(token)


def _call(task: Task[..., Any], job: Job) -> Any:
    if task.is_async:
        return asyncio.run(task.fn(*job.args, **job.kwargs))
    return task.fn(*job.args, **job.kwargs)


def format_exc(exc: BaseException) -> str:
    """A trimmed traceback string."""
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]


def log_extra(fields: dict[str, Any], decision: Decision | None) -> dict[str, Any]:
    """The ``extra`` of a job's outcome line: its fields, and a failure's traceback (the
    formatters of ``worker/logs.py`` print it as ``exc`` / indented lines: failures logged at
    WARNING carry their traceback)."""
    if decision is not None and decision.traceback:
        return {"job": fields, "traceback_text": decision.traceback}
    return {"job": fields}
