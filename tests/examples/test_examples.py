"""Every example in examples/ runs (issue 19 item 8): against SQLite files in a temporary
directory and, where the example targets it, a real redis-server. Each example is imported or
run as a user would; Docker itself is not available in CI, so the Docker example is validated
without it (see test_docker_*)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conveyor import JobState
from tests.examples.helpers import EXAMPLES, ROOT, load_example, parse_cli, wait_for

#: every example a user is pointed at; test_every_example_is_tested keeps this list honest
EXAMPLE_FILES = {
    "quickstart.py",
    "fastapi_app.py",
    "flask_app.py",
    "async_tasks.py",
    "observability.py",  # run by tests/examples/test_observability_example.py
    "django_project",
    "docker",
    "README.md",
}


def test_every_example_is_tested() -> None:
    present = {p.name for p in EXAMPLES.iterdir() if not p.name.startswith((".", "__"))}
    # the SQLite files a user's own runs leave next to the examples (git ignores them)
    present = {p for p in present if not re.search(r"\.(db|sqlite3)(-wal|-shm)?$", p)}
    assert present == EXAMPLE_FILES


def test_examples_need_nothing_outside_the_repository() -> None:
    for path in EXAMPLES.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".md", ".yaml", ".txt", ""):
            text = path.read_text(encoding="utf-8", errors="replace")
            assert "shared/seeds" not in text and "../shared" not in text, path


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 120) -> str:
    proc = subprocess.run(
        args, cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    return proc.stdout


# ---------------------------------------------------------------------------- quickstart
def test_quickstart_script_runs(tmp_path: Path) -> None:
    out = run(
        [sys.executable, str(EXAMPLES / "quickstart.py")],
        tmp_path,
        {"CONVEYOR_URL": f"sqlite:///{tmp_path / 'q.db'}"},
    )
    assert re.search(r"^ok +completed +attempts=1", out, re.M), out
    assert re.search(r"^flaky +completed +attempts=2", out, re.M), out
    assert re.search(r"^bad +dead_letter +attempts=1 PermanentError", out, re.M), out


def test_quickstart_on_redis(redis_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from conveyor.broker.redis import RedisBroker

    RedisBroker.from_url(redis_server.url).flush_all()
    monkeypatch.setenv("CONVEYOR_URL", redis_server.url)
    quickstart = load_example("quickstart.py")
    assert quickstart.main() == {
        "ok": JobState.COMPLETED,
        "flaky": JobState.COMPLETED,
        "bad": JobState.DEAD_LETTER,
    }
    quickstart.app.close()


def test_quickstart_default_database_is_next_to_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVEYOR_URL", "memory://")  # do not create the file in the checkout
    quickstart = load_example("quickstart.py")
    assert quickstart.DB.is_absolute() and quickstart.DB.parent == EXAMPLES


# ---------------------------------------------------------------------------- fastapi
def test_fastapi_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("fastapi")
    from starlette.testclient import TestClient

    monkeypatch.setenv("CONVEYOR_URL", f"sqlite:///{tmp_path / 'fastapi.db'}")
    monkeypatch.setenv("ALLOWED_HOSTS", "127.0.0.1")
    example = load_example("fastapi_app.py")
    # no dashboard credentials in this test: the dashboard answers on loopback only
    with TestClient(example.api, base_url="http://127.0.0.1") as client:
        job_id = client.post("/signup", params={"email": "ada@example.com"}).json()["job"]
        wait_for(lambda: client.get(f"/jobs/{job_id}").json()["state"] == "completed")
        body = client.get(f"/jobs/{job_id}").json()
        assert body["result"] == "welcome mail sent to ada@example.com"
        assert client.get("/jobs/nope").status_code == 404
        dashboard = client.get("/admin/jobs/api/v1/queues").json()
        assert [q["name"] for q in dashboard["queues"]] == ["default"]
    assert not example.api.state.conveyor_worker.alive  # drained at shutdown


# ---------------------------------------------------------------------------- flask
def test_flask_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("flask")
    monkeypatch.setenv("CONVEYOR_URL", f"sqlite:///{tmp_path / 'module.db'}")  # its module app
    example = load_example("flask_app.py")
    app = example.create_app({"CONVEYOR_URL": f"sqlite:///{tmp_path / 'flask.db'}"})
    client = app.test_client()
    job_id = client.post("/signup", data={"email": "ada@example.com"}).get_json()["job"]
    assert client.get(f"/jobs/{job_id}").get_json()["state"] == "pending"
    result = app.test_cli_runner().invoke(args=["conveyor", "worker", "--until-idle"])
    assert result.exit_code == 0 and "ran 1 job(s)" in result.output, result.output
    assert client.get(f"/jobs/{job_id}").get_json()["state"] == "completed"


def test_flask_example_from_the_flask_command(tmp_path: Path) -> None:
    pytest.importorskip("flask")
    env = {"CONVEYOR_URL": f"sqlite:///{tmp_path / 'flask.db'}"}
    flask = str(Path(sys.executable).with_name("flask"))
    out = run(
        [flask, "--app", str(EXAMPLES / "flask_app.py"), "conveyor", "worker", "--until-idle"],
        tmp_path,
        env,
    )
    assert "ran 0 job(s)" in out


# ---------------------------------------------------------------------------- async
def test_async_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVEYOR_URL", f"sqlite:///{tmp_path / 'async.db'}")
    example = load_example("async_tasks.py")
    assert example.main(count=10) == [n * n for n in range(10)]


def test_async_example_script_on_redis(redis_server: Any, tmp_path: Path) -> None:
    from conveyor.broker.redis import RedisBroker

    RedisBroker.from_url(redis_server.url).flush_all()
    out = run(
        [sys.executable, str(EXAMPLES / "async_tasks.py")],
        tmp_path,
        {"CONVEYOR_URL": redis_server.url},
    )
    assert "20 async jobs: results [0, 1, 4, 9" in out


# ---------------------------------------------------------------------------- django
DJANGO = EXAMPLES / "django_project"


def django_env(tmp_path: Path) -> dict[str, str]:
    return {
        "DJANGO_DB": str(tmp_path / "db.sqlite3"),
        "CONVEYOR_URL": f"sqlite:///{tmp_path / 'conveyor.db'}",
        "PYTHONPATH": os.pathsep.join([str(DJANGO), str(ROOT)]),
    }


def test_django_example_enqueues_on_commit(tmp_path: Path) -> None:
    pytest.importorskip("django")
    env = django_env(tmp_path)
    run([sys.executable, "manage.py", "check"], DJANGO, env)
    run([sys.executable, "manage.py", "migrate", "-v0"], DJANGO, env)
    out = run([sys.executable, "manage.py", "conveyor_demo"], DJANGO, env)
    assert "committed: completed welcome mail sent to ada@example.com" in out
    assert "rolled back: no job" in out


DJANGO_ASGI_CHECK = """
import os
os.environ["DJANGO_SETTINGS_MODULE"] = "mysite.settings"
from mysite.asgi import application
from django.contrib.auth.models import User
from django.test import Client
from starlette.testclient import TestClient

