"""Conveyor on the harness's PostgreSQL (system ``conveyor-postgres``), beside its two peers.

Same task module and worker modes as Conveyor on Redis (:mod:`bench.harness.conveyor`), with the
store URL ``postgresql://bench@127.0.0.1:PORT/bench_conveyor`` instead of the Redis URL. The
schema is created in a template database once (``conveyor migrate --url ...``) and every flush
copies that template
(:class:`~bench.harness.pg_system.PgDatabase`). The worker runs on the project's ``.venv``,
which needs the ``postgres`` extra (``pip install -e '.[postgres]'``; ``make setup`` installs it).
"""

from __future__ import annotations

from typing import ClassVar

from bench.harness.conveyor import ConveyorAdapter
from bench.harness.pg_system import PgDatabase


class ConveyorPostgresAdapter(PgDatabase, ConveyorAdapter):
    """Conveyor's CLI worker on PostgreSQL: one-statement SKIP LOCKED claims, LISTEN/NOTIFY."""

    name = "conveyor-postgres"
    db = 0  # unused: nothing of this system lives in Redis
    database = "bench_conveyor"
    bulk_api = "app.enqueue_many (one transaction per batch)"
    tuning_modes: ClassVar[tuple[str, ...]] = ("c64", "c256", "c1024", "c4096")

    def schema_command(self, url: str) -> list[str]:
        return [self.bin("conveyor"), "migrate", "--url", url]
