"""Start and stop a real private PostgreSQL cluster for tests (``initdb`` + ``pg_ctl``).

The cluster lives in its own temp directory, listens on a free 127.0.0.1 port only (no Unix
socket in a shared place) and is stopped by ``pg_ctl stop``. Never a mock: the PostgreSQL
backend is tested against the real server. PostgreSQL refuses to run as root, so when the tests
run as root (CI, this machine) the server runs as the ``postgres`` system user (created by
Debian's package) through ``runuser``; the data directory is owned by that user.

* ``PgServer().start()`` — ``initdb`` (trust auth, superuser ``conveyor``) then ``pg_ctl start``;
  ``url`` is ``postgresql://conveyor@127.0.0.1:<port>/postgres``.
* ``kill()`` — SIGKILL the postmaster (a crash; crash recovery replays the WAL on ``start()``).
* ``new_database()`` — a fresh, empty database (one per contract test: no cross-test state).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.redis_proc import free_port


def bindir() -> Path | None:
    """The directory of the newest installed PostgreSQL server binaries, or None."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4])
    )
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


def available() -> bool:
    """True when initdb/pg_ctl and psycopg are installed (and, as root, a ``postgres`` user)."""
    import importlib.util

    if bindir() is None or importlib.util.find_spec("psycopg") is None:
        return False
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return False
    return True


def _children(pid: int) -> list[int]:
    """Pids whose parent is ``pid`` (read from /proc: no procps needed)."""
    out: list[int] = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(stat.split("/")[2]))
    return out


class PgServer:
    """One private PostgreSQL cluster on loopback."""

    def __init__(self, port: int | None = None) -> None:
        bin_dir = bindir()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL server binaries not found")
        self.bin = bin_dir
        # Not under pytest's tmp dir: that one is 0700 root, unreadable by the postgres user.
        self.dir = Path(tempfile.mkdtemp(prefix="conveyor-pg-"))
        self.data = self.dir / "data"
        self.port = port or free_port()
        self.user = "conveyor"
        self._dbs = 0
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            os.chmod(self.dir, 0o755)
            shutil.chown(self.dir, "postgres", "postgres")

    @property
    def url(self) -> str:
        """The URL of the default database ``postgres``."""
        return self.db_url("postgres")

    def db_url(self, db: str) -> str:
        """The URL of database ``db`` on this cluster."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{db}"

    def _run(self, *argv: str, timeout: float = 60.0) -> str:
        out = subprocess.run(
            [*self._as, *argv], capture_output=True, text=True, timeout=timeout, check=False
        )
        if out.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed ({out.returncode}): {out.stderr[-2000:]}")
        return out.stdout

    def init(self) -> None:
        """``initdb`` the data directory (once) with settings fit for tests."""
        if (self.data / "PG_VERSION").exists():
            return
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            self.user,
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        )
        conf = (
            f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
            f"unix_socket_directories = '{self.dir}'\n"
            "max_connections = 300\nshared_buffers = 64MB\n"
            # Durable against a process crash (kill -9 of the server): the WAL reaches the
            # kernel at each commit. fsync itself is skipped: tests never crash the machine.
            "fsync = off\nfull_page_writes = off\n"
            "log_min_messages = warning\nlogging_collector = off\n"
        )
        with open(self.data / "postgresql.conf", "a") as f:
            f.write(conf)

    def start(self, timeout: float = 60.0) -> PgServer:
        """Start (or restart after ``kill``) the server and wait until it accepts connections."""
        self.init()
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.dir / "server.log"),
            "-w",
            "-t",
            str(int(timeout)),
            "start",
            timeout=timeout + 10,
        )
        return self

    def pid(self) -> int | None:
        """The postmaster's pid while it runs."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((self.data / "postmaster.pid").read_text().split()[0])
        return None

    def kill(self) -> None:
        """SIGKILL the postmaster and its children (a crash)."""
        pid = self.pid()
        if pid is None:
            return
        for p in [pid, *_children(pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.02)

    def stop(self) -> None:
        """``pg_ctl stop -m fast`` (then the directory is removed)."""
        if self.pid() is not None:
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)

    def new_database(self) -> str:
        """Create a fresh empty database; its URL."""
        import psycopg

        self._dbs += 1
        name = f"t{os.getpid()}_{self._dbs}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.db_url(name)

    def __enter__(self) -> PgServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
