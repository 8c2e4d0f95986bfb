"""Array literals built by ``postgres/arrays.py`` read back exactly, hostile text included."""

from __future__ import annotations

from typing import Any

import psycopg

from conveyor.broker.postgres.arrays import bytea_array, num_array, text_array
from tests.support.hostile import BAD_NAMES, HOSTILE_TEXT, TERMINAL_TEXT

TEXTS = [
    *HOSTILE_TEXT.values(),
    *BAD_NAMES.values(),
    *(t for t in TERMINAL_TEXT.values() if "\x00" not in t),
    "",
    "NULL",
    "a,b",
    '{"x": [1]}',
    "back\\slash\\",
    'quote"',
    " spaced ",
    "é€😀",
]


def test_text_numbers_and_bytes_read_back_exactly(pg_server: Any) -> None:
    nums = [0, -1, 2**63 - 1, 1795507379.331612, 1e-300, -0.5, None]
    blobs = [b"", b"\x00\xff", b'{"a":"\\u0000"}', bytes(range(256))]
    with psycopg.connect(pg_server.url, autocommit=True) as c:
        got = c.execute(
            "SELECT %s::text[], %s::float8[], %s::bytea[], %s::bigint[]",
            (text_array([*TEXTS, None]), num_array(nums), bytea_array(blobs), num_array([1, 2])),
        ).fetchone()
    assert got is not None
    assert got[0] == [*TEXTS, None]
    assert got[1] == [float(n) if n is not None else None for n in nums]
    assert got[2] == blobs and got[3] == [1, 2]
