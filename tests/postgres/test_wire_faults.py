"""Faults under the hot transactions' own libpq pipeline (``postgres/wire.py``): a backend
killed between or inside round trips, prepared statements the server no longer accepts
(a schema change, a restart), statement / lock timeouts, hostile parameters, two threads on
one broker, and the module's caches staying bounded."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from conveyor.broker.base import Ack
from conveyor.broker.postgres import wire
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.core.job import Job
from conveyor.errors import BrokerUnavailable


@pytest.fixture
def admin(pg_server: Any) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection of its own (kills, locks, DDL)."""
    with psycopg.connect(pg_server.url, autocommit=True) as c:
        yield c


def _bounded(fn: Callable[[], Any], seconds: float = 30.0) -> Any:
    """``fn()`` in a thread: its result or exception, or a failure if it hangs."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # handed to the test thread
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the call hung"
    if "error" in out:
        raise out["error"]
    return out["value"]


def _retry(fn: Callable[[], Any], seconds: float = 30.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        try:
            return fn()
        except BrokerUnavailable:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def _pid(b: PostgresBroker) -> int:
    return int(b._read("SELECT pg_backend_pid()")[0][0])


def _server_statements(b: PostgresBroker) -> int:
    return int(b._read("SELECT count(*) FROM pg_prepared_statements")[0][0])


def test_killed_between_the_claims_round_trips_rolls_back_and_recovers(
    one: PostgresBroker, admin: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time()
    one.enqueue([Job(id="k", task="t")], now)
    one.claim(["other"], now, limit=1)  # LISTEN connection opened, statements prepared
    pid = _pid(one)
    real = wire.fire
    killed: list[int] = []

    def kill_first(conn: Any, batch: Any) -> None:
        if not killed:  # the commit round trip of the claim: its backend dies first
            killed.append(admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).rowcount)
            deadline = time.monotonic() + 10
            while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchall():
                assert time.monotonic() < deadline
        real(conn, batch)

    monkeypatch.setattr(wire, "fire", kill_first)
    with pytest.raises(BrokerUnavailable):
        _bounded(lambda: one.claim(["default"], now, limit=1))
    monkeypatch.setattr(wire, "fire", real)
    leases = _retry(lambda: one.claim(["default"], now, limit=1))
    assert [x.job.id for x in leases] == ["k"]  # the lost claim rolled back: not leased twice
    assert one.complete([Ack("k", leases[0].token)], now) == [True]
    assert one.counts()["default"] == {"completed": 1} | {
        k: v for k, v in one.counts()["default"].items() if k != "completed" and v == 0
    }


def test_killed_while_the_completion_waits_for_a_row_lock(
    one: PostgresBroker, admin: psycopg.Connection[Any]
) -> None:
    now = time.time()
    one.enqueue([Job(id="w", task="t")], now)
    [lease] = one.claim(["default"], now, limit=1)
    pid = _pid(one)
    locker = psycopg.connect(admin.info.dsn)
    locker.execute(one.sql("SELECT 1 FROM {S}.jobs WHERE id = 'w' FOR UPDATE"))
    done = threading.Event()
    out: dict[str, Any] = {}

    def complete() -> None:
        try:
            out["v"] = one.complete([Ack("w", lease.token)], now)
        except BaseException as exc:
            out["e"] = exc
        done.set()

    threading.Thread(target=complete, daemon=True).start()
    deadline = time.monotonic() + 20
    while not admin.execute(
        "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'", (pid,)
    ).fetchall():
        assert time.monotonic() < deadline
    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    assert done.wait(30), "the completion hung on a dead connection"
    assert isinstance(out.get("e"), BrokerUnavailable), out
    locker.rollback()
    locker.close()
    assert _retry(lambda: one.complete([Ack("w", lease.token)], now)) == [True]
    assert one.counts()["default"]["completed"] == 1


def test_a_column_added_while_statements_are_prepared_is_survived(
    one: PostgresBroker, admin: psycopg.Connection[Any]
) -> None:
    now = time.time()
    one.enqueue([Job(id=f"a{i}", task="t") for i in range(4)], now)
    [x] = one.claim(["default"], now, limit=1)
    assert one.complete([Ack(x.job.id, x.token)], now) == [True]
    admin.execute(one.sql("ALTER TABLE {S}.jobs ADD COLUMN wire_probe int"))
    try:
        for _ in range(3):
            [x] = one.claim(["default"], now, limit=1)
            assert one.complete([Ack(x.job.id, x.token)], now) == [True]
    finally:
        admin.execute(one.sql("ALTER TABLE {S}.jobs DROP COLUMN wire_probe"))
    assert one.counts()["default"]["completed"] == 4


def test_rollbacks_never_pile_up_prepared_statements_on_the_server(one: PostgresBroker) -> None:
    """A failed transaction forgets this module's names: the server must forget them too."""
    now = time.time()
    one.enqueue([Job(id="p", task="t")], now)
    [x] = one.claim(["default"], now, limit=1)
    one.complete([Ack("p", x.token)], now)
    base = _server_statements(one)
    for _ in range(5):
        with pytest.raises(RuntimeError), one._write() as tx:
            tx.rows(one.sql("SELECT count(*) FROM {S}.jobs WHERE queue = %s"), ("q",))
            raise RuntimeError("the caller's code failed")
        one.enqueue([Job(id="p2", task="t")], now)
        [x] = one.claim(["default"], now, limit=1)
        one.complete([Ack("p2", x.token)], now)
        with one._write() as tx:
            tx.first(one.sql("DELETE FROM {S}.jobs WHERE id = 'p2'"))
    assert _server_statements(one) <= base + 2


