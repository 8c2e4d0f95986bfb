"""``conveyor migrate``: create or upgrade the broker's schema (PostgreSQL; SQLite too).

PostgreSQL: creates the ``conveyor`` schema (or ``?schema=``) or applies the versioned
migrations of ``broker.postgres.schema`` in one transaction under an advisory lock; a schema
written by a newer Conveyor is refused. ``--check`` only reports (exit 1 when a migration is
due). SQLite files migrate themselves when opened; memory has no schema. Redis has no schema
but a ready-member format (``<p>:format``, broker/redis/fmtgate.py): migrate turns fresh
members on, to be run once every worker runs this version (docs/operations.md, "Upgrading").
"""

from __future__ import annotations

import sys

import click
import orjson


@click.command("migrate")
@click.option(
    "--url",
    envvar="CONVEYOR_URL",
    required=True,
    help="Broker URL, e.g. postgresql://user@host/db (env CONVEYOR_URL).",
)
@click.option("--check", is_flag=True, help="Only report the schema version; exit 1 if behind.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def migrate(url: str, check: bool, as_json: bool) -> None:
    """Create or upgrade the broker's schema to this Conveyor's version."""
    scheme = url.split("://", 1)[0].lower()
    if scheme in ("postgresql", "postgres"):
        out = _postgres(url, check)
    elif scheme == "sqlite":
        from ..broker.sqlite import SqliteBroker
        from ..broker.sqlite_schema import SCHEMA_VERSION

        SqliteBroker.from_url(url).close()  # opening migrates the file
        out = {"backend": "sqlite", "found": None, "version": SCHEMA_VERSION, "migrated": True}
    elif scheme in ("redis", "rediss", "redis+sentinel", "redis+cluster"):
        out = _redis(url, check)
    else:
        out = {"backend": scheme, "found": None, "version": None, "migrated": False}
    if as_json:
        click.echo(orjson.dumps(out).decode())
    elif out["version"] is None:
        click.echo(f"{scheme}: no schema to migrate")
    elif out["backend"] == "redis":
        click.echo(_redis_line(out))
    else:
        click.echo(
            f"{out['backend']}: schema version {out['found']} -> {out['version']}"
            + ("" if out["migrated"] else " (not migrated: --check)")
        )
    if check and out.get("behind"):
        sys.exit(1)


def _postgres(url: str, check: bool) -> dict[str, object]:
    try:
        import psycopg

        from ..broker.postgres.schema import (
            SCHEMA_VERSION,
            SchemaError,
            ensure_schema,
            found_version,
        )
        from ..broker.postgres.store import parse_url
    except ImportError as exc:
        raise click.UsageError(
            "postgresql URLs need: pip install 'conveyor-jobs[postgres]'"
        ) from exc
    conninfo, opts = parse_url(url)
    schema = opts.get("schema", "conveyor")
    try:
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
            if check:
                found = found_version(conn, schema)
                return {
                    "backend": "postgresql",
                    "schema": schema,
                    "found": found,
                    "version": SCHEMA_VERSION,
                    "migrated": False,
                    "behind": found < SCHEMA_VERSION,
                }
            found, now = ensure_schema(conn, schema, migrate=True, where=schema)
    except (psycopg.Error, SchemaError) as exc:  # one line: psycopg adds a hint line
        raise click.ClickException(" ".join(str(exc).split())) from exc
    return {"backend": "postgresql", "schema": schema, "found": found, "version": now,
            "migrated": True}  # fmt: skip


def _redis(url: str, check: bool) -> dict[str, object]:
    """Redis: set (or with ``check`` report) the ready-member format ``<p>:format``."""
    from ..broker.redis import RedisBroker
    from ..errors import BrokerUnavailable

    broker = RedisBroker.from_url(url)
    try:
        return broker.migrate_format(check=check)
    except BrokerUnavailable as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        broker.close()


def _redis_line(out: dict[str, object]) -> str:
    """What ``migrate`` did to (or found in) ``<p>:format``, in words."""
    found, version = out["found"], out["version"]
    if found == version:
        return f"redis: ready-member format {found} (current)"
    if found == "1":  # absent: the format before fresh members
        note = "" if out["migrated"] else " (not migrated: --check)"
        return f"redis: ready-member format {found} -> {version}{note}"
    return f"redis: ready-member format {found!r} is not this version's ({version}): left as is"


def register(group: click.Group) -> None:
    """Add ``migrate`` to the CLI group."""
    group.add_command(migrate)
