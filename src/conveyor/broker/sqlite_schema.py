"""Schema of the SQLite backend, its version (``PRAGMA user_version``) and the migrations.

A new file gets ``SCHEMA`` and the current ``SCHEMA_VERSION``. An older file is migrated in
place, inside the opening ``BEGIN IMMEDIATE`` transaction (all or nothing; concurrent openers
wait for the lock, then see the new version). A newer or unknown version is refused with an
error naming the rule. Rationale of every table and index: docs/architecture-sqlite.md.

Version history:

* 1 — the first schema; the four search indexes carried ``id`` as a tie-breaker
  (``(created_at, id)``, ``(state, created_at, id)``, ...).
* 2 — the search indexes are ``(created_at)``, ``(state, created_at)``, ``(queue, created_at)``,
  ``(task, created_at)``: the 26-character id is no longer copied into four b-trees on every
  insert (bulk enqueue is bounded by index maintenance). Ties on ``created_at`` are ordered by
  ``id`` with a small sort of just the tied rows. Migration 1 → 2 drops and rebuilds those four
  indexes (a few seconds per million jobs; the rows are untouched).
* 3 — ``jobs_lease (lease_at) WHERE lease_at IS NOT NULL``: every claim returns expired leases
  (and an empty one reports the earliest deadline), so finding them must not walk the active
  rows. Migration 2 → 3 creates that index.
* 4 — workflows (issue 16): tables ``wf_nodes`` and ``wf_edges`` (sqlflow.py). Migration
  3 → 4 creates them; jobs are untouched.
* 5 — flow control (issue 15): ``jobs.grp`` (the group of a flow-controlled job, else NULL);
  ``jobs_ready`` covers only ungrouped pending jobs, ``jobs_group`` the grouped ones; tables
  ``flow_groups``, ``flow_buckets``, ``flow_slots``, ``flow_waiters``, ``flow_limits``
  (sqllimits.py). Migration 4 → 5 adds them. (No triggers: a trigger on ``jobs`` costs every
  job's UPDATE about 10 % even when its WHEN is false; the broker does the bookkeeping of
  grouped jobs itself.)
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

SCHEMA_VERSION = 5

#: Workflow tables of schema version 4 (also the 3 -> 4 migration; sqlflow.py).
WORKFLOW_SCHEMA = """
CREATE TABLE IF NOT EXISTS wf_nodes (id TEXT PRIMARY KEY, workflow TEXT NOT NULL,
  pending INTEGER NOT NULL, passing TEXT NOT NULL, trig TEXT NOT NULL, pos INTEGER NOT NULL)
  WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS wf_nodes_workflow ON wf_nodes (workflow, pos);
