"""CLI fixtures: the parametrised app exposed as an importable ``module:attribute``."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from click.testing import CliRunner, Result

from conveyor import Conveyor, PermanentError
from conveyor.cli.common import console
from conveyor.cli.main import cli


@pytest.fixture
def cli_app(app: Conveyor, request: pytest.FixtureRequest) -> Iterator[tuple[Conveyor, str]]:
    """The app of every backend, importable as ``<module>:app`` for ``--app``."""

    @app.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(name="boom", max_attempts=1)
    def boom(*args: Any) -> None:
        raise PermanentError("kaput")

    name = f"_conveyor_cli_test_{id(app)}"
    module = types.ModuleType(name)
    module.app = app  # type: ignore[attr-defined]
    sys.modules[name] = module
    yield app, f"{name}:app"
    sys.modules.pop(name, None)


def run(*args: str, input: str | None = None, width: int = 200) -> Result:
    """Invoke ``conveyor ARGS`` in-process (rich tables ``width`` columns wide)."""
    console.size = (width, 50)
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def run_json(*args: str) -> Any:
    """Invoke with ``--json`` and parse the output."""
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return orjson.loads(result.output)
