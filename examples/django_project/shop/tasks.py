"""The shop's tasks: imported at start-up by ``conveyor.contrib.django`` (autodiscovery)."""

from django.contrib.auth.models import User

from conveyor.contrib.django import app


@app.task(max_attempts=5)
def send_welcome(user_id: int) -> str:
    """Runs on a worker after the sign-up committed, so the user row is there to read."""
    user = User.objects.get(pk=user_id)
    return f"welcome mail sent to {user.email}"
