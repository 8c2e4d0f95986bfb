"""The Django app config: imports ``tasks.py`` of every installed app once Django is ready."""

from __future__ import annotations

from django.apps import AppConfig


class ConveyorConfig(AppConfig):  # type: ignore[misc]  # Django ships no types
    """``conveyor.contrib.django`` in ``INSTALLED_APPS`` (label ``conveyor``)."""

    name = "conveyor.contrib.django"
    label = "conveyor"
    verbose_name = "Conveyor background jobs"

    def ready(self) -> None:
        """Register every task: import ``<app>.tasks`` for each installed app that has one."""
        from django.utils.module_loading import autodiscover_modules

        from . import get_app

        get_app()  # fail at start-up, naming the setting, when CONVEYOR is wrong
        autodiscover_modules("tasks")
