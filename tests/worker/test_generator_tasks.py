"""A generator function is refused as a task where it is declared.

Calling a generator function only builds the generator: the job "completed" without running a
line of its body (and its result was a generator object). ``@app.task`` on a generator or an
async generator function raises ``ValidationError`` naming the task and the rule.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from conveyor import Conveyor, ValidationError


def test_a_generator_function_is_refused_as_a_task() -> None:
    app = Conveyor("memory://")
    with pytest.raises(ValidationError, match="generator"):

        @app.task
        def numbers() -> Iterator[int]:
            yield 1


def test_an_async_generator_function_is_refused_as_a_task() -> None:
    app = Conveyor("memory://")
    with pytest.raises(ValidationError, match="generator"):

        @app.task(queue="q")
        async def numbers() -> AsyncIterator[int]:
            yield 1


def test_a_function_returning_a_list_is_still_a_task() -> None:
    app = Conveyor("memory://")

    @app.task
    def numbers() -> list[int]:
        return [1, 2]

    job = numbers.enqueue()
    app.worker().run_until_idle()
    assert job.refresh().result == [1, 2]
