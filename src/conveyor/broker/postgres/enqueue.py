"""Enqueue on PostgreSQL: the broker's own transaction, or the caller's (transactional enqueue).

``insert_jobs`` stores a batch inside a given ``Tx``: idempotency keys first (``INSERT … ON
CONFLICT DO UPDATE … WHERE expired RETURNING``: a live key of the same queue returns nothing, so
two producers racing on one key never both insert, and an uncommitted key makes the other wait
for its outcome), then the rows (a taken id is a unique violation → ``DuplicateJob``, the batch
rolls back). ``enqueue_on`` runs the same on the caller's psycopg connection under a SAVEPOINT.
In the caller's transaction nothing touches a row every worker writes: its events go to
``events_pending`` and its counts to ``counts_log``, folded in by the broker's next transaction
(``store.PgStore``), so a long user transaction never stalls the workers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import orjson
import psycopg

from ...core.flow import unique_holds
from ...core.job import Job
from ...core.serialization import job_to_dict
from ...core.state import TERMINAL_STATES, JobState
from ...errors import DuplicateJob, ValidationError
from ..base import EnqueueResult
from . import flow as pgflow
from .arrays import bytea_array, bytea_binary, num_array, text_array
from .commit import statement
from .retry import retrying
from .store import Tx, one

if TYPE_CHECKING:
    from .broker import PostgresBroker

_DELAYED = (JobState.SCHEDULED, JobState.RETRY_SCHEDULED)
#: The whole batch in one statement, from one array per column (rows numbered in order).
_INSERT = (
    "INSERT INTO {S}.jobs (id, queue, task, state, priority, seq, run_at, created_at, due_at,"
    " finished_at, payload, grp) SELECT i, q, t, s, p, nextval('{S}.job_seq'), r, c, d, f, b, g"
    " FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::int[], %s::float8[],"
    " %s::float8[], %s::float8[], %s::float8[], %s::bytea[], %s::text[])"
    " AS u(i, q, t, s, p, r, c, d, f, b, g)"
)
#: Prefix of ``_INSERT`` in the broker's own transaction: list the queues in the same statement
#: (an existing row is not locked).
_REGISTER = (
    "WITH reg AS (INSERT INTO {S}.queues (name) SELECT unnest(%s::text[])"
    " ON CONFLICT (name) DO NOTHING) "
)
#: A plain batch (no idempotency key, no flow group) in ONE statement run in autocommit, the
#: settle statement (``commit.statement``, from its first CTE) appended: one round trip, one
#: implicit transaction (a taken id aborts all of it).
_ALONE = (
    "WITH reg AS (INSERT INTO {S}.queues (name) SELECT unnest(%(reg)s::text[])"
    " ON CONFLICT (name) DO NOTHING), ins AS (INSERT INTO {S}.jobs (id, queue, task, state,"
    " priority, seq, run_at, created_at, due_at, finished_at, payload, grp) SELECT i, q, t, s, p,"
    " nextval('{S}.job_seq'), r, c, d, f, b, g FROM unnest(%(c0)s::text[], %(c1)s::text[],"
    " %(c2)s::text[], %(c3)s::text[], %(c4)s::int[], %(c5)s::float8[], %(c6)s::float8[],"
    " %(c7)s::float8[], %(c8)s::float8[], %(c9)s::bytea[], %(c10)s::text[])"
    " AS u(i, q, t, s, p, r, c, d, f, b, g)), "
)
_CLAIM_KEY = (
    "INSERT INTO {S}.idem (queue, key, job_id, expires_at) VALUES (%s, %s, %s, %s)"
    " ON CONFLICT (queue, key) DO UPDATE SET job_id = excluded.job_id,"
    " expires_at = excluded.expires_at WHERE {S}.idem.expires_at <= %s RETURNING job_id"
)


def duplicate(exc: psycopg.errors.UniqueViolation, fallback: str) -> DuplicateJob:
    """The ``DuplicateJob`` of the id a unique violation of ``jobs`` names (else ``fallback``)."""
    detail = (exc.diag.message_detail or "").partition("=(")[2].rpartition(")")[0]
    return DuplicateJob(detail or fallback)


def _first_repeat(ids: Sequence[str]) -> str | None:
    seen: set[str] = set()
    for job_id in ids:
        if job_id in seen:
            return job_id
        seen.add(job_id)
    return None


def _screen(
    b: PostgresBroker, tx: Tx, jobs: Sequence[Job], now: float
) -> tuple[list[EnqueueResult], list[int]]:
    """Idempotency keys: each job's result, and the indexes of the jobs to insert."""
    c = tx.conn
    taken = {
        r[0]
        for r in c.execute(
            b.sql("SELECT id FROM {S}.jobs WHERE id = ANY(%s)"), ([j.id for j in jobs],)
        )
    }
    results: list[EnqueueResult] = []
    fresh: list[int] = []
    for i, job in enumerate(jobs):
        if job.id in taken:
            raise DuplicateJob(job.id)
        if job.idempotency_key:
            got = c.execute(
                b.sql(_CLAIM_KEY),
                (job.queue, job.idempotency_key, job.id, now + job.idempotency_ttl, now),
            ).fetchone()
            if got is None and (held := _holder(b, tx, job, now, taken)) is not None:
                existing, state = held  # a live key: the existing job
                results.append(EnqueueResult(existing, True, JobState(state or job.state)))
                continue
        fresh.append(i)
        taken.add(job.id)  # later jobs of the batch see this one (unique keys)
        results.append(EnqueueResult(job.id, False, job.state))
    return results, fresh


