"""What every system on the harness's PostgreSQL shares: its database, schema and flush.

:class:`PgDatabase` is mixed in before :class:`~bench.harness.adapter.Adapter` (or an adapter
subclass). The system's store URL, handed to producers and workers as ``$BENCH_REDIS_URL`` /
``--url`` exactly as the Redis URL is for the Redis systems, is
``postgresql://bench@127.0.0.1:PORT/bench_<system>``. On the first flush the mixin creates a
template database and installs the system's schema there with the system's own tool
(:meth:`PgDatabase.schema_command`); every flush then drops the system's database and copies it
from that template, so each scenario starts from an empty, fully migrated schema and schema
creation is never timed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, ClassVar

from bench.harness import pg_server


class PgDatabase:
    """Mixin: a system whose queue lives in its own database of the harness's cluster."""

    #: Database name in the harness's cluster (the template is ``<database>_template``).
    database: ClassVar[str]
    _template_ready: bool = False

    @property
    def pg(self) -> pg_server.PgServer:
        """The harness's private cluster (started on first use)."""
        return pg_server.shared()

    @property
    def redis_url(self) -> str:
        """The store URL (the base class's name for it is historical)."""
        return self.pg.db_url(self.database)

    def schema_command(self, url: str) -> list[str]:
        """argv (from this system's venv) that installs the schema into the database ``url``."""
        raise NotImplementedError

    def _install_template(self) -> str:
        template = f"{self.database}_template"
        self.pg.create_database(template)
        url = self.pg.db_url(template)
        adapter: Any = self
        env = adapter._env() | {"BENCH_REDIS_URL": url}
        run = subprocess.run(
            self.schema_command(url),
            cwd=adapter.ctx.repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if run.returncode != 0:
            raise RuntimeError(f"{self.database}: schema install failed: {run.stderr[-1500:]}")
        self._template_ready = True
        return template

    def flush(self) -> None:
        """Drop the system's database and copy it anew from the schema template."""
        template = f"{self.database}_template"
        if not self._template_ready:
            template = self._install_template()
        self.pg.reset_database(self.database, template)

    def describe_mode(self, mode: str) -> str:
        """The worker command line of ``mode`` with the URL and paths made generic."""
        adapter: Any = self
        argv = [Path(a).name if i == 0 else a for i, a in enumerate(adapter.worker_command(mode))]
        env = " ".join(f"{k}={v}" for k, v in sorted(adapter.worker_env(mode).items()))
        text = (env + " " if env else "") + " ".join(argv)
        generic = f"postgresql://{pg_server.USER}@127.0.0.1:PORT/{self.database}"
        return text.replace(self.redis_url, generic).replace(str(adapter.ctx.repo), ".")
