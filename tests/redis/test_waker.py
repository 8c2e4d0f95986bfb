"""The background push of the Cluster-wide wake-up marker (``broker/redis/waker.py``, issue 18):
requests while a push is on its way coalesce into one push after it, nothing is lost, ``close``
sends what is pending, and a forked child gets a working waker of its own.

The push here is a plain function that records its calls (the Redis side is tested on the
real cluster in test_cluster_wake.py); events make the interleaving deterministic.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from conveyor.broker.redis.waker import Waker
from tests.worker.conftest import wait_until


def test_requests_during_a_push_coalesce_into_one_more_push() -> None:
    pushes: list[int] = []
    entered, release = threading.Event(), threading.Event()

    def push() -> None:
        pushes.append(1)
        entered.set()
        release.wait(10)

    waker = Waker(push)
    waker.wake()
    assert entered.wait(10)  # the first push is on its way
    for _ in range(5):
        waker.wake()  # returns at once
    release.set()
    wait_until(lambda: len(pushes) == 2)
    waker.close()
    assert len(pushes) == 2  # one for the first request, one for the five that waited


def test_close_sends_what_is_pending_on_the_closing_thread() -> None:
    pushes: list[str] = []
    waker = Waker(lambda: pushes.append(threading.current_thread().name))
    with waker._cond:  # hold the writer back: the request stays pending
        waker._pending = True
    waker.close()
    assert pushes == [threading.current_thread().name]


def test_a_failing_push_is_dropped_and_the_next_request_pushes_again() -> None:
    calls: list[int] = []

    def push() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("Redis went away (injected)")

    waker = Waker(push)
    waker.wake()
    wait_until(lambda: len(calls) == 1)
    waker.wake()
    wait_until(lambda: len(calls) == 2)
    waker.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_has_a_working_waker() -> None:
    """Forked while another thread of the parent holds the waker's lock: the child's copy of
    that lock would stay held for ever (its owner does not exist there)."""
    read, write = os.pipe()
    waker = Waker(lambda: os.write(write, b"x"))
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with waker._cond:
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(10)
    pid = os.fork()
    if pid == 0:  # the child
        try:
            waker.wake()
            waker.close()
        finally:
            os._exit(0)
    release.set()
    holder.join()
    deadline = time.monotonic() + 10
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung on the parent's lock")
    assert done[1] == 0
    assert os.read(read, 1) == b"x"
    os.close(read)
    os.close(write)
    waker.close()
