"""Auto-batching policy (issue 18): when a buffer of single-job enqueues is due, with plain times.

``core.autobatch.FlushBuffer`` is pure: the times are numbers given by the test, no thread and
no clock. Also: ``AutoBatch`` refuses bad values by field, and the ``CONVEYOR_AUTOBATCH_*``
settings are validated like every other setting.
"""

from __future__ import annotations

import math

import pytest

from conveyor import AutoBatch, Conveyor
from conveyor.config import Settings, SettingsError
from conveyor.core.autobatch import FlushBuffer
from conveyor.errors import ValidationError


def test_due_when_full_or_when_the_oldest_waited_max_delay() -> None:
    buf: FlushBuffer[str] = FlushBuffer(AutoBatch(max_jobs=3, max_delay=0.001))
    assert not buf.due(0.0) and buf.wait_time(0.0) is None and buf.deadline == math.inf
    assert buf.add("a", 10.0) is True  # first item: the writer must start its timer
    assert not buf.due(10.0005) and buf.wait_time(10.0005) == pytest.approx(0.0005)
    assert buf.add("b", 10.0008) is False
    assert buf.due(10.001) and buf.wait_time(10.002) == 0.0  # the OLDEST item's deadline
    assert buf.add("c", 10.0009) is True  # full: wake the writer before the deadline
    assert buf.due(10.0009)
    assert buf.take() == ["a", "b", "c"] and len(buf) == 0


def test_take_leaves_the_rest_with_their_own_deadlines() -> None:
    buf: FlushBuffer[int] = FlushBuffer(AutoBatch(max_jobs=2, max_delay=0.5))
    for i, t in enumerate((1.0, 1.1, 1.2, 1.3, 1.4)):
        buf.add(i, t)
    assert buf.take() == [0, 1]
    assert buf.deadline == pytest.approx(1.7)  # item 2 arrived at 1.2
    assert buf.take() == [2, 3] and buf.take() == [4] and buf.take() == []


def test_zero_delay_is_due_at_once() -> None:
    buf: FlushBuffer[int] = FlushBuffer(AutoBatch(max_jobs=100, max_delay=0))
    buf.add(1, 5.0)
    assert buf.due(5.0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_jobs": 0}, "autobatch.max_jobs"),
        ({"max_jobs": True}, "autobatch.max_jobs"),
        ({"max_jobs": 2.5}, "autobatch.max_jobs"),
        ({"max_delay": -0.001}, "autobatch.max_delay"),
        ({"max_delay": math.nan}, "autobatch.max_delay"),
        ({"max_delay": 5.0}, "autobatch.max_delay"),
        ({"max_delay": "1ms"}, "autobatch.max_delay"),
    ],
)
def test_bad_values_are_refused_by_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        AutoBatch(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


def test_app_option_accepts_autobatch_true_or_false_only() -> None:
    with pytest.raises(ValidationError, match="autobatch"):
        Conveyor("memory://", autobatch="yes")  # type: ignore[arg-type]
    assert Conveyor("memory://", autobatch=False).runtime.producer.autobatch is None
    on = Conveyor("memory://", autobatch=True).runtime.producer.autobatch
    assert on is not None and on.config == AutoBatch()


def test_settings_turn_it_on_and_app_option_wins() -> None:
    env = {"CONVEYOR_AUTOBATCH_MAX_JOBS": "50", "CONVEYOR_AUTOBATCH_MAX_DELAY": "0.002"}
    settings = Settings.from_env(env)
    assert settings.autobatch_max_jobs == 50 and settings.autobatch_max_delay == 0.002
    batcher = Conveyor("memory://", settings=settings).runtime.producer.autobatch
    assert batcher is not None and batcher.config == AutoBatch(50, 0.002)
    off = Conveyor("memory://", settings=settings, autobatch=False)
    assert off.runtime.producer.autobatch is None
    assert Conveyor("memory://", settings=Settings()).runtime.producer.autobatch is None


@pytest.mark.parametrize(
    ("name", "value", "rule"),
    [
        ("CONVEYOR_AUTOBATCH_MAX_JOBS", "-1", "must be >= 0"),
        ("CONVEYOR_AUTOBATCH_MAX_JOBS", "many", "must be a whole number"),
        ("CONVEYOR_AUTOBATCH_MAX_DELAY", "2", "must be <= 1"),
        ("CONVEYOR_AUTOBATCH_MAX_DELAY", "-1", "must be >= 0"),
    ],
)
def test_bad_autobatch_variables_name_the_variable(name: str, value: str, rule: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({name: value})
    assert info.value.field == name and rule in str(info.value)


def test_the_default_is_group_commit_a_lone_job_never_waits() -> None:
    """Issue 18: the default ``max_delay`` is 0 (bench/autobatch_cpu.py: a lone thread enqueued
    ~800 jobs/s with 1 ms, ~8,000/s with 0; 50 threads keep ~20 jobs per call). A lone job is
    due the moment it arrives; jobs arriving while that write runs form the next batch."""
    assert AutoBatch().max_delay == 0.0
    assert Settings().autobatch_max_delay == 0.0  # CONVEYOR_AUTOBATCH_MAX_DELAY's default
    buf: FlushBuffer[str] = FlushBuffer(AutoBatch())
    buf.add("lone", 5.0)
    assert buf.due(5.0) and buf.wait_time(5.0) == 0.0
    assert buf.take() == ["lone"]  # the writer writes it; meanwhile two more arrive
    buf.add("b", 5.0002)
    buf.add("c", 5.0003)
    assert buf.due(5.0003) and buf.take() == ["b", "c"]  # together, at once
