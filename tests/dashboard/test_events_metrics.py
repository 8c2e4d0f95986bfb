"""Events with a resumable cursor, metrics counters and percentiles, Prometheus exposition."""

from __future__ import annotations

import time

import pytest

from conveyor import Conveyor, FakeClock
from conveyor.monitoring.events import EventReader, EventType, JobEvent, job_events, worker_event
from conveyor.monitoring.metrics import (
    HISTOGRAM_BOUNDS,
    MetricsMiddleware,
    flush_local,
    histogram_index,
    percentile,
    read_counters,
    series,
    summarize,
)
from conveyor.monitoring.prometheus import exposition, worker_queues


def test_event_reader_resumes_from_its_cursor(dash_app: Conveyor) -> None:
    reader = EventReader(dash_app.broker)
    reader.seek_end()
    first = dash_app.enqueue("add", [1, 2])
    events = reader.read()
    assert [(e.type, e.job_id) for e in events] == [(EventType.ENQUEUED, first.id)]
    saved = reader.cursor
    second = dash_app.enqueue("add", [3, 4])
    dash_app.worker().run_until_idle()
    # A new reader (another process) resumes exactly after the saved cursor.
    resumed = EventReader(dash_app.broker, saved).read(100)
    assert resumed[0].job_id == second.id and resumed[0].type is EventType.ENQUEUED
    kinds = [e.type for e in resumed if e.job_id == first.id]
    assert kinds == [EventType.STARTED, EventType.COMPLETED]
    assert EventReader(dash_app.broker, reader.cursor).read() == resumed  # read() did not move it
    assert all(e.queue == "default" and e.task == "add" for e in resumed)


def test_every_transition_is_a_typed_event(dash_app: Conveyor, clock: FakeClock) -> None:
    job = dash_app.enqueue("boom", ["x"])
    dash_app.worker().run_until_idle()
    dash_app.requeue_dead(job.id)
    dash_app.cancel(job.id)
    kinds = [e.type for e in job_events(dash_app.broker, job.id)]
    assert kinds == [
        EventType.ENQUEUED,
        EventType.STARTED,
        EventType.FAILED,
        EventType.DEAD_LETTERED,
        EventType.REQUEUED,
        EventType.CANCELLED,
    ]
    failed = next(e for e in job_events(dash_app.broker, job.id) if e.type is EventType.FAILED)
    assert "it broke" in str(failed.data.get("error"))
    assert failed.to_dict()["type"] == "failed" and failed.at == clock.now()


def test_worker_events_and_unknown_types(dash_app: Conveyor) -> None:
    reader = EventReader(dash_app.broker)
    reader.seek_end()
    dash_app.broker.events_add(
        [worker_event("worker_up", "w1", 5.0, pid=1), {"type": "something_new", "at": "bad"}]
    )
    up, odd = reader.read()
    assert up.type is EventType.WORKER_UP and up.data == {"worker": "w1", "pid": 1}
    assert odd.type is EventType.UNKNOWN and odd.raw_type == "something_new" and odd.at == 0.0
    with pytest.raises(ValueError):
        worker_event("completed", "w1", 1.0)
    assert JobEvent.from_dict({"type": "completed", "at": 1}).to_dict()["type"] == "completed"


def test_histogram_percentiles() -> None:
    assert histogram_index(0.0) == 0 and histogram_index(1e9) == len(HISTOGRAM_BOUNDS)
    counters = {"run_b3": 50.0, "run_b7": 45.0, "run_b16": 5.0}  # <=0.05 s, <=1 s, +Inf
    assert percentile(counters, "run", 0.5) == pytest.approx(0.05)
    assert 0.5 < (percentile(counters, "run", 0.95) or 0) <= 1.0
    assert percentile(counters, "run", 0.99) == HISTOGRAM_BOUNDS[-1]
    assert percentile({}, "run", 0.5) is None


def test_middleware_counts_outcomes_per_minute(dash_app: Conveyor, clock: FakeClock) -> None:
    for i in range(3):
        dash_app.enqueue("add", [i, i])
    dash_app.enqueue("boom")
    clock.advance(2.0)  # every job waited 2 s before it started
    dash_app.worker().run_until_idle()
    flush_local(dash_app)
    counters = read_counters(dash_app.broker, clock.now(), 5).get("", {})
    s = summarize(counters, 5)
    assert (s.enqueued, s.processed, s.completed, s.failed, s.dead_letter) == (4, 4, 3, 1, 1)
    assert s.failure_rate == pytest.approx(0.25)
    assert s.wait_p50 is not None and 1.0 <= s.wait_p50 <= 2.5
    by_task = read_counters(dash_app.broker, clock.now(), 5, by="task")
    assert by_task["add"]["completed"] == 3 and by_task["boom"]["dead_letter"] == 1
    # An hour later the window is empty, but the minute series of the last day keeps them.
    clock.advance(3600)
    assert summarize(read_counters(dash_app.broker, clock.now(), 5).get("", {}), 5).processed == 0
    points = series(dash_app.broker, clock.now(), 120)
    assert len(points) == 120 and sum(p["processed"] for p in points) == 4


def test_buffered_increments_flush_by_timer(dash_app: Conveyor, clock: FakeClock) -> None:
    mw = MetricsMiddleware(flush_interval=0.05)
    mw.add(dash_app.broker, clock.now(), "q", "t", {"processed": 1.0})
    deadline = time.monotonic() + 5
    while not read_counters(dash_app.broker, clock.now(), 1) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert read_counters(dash_app.broker, clock.now(), 1, queue="q")[""]["processed"] == 1.0


def test_prometheus_exposition(dash_app: Conveyor, clock: FakeClock) -> None:
    dash_app.enqueue("add", [1, 2])
    dash_app.enqueue("boom")
    clock.advance(1)
    dash_app.worker().run_until_idle()
    dash_app.enqueue("emails.send", ["a@x.com"])
    clock.advance(30)
    dash_app.broker.doc_put(
        "workers", "w1", {"id": "w1", "queues": ["emails:3", "default"]}, clock.now(), ttl=60
    )
    body, ctype = exposition(dash_app)
    text = body.decode()
    assert ctype.startswith("text/plain")
    assert 'conveyor_jobs{queue="default",state="completed"} 1.0' in text
    assert 'conveyor_queue_depth{queue="emails"} 1.0' in text
    assert 'conveyor_queue_oldest_pending_age_seconds{queue="emails"} 30.0' in text
    assert 'conveyor_dead_letters{queue="default"} 1.0' in text
    assert 'conveyor_workers{queue="emails"} 1.0' in text
    assert (
        'conveyor_jobs_processed_total{outcome="dead_letter",queue="default",task="boom"} 1.0'
        in text
    )
    assert 'conveyor_jobs_enqueued_total{queue="emails",task="emails.send"} 1.0' in text
    assert 'conveyor_job_wait_seconds_count{queue="default",task="add"} 1.0' in text
    assert "conveyor_job_run_seconds_bucket" in text


def test_worker_queues_strips_weights() -> None:
    assert worker_queues({"queues": "high:5, default"}) == ["high", "default"]
    assert worker_queues({}) == []


def test_old_event_name_is_a_deprecated_alias_of_job_event() -> None:
    import conveyor.monitoring.events as events_module

    with pytest.warns(DeprecationWarning, match="JobEvent"):
        old = events_module.Event
    assert old is JobEvent
