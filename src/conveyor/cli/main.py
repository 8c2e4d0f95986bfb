"""Entry point of the ``conveyor`` command: a click group whose commands load on demand.

Each command lives in its own module, imported only when that command runs (or for ``--help``
listings), so ``conveyor worker`` does not pay for the dashboard's or rich's imports, and no
command but ``dashboard`` (and ``worker --metrics-port``) needs the optional extras.
A mistyped command gets "did you mean"; ``conveyor --version`` prints the installed version.
"""

from __future__ import annotations

import difflib
import importlib
import logging

import click

from ..errors import BrokerUnavailable, ConveyorError
from ..worker.logs import configure_logging
from .common import unreachable

# command name -> module defining it (each module has ``register(group)``).
COMMANDS: dict[str, str] = {
    "enqueue": "admin_cmds",
    "queues": "admin_cmds",
    "pause": "admin_cmds",
    "resume": "admin_cmds",
    "cancel": "admin_cmds",
    "retry": "admin_cmds",
    "worker": "worker_cmd",
    "scheduler": "scheduler_cmd",
    "schedules": "scheduler_cmd",
    "status": "inspect_cmds",
    "jobs": "inspect_cmds",
    "job": "inspect_cmds",
    "dlq": "dlq_cmds",
    "dashboard": "dashboard_cmd",
    "demo": "demo_cmd",
    "bench": "bench_cmd",
    "relay": "relay_cmd",
    "migrate": "migrate_cmd",
    "limits": "limits_cmd",
    "quiet": "ops_cmds",
    "stop": "ops_cmds",
    "clear": "ops_cmds",
    "history": "ops_cmds",
    "run-now": "ops_cmds",
    "bulk": "ops_cmds",
}
#: Long-running processes: they show the broker's start-up warnings (persistence, eviction);
#: one-shot commands do not repeat them on every call.
DAEMONS = {"worker", "scheduler", "dashboard"}


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

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """As click does, plus "did you mean" for a mistyped command name."""
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in COMMANDS:
            close = difflib.get_close_matches(name, sorted(COMMANDS), n=3, cutoff=0.5)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            ctx.fail(f"No such command {name!r}.{hint}")
        return super().resolve_command(ctx, args)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("conveyor-jobs")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown"


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    package_name="conveyor-jobs", prog_name="conveyor", message="%(prog)s %(version)s"
)
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
@click.pass_context
def cli(ctx: click.Context, verbose: bool) -> None:
    """Conveyor: background jobs that are never lost."""
    configure_logging("text", logging.DEBUG if verbose else logging.WARNING)
    if ctx.invoked_subcommand not in DAEMONS and not verbose:
        checks = logging.getLogger("conveyor.redis.checks")
        previous = checks.level
        checks.setLevel(logging.ERROR)
        ctx.call_on_close(lambda: checks.setLevel(previous))  # in-process callers (tests)


def main() -> None:
    """Run the CLI; Conveyor errors become a clear message and exit code 2, an unreachable
    broker the one line and exit code 1 every command gives (``common.unreachable``)."""
    try:
        cli(standalone_mode=True)
    except BrokerUnavailable as exc:  # commands without their own handler (bench, demo)
        unreachable(exc).show()
        raise SystemExit(1) from exc
    except ConveyorError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from exc


if __name__ == "__main__":
    main()
