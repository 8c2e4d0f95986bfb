"""The benchmark's private PostgreSQL cluster: start, template copy as "flush", stop."""

from __future__ import annotations

import glob
import shutil

import pytest
from bench.harness.pg_server import PgServer

pytestmark = pytest.mark.skipif(
    not glob.glob("/usr/lib/postgresql/*/bin/pg_ctl") and shutil.which("pg_ctl") is None,
    reason="PostgreSQL server binaries not installed",
)


def test_cluster_on_loopback_and_flush_copies_the_template() -> None:
    server = PgServer()
    try:
        server.start()
        assert server.db_url("x") == f"postgresql://bench@127.0.0.1:{server.port}/x"
        assert server.version().split(".")[0].isdigit()
        server.create_database("sys_template")
        server.psql("CREATE TABLE jobs (id int)", "sys_template")
        server.reset_database("sys", "sys_template")
        server.psql("INSERT INTO jobs VALUES (1), (2)", "sys")
        assert server.psql("SELECT count(*) FROM jobs", "sys") == "2"
        server.reset_database("sys", "sys_template")  # the flush between scenarios
        assert server.psql("SELECT count(*) FROM jobs", "sys") == "0"
    finally:
        server.stop()
    assert not server.dir.exists()
