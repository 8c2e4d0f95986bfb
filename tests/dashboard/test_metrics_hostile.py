"""``/metrics`` with hostile task names (stored raw by another client, dead-lettered as unknown
tasks): the exposition parses, every series is there, and no label carries a terminal escape,
NUL, BEL or bidi override raw (``curl /metrics`` in a terminal ran them) — they read as
``\\x1b``, ``\\u202e`` like everywhere else — on every backend."""

from __future__ import annotations

import dataclasses

from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from conveyor import Conveyor
from conveyor.task import JobSpec
from tests.support.hostile import HOSTILE_TEXT, TERMINAL_RAW, TERMINAL_TEXT

RAW = tuple(c for c in TERMINAL_RAW if c != "\u20e3")


def test_metrics_labels_show_invisible_characters_as_escapes(
    api: TestClient, dash_app: Conveyor
) -> None:
    now = dash_app.now()
    names = {k: v[:200] for k, v in {**TERMINAL_TEXT, **HOSTILE_TEXT}.items()}
    stored = 0
    for key, name in names.items():
        job = dash_app.build_job(JobSpec("add", (1, 2), {}, {}), now)
        try:
            dash_app.broker.enqueue([dataclasses.replace(job, id=f"m-{key}", task=name)], now)
            stored += 1
        except Exception:  # PostgreSQL text cannot hold NUL: not stored at all
            assert "\x00" in name
    dash_app.worker().run_until_idle()
    body = api.get("/metrics").text
    for raw in RAW:
        assert raw not in body, repr(raw)
    tasks = {
        s.labels["task"]
        for family in text_string_to_metric_families(body)
        for s in family.samples
        if "task" in s.labels
    }
    assert "\\x1b[2J\\x1b[31mred\\x1b]0;title\\x07" in tasks
    assert "abc\\u202edcba\\u200f\\u2066x\\u2069" in tasks
    assert HOSTILE_TEXT["markup"][:200] in tasks and len(tasks) >= stored
