"""The hot transactions' round trips on libpq's pipeline directly (issue 17: client CPU).

A claim is two round trips (BEGIN, the look-up and the guarded claim; then the settle
statement and COMMIT) and a completion two (BEGIN and the row locks; then the ``UPDATE``, the
settle statement, the retention caps and COMMIT). Through psycopg's cursor machinery each
statement costs ~15 µs of client CPU and each pipeline ~35 µs more (cursor objects, adapters,
the prepared-statement cache, result objects); sent here on the connection's ``pgconn`` they
cost ~1 µs each and the batch ~25 µs. ``fire`` sends a batch whose results nobody reads;
``rows`` returns each statement's rows, loaded by psycopg's own ``Transformer`` (the same
Python values a cursor gives). Each SQL text is prepared once per connection (names ``cvN``,
never reused, so they cannot clash with psycopg's ``_pg3_N``); parameters go as text (the SQL
casts them, or the server infers the column's type). An error result raises the same psycopg
exception class psycopg would (SQLSTATE kept: a deadlock victim is still
``DeadlockDetected``); a connection failure raises ``psycopg.OperationalError``. A parameter
that is not a plain scalar (``str``, ``int``, ``float``, ``bool``, None) or a ``BinaryArray``
(``arrays.bytea_binary``: bound as it is, with format code 1) makes ``encodable`` false and the
caller goes through psycopg instead.

A failed transaction forgets this module's names of its connection (``forget``: ``Tx.rollback``,
and ``PgStore._connection`` when a connection goes back to the pool inside a transaction) and
ends with ``ROLLBACK; DEALLOCATE ALL`` when there were some: psycopg deallocates after a
ROLLBACK only when its own cache holds names. An unknown name (SQLSTATE 26000, a rollback
missed) fails that one transaction and is forgotten too. Parameters are encoded (in the
connection's client encoding) before anything is sent: a value that cannot go fails with
nothing half sent; a text with a NUL is refused (libpq would cut it there). Both caches are
bounded (``MAX_TEXTS``, ``MAX_PREPARED``): SQL built per call cannot grow them without end.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import select
import weakref
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import errors, pq
from psycopg.adapt import Transformer

from .arrays import BinaryArray

#: positional (``%s``) or named (``%(name)s``, a dict) parameters
Params = Sequence[Any] | dict[str, Any]

_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%s|%%")
#: SQL text (psycopg placeholders) -> (server text with $n, parameter names or None: positional)
_CONVERTED: dict[str, tuple[bytes, list[str] | None]] = {}
#: bounds of the caches: SQL texts built per call must not grow them without end (past the
#: bound a text is converted each time, and sent as the unnamed statement)
MAX_TEXTS = 512
MAX_PREPARED = 256


class _Conn:
    """What this module knows of one connection: its prepared names and its encoding."""

    __slots__ = ("encoding", "names")

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        #: SQL text -> its prepared statement's name on that connection
        self.names: dict[str, bytes] = {}
        #: parameters are sent in the connection's client encoding (as psycopg sends them)
        self.encoding = conn.info.encoding


_PREPARED: weakref.WeakKeyDictionary[psycopg.Connection[Any], _Conn] = weakref.WeakKeyDictionary()
_NUL = "PostgreSQL text fields cannot contain NUL (0x00) bytes"
_NAMES = itertools.count()
#: sent unprepared (nothing to plan)
_CONTROL = ("BEGIN", "COMMIT")
_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK, pq.ExecStatus.EMPTY_QUERY)
#: the parameter types sent as they are (the rest as text)
_PLAIN = (str, int, float, bool, BinaryArray)


def _convert(sql: str) -> tuple[bytes, list[str] | None]:
    """``sql`` with psycopg's ``%s`` / ``%(name)s`` placeholders as ``$n``."""
    found = _CONVERTED.get(sql)
    if found is not None:
        return found
    names: list[str] = []
    slots: dict[str, int] = {}
    positional = 0

    def swap(m: re.Match[str]) -> str:
        nonlocal positional
        if m.group(0) == "%%":
            return "%"
        if m.group(1) is None:
            positional += 1
            return f"${positional}"
        name = m.group(1)
        if name not in slots:
            names.append(name)
            slots[name] = len(names)
        return f"${slots[name]}"

    text = _PLACEHOLDER.sub(swap, sql)
    if positional and names:
        raise ValueError("a statement mixes %s and %(name)s placeholders")
    found = (text.encode(), names if names else None)
    if len(_CONVERTED) < MAX_TEXTS:
        _CONVERTED[sql] = found
    return found


def _text(value: Any, encoding: str) -> bytes | None:
    """A parameter in text format (see ``encodable``). libpq reads a text parameter up to its
    first NUL: one inside is refused (psycopg's error), never sent cut short."""
    if value is None:
        return None
    if value is True or value is False:
        return b"t" if value else b"f"
    if type(value) is BinaryArray:
        return value
    if type(value) is not str:
        return str(value).encode()
    out = value.encode(encoding)
    if b"\x00" in out:
        raise psycopg.DataError(_NUL)
    return out


def encodable(batch: Sequence[tuple[str, Params]]) -> bool:
    """True when every parameter of ``batch`` is a plain scalar ``fire`` sends as text, or a
    ``BinaryArray``."""
    for _, params in batch:
        values = params.values() if isinstance(params, dict) else params
        for v in values:
            if v is not None and type(v) not in _PLAIN:
                return False
    return True


def _formats(values: Sequence[bytes | None] | None) -> list[int] | None:
    """The parameters' format codes: None (all text) unless one is a ``BinaryArray``."""
    if values is None or not any(type(v) is BinaryArray for v in values):
        return None
    return [1 if type(v) is BinaryArray else 0 for v in values]


