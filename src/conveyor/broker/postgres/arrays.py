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
    """A ``text[]`` literal. Without a None, ``"`` or ``\\`` among the values (ids, tokens,
    queue names: the usual case) it is two joins in C instead of a quoting call per value."""
    vals = list(values)
    if not vals:
        return "{}"
    if None not in vals:
        plain: list[str] = vals  # type: ignore[assignment]
        whole = "".join(plain)
        if '"' not in whole and "\\" not in whole:
            return '{"' + '","'.join(plain) + '"}'
    return "{" + ",".join("NULL" if v is None else _quote(v) for v in vals) + "}"


def num_array(values: Iterable[int | float | None]) -> str:
    """An ``int[]``, ``bigint[]`` or ``float8[]`` literal (``repr`` round-trips a float)."""
    vals = list(values)
    if None not in vals:
        return "{" + ",".join(map(repr, vals)) + "}"
    return "{" + ",".join("NULL" if v is None else repr(v) for v in vals) + "}"


def bytea_array(values: Iterable[bytes]) -> str:
    """A ``bytea[]`` literal (hex form)."""
    hexes = [v.hex() for v in values]
    return '{"\\\\x' + '","\\\\x'.join(hexes) + '"}' if hexes else "{}"
