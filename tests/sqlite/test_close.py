"""``close()`` never closes a connection under another thread (it once segfaulted when the
metrics flush timer was still writing through it). Deterministic: threads hand over with
events; waits are polls with deadlines, never sleeps standing in for "long enough"."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from conveyor import Conveyor
from conveyor.broker.sqlite import SqliteBroker
from conveyor.monitoring.metrics import TOTALS_BUCKET, MetricsMiddleware

from .conftest import T0


def _until(cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def test_close_waits_for_a_transaction_in_another_thread(sbroker: SqliteBroker) -> None:
    inside, finish = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:  # what the metrics flusher does: counters_add in its own thread
        try:
            with sbroker._write() as tx:
                tx.conn.execute("INSERT INTO counters VALUES ('b', x'7b7d', ?)", (T0 + 60,))
                inside.set()
                assert finish.wait(10)
                tx.conn.execute(
                    "UPDATE counters SET expires_at = ? WHERE bucket = 'b'", (T0 + 120,)
                )
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    sbroker.queues()  # the main thread has a connection of its own, too
    w = threading.Thread(target=writer)
    w.start()
    assert inside.wait(10)
    gen = sbroker._gen
    closer = threading.Thread(target=sbroker.close)
    closer.start()
    _until(lambda: sbroker._gen != gen, "close() to start")
    # close() has begun; the writer still holds its transaction, so close must still be waiting
    assert closer.is_alive(), "close() returned while another thread was inside a transaction"
    finish.set()
    w.join(10)
    closer.join(10)
    assert not closer.is_alive() and not w.is_alive()
    assert errors == [], errors
    # the transaction committed on its own connection; later calls reopen lazily
    assert sbroker.counters_get(["b"], T0) == {"b": {}}
    assert sbroker.queues() == []


def test_close_waits_for_a_read_in_another_thread(sbroker: SqliteBroker) -> None:
    slot = sbroker._acquire()  # a read in progress holds the same lock as a transaction
    closer = threading.Thread(target=sbroker.close)
    try:
        closer.start()
        _until(lambda: slot not in sbroker._slots, "close() to take the slots")
        assert closer.is_alive()
        assert slot.conn.execute("SELECT COUNT(*) FROM jobs").fetchone() == (0,)
    finally:
        slot.lock.release()
    closer.join(10)
    assert not closer.is_alive() and slot.closed


def test_close_while_the_metrics_flusher_writes(db_path: str) -> None:
    """The original crash: the flush timer thread writes counters while the app closes."""
    app = Conveyor(f"sqlite:///{db_path}")
    (metrics,) = [mw for mw in app.middleware if isinstance(mw, MetricsMiddleware)]
    metrics.flush_interval = 0.001
    app.task(name="noop")(lambda: None)
    for _ in range(30):
        app.enqueue("noop")  # buffers a count and starts the flush timer thread
        app.close()  # races the timer: must neither crash nor break the next call
    metrics.flush()
    totals = app.broker.counters_get([TOTALS_BUCKET], app.now())[TOTALS_BUCKET]
    assert totals["default|noop|enqueued"] == 30, totals
    app.close()
