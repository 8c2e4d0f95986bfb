"""The hot statements' ``bytea[]`` parameters go in binary format (issue 17: server CPU).

A completion sends every completed envelope (``_DONE``) and every transaction's settle
statement its events (``body``) as one ``bytea[]`` each. As text they were hex literals the
server scanned character by character (``array_in``, then ``byteain``'s hex decoding): 5-8 %
of the server's CPU in a drain (perf, batches of 32 and 500). ``arrays.bytea_binary`` builds
the array's binary form once and ``postgres/wire.py`` binds it with format code 1 (psycopg
binds it the same way when a batch falls back to it); the server copies each element.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conveyor.broker.base import Ack
from conveyor.broker.postgres import wire
from conveyor.broker.postgres.arrays import BinaryArray, bytea_binary
from conveyor.broker.postgres.broker import PostgresBroker
from conveyor.core.job import Job
from tests.postgres.test_round_trips import trips  # noqa: F401  (the fixture)

VALUES = [b"", b"\x00", bytes(range(256)), b'{"a": "\\"}', "é€".encode(), b"x" * 70_000]


def _binds(text: str, marker: str) -> list[list[str]]:
    """The format codes of each Bind of the statement whose text contains ``marker``."""
    names: set[str] = set()
    out: list[list[str]] = []
    for line in text.splitlines():
        parts = line.split("\t")
        if parts[:3:2] == ["F", "Parse"] and marker in parts[3]:
            names.add(parts[3].split(" ")[1])
        elif parts[:3:2] == ["F", "Bind"]:
            words = parts[3].split(" ")
            if words[2] in names:
                n = int(words[3])
                out.append(words[4 : 4 + n])
    return out


def test_a_completion_binds_its_envelopes_and_events_in_binary(
    pg: PostgresBroker,
    trips: Any,  # noqa: F811
) -> None:
    now = time.time()
    pg.enqueue([Job(id=f"b{i}", task="t") for i in range(5)], now)
    leases = pg.claim(["default"], now, limit=5)
    assert pg.complete([Ack(x.job.id, x.token) for x in leases], now) == [True] * 5
    text = trips.text()
    done = _binds(text, "payload = u.payload")
    settle = _binds(text, "INSERT INTO")
    assert done and settle, "the statements were not traced"
    assert done[-1] == ["0", "0", "1"], f"envelopes bound as {done[-1]} (0 text, 1 binary)"
    assert all("1" in codes for codes in settle), f"event bodies bound as {settle}"
    job = pg.get("b3")
    assert job is not None and job.state.value == "completed"


@pytest.mark.parametrize("path", ["wire", "psycopg"])
def test_a_binary_bytea_array_arrives_byte_for_byte(pg_server: Any, path: str) -> None:
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        for values in (VALUES, [], [b"only"]):
            arg = bytea_binary(values)
            assert isinstance(arg, BinaryArray)
            sql = "SELECT %s::bytea[], cardinality(%s::bytea[])"
            if path == "wire":
                assert wire.encodable([(sql, (arg, arg))])
                rows = wire.rows(conn, [(sql, (arg, arg))], (0,))[0]
            else:
                rows = conn.execute(sql, (arg, arg), prepare=True).fetchall()
            got, n = rows[0]
            assert [bytes(v) for v in got or []] == values and n == len(values)


def test_the_binary_form_is_postgresqls_own(pg_server: Any, tmp_path: Path) -> None:
    """What the server itself sends for a ``bytea[]`` in binary is what we build."""
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        cur = conn.cursor(binary=True)
        cur.execute("SELECT ARRAY['\\x00ff'::bytea, ''::bytea, 'ab'::bytea]")
        raw = cur.pgresult.get_value(0, 0) if cur.pgresult is not None else None
    assert raw == bytes(bytea_binary([b"\x00\xff", b"", b"ab"]))
