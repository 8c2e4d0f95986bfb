"""``conveyor relay APP``: move the transactional outbox's committed rows to the broker.

The app module may declare ``Outbox(app, url)`` (its url and table are used); ``--db`` /
``--table`` override them or install an outbox on the spot. SIGTERM / SIGINT stop the relay
after the batch under way (a batch is pushed before its rows are deleted; killing it harder is
safe too: the next relay re-pushes and the broker refuses the ids it holds). docs/transactions.md.
"""

from __future__ import annotations

import signal
from typing import Any

import click

from ..core.job import MAX_DELAY
from ..outbox import DEFAULT_TABLE, Outbox
from .common import Finite, load_app


@click.command("relay")
@click.argument("app_target", metavar="APP")
@click.option(
    "--db", envvar="CONVEYOR_OUTBOX_URL", help="Outbox database (sqlite:///path, postgresql://...)."
)
@click.option("--table", default=None, help=f"Outbox table (default {DEFAULT_TABLE}).")
@click.option(
    "--batch", type=click.IntRange(min=1), default=None, help="Rows per batch (default 500)."
)
@click.option(
    "--interval",
    type=Finite(min=0.0, max=MAX_DELAY),
    default=None,
    help="Seconds between polls when idle.",
)
@click.option("--once", is_flag=True, help="Relay until the outbox is empty, then exit.")
def relay(
    app_target: str,
    db: str | None,
    table: str | None,
    batch: int | None,
    interval: float | None,
    once: bool,
) -> None:
    """Relay the outbox of APP (module:attribute) to its broker, exactly once per row."""
    from ..relay import Relay

    app = load_app(app_target)
    outbox = app.runtime.producer.transactional
    if not isinstance(outbox, Outbox) or (table and table != outbox.table):
        outbox = Outbox(app, db, table=table or DEFAULT_TABLE)
    runner = Relay(outbox, db, batch=batch, interval=interval)
    if once:
        while runner.relay_once():
            pass
        runner.close()
        click.echo(
            f"relayed {runner.relayed} row(s) ({runner.duplicates} already in the broker,"
            f" {runner.failed} refused: moved to {runner.outbox.table}_failed)"
        )
        return

    def stop(signum: int, frame: Any) -> None:
        runner.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    runner.run()


def register(group: click.Group) -> None:
    """Add the command to the CLI."""
    group.add_command(relay)
