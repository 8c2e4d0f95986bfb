"""The PostgreSQL schema: its own PostgreSQL schema, versioned, migrated only when asked
(``conveyor migrate`` or ``?migrate=true``), a newer version refused; never a silent change."""

from __future__ import annotations

from typing import Any

import orjson
import psycopg
import pytest
from click.testing import CliRunner

from conveyor import BrokerUnavailable, Conveyor
from conveyor.broker.base import Ack
from conveyor.broker.postgres import schema as pg_schema
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.cli.main import cli
from conveyor.core.state import JobState


def run_cli(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def tables(url: str, schema: str) -> set[str]:
    with psycopg.connect(url) as c:
        rows = c.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        )
        return {r[0] for r in rows}


def test_migrate_command_creates_then_reports_current(pg_server: Any) -> None:
    url = pg_server.new_database()
    check = run_cli("migrate", "--url", url, "--check", "--json")
    assert check.exit_code == 1 and orjson.loads(check.output)["found"] == 0
    first = run_cli("migrate", "--url", url, "--json")
    assert first.exit_code == 0, first.output
    assert orjson.loads(first.output)["found"] == 0
    assert orjson.loads(first.output)["version"] == pg_schema.SCHEMA_VERSION
    again = run_cli("migrate", "--url", url, "--check", "--json")
    assert again.exit_code == 0 and orjson.loads(again.output)["found"] == pg_schema.SCHEMA_VERSION
    assert {"jobs", "idem", "docs", "events", "schema_version"} <= tables(url, "conveyor")


def test_tables_live_in_their_own_schema(pg_server: Any) -> None:
    url = pg_server.new_database()
    app = Conveyor(f"{url}?schema=jobs_here")
    app.enqueue("t", args=[1])
    assert "jobs" in tables(url, "jobs_here")
    assert tables(url, "public") == set() and tables(url, "conveyor") == set()
    app.close()


def test_a_newer_schema_is_refused(pg_server: Any) -> None:
    url = pg_server.new_database()
    PostgresBroker.from_url(url).close()
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("UPDATE conveyor.schema_version SET version = 99")
    with pytest.raises(BrokerUnavailable, match="newer Conveyor"):
        PostgresBroker.from_url(url)


def test_an_older_schema_migrates_only_when_asked(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = pg_server.new_database()
    old = PostgresBroker.from_url(url)
    Conveyor(old).enqueue("t", args=["kept"])
    old.close()
    # This Conveyor pretends to be one version ahead, with one additive migration.
    monkeypatch.setattr(pg_schema, "SCHEMA_VERSION", pg_schema.SCHEMA_VERSION + 1)
    monkeypatch.setitem(
        pg_schema.MIGRATIONS,
        pg_schema.SCHEMA_VERSION - 1,
        "CREATE INDEX jobs_probe ON {S}.jobs (task)",
    )
    with pytest.raises(BrokerUnavailable, match="conveyor migrate"):
        PostgresBroker.from_url(url)
    assert run_cli("migrate", "--url", url, "--check").exit_code == 1
    new = PostgresBroker.from_url(url + "?migrate=true")
    assert [j.args for j in new.peek("default")] == [["kept"]]  # nothing lost
    new.close()
    with psycopg.connect(url) as c:
        version = c.execute("SELECT version FROM conveyor.schema_version").fetchone()
        probe = c.execute("SELECT to_regclass('conveyor.jobs_probe')").fetchone()
    assert version == (pg_schema.SCHEMA_VERSION,) and probe[0] is not None


def test_bad_url_options_are_named(pg_server: Any) -> None:
    from conveyor import ValidationError

    with pytest.raises(ValidationError, match="migrate"):
        PostgresBroker.from_url(pg_server.url + "?migrate=maybe")
    with pytest.raises(ValidationError, match="pool_size"):
        PostgresBroker.from_url(pg_server.url + "?pool_size=lots")


def test_libpq_options_with_spaces_reach_the_server(pg_server: Any) -> None:
    """``options=-c%20lock_timeout%3D300`` (libpq's way to set a session parameter) used to be
    re-encoded with "+" for the space, which libpq reads literally: the connection failed with
    'unrecognized configuration parameter "+lock_timeout"'."""
    sep = "&" if "?" in pg_server.url else "?"
    broker = PostgresBroker.from_url(pg_server.url + sep + "options=-c%20lock_timeout%3D300")
    try:
        with broker.pool().connection() as conn:
            assert conn.execute("SHOW lock_timeout").fetchone() == ("300ms",)
    finally:
        broker.close()


def test_a_version_2_schema_migrates_to_the_claim_overlay(pg_server: Any) -> None:
    """Version 2 (workflows and flow control, released first) -> 3 (the claim overlay): a
    pending job and one running under the old code (its whole envelope stored) both go on."""
    url = pg_server.new_database()
    old = PostgresBroker.from_url(url)
    app = Conveyor(old)
    job = app.enqueue("t", args=["kept"])
    running = app.enqueue("t", args=["running"])
    now = old.server_time()
    [held] = old.claim(["default"], now, limit=1, visibility_timeout=300, worker_id="w0")
    assert held.id == job.id
    assert old.extend([(held.id, held.token)], now, 300) == [True]  # envelope written whole
    old.close()
    with psycopg.connect(url, autocommit=True) as c:  # what version 2 looked like
        c.execute(
            "ALTER TABLE conveyor.jobs DROP COLUMN claims, DROP COLUMN started_at,"
            " DROP COLUMN worker"
        )
        c.execute("UPDATE conveyor.schema_version SET version = 2")
    with pytest.raises(BrokerUnavailable, match="conveyor migrate"):
        PostgresBroker.from_url(url)
    assert run_cli("migrate", "--url", url).exit_code == 0
    new = PostgresBroker.from_url(url)
    got = new.get(held.id)
    assert (got.state, got.attempts, got.worker_id) == (JobState.ACTIVE, 1, "w0")
    now = new.server_time()
    lease = new.claim(["default"], now, limit=1, visibility_timeout=30, worker_id="w")[0]
    assert (lease.id, lease.job.args, lease.job.attempts) == (running.id, ["running"], 1)
    assert new.get(running.id).worker_id == "w"
    acks = [Ack(lease.id, lease.token, 7), Ack(held.id, held.token, 8)]
    assert new.complete(acks, now) == [True, True]
    assert (new.get(running.id).result, new.get(held.id).result) == (7, 8)
    new.close()
