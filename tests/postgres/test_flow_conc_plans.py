"""The general flow path (postgres/flow.py ``_HEADS``, ``_PLACE``; ``ConcurrencyLimit`` groups)
stays on its indexes whatever the statistics say: with none at all (a fresh or flushed table,
as bench/flow_control.py drains) or with ones that say nothing is pending (ANALYZE after a
drain), a cached generic plan must not walk every pending job of the queue per group (the
heads' look-up entered ``jobs_queue_created`` on ``(queue, state)``: ~26 of 31 s of a 20,000
job drain) nor read every flow group per claim."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from conveyor import ConcurrencyLimit, Conveyor
from conveyor.broker.base import Ack

pytest.importorskip("psycopg")

#: Jobs drained, of ``WAITING`` pending over ``KEYS`` keys.
JOBS, WAITING, KEYS = 2000, 20_000, 1000


def _app(url: str) -> tuple[Conveyor, Any]:
    app = Conveyor(url)

    @app.task(name="conc", concurrency=ConcurrencyLimit(1, key="key"))
    def conc(key: str, i: int) -> None: ...

    return app, conc


def _drain(app: Conveyor, n: int) -> None:
    done = 0
    while done < n:
        leases = app.broker.claim(["default"], time.time(), limit=32, visibility_timeout=60)
        assert leases, done
        app.broker.complete([Ack(x.id, x.token) for x in leases], time.time())
        done += len(leases)


def _reads(url: str) -> dict[str, int]:
    """Index tuples read per index of ``jobs``, and the rows ``flow_groups``' sequential scans
    read (``seq:flow_groups``)."""
    with psycopg.connect(url, autocommit=True) as c:
        out = {
            name: int(n)
            for name, n in c.execute(
                "SELECT indexrelname, idx_tup_read FROM pg_stat_user_indexes"
                " WHERE schemaname = 'conveyor' AND relname = 'jobs'"
            ).fetchall()
        }
        row = c.execute(
            "SELECT seq_tup_read FROM pg_stat_user_tables"
            " WHERE schemaname = 'conveyor' AND relname = 'flow_groups'"
        ).fetchone()
    out["seq:flow_groups"] = int(row[0]) if row else 0
    return out


def _after(url: str, before: dict[str, int]) -> dict[str, int]:
    """``_reads`` since ``before``, once the ended backends' statistics arrived."""
    deadline = time.monotonic() + 10
    while True:
        now = _reads(url)
        if now["jobs_pkey"] != before["jobs_pkey"] or time.monotonic() > deadline:
            return {k: v - before.get(k, 0) for k, v in now.items()}
        time.sleep(0.05)


@pytest.mark.parametrize("stats", ["none", "warm", "drained"])
def test_a_conc_drain_stays_on_its_indexes_whatever_the_statistics_say(
    pg_server: Any, stats: str
) -> None:
    url = pg_server.new_database()
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(
            f'ALTER DATABASE "{url.rsplit("/", 1)[1]}" SET plan_cache_mode = force_generic_plan'
        )
    app, conc = _app(url)
    if stats != "none":  # a drain first (bench/flow_control.py's warm-up), then maybe ANALYZE
        app.enqueue_many([conc.spec(f"k{i}", i) for i in range(200)])
        _drain(app, 200)
    if stats == "drained":
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("ANALYZE conveyor.jobs")
            c.execute("ANALYZE conveyor.flow_groups")
    for start in range(0, WAITING, 1000):  # in batches: one call of 20,000 held ~200 MB
        app.enqueue_many([conc.spec(f"k{i % KEYS}", i) for i in range(start, start + 1000)])
    app.close()  # a backend reports its statistics when it ends
    time.sleep(0.3)
    before = _reads(url)
    app, conc = _app(url)
    _drain(app, JOBS)
    app.close()
    walked = _after(url, before)
    assert walked["jobs_pkey"] > 0, walked  # the statistics did arrive
    assert walked["jobs_state_created"] + walked["jobs_queue_created"] < JOBS, walked
    # each claim of 32 reads its groups by key, not all KEYS of them (~2 x KEYS / 32 per job)
    assert walked["seq:flow_groups"] < JOBS, walked
