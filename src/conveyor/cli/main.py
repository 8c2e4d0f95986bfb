"""Entry point of the ``conveyor`` command: a click group whose commands load on demand.

Each command lives in its own module, imported only when that command runs (or for ``--help``
listings), so ``conveyor worker`` does not pay for the dashboard's or rich's imports.
"""

from __future__ import annotations

import importlib
import logging

import click

from ..errors import ConveyorError

# command name -> module defining it (each module has ``register(group)``).
COMMANDS: dict[str, str] = {
    "enqueue": "admin_cmds",
    "queues": "admin_cmds",
    "pause": "admin_cmds",
    "resume": "admin_cmds",
    "worker": "worker_cmd",
    "scheduler": "scheduler_cmd",
    "schedules": "scheduler_cmd",
    "status": "inspect_cmds",
    "jobs": "inspect_cmds",
    "job": "inspect_cmds",
    "dlq": "inspect_cmds",
    "dashboard": "dashboard_cmd",
    "demo": "demo_cmd",
    "bench": "bench_cmd",
    "migrate": "migrate_cmd",
}


class LazyGroup(click.Group):
    """A group that imports a command's module the first time the command is needed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command name, sorted."""
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """Import the module that defines ``cmd_name`` and return the command."""
        module_name = COMMANDS.get(cmd_name)
        if module_name is None:
            return None
        if cmd_name not in self.commands:
            module = importlib.import_module(f"conveyor.cli.{module_name}")
            module.register(self)
        return self.commands.get(cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def cli(verbose: bool) -> None:
    """Conveyor: background jobs that are never lost."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def main() -> None:
    """Run the CLI; Conveyor errors become a clear message and exit code 2."""
    try:
        cli(standalone_mode=True)
    except ConveyorError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from exc


if __name__ == "__main__":
    main()
