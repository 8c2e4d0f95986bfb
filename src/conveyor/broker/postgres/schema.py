"""Schema of the PostgreSQL backend, its version and the migrations.

Everything lives in one PostgreSQL schema (default ``conveyor``; ``?schema=`` in the URL), so
Conveyor's tables never mix with the application's. ``{S}`` in the SQL below stands for the
quoted schema name. The version is the single row of ``{S}.schema_version``.

* A database without the schema gets ``SCHEMA`` at the current ``SCHEMA_VERSION`` (creating is
  never destructive), at start-up or by ``conveyor migrate``.
* An older version is migrated only when asked (``conveyor migrate``, or ``?migrate=true`` in
  the URL: ``PostgresBroker(..., migrate=True)``), inside one transaction under an advisory lock
  (all or nothing; concurrent starters wait, then see the new version). Otherwise start-up is
  refused with an error naming the command. A migration never drops data silently: one that
  must is refused unless the operator runs it explicitly.
* A newer or unknown version is refused (written by a newer Conveyor).

Version history:

* 1 — the first schema (docs/architecture-postgres.md explains every table and index).
* 2 — the claim overlay: ``jobs.claims``, ``jobs.started_at``, ``jobs.worker`` (added columns,
  nothing rewritten). The claim writes them instead of the envelope (``postgres/rec.py``).
"""

from __future__ import annotations

from typing import Any

SCHEMA_VERSION = 2

#: Text columns compare by code point (``COLLATE "C"``): the same order as Python's ``sorted``
#: and the other backends, and id-prefix search can use the b-tree as a range.
SCHEMA = """
CREATE SCHEMA IF NOT EXISTS {S};
CREATE TABLE {S}.schema_version (version integer NOT NULL);
CREATE SEQUENCE {S}.job_seq;
CREATE TABLE {S}.jobs (
  rid bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id text COLLATE "C" NOT NULL UNIQUE,
  queue text COLLATE "C" NOT NULL,
  task text COLLATE "C" NOT NULL,
  state text COLLATE "C" NOT NULL,
  priority integer NOT NULL,
  seq bigint NOT NULL,
  run_at double precision NOT NULL,
  created_at double precision NOT NULL,
  finished_at double precision,
  due_at double precision,
  lease_at double precision,
  token text,
  last_error text,
  payload bytea NOT NULL,
  corrupt bytea,
  claims integer NOT NULL DEFAULT 0,
  started_at double precision,
  worker text
) WITH (fillfactor = 80);
CREATE INDEX jobs_ready ON {S}.jobs (queue, priority, seq) WHERE state = 'pending';
CREATE INDEX jobs_due ON {S}.jobs (due_at, seq) WHERE due_at IS NOT NULL;
CREATE INDEX jobs_lease ON {S}.jobs (lease_at) WHERE lease_at IS NOT NULL;
CREATE INDEX jobs_finished ON {S}.jobs (queue, state, seq) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_created ON {S}.jobs (created_at);
CREATE INDEX jobs_state_created ON {S}.jobs (state, created_at);
CREATE INDEX jobs_queue_created ON {S}.jobs (queue, created_at);
CREATE INDEX jobs_task_created ON {S}.jobs (task, created_at);
CREATE TABLE {S}.idem (
  queue text COLLATE "C" NOT NULL,
  key text COLLATE "C" NOT NULL,
  job_id text COLLATE "C" NOT NULL,
  expires_at double precision NOT NULL,
  PRIMARY KEY (queue, key)
);
CREATE INDEX idem_expiry ON {S}.idem (expires_at);
CREATE TABLE {S}.counts (
  queue text COLLATE "C" NOT NULL,
  state text COLLATE "C" NOT NULL,
  n bigint NOT NULL,
  PRIMARY KEY (queue, state)
);
CREATE TABLE {S}.counts_log (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  queue text COLLATE "C" NOT NULL,
  state text COLLATE "C" NOT NULL,
  d bigint NOT NULL
);
CREATE TABLE {S}.meta (key text PRIMARY KEY, n bigint NOT NULL);
INSERT INTO {S}.meta (key, n) VALUES ('event', 0);
CREATE TABLE {S}.queues (name text COLLATE "C" PRIMARY KEY, paused boolean NOT NULL DEFAULT false);
CREATE TABLE {S}.docs (
  collection text COLLATE "C" NOT NULL,
  name text COLLATE "C" NOT NULL,
  body bytea NOT NULL,
  expires_at double precision,
  PRIMARY KEY (collection, name)
);
CREATE INDEX docs_expiry ON {S}.docs (expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE {S}.logs (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name text COLLATE "C" NOT NULL,
  body bytea NOT NULL
);
CREATE INDEX logs_name ON {S}.logs (name, seq);
CREATE TABLE {S}.events (last bigint PRIMARY KEY, n integer NOT NULL, body bytea NOT NULL);
CREATE TABLE {S}.events_pending (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  body bytea NOT NULL
);
CREATE TABLE {S}.counters (
  bucket text COLLATE "C" PRIMARY KEY,
  body bytea NOT NULL,
  expires_at double precision NOT NULL
);
CREATE INDEX counters_expiry ON {S}.counters (expires_at)"""

