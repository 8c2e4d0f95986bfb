"""Entry point of the ``conveyor`` command: a click group; each command lives in its own module."""

from __future__ import annotations

import importlib
import logging

import click

from ..errors import ConveyorError

# Each module defines click commands and a ``register(group)`` function.
COMMAND_MODULES = (
    "conveyor.cli.admin_cmds",
    "conveyor.cli.worker_cmd",
    "conveyor.cli.scheduler_cmd",
    "conveyor.cli.inspect_cmds",
    "conveyor.cli.dashboard_cmd",
    "conveyor.cli.demo_cmd",
    "conveyor.cli.bench_cmd",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def cli(verbose: bool) -> None:
    """Conveyor: background jobs that are never lost."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")  # fmt: skip


def _register_all() -> None:
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # not written yet in this checkout
                continue
            raise
        module.register(cli)


_register_all()


def main() -> None:
    """Run the CLI; Conveyor errors become a clear message and exit code 2."""
    try:
        cli(standalone_mode=True)
    except ConveyorError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from exc


if __name__ == "__main__":
    main()
