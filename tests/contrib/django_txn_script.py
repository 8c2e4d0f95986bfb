"""Run by tests/contrib/test_django_txn.py in a subprocess (Django is configured once per
process): in-transaction enqueue with Django's connection, on the broker's own SQLite file or
PostgreSQL database (``IN_TRANSACTION``) or through the outbox to Redis (``OUTBOX``).

argv: mode (``sqlite`` | ``postgres`` | ``outbox``), the Django database (a SQLite file; for
``postgres`` a ``postgresql://user@host:port/db`` URL), the Redis url (outbox mode).
Prints ``OK`` when every check passed.
"""

from __future__ import annotations

import sys
from typing import Any
from urllib.parse import urlsplit

import django
from django.conf import settings

mode, db = sys.argv[1], sys.argv[2]
conveyor_conf: dict[str, object] = {
    "sqlite": {"URL": f"sqlite:///{db}", "IN_TRANSACTION": True},
    "postgres": {"URL": db, "IN_TRANSACTION": True},
}.get(mode) or {"URL": sys.argv[3], "OUTBOX": {"TABLE": "conveyor_outbox"}}
database: dict[str, Any] = {"ENGINE": "django.db.backends.sqlite3", "NAME": db}
if mode == "postgres":  # Django's tables in "public", Conveyor's in schema "conveyor"
    url = urlsplit(db)
    database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": url.path.lstrip("/"),
        "USER": url.username,
        "HOST": url.hostname,
        "PORT": url.port,
    }
settings.configure(
    SECRET_KEY="django-txn-test",
    INSTALLED_APPS=[
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "conveyor.contrib.django",
    ],
    DATABASES={"default": database},
    USE_TZ=True,
    CONVEYOR=conveyor_conf,
)
django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from conveyor.contrib.django import get_app  # noqa: E402
from conveyor.outbox import ddl  # noqa: E402
from conveyor.relay import Relay  # noqa: E402

call_command("migrate", verbosity=0)
app = get_app()
seen: list[str] = []


@app.task(name="welcome")
def welcome(user_id: int) -> None:
    """Reads the row committed with the job."""
    seen.append(User.objects.get(pk=user_id).username)


def jobs() -> int:
    return sum(sum(states.values()) for states in app.broker.counts().values())


class Rollback(Exception):
    pass


if mode == "outbox":
    app.broker.flush_all()  # type: ignore[attr-defined]
    with connection.cursor() as cursor:  # what a Django migration's RunSQL(ddl()) does
        for statement in ddl():
            cursor.execute(statement)

try:
    with transaction.atomic():
        user = User.objects.create(username="ghost")
        welcome.enqueue(user.id)  # inside atomic: stored in the transaction
        raise Rollback
except Rollback:
    pass
with connection.cursor() as cursor:
    outbox_rows = 0
    if mode == "outbox":
        cursor.execute("SELECT count(*) FROM conveyor_outbox")
        outbox_rows = cursor.fetchone()[0]
assert jobs() == 0 and outbox_rows == 0, (jobs(), outbox_rows)

with transaction.atomic():
    user = User.objects.create(username="ada")
    welcome.enqueue(user.id)
    other = User.objects.create(username="bob")
    handle_id = welcome.options(connection=connection).enqueue(other.id).id  # the explicit form
    assert jobs() == 0  # not visible before the commit
if mode == "outbox":
    relay = Relay(app.runtime.producer.transactional)  # type: ignore[arg-type]
    assert relay.relay_once() == 2
    relay.close()
assert jobs() == 2, jobs()
app.worker(handle_signals=False, heartbeat=False).run_until_idle()
assert sorted(seen) == ["ada", "bob"], seen

if mode == "postgres":  # a taken id: DuplicateJob, and the caller's transaction goes on
    from conveyor import DuplicateJob

    with transaction.atomic():
        kept = User.objects.create(username="cy")
        try:
            welcome.options(job_id=handle_id).enqueue(kept.id)
        except DuplicateJob:
            pass
        else:
            raise AssertionError("a taken id was accepted")
        welcome.enqueue(kept.id)
    assert User.objects.filter(username="cy").exists()
    app.worker(handle_signals=False, heartbeat=False).run_until_idle()
    assert sorted(seen) == ["ada", "bob", "cy"], seen
print("OK")
