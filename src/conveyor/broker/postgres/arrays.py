"""Array parameters as PostgreSQL array literals (``'{…}'`` text cast with ``%s::text[]``).

The set-based statements (claim, completion, enqueue, the COMMIT bookkeeping) pass one array per
column. psycopg adapts a Python list by inspecting its elements on every call, which cost more
client CPU than the rest of an enqueue; a literal built here is one string, dumped as is.
Quoting follows the array input syntax: every element in double quotes with ``\\`` and ``"``
escaped, ``NULL`` for None, bytea in hex (``\\x…``). Text cannot hold NUL in PostgreSQL: such a
value is refused by the server, exactly as it would be as a list.
"""

from __future__ import annotations

from collections.abc import Iterable


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def text_array(values: Iterable[str | None]) -> str:
    """A ``text[]`` literal."""
    return "{" + ",".join("NULL" if v is None else _quote(v) for v in values) + "}"


def num_array(values: Iterable[int | float | None]) -> str:
    """An ``int[]``, ``bigint[]`` or ``float8[]`` literal (``repr`` round-trips a float)."""
    return "{" + ",".join("NULL" if v is None else repr(v) for v in values) + "}"


def bytea_array(values: Iterable[bytes]) -> str:
    """A ``bytea[]`` literal (hex form)."""
    return "{" + ",".join('"\\\\x' + v.hex() + '"' for v in values) + "}"
