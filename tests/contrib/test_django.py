"""conveyor.contrib.django with a real Django project: settings, autodiscovery, on-commit
enqueue over real ORM transactions (SQLite files), and the dashboard behind the staff login.

Django is configured once for this module (``settings.configure``); nothing else in the test
session configures Django in-process (the example project runs in a subprocess).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("django")

import django
from django.conf import settings

from conveyor import JobState
from conveyor.errors import JobNotFound, ValidationError


@pytest.fixture(scope="module", autouse=True)
def django_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tmp = tmp_path_factory.mktemp("django")
    if settings.configured:
        pytest.skip("Django was configured by someone else in this process")
    settings.configure(
        DEBUG=False,
        SECRET_KEY="test-secret-key-for-conveyor-contrib-django-tests",
        ALLOWED_HOSTS=["testserver"],
        INSTALLED_APPS=[
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "conveyor.contrib.django",
            "tests.contrib.djapp",
        ],
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
        ],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": tmp / "db.sqlite3"}},
        ROOT_URLCONF="tests.contrib.djapp.urls",
        LOGIN_URL="/accounts/login/",
        USE_TZ=True,
        CONVEYOR={"URL": f"sqlite:///{tmp / 'conveyor.db'}", "SETTINGS": {"max_lost": 5}},
    )
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    yield tmp
    import conveyor.contrib.django as cd

    cd.reset()


def conveyor_app() -> Any:
    from conveyor.contrib.django import get_app

    return get_app()


def make_user(name: str, staff: bool = False) -> Any:
    from django.contrib.auth.models import User

    return User.objects.create_user(name, password="pw-" + name * 3, is_staff=staff)


# --------------------------------------------------------------------- settings, discovery
def test_settings_build_the_projects_app(django_project: Path) -> None:
    import conveyor.contrib.django as cd
    from conveyor.contrib.django.conveyor_app import DjangoConveyor

    app = conveyor_app()
    assert isinstance(app, DjangoConveyor) and cd.app is app
    assert app.settings.max_lost == 5  # CONVEYOR["SETTINGS"]
    assert (django_project / "conveyor.db").exists()  # CONVEYOR["URL"]


def test_tasks_py_of_installed_apps_is_autodiscovered() -> None:
    assert "djapp.welcome" in conveyor_app().tasks


def test_unknown_setting_keys_are_refused_naming_them() -> None:
    from django.core.exceptions import ImproperlyConfigured
    from django.test import override_settings

    from conveyor.contrib.django.conveyor_app import from_settings

    with (
        override_settings(CONVEYOR={"URL": "memory://", "QUEUES": ["x"]}),
        pytest.raises(ImproperlyConfigured, match="QUEUES"),
    ):
        from_settings()


@pytest.mark.parametrize(
    ("conf", "named"),
    [
        ({"ON_COMMIT": "false"}, "ON_COMMIT"),  # a string from os.environ: was read as True
        ({"IN_TRANSACTION": "no"}, "IN_TRANSACTION"),
        ({"DATABASE": "replica"}, "DATABASE"),  # no such alias: failed at the first atomic()
        ({"DATABASE": 3}, "DATABASE"),
        ({"OUTBOX": "yes"}, "OUTBOX"),
        ({"OUTBOX": {"BATCH": "many"}}, "BATCH"),  # a bare ValueError before
        ({"OUTBOX": {"INTERVAL": "soon"}}, "INTERVAL"),
        ({"OUTBOX": {"RELAY_IN_WORKER": "off"}}, "RELAY_IN_WORKER"),
    ],
)
def test_bad_setting_values_are_refused_naming_them(conf: dict[str, Any], named: str) -> None:
    """docs/integrations.md: "a bad value raises ImproperlyConfigured naming it, at start-up"."""
    from django.core.exceptions import ImproperlyConfigured
    from django.test import override_settings

    from conveyor.contrib.django.conveyor_app import from_settings

    with (
        override_settings(CONVEYOR={"URL": "memory://", **conf}),
        pytest.raises(ImproperlyConfigured, match=named),
    ):
        from_settings()


# --------------------------------------------------------------------- enqueue on commit
def test_rollback_leaves_no_job() -> None:
    from django.contrib.auth.models import User
    from django.db import transaction

    from tests.contrib.djapp.tasks import welcome

    with pytest.raises(RuntimeError), transaction.atomic():
        user = make_user("rolledback")
        handle = welcome.enqueue(user.pk)
        raise RuntimeError("the view failed")
    assert not User.objects.filter(username="rolledback").exists()
    with pytest.raises(JobNotFound):
        conveyor_app().get_job(handle.id)


def test_commit_stores_the_job_and_the_worker_sees_the_committed_row() -> None:
    from django.db import transaction

    from tests.contrib.djapp.tasks import SEEN, welcome

    app = conveyor_app()
    with transaction.atomic():
        user = make_user("committed")
        handle = welcome.enqueue(user.pk)
        with pytest.raises(JobNotFound):  # not stored before the commit
            app.get_job(handle.id)
    assert app.get_job(handle.id).state is JobState.PENDING
    app.worker(heartbeat=False).run_until_idle()
    job = app.get_job(handle.id)
    assert job.state is JobState.COMPLETED and job.result == "welcome committed"
    assert "committed" in SEEN


def test_enqueue_by_name_and_many_wait_for_the_commit_too() -> None:
    from django.db import transaction

    from tests.contrib.djapp.tasks import welcome

    app = conveyor_app()
    user = make_user("byname")
    with transaction.atomic():
        one = app.enqueue("djapp.welcome", args=[user.pk], priority=-1)
        two, three = app.enqueue_many([welcome.spec(user.pk), welcome.spec(user.pk)])
        for h in (one, two, three):
            with pytest.raises(JobNotFound):
                app.get_job(h.id)
    assert [app.get_job(h.id).state for h in (one, two, three)] == [JobState.PENDING] * 3
    assert app.get_job(one.id).priority == -1


def test_outside_a_transaction_the_job_is_stored_at_once() -> None:
    from tests.contrib.djapp.tasks import welcome

    handle = welcome.enqueue(make_user("autocommit").pk)
    assert conveyor_app().get_job(handle.id).state is JobState.PENDING


def test_bad_input_fails_at_the_call_inside_a_transaction() -> None:
    from django.db import transaction

    from tests.contrib.djapp.tasks import welcome

    with transaction.atomic(), pytest.raises(ValidationError, match="queue"):
        welcome.options(queue="bad queue!").enqueue(1)


def test_on_commit_can_be_turned_off(django_project: Path) -> None:
    from django.db import transaction

    from conveyor.contrib.django.conveyor_app import DjangoConveyor

    app = DjangoConveyor(f"sqlite:///{django_project / 'direct.db'}", on_commit=False)
    with pytest.raises(RuntimeError), transaction.atomic():
        handle = app.enqueue("anything", args=[1])
        raise RuntimeError("rollback")
    assert app.get_job(handle.id).state is JobState.PENDING  # stored inside, kept
    app.close()


# --------------------------------------------------------------------- dashboard, staff only
@pytest.fixture(scope="module")
def asgi() -> Any:
    """docs/integrations.md's ``mysite/asgi.py``, run as written."""
    from starlette.testclient import TestClient

    from tests.examples.docblocks import run

    ns: dict[str, Any] = {}
    run("integrations.md", "# mysite/asgi.py", ns)
    return TestClient(ns["application"])


