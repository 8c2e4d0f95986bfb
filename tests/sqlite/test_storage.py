"""SqliteBroker storage: URLs and pragmas, bad rows, counts bookkeeping, events, threads, fork,
waking, busy handling. (Semantics shared with the other backends live in tests/contract.)"""

from __future__ import annotations

import multiprocessing
import random
import sqlite3
import threading
import time
from collections import Counter
from typing import Any

import orjson
import pytest

from conveyor import Conveyor, FakeClock, JobState, ValidationError
from conveyor.broker.base import Ack
from conveyor.broker.sqlite import SqliteBroker
from conveyor.config import Retention
from conveyor.core.ids import new_ulid
from conveyor.core.job import Job
from conveyor.errors import BrokerUnavailable

from .conftest import T0, wait_until


def jobs(n: int, rng: random.Random, now: float = T0, **fields: Any) -> list[Job]:
    return [
        Job(id=new_ulid(now, rng), task="t", args=[i], run_at=now, created_at=now, **fields)
        for i in range(n)
    ]


def test_url_forms_and_pragmas(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    rel = SqliteBroker.from_url("sqlite:///rel.db")
    assert rel.path == str(tmp_path / "rel.db") and rel.url == "sqlite:///rel.db"
    absolute = SqliteBroker.from_url(f"sqlite:///{tmp_path}/abs.db?synchronous=full")
    assert absolute.path == str(tmp_path / "abs.db")
    conn = absolute._conn()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000
    assert rel._conn().execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert rel._conn().execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # INCREMENTAL
    for bad in (
        "sqlite://",
        "sqlite:///",
        "sqlite:///x.db?cache=shared",
        "sqlite:///:memory:",
        "sqlite:///x.db?synchronous=sometimes",
    ):
        with pytest.raises(ValidationError):
            SqliteBroker.from_url(bad)
    rel.close()
    absolute.close()


def test_unknown_schema_version_is_refused(db_path: str) -> None:
    SqliteBroker(db_path).close()
    with sqlite3.connect(db_path) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(BrokerUnavailable, match="schema version 99"):
        SqliteBroker(db_path)


GOOD = {"v": 1, "id": "?", "task": "noop", "queue": "default", "state": "pending"}
GARBAGE: dict[str, Any] = {
    "not-json": b"{this is not json",
    "empty": b"",
    "array": b"[1, 2, 3]",
    "version-2": orjson.dumps({**GOOD, "v": 2}),
    "missing-fields": orjson.dumps({"v": 1, "id": "missing-fields"}),
    "bad-state": orjson.dumps({**GOOD, "state": "exploded"}),
    "bad-kwargs": orjson.dumps({**GOOD, "kwargs": [1]}),
    "bad-typed": orjson.dumps({**GOOD, "args": [{"$dt": "yesterday-ish"}]}),
    "other-row": orjson.dumps({**GOOD, "id": "someone-else"}),
    "non-utf8": b"\xff\xfe\x00garbage",
    "text-not-blob": "plain text",
}


def test_garbage_rows_are_dead_lettered_and_the_worker_carries_on(db_path: str) -> None:
    clock = FakeClock(T0)
    app = Conveyor(SqliteBroker(db_path), clock=clock, rng=random.Random(2))
    ran: list[int] = []

    @app.task
    def noop(n: int) -> None:
        ran.append(n)

    first = noop.enqueue(1)
    planted = {name: noop.options(job_id=name).enqueue(0) for name in GARBAGE}
    later = noop.options(job_id="later", delay=10).enqueue(0)  # garbage that must wait its turn
    noop.options(job_id="revived").enqueue(0)
    last = noop.enqueue(2)
    with sqlite3.connect(db_path) as raw:
        for name, payload in [*GARBAGE.items(), ("later", b"{oops"), ("revived", b"{oops")]:
            raw.execute("UPDATE jobs SET payload = ? WHERE id = ?", (payload, name))
    stub = app.get_job("not-json")  # readable before it is claimed: a stub from the columns
    assert stub.state is JobState.PENDING and stub.task == "noop"
    assert "decode_error" in stub.metadata
    assert app.search(state=JobState.PENDING).total == len(GARBAGE) + 3
    assert app.cancel("revived") and app.requeue_dead("revived")  # the bad bytes stay as they are
    assert app.worker().run_until_idle() == 2
    assert ran == [1, 2] and later.refresh().state is JobState.SCHEDULED
    clock.advance(10)  # promoted with its bad bytes, then dead-lettered by the claim, never run
    assert app.worker().run_until_idle() == 0 and ran == [1, 2]
    assert first.refresh().state is last.refresh().state is JobState.COMPLETED
    for name in [*planted, "later", "revived"]:
        job = app.get_job(name)
        assert job.state is JobState.DEAD_LETTER, name
        assert job.errors[-1]["kind"] == "decode_error" and job.errors[-1]["type"] == "DecodeError"
    with sqlite3.connect(db_path) as raw:
        kept = dict(raw.execute("SELECT id, corrupt FROM jobs WHERE corrupt IS NOT NULL"))
    assert kept["not-json"] == GARBAGE["not-json"] and kept["text-not-blob"] == b"plain text"
    counts = app.broker.counts()["default"]
    assert counts["dead_letter"] == len(GARBAGE) + 2 and counts["pending"] == 0
    assert app.requeue_dead("not-json") and app.get_job("not-json").state is JobState.PENDING


def _true_counts(db_path: str) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    with sqlite3.connect(db_path) as raw:
        for queue, state, n in raw.execute("SELECT queue, state, COUNT(*) FROM jobs GROUP BY 1, 2"):
            out.setdefault(queue, {})[state] = n
    return out


def test_counts_table_stays_exact_through_every_kind_of_change(db_path: str) -> None:
    retention = Retention(completed_max=7, dead_letter_max=5, completed_ttl=50, cancelled_ttl=30)
    broker = SqliteBroker(db_path, retention)
    rng = random.Random(11)
    now = T0
    for step in range(300):
        now += rng.uniform(0, 3)
        queue = rng.choice(["a", "b", "c"])
        op = rng.random()
        if op < 0.3:
            batch = jobs(rng.randint(1, 4), rng, now, queue=queue)
            for job in batch[::2]:
                job.state, job.run_at = JobState.SCHEDULED, now + rng.uniform(1, 20)
            broker.enqueue(batch, now)
        elif op < 0.7:
            vt = rng.choice([2, 60])
            for lease in broker.claim([queue], now, limit=3, visibility_timeout=vt):
                roll = rng.random()
                if roll < 0.5:
                    broker.complete([Ack(lease.id, lease.token)], now)
                elif roll < 0.7:
                    retry = None if rng.random() < 0.5 else now + 5
                    broker.fail(lease.id, lease.token, now, error={"kind": "error"}, retry_at=retry)
                elif roll < 0.8:
                    broker.release(lease.id, lease.token, now, delay=rng.choice([0, 4]))
        elif op < 0.8:
            broker.reap_expired(now, max_lost=2)
        elif op < 0.9:
            page = broker.search(broker_query(queue))
            for job in page.items[:2]:
                broker.cancel(job.id, now) or broker.requeue(job.id, now)
        else:
            broker.purge(now, older_than=rng.choice([None, 10.0]), queue=rng.choice([None, queue]))
        expected = _true_counts(db_path)
        actual = {q: {s: n for s, n in per.items() if n} for q, per in broker.counts().items()}
        assert {q: per for q, per in actual.items() if per} == expected, f"step {step}"
    assert sum(broker.counts()["a"].values()) > 0
    broker.close()


def broker_query(queue: str) -> Any:
    from conveyor.broker.base import SearchQuery

    return SearchQuery(queue=queue, page_size=5)


def test_events_are_chunked_capped_and_resumable(db_path: str) -> None:
    broker = SqliteBroker(db_path, Retention(events_max=5))
    rng = random.Random(1)
    broker.enqueue(jobs(12, rng), T0)
    events, cursor = broker.events_read(None, 100)
    assert [e["type"] for e in events] == ["enqueued"] * 5, "only the newest events_max are kept"
    assert [int(e["cursor"]) for e in events] == list(range(8, 13))
    assert broker.events_read(cursor, 10) == ([], cursor)
    first_two, mid = broker.events_read(None, 2)
    rest, end = broker.events_read(mid, 100)
    assert [e["cursor"] for e in first_two + rest] == [e["cursor"] for e in events]
    broker.events_add([{"type": "worker_up", "worker": "w1", "at": T0}])
    new, _ = broker.events_read(end, 10)
    assert [(e["type"], e["cursor"]) for e in new] == [("worker_up", "13")]
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("SELECT COUNT(*) FROM events").fetchone()[0] <= 3, "one row per txn"
    broker.close()


def test_threads_share_one_broker_and_claim_each_job_once(sbroker: SqliteBroker) -> None:
    rng = random.Random(3)
    for _ in range(4):
        sbroker.enqueue(jobs(500, rng), T0)
    claimed: list[list[str]] = [[] for _ in range(8)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def claimer(n: int) -> None:
        local = random.Random(n)
        try:
            barrier.wait()
            while leases := sbroker.claim(
                ["default"],
                T0,
                limit=local.randint(1, 6),
                visibility_timeout=600,
                worker_id=f"w{n}",
            ):
                claimed[n].extend(lease.id for lease in leases)
                assert all(sbroker.complete([Ack(x.id, x.token) for x in leases], T0))
                time.sleep(0)  # hand the GIL on, as a worker does after a claim: threads interleave
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    seen = Counter(i for part in claimed for i in part)
    assert len(seen) == 2000 and max(seen.values()) == 1
    assert sum(1 for part in claimed if part) > 1, "the threads did not overlap"
    assert sbroker.counts()["default"]["completed"] == 2000


def _child_uses_inherited_broker(broker: SqliteBroker, out: Any) -> None:
    broker.enqueue(jobs(3, random.Random(9)), T0)
    out.put(len(broker.claim(["default"], T0, limit=10, worker_id="child")))


def test_a_forked_child_reopens_its_own_connection(sbroker: SqliteBroker) -> None:
    sbroker.enqueue(jobs(2, random.Random(8)), T0)  # the parent's connection is open
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_child_uses_inherited_broker, args=(sbroker, out))
    child.start()
    assert out.get(timeout=60) == 5
    child.join(60)
    assert child.exitcode == 0
    assert sbroker.counts()["default"]["active"] == 5  # the parent's connection still works
    assert sbroker.enqueue(jobs(1, random.Random(10)), T0)[0].duplicate is False


def test_wait_for_work_wakes_on_another_connections_commit(db_path: str) -> None:
    waiter, producer = SqliteBroker(db_path), SqliteBroker(db_path)
    started = time.monotonic()
    waiter.wait_for_work(["default"], 0.2)  # nothing there: returns at the timeout
    assert time.monotonic() - started >= 0.19
    woke = threading.Event()

    def wait() -> None:
        waiter.wait_for_work(["default"], 30)
        woke.set()

    thread = threading.Thread(target=wait)
    thread.start()
    producer.pause("other")  # a commit that brings no work: the waiter keeps waiting
    producer.enqueue(jobs(1, random.Random(4), queue="other"), T0)
    producer.enqueue(jobs(1, random.Random(5)), T0)
    wait_until(woke.is_set, 10, "wait_for_work to return after the enqueue")
    thread.join(10)
    waiter.pause("default")
    started = time.monotonic()
    waiter.wait_for_work(["default"], 0.2)  # a ready job in a paused queue does not count
    assert time.monotonic() - started >= 0.19
    waiter.close()
    producer.close()


def test_busy_database_waits_then_reports_unavailable(db_path: str) -> None:
    patient = SqliteBroker(db_path)
    hasty = SqliteBroker(db_path, busy_timeout=0.05)
    blocker = sqlite3.connect(db_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    with pytest.raises(BrokerUnavailable, match="locked"):
        hasty.enqueue(jobs(1, random.Random(1)), T0)
    result: list[Any] = []
    thread = threading.Thread(
        target=lambda: result.append(patient.enqueue(jobs(1, random.Random(2)), T0))
    )
    thread.start()
    thread.join(0.3)
    assert thread.is_alive() and not result, "the writer waits for the lock"
    blocker.execute("COMMIT")
    thread.join(30)
    assert len(result) == 1 and patient.counts()["default"]["pending"] == 1
    assert hasty.counts()["default"]["pending"] == 1, "readers are never blocked"