CREATE TABLE IF NOT EXISTS wf_edges (parent TEXT NOT NULL, child TEXT NOT NULL,
  pos INTEGER NOT NULL, policy TEXT NOT NULL, done INTEGER NOT NULL DEFAULT 0, ok INTEGER,
  result BLOB, PRIMARY KEY (parent, child)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS wf_edges_child ON wf_edges (child, pos)"""

#: Flow control (issue 15), plain SQL (PostgreSQL ports it as is, bar ``INSERT OR IGNORE``).
#: Idempotent (``IF NOT EXISTS``): the 4 -> 5 migration may meet a test file that has it already.
LIMITS_SCHEMA = """
DROP INDEX IF EXISTS jobs_ready;
CREATE INDEX jobs_ready ON jobs (queue, priority, seq, run_at)
  WHERE state = 'pending' AND grp IS NULL;
CREATE INDEX IF NOT EXISTS jobs_group ON jobs (queue, grp, priority, seq)
  WHERE state = 'pending' AND grp IS NOT NULL;
CREATE TABLE IF NOT EXISTS flow_groups (queue TEXT NOT NULL, grp TEXT NOT NULL, due REAL,
  rr INTEGER NOT NULL, why TEXT, PRIMARY KEY (queue, grp)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS flow_groups_due ON flow_groups (queue, due, rr) WHERE due IS NOT NULL;
CREATE TABLE IF NOT EXISTS flow_buckets (name TEXT PRIMARY KEY, tokens REAL NOT NULL,
  at REAL NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS flow_slots (name TEXT NOT NULL, job_id TEXT NOT NULL,
  PRIMARY KEY (name, job_id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS flow_slots_job ON flow_slots (job_id);
CREATE TABLE IF NOT EXISTS flow_waiters (name TEXT NOT NULL, queue TEXT NOT NULL,
  grp TEXT NOT NULL, PRIMARY KEY (name, queue, grp)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS flow_limits (name TEXT PRIMARY KEY, spec TEXT NOT NULL) WITHOUT ROWID"""

#: The search indexes of the current version (also the target of the 1 → 2 migration).
SEARCH_INDEXES = """
CREATE INDEX jobs_created ON jobs (created_at);
CREATE INDEX jobs_state_created ON jobs (state, created_at);
CREATE INDEX jobs_queue_created ON jobs (queue, created_at);
CREATE INDEX jobs_task_created ON jobs (task, created_at)"""

SCHEMA = (
    """
CREATE TABLE jobs (rid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, queue TEXT NOT NULL,
  task TEXT NOT NULL, state TEXT NOT NULL, priority INTEGER NOT NULL, seq INTEGER NOT NULL,
  run_at REAL NOT NULL, created_at REAL NOT NULL, finished_at REAL, due_at REAL, lease_at REAL,
  token TEXT, last_error TEXT, payload BLOB NOT NULL, corrupt BLOB, grp TEXT);
CREATE INDEX jobs_due ON jobs (due_at, seq) WHERE due_at IS NOT NULL;
CREATE INDEX jobs_lease ON jobs (lease_at) WHERE lease_at IS NOT NULL;
CREATE INDEX jobs_finished ON jobs (queue, state, seq, finished_at) WHERE finished_at IS NOT NULL;
CREATE TABLE counts (queue TEXT NOT NULL, state TEXT NOT NULL, n INTEGER NOT NULL,
  PRIMARY KEY (queue, state)) WITHOUT ROWID;
INSERT INTO counts (queue, state, n) VALUES ('', 'seq', 0), ('', 'event', 0);
CREATE TABLE queues (name TEXT PRIMARY KEY, paused INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
CREATE TABLE idem (queue TEXT NOT NULL, key TEXT NOT NULL, job_id TEXT NOT NULL,
  expires_at REAL NOT NULL, PRIMARY KEY (queue, key)) WITHOUT ROWID;
CREATE INDEX idem_expiry ON idem (expires_at);
CREATE TABLE docs (collection TEXT NOT NULL, name TEXT NOT NULL, body BLOB NOT NULL,
  expires_at REAL, PRIMARY KEY (collection, name)) WITHOUT ROWID;
CREATE INDEX docs_expiry ON docs (expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE logs (seq INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, body BLOB);
CREATE INDEX logs_name ON logs (name, seq);
CREATE TABLE events (last INTEGER PRIMARY KEY, n INTEGER NOT NULL, body BLOB NOT NULL);
CREATE TABLE counters (bucket TEXT PRIMARY KEY, body BLOB NOT NULL, expires_at REAL NOT NULL)
  WITHOUT ROWID;
CREATE INDEX counters_expiry ON counters (expires_at);"""
    + SEARCH_INDEXES
    + ";"
    + WORKFLOW_SCHEMA
    + ";"
    + LIMITS_SCHEMA
)


def _to_v5(conn: sqlite3.Connection) -> None:
    """Version 4 -> 5: flow control (``jobs.grp``, the ``flow_*`` tables).

    Every step is idempotent, and the workflow tables are made sure of too: a version 4 file
    from either development branch (workflows only, or flow control only; test files, neither
    was released) ends up complete.
    """
    _run(conn, WORKFLOW_SCHEMA)
    columns = {row[1] for row in conn.execute("PRAGMA table_info(jobs)")}
    if "grp" not in columns:
        conn.execute("ALTER TABLE jobs ADD COLUMN grp TEXT")
    _run(conn, LIMITS_SCHEMA)


#: ``MIGRATIONS[v]`` turns a version ``v`` file into version ``v + 1``.
MIGRATIONS: dict[int, str | Callable[[sqlite3.Connection], None]] = {
    1: "DROP INDEX IF EXISTS jobs_created;\nDROP INDEX IF EXISTS jobs_state_created;\n"
    "DROP INDEX IF EXISTS jobs_queue_created;\nDROP INDEX IF EXISTS jobs_task_created;"
    + SEARCH_INDEXES,
    2: "CREATE INDEX IF NOT EXISTS jobs_lease ON jobs (lease_at) WHERE lease_at IS NOT NULL",
    3: WORKFLOW_SCHEMA,
    4: _to_v5,
}


class SchemaError(RuntimeError):
    """The file's schema version cannot be used by this version of Conveyor."""


def ensure_schema(conn: sqlite3.Connection, path: str) -> int:
    """Create or migrate the schema; the caller holds a ``BEGIN IMMEDIATE`` transaction.

    Returns the version found before (0 for a new file). Raises ``SchemaError`` for a version
    newer than ``SCHEMA_VERSION`` (written by a newer Conveyor) or one with no migration.
    """
    found = version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version == 0:
        _run(conn, SCHEMA)
    elif version != SCHEMA_VERSION and version not in MIGRATIONS:
        raise SchemaError(
            f"{path}: unknown schema version {version} (this Conveyor reads versions 1 to"
            f" {SCHEMA_VERSION} and migrates older files forward; a newer version was written"
            " by a newer Conveyor: upgrade it, or use another file)"
        )
    while 0 < version < SCHEMA_VERSION:
        step = MIGRATIONS[version]
        if isinstance(step, str):
            _run(conn, step)
        else:
            step(conn)
        version += 1
    if found != SCHEMA_VERSION:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return found


def _run(conn: sqlite3.Connection, script: str) -> None:
    """Execute ``;``-separated statements one by one (``executescript`` would COMMIT)."""
    for statement in _statements(script):
        conn.execute(statement)


def _statements(script: str) -> list[str]:
    """Split on ``;`` line ends, keeping a trigger's ``BEGIN ... END`` body in one piece."""
    out: list[str] = []
    for part in script.split(";\n"):
        if out and _open(out[-1]):
            out[-1] += ";\n" + part
        elif part.strip():
            out.append(part)
    return out


def _open(statement: str) -> bool:
    """True inside a trigger body (BEGIN seen, END not yet)."""
    text = statement.upper()
    return "\nBEGIN" in text and not text.rstrip().endswith("END")