def session_cookie(user: Any) -> dict[str, str]:
    from django.test import Client

    client = Client()
    client.force_login(user)
    name = settings.SESSION_COOKIE_NAME
    return {"cookie": f"{name}={client.cookies[name].value}"}


def test_dashboard_redirects_anonymous_users_to_the_django_login(asgi: Any) -> None:
    response = asgi.get("/admin/jobs/queues/default?x=1", follow_redirects=False)
    assert response.status_code == 302
    assert response.headers["location"] == (
        "/accounts/login/?next=%2Fadmin%2Fjobs%2Fqueues%2Fdefault%3Fx%3D1"
    )


def test_dashboard_refuses_logged_in_non_staff(asgi: Any) -> None:
    cookies = session_cookie(make_user("visitor"))
    response = asgi.get("/admin/jobs/", headers=cookies, follow_redirects=False)
    assert response.status_code == 403


def test_dashboard_serves_staff(asgi: Any) -> None:
    conveyor_app().enqueue("djapp.welcome", args=[0])
    cookies = session_cookie(make_user("operator", staff=True))
    page = asgi.get("/admin/jobs/", headers=cookies)
    assert page.status_code == 200 and "<html" in page.text
    api = asgi.get("/admin/jobs/api/v1/queues", headers=cookies).json()
    assert "default" in [q["name"] for q in api["queues"]]


