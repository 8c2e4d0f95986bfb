"""Wait until a PostgreSQL broker's waiters' listener is up, for wake-up latency tests."""

from __future__ import annotations

import time

import pytest

from conveyor.broker.postgres.broker import PostgresBroker


def until_listening(pg: PostgresBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    """Poll (with a deadline) until this process's waiters' listener has LISTEN active, then
    stretch the waits' safety slices to 30 s: within seconds only a NOTIFY can wake a waiter,
    so the latency bound below can be generous on a loaded machine (a waiter that began before
    the listener was up slept a 1 s slice, and 0.2 s bounds told NOTIFY from poll apart)."""
    from conveyor.broker.postgres import waits

    deadline = time.monotonic() + 30
    while pg.change_cursor("default") is None:
        assert time.monotonic() < deadline, "the waiters' listener never connected"
        time.sleep(0.05)
    monkeypatch.setattr(waits, "SAFETY_POLL_S", 30.0)
