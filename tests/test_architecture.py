"""The layering of docs/architecture.md, enforced: every import of every module is checked.

The test parses each module under ``src/conveyor`` (no import, so a ``TYPE_CHECKING`` block or
an import inside a function counts like any other) and lists every import that breaks a rule,
as ``file:line``. The rules are the table "Layers" of docs/architecture.md.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = SRC / "conveyor"

PROCESSES = ("conveyor.worker", "conveyor.scheduler", "conveyor.monitoring")
#: the only modules that may import the facade (``conveyor.app``)
SURFACES = (
    "conveyor.app",
    "conveyor.cli",
    "conveyor.dashboard",
    "conveyor.bench",
    "conveyor.demo",
    "conveyor.contrib",  # framework integrations (docs/integrations.md)
)
#: the runtime layer
RUNTIME = (
    "conveyor.runtime",
    "conveyor.producer",
    "conveyor.producer_envelopes",
    "conveyor.producer_jobs",
    "conveyor.task",
    "conveyor.task_options",
    "conveyor.handles",
    "conveyor.middleware",
    "conveyor.config",
    "conveyor.errors",
)
#: the only worker modules that may import the Worker class (``worker/loop.py``)
WORKER_OWNERS = ("conveyor.worker", "conveyor.worker.loop")
CONCRETE_BACKENDS = ("conveyor.broker.memory", "conveyor.broker.sqlite", "conveyor.broker.redis")


def module_name(path: Path) -> str:
    """``src/conveyor/worker/loop.py`` -> ``conveyor.worker.loop`` (a package -> its name)."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def within(name: str, *packages: str) -> bool:
    """True when ``name`` is one of ``packages`` or inside one of them."""
    return any(name == p or name.startswith(p + ".") for p in packages)


