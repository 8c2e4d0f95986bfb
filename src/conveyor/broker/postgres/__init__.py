"""The PostgreSQL backend (``postgresql://``): ``PostgresBroker`` and its parts.

Modules: ``schema`` (tables, versions, migrations), ``store`` (pool, transactions, counts),
``reads`` (queries, LISTEN/NOTIFY wake-ups), ``waits`` (waiting on one job), ``broker``
(transitions), ``admin`` (operator actions), ``enqueue`` (inserts, transactional enqueue),
``side`` (side stores), ``maintenance`` (retention housekeeping).
Needs the ``postgres`` extra (psycopg 3 and psycopg-pool). docs/architecture-postgres.md.
"""
