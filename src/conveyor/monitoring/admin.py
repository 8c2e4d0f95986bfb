"""Admin reads and writes over one runtime, unaudited: the logic behind ``Conveyor``'s methods.

``app.stats()``, ``app.workers()``, ``app.search(...)``, ``app.cancel``, ``app.requeue_dead``,
``app.purge_dead``, ``app.pause`` and ``app.resume`` delegate here, and so do the audited
``Operator`` actions and the ``Inspector`` (``monitoring/actions.py``, ``inspect.py``), which
therefore never need the facade (``run_now`` and ``delete_job`` serve only operators). Each
function validates its input (``ValidationError`` naming the field) and makes one broker call
(an action on a sharded queue's logical name: one per member, ``queue_members``).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import replace
from itertools import islice
from typing import Any

from ..broker import jobdocs
from ..broker.base import Page, SearchQuery
from ..core.job import validate_queue_name
from ..core.shards import fold_counts, parse_shard
from ..core.state import TERMINAL_STATES, JobState
from ..errors import ValidationError
from ..runtime import Runtime
from ..worker.presence import COLLECTION as WORKERS
from .workerdoc import clean_worker


def queue_members(rt: Runtime, queue: str) -> list[str]:
    """The physical queues an operator's action on ``queue`` reaches: a sharded queue's shards
    (those this process declares, and any other stored queue named as a shard of it: shards of
    another shard count, or a process that does not declare the queue, e.g. ``conveyor --url``)
    and the name itself (jobs stored before the queue was sharded); else ``[queue]``."""
    names = rt.shards.members(queue)
    found = [
        q
        for q in rt.broker.queues()
        if q not in names and (parsed := parse_shard(q)) is not None and parsed[0] == queue
    ]
    return [*names[:-1], *found, names[-1]]


def workers(rt: Runtime) -> list[dict[str, Any]]:
    """Heartbeat records of live workers, by id."""
    docs = rt.broker.docs.list(WORKERS, rt.now()).values()
    clean = (clean_worker(d) for d in docs if isinstance(d, dict))  # any writer's record
    return sorted(clean, key=lambda w: str(w.get("id")))


def worker_queues(worker: dict[str, Any]) -> list[str]:
    """Queue names a worker record serves (weights like ``high:5`` stripped)."""
    raw = worker.get("queues") or []
    if isinstance(raw, str):
        raw = raw.split(",")
    return [str(q).split(":", 1)[0].strip() for q in raw if str(q).strip()]


def stats(rt: Runtime) -> dict[str, Any]:
    """Counts per queue and state, paused flags, and the live workers."""
    paused = rt.broker.paused_queues()
    queues = fold_counts(rt.broker.counts(), rt.shards)  # a sharded queue: one entry
    for queue, counts in queues.items():
        members = list(counts.get("shards") or ()) or [queue]
        counts["paused"] = all(q in paused for q in members)
    return {"queues": queues, "workers": workers(rt)}


def search(
    rt: Runtime,
    *,
    id: str | None = None,
    state: JobState | str | None = None,
    task: str | None = None,
    queue: str | None = None,
    since: float | None = None,
    until: float | None = None,
    error: str | None = None,
    text: str | None = None,
    page: int = 1,
    page_size: int = 50,
    whole: bool = True,
) -> Page:
    """Search stored jobs (newest first) with filters and pagination. ``queue``: a sharded
    queue's name searches all its members (``queue_members``) unless not ``whole``."""
    if state is not None:
        try:
            state = JobState(state)
        except ValueError as exc:
            states = [s.value for s in JobState]
            raise ValidationError("state", f"must be one of {states}") from exc
    _check_page(page, page_size)
    for name, value in (("id", id), ("task", task), ("queue", queue), ("error", error)):
        _check_text(name, value)
    _check_text("text", text)
    since, until = _time_bound("since", since), _time_bound("until", until)
    query = SearchQuery(id, state, task, queue, since, until, error, text, page, page_size)
    members = queue_members(rt, queue) if queue is not None and whole else []
    if len(members) < 2:
        return rt.broker.search(query)
    return _search_members(rt, query, members)


def check_job_id(job_id: object) -> str:
    """A job id as given to an operator action: a string (an int was "not found" on some
    backends and a raw TypeError or database error on others)."""
    if not isinstance(job_id, str):
        raise ValidationError("job_id", f"must be a string, got {type(job_id).__name__}")
    return job_id


