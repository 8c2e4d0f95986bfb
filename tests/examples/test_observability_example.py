"""examples/observability.py runs as written and shows one trace from request to job."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "observability.py"


def test_the_example_prints_json_logs_with_the_job_and_one_trace() -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=60, check=True
    ).stdout.splitlines()
    logs = [json.loads(line) for line in out if line.startswith("{")]
    receipt = next(r for r in logs if r["logger"] == "shop.emails")
    assert receipt["task"] == "send_receipt" and receipt["job_id"] and receipt["attempt"] == 1
    trace = [line for line in out if not line.startswith("{")]
    assert trace == [
        "POST /orders",
        "  enqueue send_receipt",
        "    process send_receipt",
        "      smtp send",
    ]
