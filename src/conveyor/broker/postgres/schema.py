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
* 2 — workflows (issue 16) and flow control (issue 15), the tables of the shared SQL
  (broker/sqlflow.py, broker/sqllimits.py): ``jobs.grp`` (the group of a flow-controlled job,
  else NULL); ``jobs_ready`` covers only ungrouped pending jobs, ``jobs_group`` the grouped
  ones; ``wf_nodes``, ``wf_edges``, ``flow_groups``, ``flow_pending``, ``flow_buckets``,
  ``flow_slots``, ``flow_waiters``, ``flow_limits``. Additive: a nullable column (no table
  rewrite), new tables, and ``jobs_ready`` rebuilt with the narrower predicate (an index, no
  data).
* 3 — the claim overlay: ``jobs.claims``, ``jobs.started_at``, ``jobs.worker`` (added columns,
  nothing rewritten). The claim writes them instead of the envelope (``postgres/rec.py``).
* 4 — the search indexes by state, queue and task leave out running jobs (``WHERE state <>
  'active'``): a claim's new row version then enters 4 indexes instead of 7 (an UPDATE that
  changes ``state`` is never HOT, so it adds an entry to every index whose predicate holds);
  searches read running jobs through ``jobs_lease`` (``postgres/reads.py``). Indexes only:
  rebuilt, no data touched.
* 5 — searches combining filters read one index range: ``jobs_queue_created`` becomes
  ``(queue, state, created_at) INCLUDE (rid)`` and ``jobs_task_created`` ``(task, state,
  created_at) INCLUDE (queue, rid)`` (still partial, ``state <> 'active'``; the same number of
  index entries per write). A queue or task search with a state reads exactly its matches; a
  task search with a queue counts and gathers them from the index alone
  (``postgres/reads.py``). Indexes only: two rebuilt, no data touched (one self-contained
  step, ``SEARCH_COMBO_SCHEMA``).
* 6 — ``jobs_created`` (time-range searches, newest first) leaves out running jobs too (``WHERE
  state <> 'active'``): a claim's new row version enters 3 indexes, not 4 (issue 17: server
  CPU and WAL per claim). Searches already read running jobs through ``jobs_lease``. An index
  only: rebuilt, no data touched.

A new database is created at version 1 (``SCHEMA``, never edited) and migrated forward in the
same transaction, so a new and an upgraded database are the same schema.
"""

from __future__ import annotations

from typing import Any

SCHEMA_VERSION = 6

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
  corrupt bytea
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

#: Version 2: workflows and flow control (see the module docstring).
FLOW_SCHEMA = """
ALTER TABLE {S}.jobs ADD COLUMN grp text COLLATE "C";
DROP INDEX {S}.jobs_ready;
CREATE INDEX jobs_ready ON {S}.jobs (queue, priority, seq) WHERE state = 'pending' AND grp IS NULL;
CREATE INDEX jobs_group ON {S}.jobs (queue, grp, priority, seq)
  WHERE state = 'pending' AND grp IS NOT NULL;