@pytest.mark.parametrize(
    "queue",
    ["q\x00nul", "\ud800lone", "ü名前", "x" * 100_000],
    ids=["nul", "surrogate", "utf8", "long"],
)
def test_a_hostile_queue_name_fails_clearly_or_goes_through_and_leaves_the_connection_usable(
    one: PostgresBroker, queue: str
) -> None:
    now = time.time()
    one.enqueue([Job(id="h", task="t")], now)
    try:
        got = _bounded(lambda: one.claim([queue, "default"], now, limit=1))
    except (ValueError, psycopg.DataError) as exc:  # ValidationError is a ValueError
        assert any(w in str(exc).lower() for w in ("queue", "nul", "utf", "surrogate"))
        got = one.claim(["default"], now, limit=1)
    assert [x.job.id for x in got] == ["h"]
    assert one.complete([Ack("h", got[0].token)], now) == [True]


@pytest.mark.parametrize("bad", ["a\x00b", "a\ud800b"], ids=["nul", "surrogate"])
def test_a_text_the_server_cannot_store_is_refused_never_truncated(
    one: PostgresBroker, bad: str
) -> None:
    """libpq reads a text parameter up to its first NUL: the wire must refuse it (as psycopg
    does), not store a cut value; a surrogate must not leave the pipeline half sent."""
    now = time.time()
    one.enqueue([Job(id="n", task="t")], now)
    with pytest.raises((psycopg.DataError, UnicodeEncodeError)), one._write() as tx:
        tx.count("default", "pending", "active")  # a settle batch: commit goes on the wire
        tx.defer(one.sql("UPDATE {S}.jobs SET worker = %s WHERE id = %s"), (bad, "n"))
    with pytest.raises((psycopg.DataError, UnicodeEncodeError)), one._write() as tx:
        tx.rows(one.sql("SELECT id FROM {S}.jobs WHERE worker = %s OR id = %s"), (bad, "n"))
    assert one._read(one.sql("SELECT worker FROM {S}.jobs WHERE id = 'n'")) == [(None,)]
    assert one.counts()["default"]["pending"] == 1
    [x] = one.claim(["default"], now, limit=1)  # the connection is still usable
    assert one.complete([Ack("n", x.token)], now) == [True]


def test_a_non_utf8_client_encoding_never_garbles_a_wire_parameter(
    pg_server: Any, admin: psycopg.Connection[Any]
) -> None:
    b = PostgresBroker.from_url(
        pg_server.url + "?pool_size=1&options=-c%20client_encoding%3DLATIN1"
    )
    try:
        b.flush_all()
        now = time.time()
        b.enqueue([Job(id="e", task="t")], now)
        [x] = b.claim(["default"], now, limit=1, worker_id="wörker")
        stored = admin.execute(b.sql("SELECT worker FROM {S}.jobs WHERE id = 'e'")).fetchall()
        assert stored == [("wörker",)]
        assert b.complete([Ack("e", x.token)], now) == [True]
    finally:
        b.close()


