"""`conveyor demo`: the newcomer's path finishes, and its summary adds up (real SQLite file)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_demo_runs_on_sqlite_and_summary_adds_up(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    proc = subprocess.run(
        [sys.executable, "-m", "conveyor.cli.main", "demo", "--url", url, "--jobs", "60", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["total"] == 60 and summary["unfinished"] == 0
    assert summary["completed"] + summary["dead_lettered"] == 60
    # the fixed mix: every 10th job (i % 10 == 3) fails permanently, flaky ones retry then pass
    assert summary["dead_lettered"] == 6
    assert summary["dead_reasons"] == {"PermanentError: card declined": 6}
    assert summary["retried_then_completed"] >= 1 and summary["delayed_completed"] >= 1
    assert summary["schedule_runs"] >= 1
    assert 0 < summary["p50_ms"] <= summary["p95_ms"]


def test_demo_rejects_bad_job_count() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "conveyor.cli.main", "demo", "--jobs", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "--jobs" in proc.stderr


def _demo(url: str, cwd: Path) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-m", "conveyor.cli.main", "demo", "--url", url, "--jobs", "30", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def test_demo_twice_on_one_database_does_not_burst_schedule_runs(tmp_path: Path) -> None:
    from conveyor import Conveyor
    from conveyor.scheduler.models import COLLECTION

    url = f"sqlite:///{tmp_path / 'demo.db'}"
    _demo(url, tmp_path)
    app = Conveyor(url)  # age the stored schedule: the last demo ran ten minutes ago
    doc = app.broker.doc_get(COLLECTION, "demo.heartbeat", app.now())
    assert doc is not None
    doc["next_fire_at"] = app.now() - 600
    app.broker.doc_put(COLLECTION, "demo.heartbeat", doc, app.now())
    app.close()
    for _ in range(2):  # after the "outage", then again right away
        summary = _demo(url, tmp_path)
        seconds, runs = summary["seconds"], summary["schedule_runs"]
        assert isinstance(seconds, float) and isinstance(runs, int)
        assert 1 <= runs <= seconds / 2 + 3, summary  # every 2 s plus one catch-up, no burst