def concrete_backend(name: str) -> bool:
    """``broker.memory*``, ``broker.sqlite*`` (``sqlite_store``...), ``broker.redis*``."""
    return any(name.startswith(prefix) for prefix in CONCRETE_BACKENDS)


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """Every Conveyor module ``path`` imports, with the line (relative imports resolved)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            yield node.lineno, base
            for alias in node.names:  # ``from ..broker import memory`` imports a module too
                yield node.lineno, f"{base}.{alias.name}"


def broken_rule(importer: str, imported: str) -> str | None:
    """The rule an import breaks, or None."""
    facade = within(imported, "conveyor.app")
    # the package ``__init__`` re-exports the facade lazily: it is a surface too
    if facade and importer != "conveyor" and not within(importer, *SURFACES):
        return "only the surfaces (app, cli, dashboard) import the facade conveyor.app"
    core_ok = within(imported, "conveyor.core", "conveyor.errors") or not within(
        imported, "conveyor"
    )
    if within(importer, "conveyor.core") and not core_ok:
        return "core/ imports nothing of Conveyor but core and errors"
    upward = within(imported, *PROCESSES, "conveyor.dashboard", "conveyor.cli")
    if within(importer, "conveyor.broker") and upward:
        return "broker/ never imports a process or a surface"
    if within(importer, *PROCESSES) and concrete_backend(imported):
        return "processes use broker.base, never a concrete backend"
    if importer in RUNTIME and within(imported, *PROCESSES, *SURFACES):
        return "the runtime layer never imports a process or a surface"
    helper = within(importer, "conveyor.worker") and importer not in WORKER_OWNERS
    if helper and within(imported, "conveyor.worker.loop"):
        return "worker helpers get explicit collaborators, never the Worker (worker.loop)"
    return None


def violations() -> list[str]:
    """Every broken rule under src/conveyor, as ``file:line: importer -> imported: rule``."""
    found: dict[tuple[str, int, str], str] = {}  # one report per import statement and rule
    for path in sorted(ROOT.rglob("*.py")):
        importer = module_name(path)
        where = str(path.relative_to(SRC.parent))
        for line, imported in imports(path):
            rule = broken_rule(importer, imported)
            if rule is not None:
                found.setdefault(
                    (where, line, rule), f"{where}:{line}: {importer} -> {imported}: {rule}"
                )
    return [found[key] for key in sorted(found)]


def test_layering_holds() -> None:
    found = violations()
    assert not found, f"{len(found)} layering violation(s):\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("importer", "imported", "broken"),
    [
        ("conveyor.worker.loop", "conveyor.app", True),
        ("conveyor.broker.redis.broker", "conveyor.app", True),
        ("conveyor.scheduler.runner", "conveyor.broker.base", False),
        ("conveyor.monitoring.inspect", "conveyor.broker.sqlite_store", True),
        ("conveyor.worker.loop", "conveyor.broker.redis.keys", True),
        ("conveyor.worker.loop", "conveyor.broker.memory", True),
        ("conveyor.core.job", "conveyor.errors", False),
        ("conveyor.core.job", "conveyor.config", True),
        ("conveyor.broker.sqlite", "conveyor.worker.loop", True),
        ("conveyor.broker.sqlite", "conveyor.dashboard", True),
        ("conveyor.broker.sqlite", "conveyor.core.job", False),
        ("conveyor.cli.common", "conveyor.app", False),
        ("conveyor.runtime", "conveyor.app", True),
        ("conveyor.producer", "conveyor.app", True),
        ("conveyor.worker.loop", "json", False),
        ("conveyor.worker.recorder", "conveyor.worker.loop", True),
        ("conveyor.worker", "conveyor.worker.loop", False),
        ("conveyor.runtime", "conveyor.scheduler.schedules", True),
        ("conveyor.task", "conveyor.cli", True),
    ],
)
def test_rules(importer: str, imported: str, broken: bool) -> None:
    assert (broken_rule(importer, imported) is not None) is broken


def test_relative_imports_resolve(tmp_path: Path) -> None:
    """Relative imports, in a package or inside a function, resolve to absolute names."""
    pkg = tmp_path / "conveyor" / "worker"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from ..core import job\n")
    (pkg / "x.py").write_text("def f():\n    from ..app import Conveyor\n")
    global SRC
    saved, SRC = SRC, tmp_path
    try:
        assert "conveyor.core.job" in {n for _, n in imports(pkg / "__init__.py")}
        assert (2, "conveyor.app") in set(imports(pkg / "x.py"))
    finally:
        SRC = saved


def import_graph() -> dict[str, set[str]]:
    """Module -> the Conveyor modules it imports (``from pkg import mod`` counts as ``pkg.mod``)."""
    known = {module_name(p) for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        edges = graph.setdefault(module_name(path), set())
        for _, imported in imports(path):
            if imported in known:
                edges.add(imported)
    for name, edges in graph.items():  # ``from pkg import mod``: the module, not also ``pkg``
        edges -= {e for e in edges if any(x.startswith(e + ".") for x in edges)}
        edges.discard(name)
    return graph


def cycle_through(graph: dict[str, set[str]], start: str) -> list[str]:
    """The modules on an import cycle through ``start`` (empty when there is none)."""
    reach: dict[str, set[str]] = {}

    def reachable(node: str) -> set[str]:
        if node not in reach:
            seen: set[str] = set()
            todo = [node]
            while todo:
                for nxt in graph.get(todo.pop(), ()):
                    if nxt not in seen:
                        seen.add(nxt)
                        todo.append(nxt)
            reach[node] = seen
        return reach[node]

    return sorted(m for m in reachable(start) if start in reachable(m))


@pytest.mark.parametrize("module", ["conveyor.app", "conveyor.runtime"])
def test_no_import_cycle_through_the_facade_or_the_runtime(module: str) -> None:
    """Nothing the facade or the runtime imports (TYPE_CHECKING included) imports it back.

    On the code before the runtime existed, 27 modules were on one loop with ``conveyor.app``.
    """
    loop = cycle_through(import_graph(), module)
    assert not loop, f"{len(loop)} modules on an import loop with {module}: {loop}"
