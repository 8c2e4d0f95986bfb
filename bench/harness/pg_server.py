"""A private PostgreSQL cluster for the PostgreSQL systems (Conveyor, procrastinate, pgqueuer).

Same approach as the tests' fixture (``tests/support/pg_proc.py``): ``initdb`` into a temp
directory, trust authentication, listening on a free **127.0.0.1** port only (its Unix socket in
that temp directory), ``pg_ctl start``, and ``pg_ctl stop -m fast`` + removal at the end. The
server refuses to run as root, so as root it runs as Debian's ``postgres`` user via ``runuser``.
Settings are PostgreSQL's defaults (durable: ``fsync``, ``synchronous_commit`` on) except the
address, port, socket directory and ``max_connections``.

The cluster is started lazily by the first PostgreSQL adapter that needs it (:func:`shared`)
and stopped when the harness exits (``atexit``), so runs without a PostgreSQL system never start
one. Each system gets its own database; "flush" drops it and re-creates it from a template
database that holds the system's schema (:meth:`PgServer.reset_database`).

Clients here are ``psql`` processes (the harness's interpreter has no PostgreSQL driver).
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench.harness.redis_server import HOST, free_port

USER = "bench"


def bindir() -> Path:
    """The directory of the newest installed PostgreSQL server binaries."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4])
    )
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl is None:
        raise RuntimeError(
            "PostgreSQL server binaries not found (Debian: apt-get install -y postgresql)"
        )
    return Path(pg_ctl).parent


class PgServer:
    """One private PostgreSQL cluster on loopback, owned by the harness."""

    def __init__(self) -> None:
        self.bin = bindir()
        self.dir = Path(tempfile.mkdtemp(prefix="conveyor-bench-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.started = False
        # PostgreSQL refuses root: run the server as the postgres system user, who owns the dir.
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            os.chmod(self.dir, 0o755)
            shutil.chown(self.dir, "postgres", "postgres")

    def db_url(self, db: str) -> str:
        """``postgresql://bench@127.0.0.1:PORT/<db>``."""
        return f"postgresql://{USER}@{HOST}:{self.port}/{db}"

    def _run(self, *argv: str, timeout: float = 120.0) -> str:
        out = subprocess.run(
            [*self._as, *argv], capture_output=True, text=True, timeout=timeout, check=False
        )
        if out.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed ({out.returncode}): {out.stderr[-2000:]}")
        return out.stdout

    def start(self) -> PgServer:
        """``initdb`` (trust auth, superuser ``bench``) and ``pg_ctl start -w``."""
        self._run(
            str(self.bin / "initdb"),
            *("-D", str(self.data), "-U", USER, "--auth=trust", "-E", "UTF8", "--locale=C"),
        )
        with open(self.data / "postgresql.conf", "a") as f:
            f.write(
                f"listen_addresses = '{HOST}'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.dir}'\nmax_connections = 200\n"
            )
        log = str(self.dir / "server.log")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", log, "-w", "start")
        self.started = True
        return self

    def stop(self) -> None:
        """``pg_ctl stop -m fast``, then remove the directory."""
        if self.started:
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "stop")
            self.started = False
        shutil.rmtree(self.dir, ignore_errors=True)

    def psql(self, sql: str, db: str = "postgres") -> str:
        """Run ``sql`` with ``psql`` (autocommit, stop on the first error); its output."""
        argv = [str(self.bin / "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1"]
        argv += ["-h", HOST, "-p", str(self.port), "-U", USER, "-d", db, "-c", sql]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"psql failed: {sql[:200]}: {out.stderr[-1500:]}")
        return out.stdout.strip()

    def version(self) -> str:
        """``server_version`` of the running cluster."""
        return self.psql("SHOW server_version")

    def create_database(self, name: str) -> None:
        """Create an empty database ``name`` (dropping any previous one)."""
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.psql(f'CREATE DATABASE "{name}"')

    def reset_database(self, name: str, template: str) -> None:
        """Drop ``name`` (closing its connections) and copy it anew from ``template``."""
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.psql(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')


_server: PgServer | None = None


def shared() -> PgServer:
    """The harness's cluster, started on first use and stopped when the harness exits."""
    global _server
    if _server is None:
        server = PgServer()
        atexit.register(server.stop)
        try:
            server.start()
        except Exception:
            server.stop()
            raise
        _server = server
        print(f"postgres {server.version()} on {HOST}:{server.port}", flush=True)
    return _server


def running_version() -> str | None:
    """The version of the cluster if this run started one, else ``None``."""
    return _server.version() if _server is not None and _server.started else None
