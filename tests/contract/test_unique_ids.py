"""Contract: a job id is unique per app, across queues, on every backend."""

from __future__ import annotations

import pytest

from conveyor import Conveyor, DuplicateJob, JobSpec


def test_custom_job_id_cannot_be_reused_in_another_queue(app: Conveyor) -> None:
    app.enqueue("t", job_id="order-1", queue="a")
    with pytest.raises(DuplicateJob):
        app.enqueue("t", job_id="order-1", queue="b")
    job = app.get_job("order-1")
    assert job.queue == "a"
    assert app.broker.counts().get("b", {}).get("pending", 0) == 0


def test_reuse_in_another_queue_is_refused_after_the_job_finished(app: Conveyor) -> None:
    @app.task(queue="a")
    def t() -> None:
        pass

    t.options(job_id="order-2").enqueue()
    assert app.worker(["a"]).process_next()
    with pytest.raises(DuplicateJob):
        app.enqueue("t", job_id="order-2", queue="b")
    assert app.get_job("order-2").queue == "a"


def test_a_batch_reusing_an_id_of_another_queue_stores_nothing(app: Conveyor) -> None:
    app.enqueue("t", job_id="order-3", queue="a")
    specs = [
        JobSpec("t", options={"queue": "b", "job_id": "fresh-1"}),
        JobSpec("t", options={"queue": "b", "job_id": "order-3"}),
    ]
    with pytest.raises(DuplicateJob):
        app.enqueue_many(specs)
    assert app.broker.get("fresh-1") is None


def test_a_refused_enqueue_leaves_the_id_free_for_its_own_queue(app: Conveyor) -> None:
    app.enqueue("t", job_id="order-4", queue="a", idempotency_key="k-4")
    with pytest.raises(DuplicateJob):
        app.enqueue("t", job_id="order-4", queue="b")
    again = app.enqueue("t", job_id="order-4b", queue="a", idempotency_key="k-4")
    assert again.duplicate and again.id == "order-4"  # the idempotency key still dedups
    app.enqueue("t", job_id="order-5", queue="b")
    assert app.get_job("order-5").queue == "b"
