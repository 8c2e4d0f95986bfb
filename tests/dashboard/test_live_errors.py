"""Live streams (SSE) that cannot render: a bad queue name, a broker that is down before or
during the stream. They used to answer 200, then die with "Exception in ASGI application" and
a traceback — and the browser's EventSource reconnects every second, so one traceback a
second per open page. Now a bad request is a plain 422 / 503 before the stream starts (an
EventSource does not retry those), and an outage during a stream is sat out quietly: the
stream stays open and resumes when the broker is back. Real uvicorn, real redis-server."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from conveyor import Conveyor
from conveyor.dashboard import DashboardConfig
from conveyor.dashboard.server import BackgroundServer
from tests.support import redis_proc

from .conftest import AUTH, TOKEN

pytestmark = pytest.mark.skipif(not redis_proc.available(), reason="redis-server not installed")


def serve(app: Conveyor) -> BackgroundServer:
    return BackgroundServer(app, config=DashboardConfig(token=TOKEN, live_interval=0.1)).start()


def test_a_stream_that_cannot_start_is_an_error_response(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"redis://127.0.0.1:{redis_proc.free_port()}/0?socket_connect_timeout=1"
    with redis_proc.RedisServer(tmp_path / "redis") as server:
        up = serve(Conveyor(server.url))
        down = serve(Conveyor(url))
        try:
            with caplog.at_level(logging.ERROR):
                bad = httpx.get(up.url + "/live/queue/%3Cb%3E", headers=AUTH, timeout=10)
                assert bad.status_code == 422 and bad.json()["field"] == "queue", bad.text
                gone = httpx.get(down.url + "/live/overview", headers=AUTH, timeout=10)
                assert gone.status_code == 503 and "retry-after" in gone.headers, gone.text
            assert not [r for r in caplog.records if "Exception in ASGI" in r.getMessage()]
        finally:
            up.stop()
            down.stop()


def test_an_outage_during_a_stream_keeps_it_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = redis_proc.RedisServer(tmp_path / "redis", aof=True).start()
    app = Conveyor(server.url + "?socket_connect_timeout=1&socket_timeout=1")
    app.runtime.enqueue("add", [0, 0], {})
    dash = serve(app)
    chunks: list[str] = []
    closed = threading.Event()

    def read() -> None:
        try:
            with httpx.stream("GET", dash.url + "/live/queue/default", headers=AUTH) as r:
                for chunk in r.iter_text():
                    chunks.append(chunk)
        except Exception as exc:  # any end of the stream is what we check
            chunks.append(f"<closed: {exc!r}>")
        closed.set()

    def wait_for(text: str, deadline: float = 30.0) -> None:
        end = time.monotonic() + deadline
        while not any(text in c for c in chunks):
            assert time.monotonic() < end and not closed.is_set(), (text, chunks[-3:])
            time.sleep(0.05)

    reader = threading.Thread(target=read, daemon=True)
    try:
        with caplog.at_level(logging.ERROR):
            reader.start()
            wait_for('data-count="pending">1<')
            server.kill()  # SIGKILL: the broker is gone mid-stream
            time.sleep(3)  # ~30 live rounds against a dead server
            assert not closed.is_set(), chunks[-3:]
            server.start()
            for i in range(3):
                _enqueue_when_up(app, i)
            wait_for('data-count="pending">4<')
        assert not [r for r in caplog.records if "Exception in ASGI" in r.getMessage()]
    finally:
        dash.stop()
        server.stop()
        reader.join(10)


def _enqueue_when_up(app: Conveyor, i: int) -> Any:
    """Enqueue once the restarted server answers (it loads its AOF first)."""
    end = time.monotonic() + 30
    while True:
        try:
            return app.runtime.enqueue("add", [i, i], {})
        except Exception:
            if time.monotonic() > end:
                raise
            time.sleep(0.1)