def _holder(
    b: PostgresBroker, tx: Tx, job: Job, now: float, batch: set[str]
) -> tuple[str, str | None] | None:
    """The job holding ``job``'s live key and its state; None if the key passed to ``job``: a
    ``unique=`` / ``debounce=`` key whose job no longer holds it (core/flow.py ``unique_holds``;
    issue 15), taken fenced on the old holder, so of two producers racing for it one wins and
    the other gets the winner's job. A key taken earlier in this batch (``batch``) holds."""
    c, key = tx.conn, job.idempotency_key or ""
    for _ in range(2):
        existing = one(
            c.execute(
                b.sql("SELECT job_id FROM {S}.idem WHERE queue = %s AND key = %s"),
                (job.queue, key),
            )
        )[0]
        row = c.execute(b.sql("SELECT state FROM {S}.jobs WHERE id = %s"), (existing,)).fetchone()
        state = row[0] if row else None
        if existing in batch or not key.startswith(("unique:", "debounce:")):
            break
        if unique_holds(key, state):
            break
        took = c.execute(
            b.sql(
                "UPDATE {S}.idem SET job_id = %s, expires_at = %s WHERE queue = %s AND key = %s"
                " AND job_id = %s"
            ),
            (job.id, now + job.idempotency_ttl, job.queue, key, existing),
        ).rowcount
        if took:
            return None
    return existing, state


def _register(b: PostgresBroker, tx: Tx, queues: list[str]) -> None:
    """Make sure the queues are listed (``queues()``); an existing row is not locked."""
    tx.conn.execute(
        b.sql(
            "INSERT INTO {S}.queues (name) SELECT unnest(%s::text[]) ON CONFLICT (name) DO NOTHING"
        ),
        (queues,),
    )


def _columns(
    jobs: Sequence[Job], payloads: Sequence[bytes] | None, *, binary: bool = True
) -> list[Any]:
    """One array per column of ``_INSERT``: literals, the envelopes in binary (delayed:
    ``due_at``; finished: ``finished_at``; a flow-controlled job: its group ``grp``).
    ``binary=False`` (the caller's connection): the envelopes as a hex literal too — a caller's
    client-side-binding cursor (Django's default) would inline the binary array as ``bytea``."""
    pack = bytea_binary if binary else bytea_array
    return [
        text_array([j.id for j in jobs]),
        text_array([j.queue for j in jobs]),
        text_array([j.task for j in jobs]),
        text_array([str(j.state) for j in jobs]),
        num_array([j.priority for j in jobs]),
        num_array([j.run_at for j in jobs]),
        num_array([j.created_at for j in jobs]),
        num_array([j.run_at if j.state in _DELAYED else None for j in jobs]),
        num_array([j.finished_at if j.state in TERMINAL_STATES else None for j in jobs]),
        pack(  # binary: the server copies each envelope instead of parsing hex
            payloads if payloads is not None else [orjson.dumps(job_to_dict(j)) for j in jobs]
        ),
        text_array([j.flow["g"] if j.flow else None for j in jobs]),  # issue 15: its group
    ]


def enqueue_alone(
    b: PostgresBroker, jobs: Sequence[Job], now: float, payloads: Sequence[bytes] | None
) -> list[EnqueueResult] | None:
    """``PostgresBroker.enqueue`` of a plain batch (no idempotency key, no flow group, no id
    twice) as one autocommit statement (``_ALONE``); None for any other batch (the caller
    runs ``insert_jobs`` in a transaction). A taken id raises ``UniqueViolation``."""
    if not jobs or any(j.idempotency_key or j.flow for j in jobs):
        return None
    if _first_repeat([j.id for j in jobs]) is not None:
        return None
    queues = sorted({j.queue for j in jobs})
    with b._connection() as conn:
        tx = Tx(conn)  # the bookkeeping only: the statement is its own transaction
        tx.events.extend(
            {"type": "enqueued", "job_id": j.id, "queue": j.queue, "task": j.task, "at": now}
            | {"state": str(j.state)}
            for j in jobs
        )
        for (queue, state), n in Counter((j.queue, str(j.state)) for j in jobs).items():
            tx.count(queue, None, state, n)
        tx.notify.update(queues)
        settle, params = statement(b, tx) or ("", {})
        cols = {f"c{i}": v for i, v in enumerate(_columns(jobs, payloads))}
        conn.execute(
            b.sql(_ALONE) + settle.removeprefix("WITH "),
            params | cols | {"reg": text_array(queues)},
            prepare=True,
        )
    return [EnqueueResult(j.id, False, j.state) for j in jobs]


