"""Fixtures of the typed-task tests: live apps on every backend (``tests/worker/conftest``)."""

from __future__ import annotations

from tests.worker.conftest import live_app as live_app

__all__ = ["live_app"]