def test_a_deactivated_staff_user_is_refused(asgi: Any) -> None:
    user = make_user("former", staff=True)
    cookies = session_cookie(user)
    user.is_active = False
    user.save()
    response = asgi.get("/admin/jobs/", headers=cookies, follow_redirects=False)
    assert response.status_code != 200


def test_other_paths_go_to_django(asgi: Any) -> None:
    assert asgi.get("/hello/").text == "hello from django"
    assert asgi.get("/admin/jobs", follow_redirects=False).headers["location"] == "/admin/jobs/"


HOSTILE_STAFF = '<script>alert("x")</script>\x1b[31m\u202eop\u00e9rator'


def test_dashboard_actions_are_audited_as_the_django_user(asgi: Any) -> None:
    """The staff member's username is the audit entry's actor (it was ``local``); a hostile
    name is stored without its control characters and shown escaped on /audit."""
    import re

    from conveyor.dashboard.security import CSRF_COOKIE
    from conveyor.monitoring.inspect import Inspector

    cookies = session_cookie(make_user(HOSTILE_STAFF, staff=True))
    first = asgi.get("/admin/jobs/", headers=cookies)
    token = re.search(r'"X-CSRF-Token": "([0-9a-f]+)"', first.text)
    assert token, "no CSRF token"
    seed = first.cookies[CSRF_COOKIE]
    cookies = {"cookie": f"{cookies['cookie']}; {CSRF_COOKIE}={seed}"}
    r = asgi.post(
        "/admin/jobs/queues/audited/pause",
        headers=cookies,
        data={"csrf_token": token.group(1)},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    app = conveyor_app()
    app.runtime.broker.resume("audited")
    entry = next(e for e in Inspector(app.runtime).audit_log() if e["target"] == "audited")
    assert entry["actor"] == '<script>alert("x")</script>[31mop\u00e9rator'
    audit = asgi.get("/admin/jobs/audit", headers=cookies).text
    assert "<script>alert" not in audit and "&lt;script&gt;alert" in audit


# --------------------------------------------------------------------- the docs' blocks
def test_the_documented_settings_blocks_are_accepted(django_project: Path) -> None:
    """The CONVEYOR dicts of docs/integrations.md and docs/transactions.md build an app (their
    URLs swapped for a memory broker or this project's file), every key is a real one, and the
    OUTBOX keys the comment lists are the known ones."""
    import re

    from django.test import override_settings

    from conveyor.contrib.django.conveyor_app import KEYS, OUTBOX_KEYS, from_settings
    from tests.examples.docblocks import block, run

    swap = {
        "redis://localhost:6379/0": "memory://",
        "sqlite:////srv/shop/db.sqlite3": f"sqlite:///{django_project / 'conveyor.db'}",
    }
    documented = [
        ("integrations.md", "# settings.py"),
        ("transactions.md", "# settings.py"),
        ("transactions.md", "CONVEYOR = {"),
    ]
    for doc, first in documented:
        ns: dict[str, Any] = {}
        run(doc, first, ns, {k: v for k, v in swap.items() if k in block(doc, first).code})
        with override_settings(CONVEYOR=ns["CONVEYOR"]):
            from_settings().close()
    listed = block("integrations.md", "# settings.py").code
    assert re.findall(r'^    "(\w+)":', listed, re.M) == list(KEYS)
    outbox_comment = listed.split('"OUTBOX": False,', 1)[1].splitlines()[0]
    assert tuple(re.findall(r'"(\w+)"', outbox_comment)) == OUTBOX_KEYS


def test_the_documented_tasks_module_declares_a_task() -> None:
    from tests.examples.docblocks import run

    ns: dict[str, Any] = {"__name__": "shop.tasks"}
    run("integrations.md", "# shop/tasks.py", ns)
    assert conveyor_app().tasks[ns["send_welcome"].name].max_attempts == 5


def test_the_documented_outbox_migration_runs() -> None:
    from django.db import connection

    from tests.examples.docblocks import run

    ns: dict[str, Any] = {}
    run("transactions.md", "# shop/migrations/0002_conveyor_outbox.py", ns)
    operation = ns["Migration"].operations[0]
    with connection.cursor() as cur:
        for statement in operation.sql:
            cur.execute(statement)
        cur.execute("SELECT count(*) FROM conveyor_outbox")
        assert cur.fetchone() == (0,)
        cur.execute(operation.reverse_sql)
