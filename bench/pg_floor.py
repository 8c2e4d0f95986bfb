"""The floor: CPU per job of the minimal PostgreSQL job queue any design needs (issue 17).

    PYTHONPATH=$PWD/src:$PWD .venv/bin/python bench/pg_floor.py 20000 32 500

Starts a private cluster (``tests/support/pg_proc.py``) and, for each batch size B, drains N
jobs from a table that has only what a queue cannot do without: ``(id, queue, payload bytea,
state, priority, run_at)``, the primary key and ONE partial index on ready rows (ordered by
priority then id, so the planner cannot walk the primary key instead). Bulk INSERT of N rows
(one ``INSERT … SELECT unnest`` per 1,000), then a loop of: claim B rows by ``UPDATE … WHERE id
IN (SELECT … FOR UPDATE SKIP LOCKED LIMIT B) RETURNING`` and complete them by ``UPDATE state``
(variant ``delete``: ``DELETE``), each statement its own transaction (autocommit: one round trip
and one commit each, the least any client sends); variant ``ride``: the completion of the last
batch and the next claim in ONE transaction (one round trip, a pipeline); variant ``wide``: the
``update`` drain on a table with Conveyor's columns and index set (``SCHEMA_WIDE``: 3 indexes
entered per claim, 7 per completion); ``wide_lock``: ``wide`` with Conveyor's completion shape
(lock and read the rows, then write them with a patched payload from the client, in one
transaction: ``LOCK_WIDE``, ``DONE_WIDE_PAYLOAD``). Prints this process's
CPU (the client: psycopg, binary results) and the server processes' CPU per job, for the drain
only. Nothing of Conveyor runs: this bounds what any design can reach on this machine.
"""

from __future__ import annotations

import sys
import time

import psutil
import psycopg
from tests.support.pg_proc import PgServer

from bench.pg_drain_cpu import tree_cpu

SCHEMA = """
DROP TABLE IF EXISTS q;
CREATE TABLE q (id bigserial PRIMARY KEY, queue text NOT NULL, payload bytea NOT NULL,
  state smallint NOT NULL DEFAULT 0, priority smallint NOT NULL DEFAULT 0,
  run_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX q_ready ON q (queue, priority, id) WHERE state = 0;
"""
INSERT = "INSERT INTO q (queue, payload) SELECT 'default', p FROM unnest(%(p)s::bytea[]) AS p"
CLAIM = (
    "UPDATE q SET state = 1, run_at = now() WHERE id IN (SELECT id FROM q WHERE queue ="
    " 'default' AND state = 0 ORDER BY priority, id LIMIT %(n)s FOR UPDATE SKIP LOCKED)"
    " RETURNING id, payload"
)
DONE = {
    "update": "UPDATE q SET state = 2 WHERE id = ANY(%(ids)s)",
    "delete": "DELETE FROM q WHERE id = ANY(%(ids)s)",
}
#: ``wide``: the same queue with Conveyor's ``jobs`` columns and index set (schema v6: a claim
#: enters 3 indexes, a completion 7), to split Conveyor's cost into its schema and the rest.
SCHEMA_WIDE = """
DROP TABLE IF EXISTS q; DROP SEQUENCE IF EXISTS q_seq; CREATE SEQUENCE q_seq;
CREATE TABLE q (id bigserial PRIMARY KEY, jid text COLLATE "C" NOT NULL UNIQUE,
  queue text COLLATE "C" NOT NULL, task text COLLATE "C" NOT NULL, payload bytea NOT NULL,
  state smallint NOT NULL DEFAULT 0, priority smallint NOT NULL DEFAULT 0,
  seq bigint NOT NULL DEFAULT nextval('q_seq'), run_at timestamptz NOT NULL DEFAULT now(),
  created_at double precision NOT NULL DEFAULT extract(epoch FROM now()),
  finished_at double precision, lease_at double precision, token text)
  WITH (fillfactor = 80);
CREATE INDEX q_ready ON q (queue, priority, seq) WHERE state = 0;
CREATE INDEX q_lease ON q (lease_at) WHERE lease_at IS NOT NULL;
CREATE INDEX q_finished ON q (queue, state, seq) WHERE finished_at IS NOT NULL;
CREATE INDEX q_created ON q (created_at) WHERE state <> 1;
CREATE INDEX q_state_created ON q (state, created_at) WHERE state <> 1;
CREATE INDEX q_queue_created ON q (queue, state, created_at) INCLUDE (id) WHERE state <> 1;
CREATE INDEX q_task_created ON q (task, state, created_at) INCLUDE (queue, id) WHERE state <> 1;
"""
INSERT_WIDE = (
    "INSERT INTO q (jid, queue, task, payload) SELECT 'j' || nextval('q_seq'), 'default', 't',"
    " p FROM unnest(%(p)s::bytea[]) AS p"
)
CLAIM_WIDE = (
    "UPDATE q SET state = 1, seq = nextval('q_seq'), lease_at = extract(epoch FROM now()) + 30,"
    " token = replace(gen_random_uuid()::text, '-', '') WHERE id IN (SELECT id FROM q WHERE"
    " queue = 'default' AND state = 0 ORDER BY priority, seq LIMIT %(n)s FOR UPDATE SKIP"
    " LOCKED) RETURNING id, payload"
)
DONE_WIDE = (
    "UPDATE q SET state = 2, seq = nextval('q_seq'), lease_at = NULL, token = NULL,"
    " finished_at = extract(epoch FROM now()) WHERE id = ANY(%(ids)s)"
)
#: ``wide_lock``: as Conveyor's completion, the rows are locked (and read) first, then updated
#: with a payload sent by the client (the patched envelope), in one transaction
LOCK_WIDE = "SELECT id, payload FROM q WHERE id = ANY(%(ids)s) AND state = 1 ORDER BY id FOR UPDATE"
DONE_WIDE_PAYLOAD = (
    "UPDATE q SET state = 2, seq = nextval('q_seq'), lease_at = NULL, token = NULL,"
    " finished_at = extract(epoch FROM now()), payload = u.p FROM unnest(%(ids)s::bigint[],"
    " %(ps)s::bytea[]) AS u(id, p) WHERE q.id = u.id"
)
PAYLOAD = b"x" * 180  # about a plain Conveyor envelope