def _values(params: Params, names: list[str] | None, encoding: str) -> list[bytes | None]:
    if names is None:
        assert not isinstance(params, dict)
        return [_text(v, encoding) for v in params]
    assert isinstance(params, dict)
    return [_text(params[n], encoding) for n in names]


def _bound(sql: str, params: Params, encoding: str) -> tuple[bytes, list[bytes | None]]:
    """``sql``'s server text and its parameters in text format."""
    text, names = _convert(sql)
    return text, _values(params, names, encoding)


def forget(conn: psycopg.Connection[Any]) -> bool:
    """Drop the names of ``conn``'s statements; True when there were some: the caller then
    deallocates them on the server too (``ROLLBACK_ALL``), as psycopg does so only when its
    own cache holds names, and a connection that ran only this module's statements would
    keep every forgotten one."""
    state = _PREPARED.pop(conn, None)
    return state is not None and bool(state.names)


#: a failed transaction's end when ``forget`` found names: one round trip, simple protocol
ROLLBACK_ALL = "ROLLBACK; DEALLOCATE ALL"


def fire(conn: psycopg.Connection[Any], batch: Sequence[tuple[str, Params]]) -> None:
    """Run ``batch`` (prepared statements with ``encodable`` parameters; BEGIN and COMMIT go
    unprepared) in one round trip; results discarded, the first error raised."""
    _run(conn, batch, ())


def rows(
    conn: psycopg.Connection[Any], batch: Sequence[tuple[str, Params]], binary: Sequence[int]
) -> list[list[tuple[Any, ...]]]:
    """``fire`` that returns each statement's rows (tuples, loaded by psycopg's own loaders);
    the statements whose index is in ``binary`` answer in binary format (no text parsing of
    numbers and bytea)."""
    results = _run(conn, batch, binary)
    out: list[list[tuple[Any, ...]]] = []
    for i, res in enumerate(results):
        if res is None or not res.ntuples:
            out.append([])
            continue
        load = Transformer(conn)
        load.set_pgresult(res, format=pq.Format.BINARY if i in binary else pq.Format.TEXT)
        out.append(load.load_rows(0, res.ntuples, tuple))
    return out


def _run(
    conn: psycopg.Connection[Any], batch: Sequence[tuple[str, Params]], binary: Sequence[int]
) -> list[Any]:
    """Send ``batch`` in one pipeline and sync; each statement's result (None for BEGIN /
    COMMIT and the like), or the first error raised."""
    pg = conn.pgconn
    state = _PREPARED.get(conn)
    if state is None:
        state = _PREPARED[conn] = _Conn(conn)
    known = state.names
    # every parameter encoded before anything is sent: a value that cannot go (a NUL, a
    # character the client encoding lacks) fails with nothing half sent on the connection
    sends = [
        (sql, None, None) if sql in _CONTROL else (sql, *_bound(sql, params, state.encoding))
        for sql, params in batch
    ]
    fresh: list[str] = []
    pg.enter_pipeline_mode()
    try:
        for i, (sql, text, values) in enumerate(sends):
            if text is None:
                pg.send_query_params(sql.encode(), None)
                continue
            name = known.get(sql)
            if name is None:
                if len(known) < MAX_PREPARED:
                    name = known[sql] = f"cv{next(_NAMES)}".encode()
                    fresh.append(sql)
                else:  # a full registry: the unnamed statement, parsed again each time
                    name = b""
                pg.send_prepare(name, text)
            fmt = pq.Format.BINARY if i in binary else pq.Format.TEXT
            pg.send_query_prepared(name, values, _formats(values), result_format=fmt)
        pg.pipeline_sync()
        results, failed = _finish(pg, conn)
    except BaseException:
        for sql in fresh:  # maybe never prepared: prepare again under a new name next time
            known.pop(sql, None)
        raise
    finally:
        if pg.pipeline_status != pq.PipelineStatus.OFF and pg.status == pq.ConnStatus.OK:
            # fails only with results left unread (an interrupted read): the connection then
            # goes back to the pool mid-query, and the pool discards it
            with contextlib.suppress(psycopg.Error):
                pg.exit_pipeline_mode()
    if failed is not None:
        for sql in fresh:
            known.pop(sql, None)
        if failed.sqlstate == "26000":  # a name the server no longer knows: start afresh
            forget(conn)
        raise failed
    # the PREPAREs answer too: keep one result per statement of the batch
    return [r for r in results if r is not _PREPARE_DONE]


_PREPARE_DONE = object()


def _finish(pg: Any, conn: psycopg.Connection[Any]) -> tuple[list[Any], psycopg.Error | None]:
    """Send what is buffered, read every result up to the sync: one per statement (a PREPARE
    answers with an empty command result), and the first error, if any."""
    while pg.flush():  # 1: more to send, the socket is full
        select.select([pg.socket], [pg.socket], [])
        pg.consume_input()
    failed: psycopg.Error | None = None
    results: list[Any] = []
    while True:
        while pg.is_busy():
            select.select([pg.socket], [], [])
            pg.consume_input()
        res = pg.get_result()
        if res is None:
            continue
        status = res.status
        if status == pq.ExecStatus.PIPELINE_SYNC:
            return results, failed
        if status == pq.ExecStatus.TUPLES_OK:
            results.append(res)
        elif status == pq.ExecStatus.COMMAND_OK and not res.command_status:
            results.append(_PREPARE_DONE)  # the answer to a PREPARE (no command tag)
        elif status in _OK:
            results.append(None)
        else:
            results.append(None)
            if status != pq.ExecStatus.PIPELINE_ABORTED and failed is None:
                failed = errors.error_from_result(res, encoding=conn.info.encoding)
