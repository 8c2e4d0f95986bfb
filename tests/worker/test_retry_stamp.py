"""A failed attempt's ``errors`` entry is stamped with the time its retry was decided at.

``previous_delay`` (the backoff chain) and the dashboard read a retry's delay back as
``run_at - errors[-1]["at"]``. The worker decided ``run_at`` when the job ended but stamped the
entry when the recorder thread wrote it, a few ms later under load (seconds while a broker
write is retried): the stored delay came out short, and once the gap passed the delay the
chain restarted. Seen as a flaky ``test_process_jobs_with_hostile_outcomes_free_their_child``
(``3599.995 != 3600``) on a loaded machine.
"""

from __future__ import annotations

import random

import pytest

from conveyor import Backoff, Conveyor, FakeClock, JobState
from conveyor.broker.base import Broker
from conveyor.errors import Retry


class TickingClock(FakeClock):
    """A fake clock that moves one second on every reading: any two readings differ."""

    def now(self) -> float:
        """The current fake time, then one second later for the next reader."""
        return self.advance(1.0) - 1.0


@pytest.mark.parametrize("explicit", [True, False], ids=["Retry", "backoff"])
def test_the_stored_delay_of_a_retry_is_the_delay_asked_for(broker: Broker, explicit: bool) -> None:
    app = Conveyor(broker, clock=TickingClock(1_700_000_000.0), rng=random.Random(3))

    @app.task(max_attempts=3, backoff=Backoff.fixed(30.0))
    def later() -> None:
        if explicit:
            raise Retry(delay=600.0)
        raise ValueError("try again")

    job = later.enqueue()
    app.worker().run_until_idle()
    job.refresh()
    assert job.state is JobState.RETRY_SCHEDULED
    assert job.run_at - job.errors[-1]["at"] == pytest.approx(600.0 if explicit else 30.0)