VARIANTS = ("update", "delete", "ride", "wide", "wide_lock")


def fill(conn: psycopg.Connection[tuple[object, ...]], n: int, wide: bool = False) -> None:
    """Empty the table and queue ``n`` jobs, 1,000 per statement."""
    conn.execute(SCHEMA_WIDE if wide else SCHEMA)
    for i in range(0, n, 1000):
        conn.execute(INSERT_WIDE if wide else INSERT, {"p": [PAYLOAD] * min(1000, n - i)})
    conn.execute("VACUUM ANALYZE q")


def drain(conn: psycopg.Connection[tuple[object, ...]], batch: int, variant: str) -> int:
    """Claim and complete until empty; the number of jobs drained."""
    done_sql = (
        DONE_WIDE if variant == "wide" else DONE["delete" if variant == "delete" else "update"]
    )
    claim = CLAIM_WIDE if variant.startswith("wide") else CLAIM
    cur = conn.cursor(binary=True)
    total, ids = 0, []
    while True:
        if variant == "wide_lock" and ids:
            conn.execute("BEGIN")
            locked = cur.execute(LOCK_WIDE, {"ids": ids}, prepare=True).fetchall()
            ps = [p + b"!" for _, p in locked]  # the envelope, patched
            cur.execute(DONE_WIDE_PAYLOAD, {"ids": [i for i, _ in locked], "ps": ps}, prepare=True)
            conn.execute("COMMIT")
            ids = []
        if variant == "ride" and ids:
            with conn.pipeline():  # completion + next claim: one round trip, one commit
                conn.execute("BEGIN")
                cur.execute(done_sql, {"ids": ids}, prepare=True)
                cur.execute(claim, {"n": batch}, prepare=True)
                conn.execute("COMMIT")
            rows = cur.fetchall()
        else:
            rows = cur.execute(claim, {"n": batch}, prepare=True).fetchall()
            if ids:
                cur.execute(done_sql, {"ids": ids}, prepare=True)
        if not rows:
            if ids and variant == "ride":
                cur.execute(done_sql, {"ids": ids}, prepare=True)
            return total
        ids = [r[0] for r in rows]
        total += len(rows)


def main(n: int, batches: list[int]) -> None:
    """Drain ``n`` jobs per batch size and variant; print worker and server CPU per job."""
    with PgServer() as srv:
        server = psutil.Process(srv.pid() or 0)
        me = psutil.Process()
        with psycopg.connect(srv.url, autocommit=True) as conn:
            for batch in batches:
                for variant in VARIANTS:
                    best = (1e9, 1e9)
                    for _ in range(3):
                        fill(conn, n, variant.startswith("wide"))
                        time.sleep(0.5)
                        s0, c0 = tree_cpu(server), me.cpu_times()
                        got = drain(conn, batch, variant)
                        s1, c1 = tree_cpu(server), me.cpu_times()
                        assert got == n, got
                        c = (c1.user + c1.system - c0.user - c0.system) / n * 1e6
                        s = (s1 - s0) / n * 1e6
                        best = min(best, (c + s, c), key=lambda t: t[0])
                        print(f"  B={batch} {variant}: client {c:.1f} us, server {s:.1f} us")
                    print(
                        f"B={batch} {variant}: best client {best[1]:.1f} + server "
                        f"{best[0] - best[1]:.1f} = {best[0]:.1f} us per job",
                        flush=True,
                    )


if __name__ == "__main__":
    main(int(sys.argv[1]), [int(b) for b in sys.argv[2:]])