def insert_jobs(
    b: PostgresBroker,
    tx: Tx,
    jobs: Sequence[Job],
    now: float,
    payloads: Sequence[bytes] | None,
    *,
    deferred: bool = False,
    lazy: bool = False,
) -> list[EnqueueResult]:
    """Store the batch in ``tx`` (all or none); ``deferred``: the caller's transaction;
    ``lazy``: the INSERT waits for the transaction's next statement (``Tx.defer``), so a taken
    id raises ``UniqueViolation`` there (the caller turns it into ``DuplicateJob``)."""
    if (repeat := _first_repeat([j.id for j in jobs])) is not None:
        raise DuplicateJob(repeat)
    if any(j.idempotency_key for j in jobs):
        results, fresh = _screen(b, tx, jobs, now)
    else:
        results, fresh = [EnqueueResult(j.id, False, j.state) for j in jobs], list(range(len(jobs)))
    new = [jobs[i] for i in fresh]
    queues = sorted({j.queue for j in new})
    if new:
        kept = [payloads[i] for i in fresh] if payloads is not None else None
        cols = _columns(new, kept, binary=not deferred)
        sql, params = (_INSERT, cols)
        if not deferred:
            sql, params = _REGISTER + _INSERT, [text_array(queues), *cols]
        if lazy:  # sent with BEGIN, the settle statement and COMMIT: one round trip (a taken
            tx.defer(b.sql(sql), params)  # id surfaces there: ``PostgresBroker.enqueue``)
        else:
            try:  # in the caller's transaction: no prepared statement
                tx.conn.execute(b.sql(sql), params, prepare=None if deferred else True)
            except psycopg.errors.UniqueViolation as exc:
                raise duplicate(exc, new[0].id) from None
    if grouped := [j for j in new if j.flow]:  # issue 15: their groups (postgres/flow.py)
        pgflow.on_insert(b, tx, grouped)
        b.flow_seen = True  # this process's next claim goes the flow way at once
    events = [
        {"type": "enqueued", "job_id": j.id, "queue": j.queue, "task": j.task, "at": now}
        | {"state": str(j.state)}
        for j in new
    ]
    counts = Counter((j.queue, str(j.state)) for j in new)
    if queues and deferred:  # committed apart: a new queue row must not wait for the caller;
        # that short transaction is the broker's own, so a lock conflict runs it again (retry.py)
        retrying(b.retry, "register_queues", lambda: b.in_tx(lambda own: _register(b, own, queues)))
    tx.notify.update(queues)
    if not deferred:
        tx.events.extend(events)
        for (queue, state), n in counts.items():
            tx.count(queue, None, state, n)
    elif new:
        with tx.conn.cursor() as cur:
            cur.execute(
                b.sql("INSERT INTO {S}.events_pending (body) VALUES (%s)"), (orjson.dumps(events),)
            )
            cur.executemany(
                b.sql("INSERT INTO {S}.counts_log (queue, state, d) VALUES (%s, %s, %s)"),
                [(q, s, n) for (q, s), n in sorted(counts.items())],
            )
    return results


def enqueue_on(
    b: PostgresBroker,
    conn: Any,
    jobs: Sequence[Job],
    now: float | None,
    payloads: Sequence[bytes] | None,
    also: Callable[[Tx], None] | None = None,
) -> list[EnqueueResult]:
    """``PostgresBroker.enqueue_in_transaction``: the batch on ``conn`` under a SAVEPOINT;
    ``also`` writes more rows under the same savepoint (a workflow's graph: sqlflow.py)."""
    if not isinstance(conn, psycopg.Connection):
        raise ValidationError(
            "connection", f"must be a psycopg (3) Connection, got {type(conn).__name__}"
        )
    if not conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        conn.execute("SELECT 1")  # begin the caller's implicit transaction: ours nests in it
    if not jobs:
        return []
    if now is None:
        now = jobs[0].created_at  # the producer's clock, as for ``enqueue`` (Broker contract)
    with conn.transaction():  # a SAVEPOINT inside the caller's transaction
        tx = Tx(conn)
        results = insert_jobs(b, tx, jobs, now, payloads, deferred=True)
        if also is not None:
            also(tx)
        for queue in sorted(tx.notify):  # queued by the server, delivered at the caller's COMMIT
            conn.execute(
                "SELECT pg_notify(%s, %s)", (b.channel, queue if len(queue) < 2000 else "")
            )
    return results