#: ``MIGRATIONS[v]`` turns a version ``v`` schema into version ``v + 1``.
MIGRATIONS: dict[int, str] = {
    # 2: the claim overlay (postgres/rec.py); v1 rows have claims = 0: their envelope is whole
    1: "ALTER TABLE {S}.jobs ADD COLUMN claims integer NOT NULL DEFAULT 0,"
    " ADD COLUMN started_at double precision, ADD COLUMN worker text",
}

#: The advisory lock key serialising schema creation and migration (any schema name).
LOCK_KEY = 0x636F6E76  # "conv"


class SchemaError(RuntimeError):
    """The database's schema version cannot be used by this version of Conveyor."""


def quote_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def statements(script: str, schema: str) -> list[str]:
    """The ``;``-separated statements of ``script`` with ``{S}`` bound to ``schema``."""
    quoted = quote_ident(schema)
    return [s.replace("{S}", quoted) for s in script.split(";\n") if s.strip()]


def found_version(conn: Any, schema: str) -> int:
    """The schema's version, 0 when it does not exist yet."""
    row = conn.execute("SELECT to_regclass(%s)", (f"{quote_ident(schema)}.schema_version",))
    if row.fetchone()[0] is None:
        return 0
    got = conn.execute(f"SELECT max(version) FROM {quote_ident(schema)}.schema_version")
    return int(got.fetchone()[0] or 0)


def ensure_schema(conn: Any, schema: str, *, migrate: bool, where: str) -> tuple[int, int]:
    """Create or (when ``migrate``) migrate the schema on ``conn`` in one transaction.

    Returns (version found, version now). Raises ``SchemaError`` for a newer or unknown
    version, and for an older one when ``migrate`` is False (naming ``conveyor migrate``).
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        found = version = found_version(conn, schema)
        if version == 0:
            for sql in statements(SCHEMA, schema):
                conn.execute(sql)
            conn.execute(
                f"INSERT INTO {quote_ident(schema)}.schema_version VALUES ({SCHEMA_VERSION})"
            )
            return 0, SCHEMA_VERSION
        if version > SCHEMA_VERSION or (version < SCHEMA_VERSION and version not in MIGRATIONS):
            raise SchemaError(
                f"{where}: schema {schema!r} has version {version}; this Conveyor reads versions"
                f" 1 to {SCHEMA_VERSION} (a newer version was written by a newer Conveyor:"
                " upgrade it, or use another schema)"
            )
        if version < SCHEMA_VERSION and not migrate:
            raise SchemaError(
                f"{where}: schema {schema!r} is at version {version}, this Conveyor needs"
                f" {SCHEMA_VERSION}: run `conveyor migrate --broker <url>` (or add"
                " ?migrate=true to the URL to migrate at start-up)"
            )
        while version < SCHEMA_VERSION:
            for sql in statements(MIGRATIONS[version], schema):
                conn.execute(sql)
            version += 1
        if found != version:
            conn.execute(
                f"UPDATE {quote_ident(schema)}.schema_version SET version = %s", (version,)
            )
        return found, version
