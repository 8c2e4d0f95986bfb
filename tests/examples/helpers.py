"""Helpers of the example tests: import an example by path, parse a CLI line, wait."""

from __future__ import annotations

import importlib.util
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def load_example(relative: str, name: str | None = None) -> ModuleType:
    """Import ``examples/<relative>`` by path, fresh (a new module object every call)."""
    path = EXAMPLES / relative
    module_name = name or f"conveyor_example_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def parse_cli(args: list[str] | str) -> None:
    """The real ``conveyor`` CLI accepts the command and every option (parsed, not invoked)."""
    import click

    from conveyor.cli.main import cli

    argv = shlex.split(args) if isinstance(args, str) else list(args)
    if argv and argv[0] == "conveyor":
        argv = argv[1:]
    with click.Context(cli) as ctx:
        command = cli.get_command(ctx, argv[0])
        assert command is not None, f"{argv!r}: no such command"
        command.make_context(argv[0], argv[1:], parent=ctx)


def wait_for(predicate: Callable[[], object], timeout: float = 30.0) -> None:
    """Poll ``predicate`` until it is true, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        time.sleep(0.02)
