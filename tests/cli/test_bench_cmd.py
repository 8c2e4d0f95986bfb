"""`conveyor bench` measures a real SQLite broker and reports sane numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import redis_proc


def test_bench_reports_rates_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bench.db'}"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "conveyor.cli.main",
            "bench",
            "--url",
            url,
            "--jobs",
            "200",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["jobs"] == 600
    for key in ("enqueue_per_s", "bulk_enqueue_per_s", "drain_per_s"):
        assert result[key] > 0, key
    assert 0 < result["pickup_p50_ms"] <= result["pickup_p99_ms"]


@pytest.mark.skipif(not redis_proc.available(), reason="redis-server not installed")
def test_bench_never_prints_the_broker_password(tmp_path: Path) -> None:
    """The progress line, the table's title and the JSON show the URL's password as ***
    (a real redis-server with --requirepass)."""
    with redis_proc.RedisServer(tmp_path / "redis", password="pw-s3cret") as server:
        for extra in ([], ["--json"]):
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "conveyor.cli.main",
                    "bench",
                    "--url",
                    server.url,
                    "--jobs",
                    "100",
                    *extra,
                ],
                capture_output=True,
                text=True,
                timeout=180,
            )
            assert proc.returncode == 0, proc.stderr
            assert "s3cret" not in proc.stdout + proc.stderr
            assert "***" in proc.stdout
