"""The probe server of a worker process: ``/healthz``, ``/readyz`` and (optionally) ``/metrics``.

Kubernetes needs two answers that must not be confused with the metrics scrape:

* ``/healthz`` (liveness): 200 while this process serves HTTP. It does not touch the broker, so
  a broker outage never makes Kubernetes restart healthy workers (which would only add load).
* ``/readyz`` (readiness): 200 when the broker answers (``server_time()``), else 503 naming the
  error; a worker that cannot reach the broker is not ready.

``conveyor worker --metrics-port`` serves these next to ``/metrics`` (``prometheus.
start_metrics_server``). The server needs nothing beyond the standard library.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from ..errors import ConveyorError
from ..runtime import as_runtime

if TYPE_CHECKING:
    from ..runtime import HasRuntime, Runtime

log = logging.getLogger("conveyor.metrics")
TEXT = "text/plain; charset=utf-8"
#: ``() -> (body, content type)`` of the metrics exposition
Exposition = Callable[[], tuple[bytes, str]]


def readiness(app: Runtime | HasRuntime) -> tuple[int, str]:
    """``(200, "ready")`` when the broker answers, else ``(503, "broker unavailable: ...")``."""
    try:
        as_runtime(app).broker.server_time()
    except Exception as exc:  # any failure means "not ready"; the body says which
        return 503, f"broker unavailable: {type(exc).__name__}: {str(exc)[:200]}"
    return 200, "ready"


class ProbeServer(ThreadingHTTPServer):
    """A threading HTTP server that knows the app and its exposition."""

    daemon_threads = True

    def __init__(
        self, addr: tuple[str, int], app: Runtime | HasRuntime, metrics: Exposition | None
    ) -> None:
        self.app = app
        self.metrics = metrics
        super().__init__(addr, ProbeHandler)


class ProbeHandler(BaseHTTPRequestHandler):
    """GET ``/healthz``, ``/readyz``, ``/metrics``; anything else is 404."""

    server: ProbeServer

    def do_GET(self) -> None:
        """Answer one probe or scrape."""
        path = self.path.partition("?")[0]
        if path == "/healthz":
            self._send(200, b"ok\n", TEXT)
        elif path == "/readyz":
            status, text = readiness(self.server.app)
            self._send(status, (text + "\n").encode(), TEXT)
        elif path == "/metrics" and self.server.metrics is not None:
            try:
                body, ctype = self.server.metrics()
            except ConveyorError as exc:  # broker down: say so (was a traceback per scrape)
                self._send(503, f"broker unavailable: {str(exc)[:200]}\n".encode(), TEXT)
                return
            self._send(200, body, ctype)
        else:
            self._send(404, b"not found: /healthz, /readyz, /metrics\n", TEXT)

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Probes every few seconds would flood stderr: debug log only."""
        log.debug("probe server: " + format, *args)


def start_probe_server(
    app: Runtime | HasRuntime,
    port: int,
    addr: str = "127.0.0.1",
    metrics: Exposition | None = None,
) -> tuple[ProbeServer, threading.Thread]:
    """Serve the probes (and ``metrics``) on ``addr:port`` from a daemon thread (0: any port)."""
    server = ProbeServer((addr, port), app, metrics)
    thread = threading.Thread(target=server.serve_forever, name="conveyor-probes", daemon=True)
    thread.start()
    return server, thread
