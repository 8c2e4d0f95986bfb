"""Django integration: ``INSTALLED_APPS += ["conveyor.contrib.django"]``.

* Settings: ``CONVEYOR = {"URL": "redis://...", "SETTINGS": {...}, "ON_COMMIT": True}`` in
  settings.py builds the project's one app (``conveyor.contrib.django.app`` / ``get_app()``).
* ``tasks.py`` of every installed app is imported at start-up (``apps.ConveyorConfig.ready``).
* Enqueue on commit: inside ``transaction.atomic()`` a job is stored when the transaction commits
  and never when it rolls back (``conveyor_app.DjangoConveyor``).
* The dashboard behind Django's staff login: ``asgi.with_dashboard`` (Django served over ASGI).
* Workers: ``DJANGO_SETTINGS_MODULE=mysite.settings conveyor worker conveyor.contrib.django:app``.

See docs/integrations.md.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .conveyor_app import DjangoConveyor

_lock = threading.RLock()
_app: DjangoConveyor | None = None


def get_app() -> DjangoConveyor:
    """The project's Conveyor app, built once from ``settings.CONVEYOR`` (Django set up first)."""
    global _app
    from django.apps import apps

    if not apps.apps_ready:  # e.g. ``conveyor worker conveyor.contrib.django:app``
        import django

        django.setup()
    with _lock:
        if _app is None:
            from .conveyor_app import from_settings

            _app = from_settings()
        return _app


def reset() -> None:
    """Forget the app (tests that change ``settings.CONVEYOR``); closes the old one."""
    global _app
    with _lock:
        old, _app = _app, None
    if old is not None:
        old.close()


def __getattr__(name: str) -> Any:
    """``conveyor.contrib.django.app``: the project's app, built on first use."""
    if name == "app":
        return get_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
