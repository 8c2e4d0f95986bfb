"""conveyor.contrib.flask: the extension with the app-factory pattern, over real SQLite files,
driven by Flask's test client and its CLI runner."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("flask")

from flask import Flask, request

from conveyor import Conveyor, JobState
from conveyor.contrib.flask import FlaskConveyor
from conveyor.errors import ValidationError

ext = FlaskConveyor()
DONE: list[str] = []


@ext.task(queue="default", max_attempts=2)
def resize(image: str) -> str:
    DONE.append(image)
    return image.upper()


def create_app(db: Path, **config: object) -> Flask:
    """The app factory: config first, then ``init_app``."""
    app = Flask(__name__)
    app.config.update(CONVEYOR_URL=f"sqlite:///{db}", **config)
    ext.init_app(app)

    @app.post("/resize")
    def post_resize() -> dict[str, str]:
        job = resize.enqueue(request.form["image"])
        return {"id": job.id}

    return app


def test_config_builds_one_conveyor_per_app(tmp_path: Path) -> None:
    one = create_app(tmp_path / "one.db", CONVEYOR_SETTINGS={"max_lost": 7})
    two = create_app(tmp_path / "two.db")
    c1, c2 = one.extensions["conveyor"], two.extensions["conveyor"]
    assert isinstance(c1, Conveyor) and c1 is not c2
    assert c1.settings.max_lost == 7 and c2.settings.max_lost == 3
    assert c1.tasks["resize"] is resize and c2.tasks["resize"] is resize
    with one.app_context():
        assert ext.app is c1
    with two.app_context():
        assert ext.app is c2


def test_endpoint_enqueues_on_its_own_apps_conveyor(tmp_path: Path) -> None:
    one = create_app(tmp_path / "one.db")
    two = create_app(tmp_path / "two.db")
    job_id = one.test_client().post("/resize", data={"image": "cat.png"}).get_json()["id"]
    c1, c2 = one.extensions["conveyor"], two.extensions["conveyor"]
    assert c1.get_job(job_id).state is JobState.PENDING
    assert c2.stats()["queues"] == {}  # the other app's broker saw nothing


def test_flask_cli_worker_runs_the_jobs(tmp_path: Path) -> None:
    app = create_app(tmp_path / "cli.db")
    job_id = app.test_client().post("/resize", data={"image": "dog.png"}).get_json()["id"]
    result = app.test_cli_runner().invoke(args=["conveyor", "worker", "--until-idle"])
    assert result.exit_code == 0, result.output
    assert "ran 1 job(s)" in result.output
    job = app.extensions["conveyor"].get_job(job_id)
    assert job.state is JobState.COMPLETED and job.result == "DOG.PNG"


def test_direct_form_and_given_app(tmp_path: Path) -> None:
    conveyor = Conveyor(f"sqlite:///{tmp_path / 'given.db'}")
    app = Flask(__name__)
    own = FlaskConveyor(app, conveyor=conveyor)
    with app.app_context():
        assert own.app is conveyor
        handle = own.enqueue("anything", args=[1])
    assert conveyor.get_job(handle.id).state is JobState.PENDING


def test_bad_config_and_options_are_refused_by_name(tmp_path: Path) -> None:
    app = Flask(__name__)
    app.config.update(CONVEYOR_URL="memory://", CONVEYOR_SETTINGS=["x"])
    with pytest.raises(ValidationError, match="CONVEYOR_SETTINGS"):
        FlaskConveyor(app)
    with pytest.raises(ValidationError, match="queues"):
        FlaskConveyor().task(queues="x")


def test_using_the_extension_before_init_app_says_so() -> None:
    with pytest.raises(RuntimeError, match="init_app"):
        _ = FlaskConveyor().app


def test_a_task_declared_after_init_app_reaches_every_app(tmp_path: Path) -> None:
    """The module docstring: tasks are "registered with every app it is initialised for" —
    also one declared late (a tasks module imported once both apps exist); it reached only the
    last app before, and the first app's worker failed its jobs as unknown tasks."""
    late = FlaskConveyor()
    one, two = Flask("one"), Flask("two")
    for i, flask_app in enumerate((one, two)):
        flask_app.config.update(CONVEYOR_URL=f"sqlite:///{tmp_path / f'{i}.db'}")
        late.init_app(flask_app)

    @late.task
    def ping() -> str:
        return "pong"

    for flask_app in (one, two):
        with flask_app.app_context():
            assert late.app.tasks.get("ping") is ping
            job = ping.enqueue()
            assert late.app.worker().run_until_idle() == 1
            assert job.refresh().state is JobState.COMPLETED
