"""The worker's metrics server (``conveyor worker --metrics-port``) answers Kubernetes probes:
``/healthz`` (liveness) and ``/readyz`` (readiness: the broker answers) apart from ``/metrics``.
Real HTTP server on a free loopback port, real SQLite broker and a real redis-server."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from conveyor import Conveyor
from conveyor.monitoring.prometheus import start_metrics_server


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            body = response.read().decode()
            return response.status, response.headers["content-type"], body
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["content-type"], exc.read().decode()


def serve(app: Conveyor) -> tuple[Any, str]:
    server, _thread = start_metrics_server(app, 0)
    return server, f"http://127.0.0.1:{server.server_port}"


def test_healthz_and_readyz_are_not_the_metrics(tmp_path: Path) -> None:
    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}")
    app.enqueue("send_email", args=["x"])
    server, base = serve(app)
    try:
        assert get(base + "/healthz") == (200, "text/plain; charset=utf-8", "ok\n")
        assert get(base + "/readyz") == (200, "text/plain; charset=utf-8", "ready\n")
        status, ctype, body = get(base + "/metrics")
        assert status == 200 and ctype.startswith("text/plain; version=")
        assert "conveyor_jobs" in body
        assert get(base + "/nothing")[0] == 404
    finally:
        server.shutdown()
        server.server_close()


def test_readyz_fails_while_the_broker_is_down_and_healthz_stays_up(
    make_server: Any,
) -> None:
    redis = make_server()
    app = Conveyor(redis.url)
    server, base = serve(app)
    try:
        assert get(base + "/readyz")[0] == 200
        redis.stop()
        status, _, body = get(base + "/readyz")
        assert status == 503 and body.startswith("broker unavailable")
        assert get(base + "/healthz")[0] == 200  # do not restart a worker for a broker outage
    finally:
        server.shutdown()
        server.server_close()
