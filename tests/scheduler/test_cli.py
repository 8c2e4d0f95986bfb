"""``conveyor schedules list|next|history|pause|resume|remove`` and ``conveyor scheduler``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from conveyor import Conveyor
from conveyor.cli.main import cli
from tests.support.backends import BACKENDS

pytestmark = pytest.mark.skipif("sqlite" not in BACKENDS, reason="needs the SQLite backend")


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    """A SQLite file holding two schedules, one in New York time."""
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    app = Conveyor(url)
    app.schedule_cron("nightly", "reports.nightly", "30 2 * * *", tz="America/New_York")
    app.schedule_cron("beat", "reports.beat", every=60, overlap="skip")
    app.close()
    yield url


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_list_json_and_table(url: str) -> None:
    code, out = run("schedules", "list", "--url", url, "--json")
    assert code == 0
    rows = json.loads(out)
    assert [r["name"] for r in rows] == ["beat", "nightly"]
    assert rows[1]["cron"] == "30 2 * * *" and rows[1]["tz"] == "America/New_York"
    assert rows[0]["every"] == 60 and rows[0]["overlap"] == "skip"
    code, out = run("schedules", "list", "--url", url)
    assert code == 0 and "nightly" in out and "beat" in out and "paused" not in out


def test_next_shows_local_and_utc_times(url: str) -> None:
    code, out = run("schedules", "next", "nightly", "-n", "3", "--url", url, "--json")
    assert code == 0
    data = json.loads(out)
    assert len(data["next"]) == 3
    assert all("T02:30:00" in r["local"] or "T03:00:00" in r["local"] for r in data["next"])
    code, out = run("schedules", "next", "nightly", "--url", url)
    assert code == 0 and "Next runs of nightly" in out


def test_pause_resume_remove(url: str) -> None:
    assert run("schedules", "pause", "beat", "--url", url)[0] == 0
    assert Conveyor(url).schedules.get("beat").paused
    code, out = run("schedules", "resume", "beat", "--url", url, "--json")
    assert code == 0 and json.loads(out)["paused"] is False
    code, out = run("schedules", "remove", "beat", "--url", url)
    assert code == 0 and "removed" in out
    assert [s.name for s in Conveyor(url).list_schedules()] == ["nightly"]


def test_unknown_schedule_is_a_clear_error(url: str) -> None:
    for command in ("pause", "resume", "remove", "next"):
        code, out = run("schedules", command, "nope", "--url", url)
        assert code != 0 and "'nope' not found" in out, (command, out)


def test_bad_input_exits_non_zero(url: str) -> None:
    code, out = run("schedules", "next", "nightly", "-n", "0", "--url", url)
    assert code == 2 and "-n" in out
    code, out = run("scheduler", "not-a-target")
    assert code == 2 and "module:attribute" in out
    code, out = run("scheduler", "no_such_module_xyz:app")
    assert code == 2 and "cannot import" in out


def test_history(url: str) -> None:
    app = Conveyor(url)
    schedule = app.schedules.get("beat")
    assert schedule.next_fire_at is not None
    app.scheduler().fire(schedule, schedule.next_fire_at)
    code, out = run("schedules", "history", "beat", "--url", url, "--json")
    assert code == 0
    (entry,) = json.loads(out)
    assert entry["outcome"] == "enqueued" and entry["job_id"].startswith("sched:beat:")
    code, out = run("schedules", "history", "beat", "--url", url)
    assert code == 0 and "enqueued" in out


def test_absurd_interval_is_refused_naming_every(url: str) -> None:
    from conveyor import ValidationError

    app = Conveyor(url)
    with pytest.raises(ValidationError) as info:
        app.schedule_cron("big", "reports.big", every=10**12)
    assert info.value.field == "every" and "366 days" in info.value.rule
    app.close()


def test_list_and_next_survive_one_bad_stored_schedule(url: str) -> None:
    from conveyor.scheduler.models import COLLECTION

    app = Conveyor(url)  # a schedule stored by an older version, before `every` had a maximum
    doc = app.broker.doc_get(COLLECTION, "beat", app.now())
    assert doc is not None
    app.broker.doc_put(
        COLLECTION,
        "huge",
        {**doc, "name": "huge", "every": 10**12, "next_fire_at": 1e12},
        app.now(),
    )
    app.close()
    code, out = run("schedules", "list", "--url", url)
    assert code == 0 and "nightly" in out and "beat" in out and "huge" in out
    code, out = run("schedules", "list", "--url", url, "--json")
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)}
    assert set(rows) == {"beat", "huge", "nightly"} and "every" in rows["huge"]["error"]
    code, out = run("schedules", "next", "beat", "--url", url)
    assert code == 0 and "Next runs of beat" in out
    result = CliRunner().invoke(cli, ["schedules", "next", "huge", "--url", url])
    assert (result.exit_code != 0 and result.exception is None) or isinstance(
        result.exception, SystemExit
    )
    assert "huge" in result.output and "every" in result.output


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_schedule_arguments_are_refused(url: str, bad: float) -> None:
    from conveyor import ValidationError

    app = Conveyor(url)
    with pytest.raises(ValidationError) as info:
        app.schedule_cron("n1", "reports.n", every=60, args=[1, {"x": bad}])
    assert info.value.field == "args"
    with pytest.raises(ValidationError) as info:
        app.schedule_cron("n2", "reports.n", every=60, kwargs={"x": [bad]})
    assert info.value.field == "kwargs"
    assert {s.name for s in app.list_schedules()} == {"beat", "nightly"}
    app.close()


def test_list_and_pause_survive_a_stored_schedule_with_wrongly_typed_fields(url: str) -> None:
    # a document written by hand, another client or an older version: its fields have the
    # wrong JSON types; `list` crashed with a TypeError traceback and hid every schedule
    from conveyor.scheduler.models import COLLECTION

    app = Conveyor(url)
    doc = app.broker.doc_get(COLLECTION, "beat", app.now())
    assert doc is not None
    bad = {"name": "odd", "next_fire_at": "soon", "args": "oops", "misfire_grace": "x"}
    app.broker.doc_put(COLLECTION, "odd", {**doc, **bad}, app.now())
    app.close()
    code, out = run("schedules", "list", "--url", url)
    assert code == 0 and "nightly" in out and "beat" in out and "invalid" in out
    code, out = run("schedules", "list", "--url", url, "--json")
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)}
    assert set(rows) == {"beat", "nightly", "odd"} and "next_fire_at" in rows["odd"]["error"]
    assert [s.name for s in Conveyor(url).list_schedules()] == ["beat", "nightly"]
    result = CliRunner().invoke(cli, ["schedules", "next", "odd", "--url", url])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code != 0 and "next_fire_at" in result.output
    result = CliRunner().invoke(cli, ["schedules", "pause", "odd", "--url", url])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code != 0 and "next_fire_at" in result.output
    app = Conveyor(url)
    app.broker.doc_put(COLLECTION, "odd", {**doc, "name": "odd", "rev": "7"}, app.now())
    app.close()
    result = CliRunner().invoke(cli, ["schedules", "pause", "odd", "--url", url])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code != 0 and "rev" in result.output


@pytest.mark.skipif("redis" not in BACKENDS, reason="needs the Redis backend")
def test_the_scheduler_banner_does_not_print_the_broker_password(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # `conveyor scheduler` printed its broker URL as given, password included, to stdout
    # (journald, container logs); Celery shows redis://:**@host
    import os
    import signal
    import subprocess
    import sys
    import time

    server = request.getfixturevalue("redis_server")
    host = server.url.split("://", 1)[1].rsplit("/", 1)[0]
    url = f"redis://:s3cr%2Fet@{host}/7"  # a Redis without a password accepts any
    (tmp_path / "pw_app.py").write_text(
        "import os\nfrom conveyor import Conveyor\n\napp = Conveyor(os.environ['CONVEYOR_URL'])\n"
    )
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "CONVEYOR_URL": url, "PYTHONPATH": path}
    conveyor = Path(sys.executable).parent / "conveyor"
    log = tmp_path / "scheduler.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(conveyor), "scheduler", "pw_app:app"],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while "started" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    text = log.read_text()
    assert "conveyor scheduler" in text and f"redis://:***@{host}/7" in text, text
    assert "s3cr" not in text
