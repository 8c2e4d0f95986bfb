"""docs/architecture-postgres.md's schema is the schema: its tables and its indexes (name,
columns, predicate) are exactly those a fresh database gets from ``schema.py`` (version 1 plus
every migration), and the error naming ``conveyor migrate`` names a command that exists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conveyor import BrokerUnavailable
from conveyor.broker.postgres import schema as pg_schema
from conveyor.broker.postgres.broker import PostgresBroker
from tests.examples.test_docs_cli import problems

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture-postgres.md"


def _section(text: str, heading: str) -> str:
    return text.split(f"\n{heading}\n", 1)[1].split("\n#", 1)[0]


def documented_tables(text: str) -> set[str]:
    return set(re.findall(r"^\| `(\w+)` \|", _section(text, "## Schema"), re.M))


def documented_indexes(text: str) -> dict[str, str]:
    """index name -> its normalised definition (columns, INCLUDE, WHERE), or "" when the doc
    names a constraint's index (``jobs_id_key``, ``idem`` primary key)."""
    found = {}
    for cell in re.findall(r"^\| (.+?) \| .+ \|$", _section(text, "### Indexes"), re.M):
        if cell.startswith("index") or set(cell) <= {"-", " ", "|"}:
            continue
        for span in re.findall(r"`([^`]+)`", cell):
            name, _, definition = span.partition(" ")
            found[name] = _normal(definition)
        if cell.endswith("primary key"):
            found[re.findall(r"`(\w+)`", cell)[0] + "_pkey"] = ""
            del found[re.findall(r"`(\w+)`", cell)[0]]
    return found


def _normal(definition: str) -> str:
    """Columns, INCLUDE and predicate without casts, parentheses, quotes or spaces."""
    definition = re.sub(r"::\w+", "", definition).split(" USING btree ", 1)[-1]
    return re.sub(r"[()\s\"]", "", definition).lower()


def real_schema(url: str) -> tuple[set[str], dict[str, str]]:
    with psycopg.connect(url) as c:
        tables = {
            r[0] for r in c.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'conveyor'")
        }
        rows = c.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'conveyor'")
        indexes = {name: _normal(definition) for name, definition in rows}
    return tables, indexes


@pytest.fixture(scope="module")
def fresh(pg_server: Any) -> tuple[set[str], dict[str, str]]:
    url = pg_server.new_database()
    PostgresBroker.from_url(url).close()
    return real_schema(url)


def test_the_documented_tables_are_the_real_ones(fresh: tuple[set[str], dict[str, str]]) -> None:
    assert documented_tables(DOC.read_text("utf-8")) == fresh[0]


def test_the_documented_indexes_are_the_real_ones(fresh: tuple[set[str], dict[str, str]]) -> None:
    documented = documented_indexes(DOC.read_text("utf-8"))
    real = fresh[1]
    # a table's primary key is documented as its key in the table list, not as an index
    keys_only = {n for n in real if n.endswith("_pkey") and n not in documented}
    assert set(documented) == set(real) - keys_only
    assert {n: d for n, d in documented.items() if d} == {
        n: real[n] for n in documented if documented[n]
    }


def test_a_planted_schema_mistake_is_caught(fresh: tuple[set[str], dict[str, str]]) -> None:
    text = DOC.read_text("utf-8")
    wrong = text.replace(
        "`jobs_lease (lease_at) WHERE lease_at IS NOT NULL`", "`jobs_lease (lease_at)`"
    )
    assert documented_indexes(wrong)["jobs_lease"] != fresh[1]["jobs_lease"]
    renamed = documented_tables(text.replace("| `flow_limits` |", "| `flow_limit` |"))
    assert renamed != fresh[0]


def test_the_outdated_schema_error_names_a_real_command(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = pg_server.new_database()
    PostgresBroker.from_url(url).close()
    monkeypatch.setattr(pg_schema, "SCHEMA_VERSION", pg_schema.SCHEMA_VERSION + 1)
    monkeypatch.setitem(pg_schema.MIGRATIONS, pg_schema.SCHEMA_VERSION - 1, "SELECT 1")
    with pytest.raises(BrokerUnavailable) as caught:
        PostgresBroker.from_url(url)
    command = re.findall(r"`conveyor ([^`]+)`", str(caught.value))
    assert command, str(caught.value)
    assert problems(command[0].split()) == []


def test_transactions_psycopg_block(pg_server: Any) -> None:
    """docs/transactions.md's psycopg block, its URL swapped for the test server's."""
    from tests.examples.docblocks import run

    url = pg_server.new_database()
    with psycopg.connect(url, autocommit=True) as setup:  # the reader's own table
        setup.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    ns: dict[str, Any] = {}
    run("transactions.md", "import psycopg", ns, {"postgresql://shop@db/shop": url})
    app = ns["app"]
    try:
        assert app.broker.counts()["default"]["pending"] == 1
        with psycopg.connect(url) as c:
            assert c.execute("SELECT id FROM orders").fetchall() == [(42,)]
    finally:
        app.close()
