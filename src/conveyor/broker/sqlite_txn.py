"""Transactional enqueue on SQLite: jobs written with the caller's ``sqlite3`` connection.

When the application keeps its own tables in the broker's database file, a job can be inserted
inside the application's transaction: it commits with the caller's rows (workers see it at their
next poll or wake-up: ``PRAGMA data_version`` changes on every commit of any connection) and it
vanishes with a rollback. The insert is the broker's own (``SqliteBroker._insert``: the same
rows, counts, idempotency keys and events) wrapped in a SAVEPOINT, so a refused batch (a taken
id) is undone alone and the caller's transaction goes on. Guarantees: docs/transactions.md.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..core.job import Job
from ..errors import ValidationError
from .base import EnqueueResult
from .sqlite_schema import SCHEMA_VERSION
from .sqlite_store import Tx, storage_error

if TYPE_CHECKING:
    from .sqlite import SqliteBroker

_SAVEPOINT = "conveyor_enqueue"


def enqueue_in_transaction(
    broker: SqliteBroker,
    conn: Any,
    jobs: Sequence[Job],
    payloads: Sequence[bytes] | None = None,
    also: Callable[[Tx], None] | None = None,
) -> list[EnqueueResult]:
    """Insert ``jobs`` (encoded as ``payloads`` when given) with ``conn`` inside its transaction
    (begun here in legacy mode); ``also`` writes more rows in the same savepoint (a workflow's
    graph: ``sqlflow``)."""
    if not isinstance(conn, sqlite3.Connection):
        raise ValidationError(
            "connection",
            f"the SQLite backend needs a sqlite3 connection to {broker.path},"
            f" got {type(conn).__module__}.{type(conn).__name__}",
        )
    if not jobs:
        return []
    check_database(broker.path, conn)
    begin_transaction(conn)
    conn.execute(f"SAVEPOINT {_SAVEPOINT}")
    try:
        tx = Tx(conn)
        results = broker._insert(tx, jobs, jobs[0].created_at, payloads)
        if also is not None:
            also(tx)
        broker._before_commit(tx)
    except BaseException as exc:
        conn.execute(f"ROLLBACK TO {_SAVEPOINT}")
        conn.execute(f"RELEASE {_SAVEPOINT}")
        if isinstance(exc, sqlite3.OperationalError):  # locked, full, read-only
            raise storage_error(broker.path, exc) from exc
        raise
    conn.execute(f"RELEASE {_SAVEPOINT}")
    return results


def check_database(path: str, conn: sqlite3.Connection) -> None:
    """Refuse a connection to another file, or to a file without the Conveyor schema."""
    files = {row[1]: row[2] for row in conn.execute("PRAGMA database_list")}
    main = files.get("main") or ""
    if not main or not os.path.exists(main) or not os.path.samefile(main, path):
        raise ValidationError(
            "connection",
            f"points at {main or 'an in-memory database'!r}, not the broker's file {path!r}:"
            " in-transaction enqueue needs the app and Conveyor to share one SQLite file",
        )
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    has_jobs = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobs'"
    ).fetchone()
    if version != SCHEMA_VERSION or not has_jobs:
        raise ValidationError(
            "connection",
            f"{main!r} has no Conveyor schema (version {version}, expected {SCHEMA_VERSION}):"
            " open Conveyor('sqlite:///...') on it once first (it creates and migrates it)",
        )


def begin_transaction(conn: sqlite3.Connection) -> None:
    """Make sure a transaction is open: the job must commit with the caller's work, not alone.

    In the stdlib's legacy mode (``isolation_level`` is a string) the module would begin one
    before the caller's next DML anyway, so beginning it here changes nothing for the caller.
    In autocommit mode (``isolation_level=None`` or ``autocommit=True``) there is no
    transaction to join: refused.
    """
    if conn.in_transaction:
        return
    autocommit = getattr(conn, "autocommit", -1)  # Python 3.12+: -1 = legacy control
    if conn.isolation_level is None or autocommit is True:
        raise ValidationError(
            "connection",
            "no open transaction (the connection is in autocommit mode): run BEGIN first,"
            " or the job would commit on its own",
        )
    conn.execute(f"BEGIN {conn.isolation_level}")
