"""`conveyor bench` measures a real SQLite broker and reports sane numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


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
