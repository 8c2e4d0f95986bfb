"""A stored job whose flow record is malformed never stops its queue (issue 15, hostile storage).

The job's envelope (and, on Redis, the job hash's ``flow`` field; on memory, the stored Job)
is overwritten behind Conveyor's back with a ``flow`` record Conveyor could not have written,
in the same group as good jobs of a ``ConcurrencyLimit(1)`` + rate-limited task: every good job
runs, the bad one ends in ``dead_letter`` with kind ``decode_error``, it holds no slot or token
afterwards (a later job of the group still runs) and no claim logs a traceback.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from conveyor import ConcurrencyLimit, Conveyor, FakeClock, JobState
from conveyor.broker.base import Ack, Broker
from tests.support.backends import BACKENDS

from .test_bad_stored_rows import _read_envelope, _write_envelope

T0 = 1_700_000_000.0
SLOT = "conc:flow.acct:account=a"
BUCKET = "rate:flow.acct"
GROUP = f"{BUCKET}|{SLOT}"
BAD_FLOWS: dict[str, Any] = {
    "slots_not_a_list": {"g": GROUP, "r": [[BUCKET, 1000.0, 1.0, 1000.0]], "c": 5},
    "slot_not_a_pair": {"g": GROUP, "c": [SLOT]},
    "limit_not_a_number": {"g": GROUP, "c": [[SLOT, "many"]]},
    "limit_zero": {"g": GROUP, "c": [[SLOT, 0]]},
    "rate_entry_wrong_type": {"g": GROUP, "r": {"rate": 1}, "c": [[SLOT, 1]]},
    "rate_not_a_number": {"g": GROUP, "r": [[BUCKET, "fast", 1.0, 1.0]], "c": [[SLOT, 1]]},
    "rate_zero": {"g": GROUP, "r": [[BUCKET, 0, 0, 1.0]], "c": [[SLOT, 1]]},
    "slot_name_not_text": {"g": GROUP, "c": [[7, 1]]},
    "group_not_text": {"g": 7, "c": [[SLOT, 1]]},
}


@pytest.fixture(params=list(BACKENDS))
def any_broker(request: Any, tmp_path: Path) -> Iterator[Broker]:
    """A fresh broker of every backend (real SQLite file, redis-server, PostgreSQL)."""
    broker = BACKENDS[request.param](request, tmp_path, None)
    yield broker
    broker.close()


def _plant(broker: Broker, job_id: str, flow: Any) -> None:
    """Replace the stored job's flow record (and the Redis hash's copy) with ``flow``."""
    if type(broker).__name__ == "MemoryBroker":
        broker._jobs[job_id].flow = flow  # type: ignore[attr-defined]
        return
    data = orjson.loads(_read_envelope(broker, job_id))
    assert data["flow"]["g"] == GROUP and data["flow"]["c"] == [[SLOT, 1]]
    data["flow"] = flow
    _write_envelope(broker, job_id, orjson.dumps(data))
    if hasattr(broker, "client"):  # Redis: the claim script reads the hash's own copy
        broker.client.hset(f"conveyor:{{default}}:job:{job_id}", "flow", orjson.dumps(flow))


@pytest.mark.parametrize("bad_flow", list(BAD_FLOWS))
def test_a_bad_flow_record_is_dead_lettered_and_its_group_runs_on(
    any_broker: Broker, bad_flow: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(T0)
    app = Conveyor(any_broker, clock=clock, rng=random.Random(5))
    if not getattr(any_broker, "supports_flow", False):
        pytest.skip("no flow control on this backend")
    ran: list[int] = []

    @app.task(name="flow.acct", rate_limit="1000/s", concurrency=ConcurrencyLimit(1, "account"))
    def acct(account: str, n: int) -> None:
        ran.append(n)

    good = [acct.enqueue("a", 1)]
    bad = acct.enqueue("a", 0)
    good += [acct.enqueue("a", n) for n in range(2, 6)]
    _plant(any_broker, bad.id, BAD_FLOWS[bad_flow])
    caplog.set_level(logging.WARNING)

    worker = app.worker()
    assert worker.run_until_idle() == 5
    later = acct.enqueue("a", 6)  # the bad job holds no slot: its group still runs
    assert worker.run_until_idle() == 1

    assert ran == [1, 2, 3, 4, 5, 6]
    for handle in [*good, later]:
        assert app.get_job(handle.id).state is JobState.COMPLETED
    job = app.get_job(bad.id)
    assert job is not None and job.state is JobState.DEAD_LETTER
    assert job.errors[-1]["kind"] == "decode_error", job.errors
    assert not [r for r in caplog.records if r.exc_info], "no traceback in any claim"


@pytest.mark.parametrize("end", ["completed", "lease_expired"])
def test_a_running_job_whose_flow_record_goes_bad_frees_its_slot(
    any_broker: Broker, end: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(T0)
    app = Conveyor(any_broker, clock=clock, rng=random.Random(6))
    if not getattr(any_broker, "supports_flow", False):
        pytest.skip("no flow control on this backend")
    ran: list[int] = []

    @app.task(name="flow.acct", rate_limit="1000/s", concurrency=ConcurrencyLimit(1, "account"))
    def acct(account: str, n: int) -> None:
        ran.append(n)

    first, second = acct.enqueue("a", 1), acct.enqueue("a", 2)
    [lease] = any_broker.claim(["default"], clock.now(), limit=5, visibility_timeout=10.0)
    assert lease.job.id == first.id  # the second waits for the slot
    _plant(any_broker, first.id, BAD_FLOWS["slots_not_a_list"])
    caplog.set_level(logging.WARNING)
    if end == "completed":
        assert any_broker.complete([Ack(first.id, lease.token, None)], clock.now()) == [True]
    else:
        clock.advance(11.0)  # its worker died: the lease expires
    worker = app.worker()
    worker.run_until_idle()
    assert 2 in ran, "the slot the bad job held was freed"
    assert app.get_job(second.id).state is JobState.COMPLETED
    memory = getattr(any_broker, "_jobs", None)  # its Job itself changed: read it as it is
    bad = memory[first.id] if memory is not None else app.get_job(first.id)
    assert bad.state in (JobState.COMPLETED, JobState.DEAD_LETTER)
    assert not [r for r in caplog.records if r.exc_info], "no traceback in any claim"


def test_a_bad_flow_record_in_a_fair_group_is_dead_lettered(
    any_broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    app = Conveyor(any_broker, clock=FakeClock(T0), rng=random.Random(7))
    if not getattr(any_broker, "supports_flow", False):
        pytest.skip("no flow control on this backend")
    ran: list[int] = []

    @app.task(name="flow.fair", fair_by="tenant")
    def fair(tenant: str, n: int) -> None:
        ran.append(n)

    good = [fair.enqueue("a", 1), fair.enqueue("b", 2)]
    bad = fair.enqueue("a", 0)
    good += [fair.enqueue("a", 3), fair.enqueue("b", 4)]
    flow = {"g": "fair:tenant=a", "c": [["conc:x", "one"]]}
    if type(any_broker).__name__ == "MemoryBroker":
        any_broker._jobs[bad.id].flow = flow  # type: ignore[attr-defined]
    else:
        data = orjson.loads(_read_envelope(any_broker, bad.id))
        _write_envelope(any_broker, bad.id, orjson.dumps({**data, "flow": flow}))
    caplog.set_level(logging.WARNING)
    assert app.worker().run_until_idle() == 4
    assert sorted(ran) == [1, 2, 3, 4]
    assert all(app.get_job(h.id).state is JobState.COMPLETED for h in good)
    job = app.get_job(bad.id)
    assert job.state is JobState.DEAD_LETTER and job.errors[-1]["kind"] == "decode_error"
    assert not [r for r in caplog.records if r.exc_info], "no traceback in any claim"
