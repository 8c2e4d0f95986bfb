"""Tasks of the test Django app: found by ``conveyor.contrib.django``'s autodiscovery."""

from __future__ import annotations

from django.contrib.auth.models import User

from conveyor.contrib.django import app

SEEN: list[str] = []


@app.task(name="djapp.welcome")
def welcome(user_id: int) -> str:
    """Reads the user row: it exists, because the job was stored only after the commit."""
    user = User.objects.get(pk=user_id)
    SEEN.append(user.username)
    return f"welcome {user.username}"