def test_rollbacks_on_a_wire_only_connection_leave_no_statement_on_the_server(
    one: PostgresBroker, admin: psycopg.Connection[Any]
) -> None:
    """psycopg sends ``DEALLOCATE ALL`` after a ROLLBACK only when ITS cache holds names: a
    connection that only ever ran the wire's statements must not keep the forgotten ones."""
    now = time.time()
    one.enqueue([Job(id=f"w{i}", task="t") for i in range(10)], now)  # never empty
    admin.execute("SELECT pg_terminate_backend(%s)", (_pid(one),))
    [x] = _retry(lambda: one.claim(["default"], now, limit=1))  # a new connection: wire only
    assert one.complete([Ack(x.job.id, x.token)], now) == [True]
    for _ in range(6):
        with one._connection() as c:
            assert not c._prepared._names  # nothing psycopg would deallocate
        [x] = one.claim(["default"], now, limit=1)
        with pytest.raises(RuntimeError), one._write() as tx:
            tx.rows(one.sql("SELECT count(*) FROM {S}.jobs WHERE queue = %s"), ("q",))
            raise RuntimeError("the caller's code failed")
        assert one.complete([Ack(x.job.id, x.token)], now) == [True]
    with one._connection() as c:
        left = c.execute("SELECT count(*) FROM pg_prepared_statements").fetchall()[0][0]
    assert left <= 12  # one claim's and one completion's statements, not six rounds' worth


def test_a_connection_given_back_inside_a_wire_transaction_leaves_nothing_behind(
    one: PostgresBroker, admin: psycopg.Connection[Any]
) -> None:
    now = time.time()
    one.enqueue([Job(id=f"g{i}", task="t") for i in range(10)], now)
    admin.execute("SELECT pg_terminate_backend(%s)", (_pid(one),))
    _retry(lambda: one.claim(["default"], now, limit=1))  # a new connection: wire only
    sql = one.sql("SELECT count(*) FROM {S}.jobs WHERE queue = %s")
    for i in range(6):
        with pytest.raises(RuntimeError), one._connection() as c:
            wire.rows(c, [("BEGIN", ()), (sql + f" AND {i} = {i}", ("default",))], ())
            raise RuntimeError("the caller failed inside its transaction")
        assert one.claim(["default"], now, limit=1)  # the connection is usable
    with one._connection() as c:
        left = c.execute("SELECT count(*) FROM pg_prepared_statements").fetchall()[0][0]
    assert left <= 8


def test_a_result_type_changed_under_prepared_statements_is_survived(
    one: PostgresBroker, admin: psycopg.Connection[Any]
) -> None:
    """A migration that changes a returned column's type: the server refuses the prepared
    plans once ("cached plan must not change result type", 0A000); the claim and the
    completion prepare again and go through, never failing every call after."""
    now = time.time()
    one.enqueue([Job(id=f"c{i}", task="t") for i in range(4)], now)
    [x] = one.claim(["default"], now, limit=1)
    assert one.complete([Ack(x.job.id, x.token)], now) == [True]
    admin.execute(one.sql("ALTER TABLE {S}.jobs ALTER COLUMN worker TYPE varchar(500)"))
    try:
        for _ in range(3):
            [x] = one.claim(["default"], now, limit=1)
            assert one.complete([Ack(x.job.id, x.token)], now) == [True]
    finally:
        admin.execute(one.sql("ALTER TABLE {S}.jobs ALTER COLUMN worker TYPE text"))
    assert one.counts()["default"]["completed"] == 4


# statement_timeout applies to every statement of the connection: at 150 ms a loaded CI machine
# made an ordinary one (the flush, the claim) time out now and then, so it gets a second
@pytest.mark.parametrize(("setting", "ms"), [("lock_timeout", 150), ("statement_timeout", 1000)])
def test_a_timeout_inside_a_wire_round_trip_rolls_back_and_the_connection_goes_on(
    pg_server: Any, admin: psycopg.Connection[Any], setting: str, ms: int
) -> None:
    b = PostgresBroker.from_url(pg_server.url + f"?pool_size=1&options=-c%20{setting}%3D{ms}")
    b.retry.attempts = 1  # the timeout itself is under test, not the lock-conflict retry
    try:
        b.flush_all()
        now = time.time()
        b.enqueue([Job(id="t", task="t")], now)
        [x] = b.claim(["default"], now, limit=1)
        locker = psycopg.connect(admin.info.dsn)
        locker.execute(b.sql("SELECT 1 FROM {S}.jobs WHERE id = 't' FOR UPDATE"))
        with pytest.raises(BrokerUnavailable) as err:
            _bounded(lambda: b.complete([Ack("t", x.token)], now))
        assert getattr(err.value.__cause__, "sqlstate", None) in ("55P03", "57014")
        locker.rollback()
        locker.close()
        assert b._read("SELECT 1") == [(1,)]  # usable, and out of the failed transaction
        assert b.counts()["default"]["active"] == 1  # nothing of the completion kept
        assert b.complete([Ack("t", x.token)], now) == [True]
        assert b.counts()["default"]["completed"] == 1
    finally:
        b.close()


