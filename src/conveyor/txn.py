"""Transactional enqueue: find the DB-API connection (and its open transaction) under what the
caller passed as ``connection=``.

``task.options(connection=conn).enqueue(...)`` and ``app.enqueue_many(specs, connection=conn)``
accept a DB-API connection (``sqlite3.Connection``, ``psycopg.Connection``), a SQLAlchemy
``Connection`` or ``Session``, or Django's connection (``django.db.connection`` /
``connections[alias]``, inside ``transaction.atomic()``). SQLAlchemy and Django are recognised
by duck typing, never imported here, so neither is a dependency. The producer hands the raw
connection to ``Broker.enqueue_in_transaction`` (or to the outbox, ``conveyor.outbox``).
Recipes and guarantees: docs/transactions.md.
"""

from __future__ import annotations

import sys
from typing import Any

from .errors import ValidationError

#: DB-API ``paramstyle`` -> the placeholder Conveyor's SQL uses for it.
_PLACEHOLDERS = {"qmark": "?", "format": "%s", "pyformat": "%s"}


def raw_connection(connection: Any) -> Any:
    """The DB-API connection under ``connection``, with the caller's transaction open.

    SQLAlchemy: a ``Session`` yields its connection (starting the session's transaction if it
    has none yet, exactly as a query would); a ``Connection`` outside a transaction is begun
    (SQLAlchemy 2.0's autobegin). Django: only inside ``transaction.atomic()`` (in autocommit
    mode the job would be committed on its own, which is what ``transaction.on_commit`` /
    the ``ON_COMMIT`` setting are for).
    """
    if connection is None:
        raise ValidationError("connection", "must be a database connection, got None")
    if _is_sqlalchemy_session(connection):
        connection = connection.connection()
    if _is_sqlalchemy_connection(connection):
        if not connection.in_transaction():
            connection.begin()
        return connection.connection.dbapi_connection
    if _is_django_connection(connection):
        if not connection.in_atomic_block:
            raise ValidationError(
                "connection",
                "Django's connection is in autocommit mode: enqueue inside "
                "transaction.atomic() (the job then commits or rolls back with your data)",
            )
        connection.ensure_connection()
        return connection.connection
    if callable(getattr(connection, "cursor", None)) and callable(
        getattr(connection, "commit", None)
    ):
        return connection  # a DB-API connection (PEP 249)
    raise ValidationError(
        "connection",
        f"must be a DB-API connection, a SQLAlchemy Connection or Session, or Django's"
        f" connection; got {type(connection).__name__}",
    )


def placeholder(raw: Any) -> str:
    """The parameter placeholder of a raw DB-API connection (``?`` or ``%s``)."""
    root = type(raw).__module__.split(".")[0]
    module = sys.modules.get(root)
    style = getattr(module, "paramstyle", None)
    if style not in _PLACEHOLDERS:
        raise ValidationError(
            "connection",
            f"unsupported DB-API driver {root!r} (paramstyle {style!r}): use sqlite3 or psycopg",
        )
    return _PLACEHOLDERS[str(style)]


def is_sqlite(raw: Any) -> bool:
    """True for a ``sqlite3.Connection`` (the stdlib driver)."""
    import sqlite3

    return isinstance(raw, sqlite3.Connection)


def _is_sqlalchemy_session(obj: Any) -> bool:
    """An ``sqlalchemy.orm.Session`` (or a scoped session proxying one)."""
    module = type(obj).__module__
    return module.startswith("sqlalchemy.orm") and callable(getattr(obj, "connection", None))


def _is_sqlalchemy_connection(obj: Any) -> bool:
    """An ``sqlalchemy.engine.Connection``."""
    return type(obj).__module__.startswith("sqlalchemy.engine") and hasattr(obj, "in_transaction")


def _is_django_connection(obj: Any) -> bool:
    """Django's database wrapper, or the ``django.db.connection`` proxy in front of one."""
    return type(obj).__module__.startswith("django.") and hasattr(obj, "in_atomic_block")
