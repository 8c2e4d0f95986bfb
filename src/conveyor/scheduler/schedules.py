"""Schedules: declare them in code (the schedule registry), manage the stored ones at run time.

``app.cron(...)`` / ``app.every(...)`` decorate a function: it becomes a task (unless it already
is one) and its schedule is remembered in ``declared``; every ``Scheduler`` upserts the declared
schedules into the broker when it starts (``sync``). A changed timetable (``cron``, ``every``,
``tz``) recomputes the next run; an unchanged one keeps its state (next run, pause, history).
``app.schedule_cron(...)``, ``unschedule``, ``pause_schedule`` and ``resume_schedule`` act on the
stored schedules directly, so every process sees them at once.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

import orjson

from ..errors import ConveyorError, ValidationError
from ..task import Task
from .models import (
    COLLECTION,
    TIMING_FIELDS,
    Schedule,
    ScheduleNotFound,
    build_schedule,
    check_stored,
    history_log,
    stored_schedule,
    validate_name,
)

if TYPE_CHECKING:
    from ..runtime import Runtime

F = TypeVar("F", bound=Callable[..., Any])
_CAS_ATTEMPTS = 20


class ScheduleRegistry:
    """Schedules of one app: code declarations plus the broker-stored set every process shares."""

    def __init__(
        self, runtime: Runtime, register: Callable[[Callable[..., Any]], Task[..., Any]]
    ) -> None:
        self.app = runtime  # the runtime (never the facade)
        #: turns a decorated function into a registered task (``app.task``)
        self.register = register
        #: Schedules declared in code with ``app.cron`` / ``app.every``, by name.
        self.declared: dict[str, Schedule] = {}

    # ------------------------------------------------------------------ declaring in code
    def cron(self, expr: str, **options: Any) -> Callable[[F], F]:
        """Decorator: run the function on a cron expression (``tz=``, ``name=``, ``args=``, ...)."""
        return self._decorator(cron=expr, every=None, options=options)

    def every(self, seconds: int | float | timedelta, **options: Any) -> Callable[[F], F]:
        """Decorator: run the function every ``seconds`` (whole seconds >= 1, or a timedelta)."""
        return self._decorator(cron=None, every=seconds, options=options)

    def _decorator(
        self,
        *,
        cron: str | None,
        every: int | float | timedelta | None,
        options: Mapping[str, Any],
    ) -> Callable[[F], F]:
        opts = dict(options)
        # Validate timing and options now, so a bad declaration fails at import time.
        build_schedule(
            opts.get("name") or "probe", "probe", cron=cron, every=every, **_without(opts, "name")
        )

        def decorate(fn: F) -> F:
            task = fn if isinstance(fn, Task) else self.register(fn)
            name = opts.get("name") or task.name
            schedule = build_schedule(
                name, task.name, cron=cron, every=every, source="code", **_without(opts, "name")
            ).with_state(task_queue=task.queue)
            known = self.declared.get(schedule.name)
            if known is not None and known.definition() != schedule.definition():
                raise ValidationError("name", f"schedule {name!r} is declared twice")
            self.declared[schedule.name] = schedule
            return cast(F, task)  # the decorator returns the Task (callable like ``fn``)

        return decorate

    def sync(self, now: float | None = None) -> builtins.list[Schedule]:
        """Upsert every code-declared schedule into the broker (each scheduler does at start)."""
        at = self.app.now() if now is None else now
        return [self._upsert(schedule, at) for schedule in self.declared.values()]

    # ------------------------------------------------------------------ run-time management
    def schedule(
        self,
        name: str,
        task: str | Task[..., Any],
        expr: str | None = None,
        *,
        every: int | float | timedelta | None = None,
        **options: Any,
    ) -> Schedule:
        """Create or replace a stored schedule now; returns it with its next run time.

        Give ``expr`` (cron) or ``every=``. Replacing with the same timetable keeps its state.
        """
        task_name = task.name if isinstance(task, Task) else task
        schedule = build_schedule(name, task_name, cron=expr, every=every, **options)
        known = task if isinstance(task, Task) else self.app.tasks.get(task_name)
        if known is not None:  # where a scheduler that does not register it sends the ticks
            schedule = schedule.with_state(task_queue=known.queue)
        return self._upsert(schedule, self.app.now())

    def remove(self, name: str) -> bool:
        """Delete a stored schedule; True if it existed. Its history log is kept.

        A schedule declared in code comes back the next time a scheduler starts.
        """
        return self.app.broker.docs.delete(COLLECTION, validate_name(name))

    def list(self) -> builtins.list[Schedule]:
        """Every valid stored schedule, sorted by name (see ``scan`` for the invalid ones)."""
        return self.scan()[0]

    def scan(self) -> tuple[builtins.list[Schedule], dict[str, str]]:
        """Valid stored schedules, sorted by name, and the invalid ones: name -> the reason.

        One bad document (e.g. stored by an older version) must not hide the others.
        """
        docs = self.app.broker.docs.list(COLLECTION, self.app.now())
        good: builtins.list[Schedule] = []
        bad: dict[str, str] = {}
        for name in sorted(docs):
            try:
                schedule = check_stored(stored_schedule(docs[name]))
            except (ValidationError, TypeError, ValueError) as exc:
                bad[name] = str(exc)[:300]
                continue
            good.append(schedule)
        return good, bad

    def get(self, name: str) -> Schedule:
        """One stored schedule; ``ScheduleNotFound`` if there is none by that name."""
        doc = self.app.broker.docs.get(COLLECTION, validate_name(name), self.app.now())
        if doc is None:
            raise ScheduleNotFound(name)
        return Schedule.from_doc(doc)

    def set_paused(self, name: str, paused: bool) -> Schedule:
        """Pause or resume a schedule. Resuming does not fire the ticks missed while paused."""
        for _ in range(_CAS_ATTEMPTS):
            now = self.app.now()
            # ValidationError for a bad stored state or definition (cron: [] raised TypeError)
            current = check_stored(stored_schedule(self.get(name).to_doc()))
            if current.paused == paused:
                return current
            changes: dict[str, Any] = {"paused": paused, "updated_at": now, "rev": current.rev + 1}
            if not paused:
                changes["next_fire_at"] = current.spec.next_after(now)
            if self.app.broker.docs.update_if(COLLECTION, name, "rev", current.rev, changes, now):
                return current.with_state(**changes)
        raise ConveyorError(f"schedule {name!r}: too much contention, try again")

    def history(self, name: str, limit: int = 50) -> builtins.list[dict[str, Any]]:
        """The newest ``limit`` history entries of a schedule, newest first (``limit``: an
        integer 1..10,000, else ``ValidationError``)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
            raise ValidationError("limit", f"must be an integer 1..10000, got {limit!r:.40}")
        return self.app.broker.logs.read(history_log(validate_name(name)), limit)

    def next_runs(self, name: str, n: int = 10) -> builtins.list[float]:
        """The next ``n`` fire times of a stored schedule (epoch seconds), due ones included."""
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 1000:
            raise ValidationError("n", "must be an integer 1..1000")
        # a stored document that is not valid (any more): a ValidationError naming the field
        schedule = check_stored(stored_schedule(self.get(name).to_doc()))
        spec = schedule.spec
        first = None if schedule.paused else schedule.next_fire_at  # paused: from now on
        times = [first if first is not None else spec.next_after(self.app.now())]
        while len(times) < n:
            times.append(spec.next_after(times[-1]))
        return times

    # ------------------------------------------------------------------ storage
    def _upsert(self, schedule: Schedule, now: float) -> Schedule:
        """Store ``schedule``: create it, or update its definition keeping its firing state."""
        broker = self.app.broker
        wanted = _normalized(schedule.definition())
        for _ in range(_CAS_ATTEMPTS):
            doc = broker.docs.get(COLLECTION, schedule.name, now)
            if doc is None or _invalid(doc):  # an invalid stored document is replaced
                fresh = schedule.with_state(
                    next_fire_at=schedule.spec.next_after(now),
                    created_at=now,
                    updated_at=now,
                    rev=1,
                )
                broker.docs.put(COLLECTION, schedule.name, fresh.to_doc(), now)
                return fresh
            current = Schedule.from_doc(doc)
            stored = _normalized(current.definition())
            if stored == wanted and current.source == schedule.source:
                return current
            changes: dict[str, Any] = {
                **wanted,
                "source": schedule.source,
                "updated_at": now,
                "rev": current.rev + 1,
            }
            if any(stored[key] != wanted[key] for key in TIMING_FIELDS):
                changes["next_fire_at"] = schedule.spec.next_after(now)
            if broker.docs.update_if(COLLECTION, schedule.name, "rev", current.rev, changes, now):
                return Schedule.from_doc({**doc, **changes})
        raise ConveyorError(f"schedule {schedule.name!r}: too much contention, try again")


def _invalid(doc: Mapping[str, Any]) -> bool:
    """True for a stored document no scheduler can use (``scan`` lists it as invalid)."""
    try:
        check_stored(stored_schedule(doc))
    except ValidationError:
        return True
    return False


def _without(options: Mapping[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in options.items() if k != key}


def _normalized(definition: Mapping[str, Any]) -> dict[str, Any]:
    """The definition as it reads back from JSON storage (tuples become lists, ...)."""
    try:
        data: dict[str, Any] = orjson.loads(orjson.dumps(dict(definition)))
    except TypeError as exc:
        raise ValidationError(
            "args", f"schedule arguments must be plain JSON values: {exc}"
        ) from exc
    return data
