"""Run-time administration of the SQL brokers' flow control (issue 15): ``debounce``'s
``replace_waiting``, limit overrides (``flow_set_limit``) and ``flow_status``, written once for
SQLite and PostgreSQL (dialect seam: ``sqldb.Db``; split out of broker/sqllimits.py, which
re-exports both names)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import orjson

from ..core import lifecycle
from ..core.job import Job
from ..core.serialization import job_to_dict
from ..core.state import JobState
from .sqldb import Db

_DELAYED = (JobState.SCHEDULED, JobState.RETRY_SCHEDULED)


def replace_waiting(db: Db, job_id: str, job: Job, now: float) -> bool:
    """``debounce`` (issue 15): newest arguments; a scheduled job's delay restarts."""
    recs = db.rows("id = ?", (job_id,), full=True)
    if not recs or recs[0].corrupt is not None:
        return False
    stored = recs[0].job
    if not lifecycle.debounce(stored, job, now):
        return False
    due = stored.run_at if stored.state in _DELAYED else None
    db.run(
        "UPDATE {S}.jobs SET payload = ?, run_at = ?, due_at = ? WHERE id = ?",
        (orjson.dumps(job_to_dict(stored)), stored.run_at, due, job_id),
    )
    return True


class SqlFlowAdmin:
    """``flow_set_limit`` / ``flow_status`` / ``replace_waiting`` of the SQL brokers (mixed in;
    ``_db`` binds a transaction)."""

    _write: Callable[[], AbstractContextManager[Any]]
    _db: Callable[[Any], Db]

    def replace_waiting(self, job_id: str, job: Job, now: float) -> bool:
        """``debounce`` (issue 15): newest arguments; a scheduled job's delay restarts."""
        with self._write() as tx:
            return replace_waiting(self._db(tx), job_id, job, now)

    def flow_set_limit(self, name: str, spec: list[float] | None) -> None:
        """Override the limit of a limiter (``rate:<task>``) or one bucket / slot; None clears.

        Parked groups are looked at again by the next claim (a raised concurrency limit)."""
        with self._write() as tx:
            db = self._db(tx)
            db.lock()
            if spec is None:
                db.run("DELETE FROM {S}.flow_limits WHERE name = ?", (name,))
            else:
                db.run(
                    "INSERT INTO {S}.flow_limits (name, spec) VALUES (?, ?) ON CONFLICT (name)"
                    " DO UPDATE SET spec = excluded.spec",
                    (name, orjson.dumps([float(v) for v in spec]).decode()),
                )
            # every waiting group is looked at again by the next claim, under the new limit
            for (queue,) in db.run(
                "UPDATE {S}.flow_groups SET due = 0, why = NULL RETURNING queue"
            ).fetchall():
                db.wake(queue)
            db.run("DELETE FROM {S}.flow_waiters")

    def flow_status(self, now: float) -> dict[str, Any]:
        """Run-time limits, bucket tokens, running jobs per slot, waiting jobs per group."""
        with self._write() as tx:
            db = self._db(tx)

            def read(sql: str) -> list[Any]:
                return list(db.run(sql).fetchall())

            slots = read("SELECT name, job_id FROM {S}.flow_slots ORDER BY name, job_id")
            why = {(q, g): w for q, g, w in read("SELECT queue, grp, why FROM {S}.flow_groups")}
            waiting = read(
                "SELECT queue, grp, COUNT(*) FROM {S}.jobs WHERE state = 'pending'"
                " AND grp IS NOT NULL GROUP BY queue, grp ORDER BY queue, grp"
            )
            limits = read("SELECT name, spec FROM {S}.flow_limits")
            buckets = read("SELECT name, tokens FROM {S}.flow_buckets")
        running: dict[str, list[str]] = {}
        for name, job_id in slots:
            running.setdefault(name, []).append(job_id)
        return {
            "limits": {n: orjson.loads(s) for n, s in limits},
            "buckets": {n: round(t, 3) for n, t in buckets},
            "running": running,
            "groups": [
                {"queue": q, "group": g, "waiting": int(n), "why": why.get((q, g))}
                for q, g, n in waiting
            ],
        }
