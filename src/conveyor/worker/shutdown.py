"""Signals for a worker running in the main thread: the first SIGTERM/SIGINT drains, the second
releases everything and returns at once.

Draining means: claim nothing more, let in-flight jobs finish for up to ``shutdown_timeout``
seconds, then release the unfinished leases back to ``pending`` without an attempt penalty (the
release is written in each job's history), so the next worker runs them immediately instead of
waiting for the leases to expire.

The Python-level handler does nothing: the interpreter writes each signal number to a wakeup
socket (``signal.set_wakeup_fd``) and a listener thread acts on it. Taking a lock inside a
signal handler can deadlock against the interrupted code of the same thread; this cannot.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any, Protocol

log = logging.getLogger("conveyor.worker")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stoppable(Protocol):
    """What the signal listener needs of a worker."""

    shutdown_timeout: float

    def stop(self, timeout: float | None = None, *, wait: bool = True) -> None:
        """Drain."""

    def stop_now(self, code: int | None = None) -> None:
        """Release in-flight jobs and stop."""


def _ignore(signum: int, frame: FrameType | None) -> None:
    """Replaces the default action; the wakeup socket carries the signal to the listener."""


@contextlib.contextmanager
def stop_on_signals(worker: Stoppable) -> Iterator[None]:
    """Install the drain / stop-now handling while the block runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    listener = threading.Thread(
        target=_listen, args=(reader, worker), daemon=True, name="conveyor-signals"
    )
    listener.start()
    previous: dict[signal.Signals, Any] = {sig: signal.signal(sig, _ignore) for sig in STOP_SIGNALS}
    old_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    try:
        yield
    finally:
        signal.set_wakeup_fd(old_fd)
        for sig, old in previous.items():
            signal.signal(sig, old)
        with contextlib.suppress(OSError):
            writer.send(b"\0")  # tells the listener to exit
        listener.join(1.0)
        writer.close()
        reader.close()


def _listen(reader: socket.socket, worker: Stoppable) -> None:
    received = 0
    while True:
        try:
            data = reader.recv(64)
        except OSError:
            return
        if not data:
            return
        for signum in data:
            if signum == 0:
                return
            if signum not in STOP_SIGNALS:
                continue
            received += 1
            name = signal.Signals(signum).name
            if received == 1:
                log.warning(
                    "%s: draining (no new jobs; in-flight jobs get up to %gs); send it "
                    "again to release them and exit now",
                    name,
                    worker.shutdown_timeout,
                )
                worker.stop(wait=False)
            else:
                log.warning("%s again: releasing in-flight jobs and exiting now", name)
                worker.stop_now()