def test_two_threads_sharing_a_broker_claim_and_complete_every_job_once(
    pg_server: Any,
) -> None:
    b = PostgresBroker.from_url(pg_server.url + "?pool_size=2")
    b.flush_all()
    now = time.time()
    n = 200
    b.enqueue([Job(id=f"m{i}", task="t") for i in range(n)], now)
    done: list[str] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            while True:
                got = b.claim(["default"], now, limit=3)
                if not got:
                    return
                assert b.complete([Ack(x.job.id, x.token) for x in got], now) == [True] * len(got)
                done.extend(x.job.id for x in got)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert not errors, errors
        assert sorted(done) == sorted(f"m{i}" for i in range(n))  # each once
        assert b.counts()["default"]["completed"] == n
    finally:
        b.close()


def test_sql_texts_built_per_call_do_not_grow_the_caches(one: PostgresBroker) -> None:
    calls = 600  # over both bounds (wire.MAX_TEXTS, wire.MAX_PREPARED)
    for i in range(calls):
        with one._write() as tx:
            got = tx.rows(one.sql("SELECT %s::int + " + str(i)), (1,))
        assert got == [(1 + i,)]
    assert len(wire._CONVERTED) < calls
    assert all(len(getattr(s, "names", s)) < calls for s in wire._PREPARED.values())
    assert int(one._read("SELECT count(*) FROM pg_prepared_statements")[0][0]) < calls


def test_a_server_restart_forgets_every_name_and_the_broker_goes_on() -> None:
    """A private cluster killed (SIGKILL) and started again: the pool's connections and the
    server's prepared statements are gone; a claim fails as an outage, never hangs, then the
    broker prepares again on new connections and loses nothing."""
    from tests.support.pg_proc import PgServer, available

    if not available():
        pytest.skip("PostgreSQL server binaries not found")
    server = PgServer().start()
    b = PostgresBroker.from_url(server.url + "?pool_size=2")
    try:
        now = time.time()
        b.enqueue([Job(id=f"s{i}", task="t") for i in range(4)], now)
        [x] = b.claim(["default"], now, limit=1)
        assert b.complete([Ack(x.job.id, x.token)], now) == [True]
        [y] = b.claim(["default"], now, limit=1)
        server.kill()
        with pytest.raises(BrokerUnavailable):
            _bounded(lambda: b.claim(["default"], now, limit=1))
        server.start()
        # a claim commits without waiting for its WAL (claim.py, "Durability"): one lost in
        # the crash answers False here and its job is pending again, claimed below
        lost = _retry(lambda: b.complete([Ack(y.job.id, y.token)], now)) == [False]
        got = _retry(lambda: b.claim(["default"], now, limit=4))
        assert sorted(g.job.id for g in got) == (["s1", "s2", "s3"] if lost else ["s2", "s3"])
        assert b.complete([Ack(g.job.id, g.token) for g in got], now) == [True] * len(got)
        assert b.counts()["default"]["completed"] == 4  # every job once, none lost
    finally:
        b.close()
        server.stop()


def test_large_parameters_and_results_cross_the_wire_whole(one: PostgresBroker) -> None:
    big = "ü" * 3_000_000  # 6 MB of UTF-8: more than the socket takes in one send
    with one._write() as tx:
        got = tx.rows(
            one.sql("SELECT length(%s), octet_length(%s), repeat(%s, 400000)"), (big, big, "ab")
        )
    assert got == [(len(big), 2 * len(big), "ab" * 400_000)]
    now = time.time()
    one.enqueue([Job(id="z", task="t")], now)
    [x] = one.claim(["default"], now, limit=1)  # the connection is usable after
    assert one.complete([Ack("z", x.token)], now) == [True]
