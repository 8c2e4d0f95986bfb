"""``conveyor worker --metrics-port``'s ``/metrics`` while the broker is unreachable (a real
Redis client on a closed port): the scrape got a dropped connection and the process printed a
full traceback on stderr at every scrape (every 15 s for Prometheus). It is now a ``503``
naming the broker, as ``/readyz`` says, and nothing on stderr."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from conveyor import Conveyor
from conveyor.monitoring.prometheus import start_metrics_server
from tests.support.redis_proc import free_port


def test_a_scrape_while_the_broker_is_down_is_a_503(capfd: pytest.CaptureFixture[str]) -> None:
    app = Conveyor(f"redis://127.0.0.1:{free_port()}/0?socket_connect_timeout=1")
    server, _thread = start_metrics_server(app, 0)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(url, timeout=10)
        assert info.value.code == 503
        assert info.value.read().decode().startswith("broker unavailable")
    finally:
        server.shutdown()
        server.server_close()
    assert "Traceback" not in capfd.readouterr().err
