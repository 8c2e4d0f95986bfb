"""Array parameters as PostgreSQL array literals (``'{…}'`` text cast with ``%s::text[]``).

The set-based statements (claim, completion, enqueue, the COMMIT bookkeeping) pass one array per
column. psycopg adapts a Python list by inspecting its elements on every call, which cost more
client CPU than the rest of an enqueue; a literal built here is one string, dumped as is.
Quoting follows the array input syntax: every element in double quotes with ``\\`` and ``"``
escaped, ``NULL`` for None, bytea in hex (``\\x…``). Text cannot hold NUL in PostgreSQL: such a
value is refused by the server, exactly as it would be as a list.

The large ``bytea[]`` parameters of the hot statements (enqueued and completed envelopes, event
bodies) go in PostgreSQL's binary array format instead (``bytea_binary``): as hex text the
server scanned every character of them (``array_in``, then ``byteain``), 5-8 % of its CPU in
a drain. A ``BinaryArray`` is bound with format code 1 by ``postgres/wire.py`` and by psycopg
(the dumper registered here), under the ``bytea[]`` type the statement's cast gives the parameter.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

from psycopg import adapters, pq
from psycopg.adapt import Buffer, Dumper

#: OIDs of ``bytea`` and ``bytea[]``
BYTEA_OID, BYTEA_ARRAY_OID = 17, 1001
_LEN = struct.Struct(">i")


class BinaryArray(bytes):
    """A ``bytea[]`` in PostgreSQL's binary format (``bytea_binary``), bound as such."""


class _BinaryArrayDumper(Dumper):
    """psycopg's way to bind a ``BinaryArray``: its bytes as they are, binary ``bytea[]``."""

    format = pq.Format.BINARY
    oid = BYTEA_ARRAY_OID

    def dump(self, obj: object) -> Buffer | None:
        assert isinstance(obj, BinaryArray)
        return obj


adapters.register_dumper(BinaryArray, _BinaryArrayDumper)


def bytea_binary(values: Sequence[bytes]) -> BinaryArray:
    """A one-dimensional ``bytea[]`` in binary format: dimensions, no NULL flag, the element
    type, the length and lower bound, then each element as its length and its bytes."""
    if not values:
        return BinaryArray(struct.pack(">iii", 0, 0, BYTEA_OID))
    pack = _LEN.pack
    parts = [struct.pack(">iiiii", 1, 0, BYTEA_OID, len(values), 1)]
    for v in values:
        parts.append(pack(len(v)))
        parts.append(v)
    return BinaryArray(b"".join(parts))


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
