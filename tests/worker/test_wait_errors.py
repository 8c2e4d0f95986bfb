"""An outage seen while a worker waits for work (not while it claims) must not end the worker.

Found in session 5: PostgreSQL's ``wait_for_work`` probes for ready jobs before it listens, and
a pool timeout there raised ``BrokerUnavailable`` out of the claim loop: the worker thread died
with exit code 0 and the jobs enqueued after the database came back stayed pending. The broker
here is the real memory broker; only its ``wait_for_work`` fails the first times it is called
(fault injection, as a dropped connection would).
"""

from __future__ import annotations

from collections.abc import Sequence

from conveyor import Conveyor
from conveyor.broker.memory import MemoryBroker
from conveyor.errors import BrokerUnavailable
from tests.worker.conftest import running, wait_until


class FlakyWaits(MemoryBroker):
    """A memory broker whose first ``failures`` waits raise as an unreachable server does."""

    failures = 3

    def wait_for_work(self, queues: Sequence[str], timeout: float, *, due: bool = False) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise BrokerUnavailable("memory: the server went away (injected)")
        super().wait_for_work(queues, timeout, due=due)


def test_a_failing_wait_for_work_does_not_end_the_worker() -> None:
    broker = FlakyWaits()
    app = Conveyor(broker)
    done: list[int] = []

    @app.task
    def note(i: int) -> None:
        done.append(i)

    with running(app, concurrency=1) as worker:
        wait_until(lambda: broker.failures == 0, timeout=20)
        note.enqueue(7)
        wait_until(lambda: done == [7], timeout=20)
        assert not worker.draining
    assert worker.returned == 0  # type: ignore[attr-defined]
