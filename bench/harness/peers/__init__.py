"""Registry of systems the harness can measure, in table order.

Entries are ``"module:Class"`` strings so that a missing adapter (e.g. Conveyor's, before it is
written) only removes that system. The Conveyor adapter is expected at
``bench/harness/conveyor.py`` as ``ConveyorAdapter``.
"""

from __future__ import annotations

import importlib

from bench.harness.adapter import Adapter

SYSTEMS: dict[str, str] = {
    "conveyor": "bench.harness.conveyor:ConveyorAdapter",
    "conveyor-sqlite": "bench.harness.conveyor_backends:ConveyorSqliteAdapter",
    "conveyor-memory": "bench.harness.conveyor_backends:ConveyorMemoryAdapter",
    "conveyor-postgres": "bench.harness.conveyor_postgres:ConveyorPostgresAdapter",
    "celery": "bench.harness.peers.celery:CeleryAdapter",
    "rq": "bench.harness.peers.rq:RQAdapter",
    "dramatiq": "bench.harness.peers.dramatiq:DramatiqAdapter",
    "arq": "bench.harness.peers.arq:ArqAdapter",
    "saq": "bench.harness.peers.saq:SaqAdapter",
    "huey": "bench.harness.peers.huey:HueyAdapter",
    "bullmq": "bench.harness.peers.leaders:BullMQAdapter",
    "sidekiq": "bench.harness.peers.leaders:SidekiqAdapter",
    "bullmq-python": "bench.harness.peers.leaders:BullMQPythonAdapter",
    "procrastinate": "bench.harness.peers.postgres:ProcrastinateAdapter",
    "pgqueuer": "bench.harness.peers.postgres:PgQueuerAdapter",
}

PEERS = tuple(name for name in SYSTEMS if not name.startswith("conveyor"))
#: The field's leaders (other runtimes, or their Python port): the issue-21 targets.
LEADERS = ("bullmq", "sidekiq", "bullmq-python")
#: Conveyor on its embedded backends: absolute figures, no peers to compare with.
BACKENDS = ("conveyor-sqlite", "conveyor-memory")
#: The systems on the harness's PostgreSQL: their own table, ratios against the PostgreSQL peers.
POSTGRES = ("conveyor-postgres", "procrastinate", "pgqueuer")


def load_adapter(name: str) -> type[Adapter]:
    """Import and return the adapter class registered as ``name``."""
    if name not in SYSTEMS:
        raise KeyError(f"unknown system {name!r}; known: {', '.join(SYSTEMS)}")
    module_name, _, attr = SYSTEMS[name].partition(":")
    cls: type[Adapter] = getattr(importlib.import_module(module_name), attr)
    return cls


def available() -> list[str]:
    """Names whose adapter module can be imported (Conveyor's may not exist yet)."""
    names = []
    for name, target in SYSTEMS.items():
        try:
            load_adapter(name)
        except ModuleNotFoundError as exc:
            if exc.name != target.partition(":")[0]:
                raise  # the adapter exists but imports something missing: say so
            continue
        names.append(name)
    return names