client = TestClient(application)
anonymous = client.get("/admin/jobs/", follow_redirects=False)
print("anonymous", anonymous.status_code, anonymous.headers["location"])
staff = User.objects.create_user("op", password="op-password-123", is_staff=True)
login = Client()
login.force_login(staff)
cookie = "sessionid=" + login.cookies["sessionid"].value
page = client.get("/admin/jobs/", headers={"cookie": cookie})
print("staff", page.status_code, "<html" in page.text)
response = client.post("/signup/", data={"email": "eve@example.com"})
print("signup", response.status_code, sorted(response.json()))
"""


def test_django_example_asgi_dashboard_is_staff_only(tmp_path: Path) -> None:
    pytest.importorskip("django")
    env = django_env(tmp_path)
    run([sys.executable, "manage.py", "migrate", "-v0"], DJANGO, env)
    out = run([sys.executable, "-c", DJANGO_ASGI_CHECK], DJANGO, env)
    assert "anonymous 302 /admin/login/?next=%2Fadmin%2Fjobs%2F" in out
    assert "staff 200 True" in out
    assert "signup 200 ['job', 'user']" in out


# ---------------------------------------------------------------------------- docker
DOCKER = EXAMPLES / "docker"


def compose() -> dict[str, Any]:
    data = yaml.safe_load((DOCKER / "compose.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_docker_compose_has_worker_scheduler_dashboard_and_redis() -> None:
    services = compose()["services"]
    assert set(services) == {"redis", "worker", "scheduler", "dashboard"}
    for name in ("worker", "scheduler", "dashboard"):
        assert services[name]["environment"]["CONVEYOR_URL"] == "redis://redis:6379/0"
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "noeviction" in services["redis"]["command"]  # docs/reliability.md


def test_docker_commands_are_accepted_by_the_real_cli() -> None:
    services = compose()["services"]
    for name in ("worker", "scheduler", "dashboard"):
        command = services[name]["command"]
        assert command[0] == "conveyor" and command[2] == "jobs:app", name
        parse_cli(command)


def test_docker_health_checks_probe_the_served_ports() -> None:
    services = compose()["services"]
    worker = services["worker"]["command"]
    port = worker[worker.index("--metrics-port") + 1]
    assert f"127.0.0.1:{port}/healthz" in " ".join(services["worker"]["healthcheck"]["test"])
    dash = services["dashboard"]["command"]
    dash_port = dash[dash.index("--port") + 1]
    assert f"127.0.0.1:{dash_port}/healthz" in " ".join(
        services["dashboard"]["healthcheck"]["test"]
    )
    assert "127.0.0.1" in dash  # an --allowed-host, so the probe's Host header passes


def test_dockerfile_copies_only_paths_that_exist() -> None:
    build = compose()["services"]["worker"]["build"]
    context = (DOCKER / build["context"]).resolve()
    dockerfile = context / build["dockerfile"]
    assert context == ROOT and dockerfile == DOCKER / "Dockerfile"
    copies = re.findall(r"^COPY (.+)$", dockerfile.read_text(), re.M)
    assert copies
    for line in copies:
        *sources, _dest = line.split()
        for source in sources:
            assert (context / source).exists(), f"Dockerfile copies missing {source}"
    cmd = re.search(r"^CMD (\[.*\])$", dockerfile.read_text(), re.M)
    assert cmd is not None
    parse_cli(yaml.safe_load(cmd.group(1)))


def test_docker_jobs_module_runs_a_job_on_redis(
    redis_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conveyor.broker.redis import RedisBroker

    RedisBroker.from_url(redis_server.url).flush_all()
    monkeypatch.setenv("CONVEYOR_URL", redis_server.url)
    jobs = load_example("docker/jobs.py", "conveyor_example_docker_jobs")
    handle = jobs.send_welcome.enqueue("ada@example.com")
    jobs.app.worker().run_until_idle()
    assert handle.refresh().state is JobState.COMPLETED
    assert "heartbeat-report" in jobs.app.schedules.declared
    jobs.app.close()


DJANGO_ENQUEUE = """
import django
django.setup()
from django.contrib.auth.models import User
from django.db import transaction
from shop.tasks import send_welcome
with transaction.atomic():
    user = User.objects.create_user("cli", email="cli@example.com")
    print(send_welcome.enqueue(user.pk).id)
"""


def test_django_example_with_the_conveyor_worker_command(tmp_path: Path) -> None:
    pytest.importorskip("django")
    import signal

    from conveyor import Conveyor

    env = {**django_env(tmp_path), "DJANGO_SETTINGS_MODULE": "mysite.settings"}
    run([sys.executable, "manage.py", "migrate", "-v0"], DJANGO, env)
    conveyor_cmd = str(Path(sys.executable).with_name("conveyor"))
    worker = subprocess.Popen(
        [conveyor_cmd, "worker", "conveyor.contrib.django:app"],
        cwd=DJANGO,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        job_id = run([sys.executable, "-c", DJANGO_ENQUEUE], DJANGO, env).strip()
        app = Conveyor(env["CONVEYOR_URL"])
        wait_for(lambda: app.get_job(job_id).state is JobState.COMPLETED, timeout=60)
        assert app.get_job(job_id).result == "welcome mail sent to cli@example.com"
        app.close()
    finally:
        worker.send_signal(signal.SIGTERM)
        output = worker.communicate(timeout=60)[0]
    assert worker.returncode == 0, output[-3000:]