def check_count(value: object, name: str, top: int = 1000) -> int:
    """A count argument (``peek``'s ``n``, ``dead_letters``' ``limit``): an integer 1..top."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
        raise ValidationError(name, f"must be an integer 1..{top}, got {value!r:.40}")
    return value


def _check_page(page: object, page_size: object) -> None:
    """``page`` an integer >= 1, ``page_size`` 1..1000 (a string or a float reached the
    backends: raw TypeErrors, an empty page on some, a database error on others)."""
    if isinstance(page, bool) or not isinstance(page, int) or page < 1:
        raise ValidationError("page", f"must be an integer >= 1, got {page!r:.40}")
    if isinstance(page_size, bool) or not isinstance(page_size, int) or not 1 <= page_size <= 1000:
        raise ValidationError("page_size", f"must be an integer 1..1000, got {page_size!r:.40}")


def _check_text(name: str, value: object) -> None:
    """A text filter: None or a string."""
    if value is not None and not isinstance(value, str):
        raise ValidationError(name, f"must be a string, got {type(value).__name__}")


def _time_bound(name: str, value: object) -> float | None:
    """``since`` / ``until``: None or finite epoch seconds."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValidationError(name, f"must be epoch seconds (a finite number), got {value!r:.40}")
    return float(value)


def _search_members(rt: Runtime, query: SearchQuery, members: list[str]) -> Page:
    """One page of ``query`` over several queues (a sharded queue's members): each queue's
    newest ``page * page_size`` matches, merged newest first as one search orders them."""
    top = query.page * query.page_size
    pages = [rt.broker.search(replace(query, queue=q, page=1, page_size=top)) for q in members]
    merged = heapq.merge(
        *(p.items for p in pages), key=lambda j: (j.created_at, j.id), reverse=True
    )
    items = list(islice(merged, top - query.page_size, top))
    return Page(items, sum(p.total for p in pages), query.page, query.page_size)


def cancel(rt: Runtime, job_id: str, by: str = "") -> bool:
    """Cancel a job: a waiting one at once; a running one by asking the worker holding its
    lease to stop it (it ends ``cancelled`` within about a second: ``worker/cancel.py``).
    False if it is finished or unknown."""
    check_job_id(job_id)
    now = rt.now()
    if rt.broker.cancel(job_id, now):
        return True
    job = rt.broker.get(job_id)
    if job is None or job.state is not JobState.ACTIVE:
        return False
    jobdocs.request_cancel(rt.broker, job_id, now, by)
    return True


def requeue_dead(rt: Runtime, job_id: str) -> bool:
    """Run a dead-lettered (or cancelled) job again with fresh attempts (a workflow node that
    never got its parents' results reads them again: ``Broker.requeue_node``)."""
    check_job_id(job_id)
    job = rt.broker.get(job_id)
    if job is not None and "workflow" in job.metadata:  # it may need its parents' results
        ok = rt.broker.requeue_node(job_id, rt.now())
    else:
        ok = rt.broker.requeue(job_id, rt.now())
    if ok:  # a cancel request that arrived as the job ended must not stop its next run
        jobdocs.forget_cancel(rt.broker, job_id)
    return ok


def run_now(rt: Runtime, job_id: str) -> bool:
    """Make a scheduled or retrying job due now; False in any other state."""
    check_job_id(job_id)
    return rt.broker.run_now(job_id, rt.now())


def delete_job(rt: Runtime, job_id: str) -> bool:
    """Delete a job that is not running; False when it is running or unknown, or when it is
    an unfinished workflow node (the nodes after it would wait for ever: cancel it instead,
    its dependants end with it)."""
    check_job_id(job_id)
    job = rt.broker.get(job_id)
    if job is None or ("workflow" in job.metadata and job.state not in TERMINAL_STATES):
        return False
    return rt.broker.delete_job(job_id, rt.now())


def purge_dead(rt: Runtime, older_than: float | None = None, queue: str | None = None) -> int:
    """Delete dead letters finished more than ``older_than`` seconds ago (all if None;
    else finite seconds >= 0: NaN purged nothing or everything depending on the backend)."""
    if older_than is not None:
        limit = older_than
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int | float)
            or not 0 <= limit < math.inf
        ):
            raise ValidationError(
                "older_than", f"must be a finite number of seconds >= 0, got {limit!r:.40}"
            )
    if queue is None:
        return rt.broker.purge(rt.now(), older_than=older_than)
    members = queue_members(rt, validate_queue_name(queue))  # a sharded queue: every shard
    return sum(rt.broker.purge(rt.now(), older_than=older_than, queue=q) for q in members)


def pause(rt: Runtime, queue: str) -> None:
    """Workers stop claiming from ``queue`` (running jobs finish); every shard of a
    sharded queue."""
    for name in queue_members(rt, validate_queue_name(queue)):
        rt.broker.pause(name)


def resume(rt: Runtime, queue: str) -> None:
    """Undo ``pause``."""
    for name in queue_members(rt, validate_queue_name(queue)):
        rt.broker.resume(name)