CREATE TABLE {S}.wf_nodes (
  id text COLLATE "C" PRIMARY KEY,
  workflow text COLLATE "C" NOT NULL,
  pending integer NOT NULL,
  passing text NOT NULL,
  trig text NOT NULL,
  pos integer NOT NULL
);
CREATE INDEX wf_nodes_workflow ON {S}.wf_nodes (workflow, pos);
CREATE TABLE {S}.wf_edges (
  parent text COLLATE "C" NOT NULL,
  child text COLLATE "C" NOT NULL,
  pos integer NOT NULL,
  policy text NOT NULL,
  done integer NOT NULL DEFAULT 0,
  ok integer,
  result bytea,
  PRIMARY KEY (parent, child)
);
CREATE INDEX wf_edges_child ON {S}.wf_edges (child, pos);
CREATE TABLE {S}.flow_groups (
  queue text COLLATE "C" NOT NULL,
  grp text COLLATE "C" NOT NULL,
  due double precision,
  rr bigint NOT NULL,
  why text,
  PRIMARY KEY (queue, grp)
);
CREATE INDEX flow_groups_due ON {S}.flow_groups (queue, due, rr) WHERE due IS NOT NULL;
CREATE TABLE {S}.flow_pending (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  queue text COLLATE "C" NOT NULL,
  grp text COLLATE "C" NOT NULL
);
CREATE TABLE {S}.flow_buckets (
  name text COLLATE "C" PRIMARY KEY,
  tokens double precision NOT NULL,
  at double precision NOT NULL
);
CREATE TABLE {S}.flow_slots (
  name text COLLATE "C" NOT NULL,
  job_id text COLLATE "C" NOT NULL,
  PRIMARY KEY (name, job_id)
);
CREATE INDEX flow_slots_job ON {S}.flow_slots (job_id);
CREATE TABLE {S}.flow_waiters (
  name text COLLATE "C" NOT NULL,
  queue text COLLATE "C" NOT NULL,
  grp text COLLATE "C" NOT NULL,
  PRIMARY KEY (name, queue, grp)
);
CREATE TABLE {S}.flow_limits (name text COLLATE "C" PRIMARY KEY, spec text NOT NULL)"""

#: The tables version 2 added (``flush_all`` empties them too).
FLOW_TABLES = (
    "wf_nodes",
    "wf_edges",
    "flow_groups",
    "flow_pending",
    "flow_buckets",
    "flow_slots",
    "flow_waiters",
    "flow_limits",
)

#: Version 3: the claim overlay (postgres/rec.py). Rows written before it have claims = 0:
#: their envelope is whole.
OVERLAY_SCHEMA = (
    "ALTER TABLE {S}.jobs ADD COLUMN claims integer NOT NULL DEFAULT 0,"
    " ADD COLUMN started_at double precision, ADD COLUMN worker text"
)

#: Version 4: the search indexes leave out running jobs (see the module docstring).
LEAN_SEARCH_SCHEMA = """
DROP INDEX {S}.jobs_state_created;
CREATE INDEX jobs_state_created ON {S}.jobs (state, created_at) WHERE state <> 'active';
DROP INDEX {S}.jobs_queue_created;
CREATE INDEX jobs_queue_created ON {S}.jobs (queue, created_at) WHERE state <> 'active';
DROP INDEX {S}.jobs_task_created;
CREATE INDEX jobs_task_created ON {S}.jobs (task, created_at) WHERE state <> 'active'"""

#: Version 5: the queue and task search indexes carry the state (and the task one the queue and
#: the row id), so a search combining filters reads one index range (see the module docstring).
SEARCH_COMBO_SCHEMA = """
DROP INDEX {S}.jobs_queue_created;
CREATE INDEX jobs_queue_created ON {S}.jobs (queue, state, created_at) INCLUDE (rid)
  WHERE state <> 'active';
DROP INDEX {S}.jobs_task_created;
CREATE INDEX jobs_task_created ON {S}.jobs (task, state, created_at) INCLUDE (queue, rid)
  WHERE state <> 'active'"""

#: Version 6: the time-range index leaves out running jobs too (see the module docstring).
LEAN_CREATED_SCHEMA = """
DROP INDEX {S}.jobs_created;
CREATE INDEX jobs_created ON {S}.jobs (created_at) WHERE state <> 'active'"""

#: ``MIGRATIONS[v]`` turns a version ``v`` schema into version ``v + 1``.
MIGRATIONS: dict[int, str] = {
    1: FLOW_SCHEMA,
    2: OVERLAY_SCHEMA,
    3: LEAN_SEARCH_SCHEMA,
    4: SEARCH_COMBO_SCHEMA,
    5: LEAN_CREATED_SCHEMA,
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
        if version == 0:  # version 1, then every migration in this same transaction
            for sql in statements(SCHEMA, schema):
                conn.execute(sql)
            conn.execute(f"INSERT INTO {quote_ident(schema)}.schema_version VALUES (1)")
            version, migrate = 1, True
        if version > SCHEMA_VERSION or (version < SCHEMA_VERSION and version not in MIGRATIONS):
            raise SchemaError(
                f"{where}: schema {schema!r} has version {version}; this Conveyor reads versions"
                f" 1 to {SCHEMA_VERSION} (a newer version was written by a newer Conveyor:"
                " upgrade it, or use another schema)"
            )
        if version < SCHEMA_VERSION and not migrate:
            raise SchemaError(
                f"{where}: schema {schema!r} is at version {version}, this Conveyor needs"
                f" {SCHEMA_VERSION}: run `conveyor migrate --url <url>` (or add"
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
