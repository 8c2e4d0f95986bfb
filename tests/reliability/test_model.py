"""Model-based testing: random operation sequences against every backend and a tiny model.

After every step: each job is in exactly the state the model says, with the model's attempts,
lost count and due time; counts are conserved; nothing terminal or not-yet-due is ever claimed;
a stale token never changes anything.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from conveyor.broker.base import Ack, Broker, Lease
from conveyor.core.job import Job
from conveyor.core.state import TERMINAL_STATES, JobState
from conveyor.errors import LeaseLost
from tests.support.backends import BACKENDS

S = JobState
VT = 10.0
MAX_LOST = 2


@dataclass
class ModelJob:
    """What the model believes about one job."""

    state: JobState
    priority: int
    run_at: float
    attempts: int = 0
    lost: int = 0
    token: str | None = None
    lease_until: float = 0.0


class BrokerMachine(RuleBasedStateMachine):
    """Drives one broker and the model side by side."""

    open_broker: Callable[[], Broker]

    def __init__(self) -> None:
        super().__init__()
        self.broker = type(self).open_broker()
        self.now = 1_000.0
        self.model: dict[str, ModelJob] = {}
        self.leases: dict[str, Lease] = {}
        self.stale: list[Lease] = []
        self.ids = itertools.count()

    def teardown(self) -> None:
        self.broker.close()

    # ------------------------------------------------------------------ helpers
    def _job(self, priority: int, delay: float) -> Job:
        job_id = f"j{next(self.ids):04d}"
        state = S.SCHEDULED if delay > 0 else S.PENDING
        return Job(
            id=job_id,
            task="t",
            args=[job_id],
            priority=priority,
            state=state,
            run_at=self.now + delay,
            created_at=self.now,
            max_attempts=3,
        )

    def _ready(self) -> list[str]:
        due = (S.PENDING, S.SCHEDULED, S.RETRY_SCHEDULED)
        return [
            i
            for i, m in self.model.items()
            if m.state in due and (m.state is S.PENDING or m.run_at <= self.now)
        ]

    # ------------------------------------------------------------------ rules
    @rule(priority=st.integers(-2, 2), delay=st.sampled_from([0, 0, 5, 15]))
    def enqueue(self, priority: int, delay: float) -> None:
        job = self._job(priority, delay)
        assert not self.broker.enqueue([job], self.now)[0].duplicate
        self.model[job.id] = ModelJob(job.state, priority, job.run_at)

    @rule(n=st.integers(1, 4), priority=st.integers(-2, 2))
    def enqueue_many(self, n: int, priority: int) -> None:
        jobs = [self._job(priority, 0) for _ in range(n)]
        self.broker.enqueue(jobs, self.now)
        for job in jobs:
            self.model[job.id] = ModelJob(S.PENDING, priority, job.run_at)

    def _expire(self) -> list[str]:
        """Model of returning expired leases (``reap_expired``, and every ``claim``)."""
        expired = [
            i for i, m in self.model.items() if m.state is S.ACTIVE and m.lease_until <= self.now
        ]
        for job_id in expired:
            m = self.model[job_id]
            m.lost += 1
            m.state = S.DEAD_LETTER if m.lost >= MAX_LOST else S.PENDING
            m.run_at = self.now
            self.stale.append(self.leases.pop(job_id))
        return expired

    @rule(limit=st.integers(1, 3))
    def claim(self, limit: int) -> None:
        self._expire()  # a claim first returns expired leases, as the reaper does
        ready = self._ready()
        leases = self.broker.claim(
            ["default"],
            self.now,
            limit=limit,
            visibility_timeout=VT,
            worker_id="w",
            max_lost=MAX_LOST,
        )
        got = [lease.id for lease in leases]
        assert len(got) == min(limit, len(ready)), (got, ready)
        assert set(got) <= set(ready), "claimed a job that was not ready"
        prios = [self.model[i].priority for i in got]
        assert prios == sorted(prios)
        left = set(ready) - set(got)
        if left and got:
            assert min(self.model[i].priority for i in left) >= max(prios)
        for lease in leases:
            m = self.model[lease.id]
            m.state, m.attempts, m.token = S.ACTIVE, m.attempts + 1, lease.token
            m.lease_until = self.now + VT
            assert lease.job.attempts == m.attempts
            self.leases[lease.id] = lease
        for job_id in set(ready) - set(got):
            self.model[job_id].state = S.PENDING  # claim promoted it

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def ack(self, data: Any) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.leases)))
        lease = self.leases.pop(job_id)
        assert self.broker.complete([Ack(job_id, lease.token, "ok")], self.now) == [True]
        self.model[job_id].state = S.COMPLETED

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), retry=st.booleans())
    def fail(self, data: Any, retry: bool) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.leases)))
        lease = self.leases.pop(job_id)
        retry_at = self.now + 7 if retry else None
        state = self.broker.fail(
            job_id, lease.token, self.now, error={"kind": "error"}, retry_at=retry_at
        )
        m = self.model[job_id]
        m.state = S.RETRY_SCHEDULED if retry else S.DEAD_LETTER
        m.run_at = retry_at or m.run_at
        assert state is m.state

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), delay=st.sampled_from([0, 3]), penalize=st.booleans())
    def release(self, data: Any, delay: float, penalize: bool) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.leases)))
        lease = self.leases.pop(job_id)
        self.broker.release(job_id, lease.token, self.now, delay=delay, penalize=penalize)
        m = self.model[job_id]
        m.state = S.SCHEDULED if delay else S.PENDING
        m.run_at = self.now + delay
        m.attempts -= 0 if penalize else 1

    @precondition(lambda self: self.leases)
    @rule()
    def extend_all(self) -> None:
        pairs = [(i, lease.token) for i, lease in sorted(self.leases.items())]
        live = [self.model[i].lease_until > self.now for i, _ in pairs]
        assert self.broker.extend(pairs, self.now, VT) == [True] * len(pairs) or not all(live)
        for i, _ in pairs:
            self.model[i].lease_until = self.now + VT

    @rule(seconds=st.sampled_from([1, 4, 8, 11]))
    def advance(self, seconds: float) -> None:
        self.now += seconds

    @rule()
    def reap(self) -> None:
        expected = len(
            [i for i, m in self.model.items() if m.state is S.ACTIVE and m.lease_until <= self.now]
        )
        assert self.broker.reap_expired(self.now, max_lost=MAX_LOST) == expected
        self._expire()

    @rule()
    def promote(self) -> None:
        due = [
            i
            for i, m in self.model.items()
            if m.state in (S.SCHEDULED, S.RETRY_SCHEDULED) and m.run_at <= self.now
        ]
        assert self.broker.promote_due(self.now) == len(due)
        for job_id in due:
            self.model[job_id].state = S.PENDING

    @precondition(lambda self: self.stale)
    @rule(data=st.data())
    def stale_token_changes_nothing(self, data: Any) -> None:
        lease = data.draw(st.sampled_from(self.stale))
        before = self.broker.get(lease.id)
        current = self.leases.get(lease.id)
        if current is not None and current.token == lease.token:
            return  # not stale after all: the same attempt still holds it
        assert self.broker.complete([Ack(lease.id, lease.token, "zombie")], self.now) == [False]
        with pytest.raises(LeaseLost):
            self.broker.fail(lease.id, lease.token, self.now, error={"kind": "x"}, retry_at=None)
        after = self.broker.get(lease.id)
        assert (before is None) == (after is None)
        if before is not None and after is not None:
            assert (after.state, after.attempts, after.result) == (
                before.state,
                before.attempts,
                before.result,
            )

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def cancel(self, data: Any) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.model)))
        m = self.model[job_id]
        ok = self.broker.cancel(job_id, self.now)
        expected = m.state in (S.PENDING, S.SCHEDULED, S.RETRY_SCHEDULED)
        assert ok == expected
        if ok:
            m.state = S.CANCELLED

    @precondition(lambda self: any(m.state is S.DEAD_LETTER for m in self.model.values()))
    @rule(data=st.data())
    def requeue_dead(self, data: Any) -> None:
        dead = sorted(i for i, m in self.model.items() if m.state is S.DEAD_LETTER)
        job_id = data.draw(st.sampled_from(dead))
        assert self.broker.requeue(job_id, self.now)
        m = self.model[job_id]
        m.state, m.attempts, m.lost = S.PENDING, 0, 0

    @rule()
    def purge_dead(self) -> None:
        dead = [i for i, m in self.model.items() if m.state is S.DEAD_LETTER]
        assert self.broker.purge(self.now, state=S.DEAD_LETTER) == len(dead)
        for job_id in dead:
            del self.model[job_id]

    # ------------------------------------------------------------------ invariants
    @invariant()
    def matches_model(self) -> None:
        for job_id, m in self.model.items():
            job = self.broker.get(job_id)
            assert job is not None, f"{job_id} lost"
            assert (job.state, job.attempts, job.lost) == (m.state, m.attempts, m.lost), job_id
            if m.state in (S.SCHEDULED, S.RETRY_SCHEDULED):
                assert job.run_at == pytest.approx(m.run_at, abs=1e-3)
            assert job.state not in TERMINAL_STATES or job_id not in self.leases

    @invariant()
    def counts_are_conserved(self) -> None:
        counts = self.broker.counts().get("default", {})
        for state in JobState:
            expected = sum(1 for m in self.model.values() if m.state is state)
            assert counts.get(str(state), 0) == expected, state


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_broker_matches_model(backend: str, request: Any) -> None:
    from conveyor.config import Retention

    retention = Retention(completed_max=10_000, dead_letter_max=10_000)
    tmp = Path(tempfile.mkdtemp(prefix="conveyor-model-"))
    counter = itertools.count()

    def open_broker() -> Broker:
        path = tmp / f"m{next(counter)}"
        path.mkdir()
        return BACKENDS[backend](request, path, retention)

    attrs = {"open_broker": staticmethod(open_broker)}
    machine = type(f"Machine_{backend}", (BrokerMachine,), attrs)
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=40 if backend == "memory" else 15,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
