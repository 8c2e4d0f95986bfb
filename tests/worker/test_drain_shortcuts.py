"""The drain's per-job shortcuts (issue 15: no-limit drain CPU) decide exactly as the long way.

* ``runs_of``: a task's executor, timeout and argument range are worked out once per claim;
  every job must still get what ``precheck`` / ``choose_executor`` / ``effective_timeout``
  give it (a job's own timeout, its arguments, an unknown task).
* ``codec.claimed_job``: a plain envelope (the 11 keys of a job enqueued without options) is
  decoded by ``_plain_job``; it must give the same Job as the general decoder, retried jobs
  included, and an envelope that merely has 11 keys must not take it.
* ``Lease.fast`` / ``Ack.fast``: equal to the dataclass constructors, still frozen.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from conveyor import Conveyor
from conveyor.broker.base import Ack, Lease
from conveyor.broker.redis import codec
from conveyor.core.job import Job
from conveyor.core.serialization import encode_envelope
from conveyor.worker.execute import precheck, runs_of
from conveyor.worker.running import choose_executor, effective_timeout


def _app() -> Conveyor:
    app = Conveyor("memory://")

    @app.task
    def plain(a: int, b: int = 0) -> None:
        return None

    @app.task(timeout=7)
    def slow(a: int) -> None:
        return None

    @app.task
    async def coro(a: int) -> None:
        return None

    @app.task
    def kw_only(*, k: int) -> None:
        return None

    return app


def _lease(task: str, args: list[Any], kwargs: dict[str, Any] | None = None, **extra: Any) -> Lease:
    job = Job(id=f"j{task}{len(args)}{extra}", task=task, args=args, kwargs=kwargs or {}, **extra)
    return Lease(job, "1:default", 30.0)


def test_runs_of_decides_each_job_as_the_per_job_checks_do() -> None:
    app = _app()
    tasks = app.runtime.tasks
    leases = [
        _lease("plain", [1]),
        _lease("plain", [1], timeout=3.0),  # its own timeout, same task in the same claim
        _lease("plain", [1, 2]),
        _lease("plain", []),  # too few arguments
        _lease("plain", [1, 2, 3]),  # too many
        _lease("plain", [1], {"b": 2}),  # keywords: the cached-shape path
        _lease("plain", [1], {"zz": 2}),
        _lease("slow", [1]),
        _lease("slow", [1], timeout=2.0),
        _lease("slow", [1]),  # after an override: the task's timeout again
        _lease("coro", [1]),
        _lease("kw_only", [], {"k": 1}),
        _lease("kw_only", []),  # a required keyword-only argument is missing
        _lease("nope", [1]),  # unknown task
    ]
    runs, refused = runs_of(leases, tasks)
    assert [run.lease for run in runs] == leases
    outcomes = {id(run): outcome for run, outcome in refused}
    for run, lease in zip(runs, leases, strict=True):
        job, task = lease.job, tasks.get(lease.job.task)
        expected = precheck(task, job)
        got = outcomes.get(id(run))
        assert (got is None) == (expected is None), job
        if expected is not None:
            assert got is not None and got.decision == expected.decision
            assert (run.executor, run.timeout) == ("none", None)
        else:
            assert task is not None
            assert run.executor == choose_executor(task)
            assert run.timeout == effective_timeout(task, job)
            assert run.task is task
    assert [run.timeout for run in runs[7:10]] == [7.0, 2.0, 7.0]
    assert runs[1].timeout == 3.0 and runs[0].timeout is None


def _items(raw: bytes) -> list[list[Any]]:
    """claim.lua reply entries for ``raw``: first attempt, and a retried one."""
    error = b'{"attempt":1,"kind":"error","message":"x"}'
    history = b'{"event":"release","at":1.0}\n{"event":"lost","at":2.0}'
    return [
        [b"01JABCDEFGHJKMNPQRSTVWXYZ0", b"1:q1", raw, [1, b"1000.5", None, None, None, None]],
        [b"01JABCDEFGHJKMNPQRSTVWXYZ0", b"1:q1", raw, [3, b"2000.5", 2, error, history, b"E: x"]],
    ]


def _jobs() -> list[Job]:
    base = {"id": "01JABCDEFGHJKMNPQRSTVWXYZ0", "task": "mod.work", "queue": "q1"}
    return [
        Job(**base, args=[1, "a"], created_at=999.5, run_at=1000.25),
        Job(**base, args=[], created_at=0.0, run_at=0.0, priority=-3, max_attempts=9),
        Job(**base, args=[[1, {"k": [2]}]], kwargs={"k": 1}, timeout=5.0),
        Job(**base, metadata={"m": "v"}),
        Job(**base, idempotency_key="key", idempotency_ttl=60.0),
        Job(**base, args=[b"bytes"]),  # a typed value ("$b")
    ]


@pytest.mark.parametrize("index", range(6))
def test_plain_claim_decoding_equals_the_general_decoder(
    index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = encode_envelope(_jobs()[index])
    fast = [codec.claimed_job(item, "q1", 2000.0, 2030.0, "w-2") for item in _items(raw)]
    monkeypatch.setattr(codec, "_PLAIN_LEN", -1)  # no envelope is plain: the general path
    slow = [codec.claimed_job(item, "q1", 2000.0, 2030.0, "w-2") for item in _items(raw)]
    assert fast == slow
    fields = {f.name for f in dataclasses.fields(Job)}
    for job in fast:
        assert set(vars(job)) == fields
    assert fast[1].lost == 2 and fast[1].last_error == "E: x" and len(fast[1].history) == 2


def test_an_eleven_key_envelope_with_an_option_is_not_taken_for_plain() -> None:
    raw = (
        b'{"v":1,"id":"01JABCDEFGHJKMNPQRSTVWXYZ0","task":"t","args":[],"queue":"q1",'
        b'"priority":0,"state":"pending","max_attempts":4,"run_at":1.0,"created_at":1.0,'
        b'"timeout":9.5}'  # no "kwargs" but a timeout: 11 keys, not the plain ones
    )
    job = codec.claimed_job(_items(raw)[0], "q1", 2000.0, 2030.0, "w-2")
    assert job.timeout == 9.5 and job.kwargs == {}


def test_fast_lease_and_ack_equal_the_constructors_and_stay_frozen() -> None:
    job = Job(id="x", task="t")
    lease = Lease.fast(job, "1:q", 5.0)
    assert lease == Lease(job, "1:q", 5.0) and lease.id == "x"
    ack = Ack.fast("x", "1:q", {"r": 1}, "q")
    assert ack == Ack("x", "1:q", {"r": 1}, "q") and ack.error is None
    assert repr(ack) == repr(Ack("x", "1:q", {"r": 1}, "q"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        lease.token = "2:q"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ack.result = None  # type: ignore[misc]


def test_only_plain_envelopes_take_the_plain_path(monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[str] = []
    plain_job = codec._plain_job

    def spy(data: dict[str, Any], *args: Any) -> Job:
        taken.append(data["task"])
        return plain_job(data, *args)

    monkeypatch.setattr(codec, "_plain_job", spy)
    for i, job in enumerate(_jobs()):
        job.task = f"t{i}"
        codec.claimed_job(_items(encode_envelope(job))[0], "q1", 2000.0, 2030.0, "w-2")
    assert taken == ["t0", "t1"]
