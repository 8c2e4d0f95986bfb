"""Issue 19 item 2: arguments are bound against the task's signature at enqueue, and an
enqueue by a name the app does not register is refused (with an opt-out).

Before: ``send_email.enqueue("x@example.com")`` (a missing argument) and
``app.enqueue("send_emial")`` were stored and only dead-lettered on the worker.
"""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import Conveyor, JobSpec, ValidationError


def _app(**options: Any) -> Conveyor:
    app = Conveyor("memory://", **options)

    @app.task
    def send_email(to: str, subject: str, *, cc: str | None = None) -> None:
        return None

    @app.task
    def flexible(*args: Any, **kwargs: Any) -> None:
        return None

    return app


def _stored(app: Conveyor) -> int:
    return sum(sum(states.values()) for states in app.broker.counts().values())


def test_missing_argument_is_refused_naming_it() -> None:
    app = _app()
    with pytest.raises(ValidationError) as info:
        app.tasks["send_email"].enqueue("x@example.com")
    assert info.value.field == "subject"
    assert "missing required argument" in info.value.rule
    assert "send_email(to, subject, *, cc=None)" in info.value.rule
    assert _stored(app) == 0


def test_unexpected_keyword_is_refused_with_a_suggestion() -> None:
    app = _app()
    with pytest.raises(ValidationError) as info:
        app.tasks["send_email"].enqueue("x@example.com", subjct="hi")
    assert info.value.field == "subjct"
    assert "did you mean 'subject'?" in info.value.rule


def test_too_many_positional_arguments_are_refused() -> None:
    app = _app()
    with pytest.raises(ValidationError) as info:
        app.tasks["send_email"].enqueue("a", "b", "c")
    assert info.value.field == "args"
    assert "at most 2 positional" in info.value.rule


def test_every_enqueue_path_binds() -> None:
    app = _app()
    task = app.tasks["send_email"]
    for call in (
        lambda: app.enqueue_many([task.s("a")]),  # .s() may leave the first one to upstream
        lambda: task.spec("a"),
        lambda: task.options(queue="q").enqueue("a"),
        lambda: task.enqueue_in(5, "a"),
        lambda: app.enqueue("send_email", args=["a"]),
        lambda: app.enqueue("send_email", args=["a"], priority=1),
        lambda: app.enqueue_many(
            [JobSpec("send_email", ("a", "b")), JobSpec("send_email", ("a",))]
        ),
    ):
        with pytest.raises(ValidationError, match="subject"):
            call()
    assert _stored(app) == 0  # the batch is refused whole


def test_good_calls_pass_and_s_is_spec() -> None:
    app = _app()
    task = app.tasks["send_email"]
    assert task.s("a", "b", cc="c") == task.spec("a", "b", cc="c")
    assert task.s("a", subject="b") == JobSpec("send_email", ("a",), {"subject": "b"}, {})
    task.enqueue("a", "b")
    task.enqueue("a", subject="b", cc="c")
    app.tasks["flexible"].enqueue(1, 2, x=3)
    app.enqueue_many([task.s("a", "b"), app.tasks["flexible"].s()])
    assert _stored(app) == 5


def test_unregistered_name_is_refused_with_did_you_mean() -> None:
    app = _app()
    with pytest.raises(ValidationError) as info:
        app.enqueue("send_emial", args=["a", "b"])
    assert info.value.field == "task"
    assert "did you mean 'send_email'?" in info.value.rule
    assert "strict_names=False" in info.value.rule
    with pytest.raises(ValidationError, match="send_emial"):
        app.enqueue_many([JobSpec("send_emial")])
    assert _stored(app) == 0


def test_opt_out_and_name_only_producers_enqueue_any_name() -> None:
    _app(strict_names=False).enqueue("billing.charge", args=[1])
    Conveyor("memory://").enqueue("billing.charge", args=[1])  # no registry: name-only producer
