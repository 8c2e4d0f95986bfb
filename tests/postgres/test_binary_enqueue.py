"""An enqueue's envelopes go to the server as a binary ``bytea[]`` (issue 17: server CPU).

Every path that inserts jobs on the broker's own connection binds its ``payload`` array the
way a completion binds its envelopes (tests/postgres/test_binary_arrays.py): a plain batch
(``enqueue._ALONE``, one autocommit statement, single or ``enqueue_many``) and a batch in the
broker's transaction (an idempotency key: ``_INSERT`` on libpq's pipeline, ``wire.py``). A
batch on the caller's connection (``enqueue_in_transaction``) keeps the hex literal, as that
connection may bind client-side. As hex text the server scanned each envelope character by
character (``array_in``, then ``byteain``); binary, it copies them. The libpq trace shows the
parameter's format code; the stored bytes are exactly the ones sent, NUL bytes and 70 KB
included.
"""

from __future__ import annotations

import re
import time
from typing import Any

import psycopg

from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.core.job import Job
from tests.postgres.test_round_trips import trips  # noqa: F401  (the fixture)

#: Envelope bytes as the producer could hand them over (the column stores them as they are)
VALUES = [b'{"v":1}', b"\x00", bytes(range(256)), b'{"a": "\\"}', "é€".encode(), b"x" * 70_000]


def _payload_codes(text: str) -> list[str]:
    """The format code of the ``payload`` array in each Bind of a jobs INSERT: the statement's
    first ``$n::bytea[]`` parameter (the insert comes before the settle statement's bodies)."""
    where: dict[str, int] = {}  # statement name -> index of its payload parameter
    pending: int | None = None  # an unnamed statement's index, for the Bind right after it
    out: list[str] = []
    for line in text.splitlines():
        parts = line.split("\t")
        if parts[:3:2] == ["F", "Parse"]:
            name, query = parts[3].strip().split(" ", 1)
            found = re.search(r"\$(\d+)::bytea\[\]", query)
            index = int(found.group(1)) - 1 if found and 'INTO "conveyor".jobs' in query else None
            if index is not None:
                where[name] = index
            pending = index if name == '""' else None
        elif parts[:3:2] == ["F", "Bind"]:
            words = parts[3].strip().split(" ")  # portal, statement, codes
            index = where.get(words[1]) if words[1] != '""' else pending
            if index is not None:
                n = int(words[2])
                codes = words[3 : 3 + n]
                out.append(
                    codes[index] if len(codes) > 1 else (codes or ["0"])[0]
                )  # none: all text
    return out


def _stored(pg: PostgresBroker, ids: list[str]) -> list[bytes]:
    rows = pg._read("SELECT id, payload FROM {S}.jobs WHERE id = ANY(%s)", (ids,))
    got = {r[0]: bytes(r[1]) for r in rows}
    return [got[i] for i in ids]


def _jobs(prefix: str, n: int, **kw: Any) -> list[Job]:
    return [Job(id=f"{prefix}{i}", task="t", **kw) for i in range(n)]


def test_a_single_enqueue_and_a_batch_bind_their_envelopes_in_binary(
    pg: PostgresBroker,
    trips: Any,  # noqa: F811
) -> None:
    now = time.time()
    for i, value in enumerate(VALUES):  # one job per call: the single enqueue's statement
        pg.enqueue([Job(id=f"s{i}", task="t")], now, [value])
    batch = _jobs("m", 1000)
    many = [VALUES[i % len(VALUES)] for i in range(len(batch))]
    pg.enqueue(batch, now, many)  # enqueue_many's statement
    codes = _payload_codes(trips.text())
    assert len(codes) == len(VALUES) + 1, f"the inserts were not traced: {codes}"
    assert set(codes) == {"1"}, f"envelopes bound as {codes} (0 text, 1 binary)"
    assert _stored(pg, [f"s{i}" for i in range(len(VALUES))]) == VALUES
    assert _stored(pg, [j.id for j in batch]) == many


def test_a_keyed_batch_binds_its_envelopes_in_binary(
    pg: PostgresBroker,
    trips: Any,  # noqa: F811
) -> None:
    now = time.time()
    jobs = [Job(id=f"k{i}", task="t", idempotency_key=f"key{i}") for i in range(len(VALUES))]
    pg.enqueue(jobs, now, VALUES)  # the transaction path (its INSERT on libpq's pipeline)
    codes = _payload_codes(trips.text())
    assert codes == ["1"], f"envelopes bound as {codes} (0 text, 1 binary)"
    assert _stored(pg, [j.id for j in jobs]) == VALUES


def test_an_enqueue_on_the_callers_connection_sends_its_envelopes_as_text(
    pg: PostgresBroker, pg_server: Any, tmp_path: Any
) -> None:
    """The caller's connection may bind client-side (Django's default ``ClientCursor``), which
    would inline a binary array as a ``bytea`` literal ("cannot cast type bytea to bytea[]"):
    there the envelopes go as the hex literal, stored byte for byte."""
    now = time.time()
    path = tmp_path / "trace"
    with path.open("w") as out, psycopg.connect(pg_server.url) as conn:
        conn.pgconn.trace(out.fileno())
        conn.pgconn.set_trace_flags(
            psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE
        )
        pg.enqueue_in_transaction(conn, _jobs("c", len(VALUES)), now, VALUES)
        conn.commit()
        conn.pgconn.untrace()
    assert _payload_codes(path.read_text()) == ["0"]
    assert _stored(pg, [f"c{i}" for i in range(len(VALUES))]) == VALUES


def test_an_enqueue_on_a_client_side_binding_connection_is_stored_byte_for_byte(
    pg: PostgresBroker, pg_server: Any
) -> None:
    now = time.time()
    with psycopg.connect(pg_server.url, cursor_factory=psycopg.ClientCursor) as conn:
        pg.enqueue_in_transaction(conn, _jobs("k", len(VALUES)), now, VALUES)
        conn.commit()
    assert _stored(pg, [f"k{i}" for i in range(len(VALUES))]) == VALUES
