"""A result nested close to JSON's depth limit is either read back intact or refused when the
job completes, on every backend (item 3 of session 10's hardening).

orjson refuses more than 255 levels; a stored job wraps its result in one or two more levels, so
a result ~253 levels deep used to be stored but read back as null (SQLite, PostgreSQL) or not
readable at all (memory: a TypeError). Now a result deeper than ``MAX_RESULT_DEPTH`` is refused
like any other unstorable result: the job completes without it (its work happened) and a
``result_error`` entry names ``result`` and the nesting limit.
"""

from __future__ import annotations

from conveyor import Conveyor, JobState
from conveyor.core.values import MAX_RESULT_DEPTH
from tests.support.hostile import deep_list


def _depth(value: object) -> int:
    """Levels of JSON arrays / objects in ``value`` (``[]`` is 1)."""
    depth = 0
    while isinstance(value, list | dict):
        depth += 1
        value = value[0] if isinstance(value, list) and value else None
        if isinstance(value, dict):
            value = next(iter(value.values()), None)
    return depth


def test_deep_results_read_back_intact_or_are_refused_naming_the_limit(app: Conveyor) -> None:
    @app.task(max_attempts=1)
    def deep(levels: int) -> object:
        return deep_list(levels - 1)  # deep_list(n) is n + 1 levels

    levels = sorted({*range(MAX_RESULT_DEPTH - 3, MAX_RESULT_DEPTH + 2), *range(250, 258)})
    jobs = {n: deep.enqueue(n) for n in levels}
    assert app.worker().run_until_idle() == len(jobs)
    for n, handle in jobs.items():
        job = app.get_job(handle.id)
        assert job.state is JobState.COMPLETED, (n, job.state)
        if n <= MAX_RESULT_DEPTH:
            assert job.errors == [] and _depth(job.result) == n, (n, job.errors)
            assert job.result == deep_list(n - 1)
        else:
            assert job.result is None, n
            assert [e["kind"] for e in job.errors] == ["result_error"], (n, job.errors)
            message = job.errors[0]["message"]
            assert message.startswith("result") and "nest" in message, message
            assert str(MAX_RESULT_DEPTH) in message, message


def test_a_deep_dict_result_counts_its_levels_too(app: Conveyor) -> None:
    @app.task(max_attempts=1)
    def tree() -> object:
        value: object = 1
        for _ in range(MAX_RESULT_DEPTH + 1):
            value = {"k": value}
        return value

    job = tree.enqueue()
    assert app.worker().run_until_idle() == 1
    stored = app.get_job(job.id)
    assert stored.result is None and stored.errors[0]["kind"] == "result_error"
    assert str(MAX_RESULT_DEPTH) in stored.errors[0]["message"]
