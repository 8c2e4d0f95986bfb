"""Concurrent claimers never get the same job: 10 threads over 10,000 jobs, each claimed once."""

from __future__ import annotations

import random
import threading
from collections import Counter

from conveyor.broker.base import Ack
from conveyor.broker.redis import RedisBroker
from conveyor.core.ids import new_ulid
from conveyor.core.job import Job
from conveyor.core.state import JobState

from .conftest import T0

JOBS = 10_000
THREADS = 10


def test_ten_threads_claim_each_job_exactly_once(rbroker: RedisBroker) -> None:
    rng = random.Random(3)
    ids = [new_ulid(T0, rng) for _ in range(JOBS)]
    for start in range(0, JOBS, 1000):
        rbroker.enqueue(
            [Job(id=i, task="t", run_at=T0, created_at=T0) for i in ids[start : start + 1000]], T0
        )
    claimed: list[list[str]] = [[] for _ in range(THREADS)]
    errors: list[BaseException] = []
    start_line = threading.Barrier(THREADS)

    def claimer(n: int) -> None:
        local = random.Random(n)
        try:
            start_line.wait()
            while True:
                leases = rbroker.claim(
                    ["default"],
                    T0,
                    limit=local.randint(1, 8),
                    visibility_timeout=600,
                    worker_id=f"w{n}",
                )
                if not leases:
                    return
                claimed[n].extend(lease.id for lease in leases)
                acks = [Ack(lease.id, lease.token) for lease in leases]
                assert rbroker.complete(acks, T0) == [True] * len(acks)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    everything = Counter(i for part in claimed for i in part)
    assert len(everything) == JOBS and set(everything) == set(ids)
    assert max(everything.values()) == 1, "a job was claimed twice"
    assert sum(1 for part in claimed if part) > 1, "the threads did not overlap"
    counts = rbroker.counts()["default"]
    assert counts[str(JobState.COMPLETED)] == JOBS
    assert counts[str(JobState.PENDING)] == counts[str(JobState.ACTIVE)] == 0
