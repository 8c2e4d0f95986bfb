"""Django: enqueue inside ``transaction.atomic()`` stored in the transaction itself.

* ``IN_TRANSACTION``: the broker is a SQLite file that is also Django's database, or the
  PostgreSQL database Django uses (its tables in ``public``, Conveyor's in ``conveyor``);
* ``OUTBOX``: the broker is the real redis-server, the outbox table is in Django's database.

Rollback -> no job (no outbox row); commit -> the worker runs it (after the relay, for Redis).
Each mode runs django_txn_script.py in a subprocess (Django is configured once per process).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("django")

SCRIPT = Path(__file__).with_name("django_txn_script.py")
ROOT = Path(__file__).parents[2]


def _run(*args: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-3000:]


def test_in_transaction_on_the_shared_sqlite_file(tmp_path: Path) -> None:
    _run("sqlite", str(tmp_path / "site.db"))


def test_outbox_in_the_django_database_relayed_to_redis(tmp_path: Path, redis_server: Any) -> None:
    _run("outbox", str(tmp_path / "site.db"), redis_server.url)


def test_in_transaction_on_the_shared_postgres_database(pg_server: Any) -> None:
    pytest.importorskip("psycopg")
    _run("postgres", pg_server.new_database())
