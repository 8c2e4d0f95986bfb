"""The transactional outbox: jobs for a broker that is not your database (Redis), written to an
outbox table inside your database transaction, then relayed to the broker exactly once.

``Outbox(app, url)`` installs itself as the app's transactional store: from then on
``task.options(connection=conn).enqueue(...)`` and ``app.enqueue_many(specs, connection=conn)``
insert one outbox row per job with ``conn`` (DB-API, SQLAlchemy ``Connection``/``Session`` or
Django's connection: ``conveyor.txn``), inside the caller's transaction: a rollback leaves no
row, a commit leaves a row the relay (``conveyor.relay``; ``conveyor relay APP`` or inside the
worker) pushes to the broker. The row's key is the job id, so a relay killed between the push
and the delete pushes again harmlessly: the broker refuses the id a second time
(``DuplicateJob``) and the relay only deletes the row. The table (``ddl``): portable SQL for
SQLite and PostgreSQL. Recipes, migrations and guarantees: docs/transactions.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from .broker.base import EnqueueResult
from .core.job import Job
from .core.serialization import encode_envelope
from .errors import DuplicateJob, ValidationError
from .runtime import HasRuntime, Runtime, as_runtime
from .txn import is_sqlite, placeholder, raw_connection

DEFAULT_TABLE = "conveyor_outbox"
MAX_TABLE_CHARS = 55  # 63 (PostgreSQL's identifier limit) - len("_created")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$")
_SAVEPOINT = "conveyor_outbox"


def check_table(name: str) -> str:
    """An SQL identifier (``table`` or ``schema.table``): letters, digits, underscores; the
    table part at most ``MAX_TABLE_CHARS`` long."""
    if not isinstance(name, str) or not _IDENT.match(name):
        raise ValidationError("table", f"must be an SQL identifier like conveyor_outbox, {name!r}")
    if len(name.rpartition(".")[2]) > MAX_TABLE_CHARS:
        # PostgreSQL cuts names at 63 bytes: a longer "<table>_failed" or "<table>_created"
        # would be cut to another name (at 63 characters, to the outbox table itself)
        raise ValidationError(
            "table", f"the table name must be at most {MAX_TABLE_CHARS} characters, {name!r}"
        )
    return name


def ddl(table: str = DEFAULT_TABLE) -> list[str]:
    """The statements that create the outbox table (idempotent; SQLite and PostgreSQL).

    ``id``: the job id (the relay's de-duplication key); ``created_at``: epoch seconds, the
    relay's order; ``payload``: the job's envelope (JSON text, docs/wire-format.md).
    """
    t = check_table(table)
    index = t.replace(".", "_") + "_created"
    return [
        f"CREATE TABLE IF NOT EXISTS {t} (id VARCHAR(255) PRIMARY KEY,"
        " created_at DOUBLE PRECISION NOT NULL, payload TEXT NOT NULL)",
        f"CREATE INDEX IF NOT EXISTS {index.rsplit('.', 1)[-1]} ON {t} (created_at, id)",
    ]


def failed_ddl(table: str = DEFAULT_TABLE) -> list[str]:
    """The statements that create ``<table>_failed`` (idempotent): rows the broker refused
    (``conveyor.relay``), with ``error`` (the refusal) and ``failed_at`` (epoch seconds). The
    relay runs them itself the first time it needs the table; run them in your migrations to
    own it. An operator fixes a row and moves it back with ``INSERT INTO <table> SELECT id,
    created_at, payload FROM <table>_failed WHERE id = ...`` (then deletes it there)."""
    t = check_table(table) + "_failed"
    return [
        f"CREATE TABLE IF NOT EXISTS {t} (id VARCHAR(255) PRIMARY KEY,"
        " created_at DOUBLE PRECISION NOT NULL, payload TEXT NOT NULL, error TEXT NOT NULL,"
        " failed_at DOUBLE PRECISION NOT NULL)"
    ]


def sqlalchemy_table(metadata: Any, table: str = DEFAULT_TABLE) -> Any:
    """The outbox as a SQLAlchemy ``Table`` on ``metadata`` (for Alembic autogenerate)."""
    import sqlalchemy as sa

    schema, _, name = check_table(table).rpartition(".")
    return sa.Table(
        name,
        metadata,
        sa.Column("id", sa.String(255), primary_key=True),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Index(f"{name}_created", "created_at", "id"),
        schema=schema or None,
    )


class Outbox:
    """Stores an app's ``connection=`` enqueues in an outbox table (see module docstring)."""

    def __init__(
        self,
        app: Runtime | HasRuntime,
        url: str | None = None,
        *,
        table: str = DEFAULT_TABLE,
        relay_in_worker: bool = False,
        batch: int = 500,
        interval: float = 0.5,
        connect: Callable[[], Any] | None = None,
    ) -> None:
        """Install on ``app``. ``url``: the database the relay reads (``sqlite:///path`` or
        ``postgresql://...``), or ``connect``: a function returning a new DB-API connection to
        it (the Django integration uses Django's settings); ``relay_in_worker``: every worker
        of this app also relays."""
        self.app = as_runtime(app)  # a Conveyor app or its runtime
        self.url = url
        self.connect = connect
        self.table = check_table(table)
        self.batch, self.interval = batch, interval
        self.app.producer.transactional = self
        if relay_in_worker:
            from .relay import RelayInWorker

            self.app.middleware.append(RelayInWorker(self))

    def create_table(self, connection: Any) -> None:
        """Run ``ddl`` with ``connection`` (committed by you, or at once in autocommit)."""
        raw = raw_connection(connection)
        cur = raw.cursor()
        for statement in ddl(self.table):
            cur.execute(statement)

    def enqueue_in_transaction(
        self,
        connection: Any,
        jobs: Sequence[Job],
        *,
        payloads: Sequence[bytes] | None = None,
    ) -> list[EnqueueResult]:
        """One outbox row per job with the caller's raw DB-API ``connection``, in a savepoint
        (``payloads``: the envelopes the producer encoded, stored as they are).

        Idempotency keys are resolved when the relay pushes (the broker keeps them), so every
        result here is ``duplicate=False``. A job id already in the outbox raises
        ``DuplicateJob`` after rolling back to the savepoint (the caller's work survives).
        """
        if not jobs:
            return []
        limit = self.app.settings.max_payload_bytes
        blobs = payloads or [encode_envelope(job, limit) for job in jobs]
        rows = [
            (job.id, job.created_at, blob.decode()) for job, blob in zip(jobs, blobs, strict=True)
        ]
        p = placeholder(connection)
        if is_sqlite(connection):
            from .broker.sqlite_txn import begin_transaction

            begin_transaction(connection)  # SAVEPOINT outside a transaction would commit on RELEASE
        cur = connection.cursor()
        cur.execute(f"SAVEPOINT {_SAVEPOINT}")
        try:
            cur.executemany(
                f"INSERT INTO {self.table} (id, created_at, payload) VALUES ({p}, {p}, {p})", rows
            )
        except Exception as exc:
            cur.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")
            cur.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
            if type(exc).__name__ != "IntegrityError":  # DB-API's name in every driver
                raise
            raise DuplicateJob(self._taken(cur, p, [r[0] for r in rows])) from exc
        cur.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
        return [EnqueueResult(job.id, False, job.state) for job in jobs]

    def _taken(self, cur: Any, p: str, ids: list[str]) -> str:
        """The first of ``ids`` already in the outbox (for the ``DuplicateJob`` message)."""
        marks = ", ".join([p] * len(ids))
        cur.execute(f"SELECT id FROM {self.table} WHERE id IN ({marks})", ids)
        found = {row[0] for row in cur.fetchall()}
        return next((i for i in ids if i in found), ids[0])
