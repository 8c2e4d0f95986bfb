"""``python manage.py conveyor_demo``: a committed and a rolled-back sign-up, then a worker."""

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand
from django.db import transaction

from conveyor.contrib.django import get_app
from conveyor.errors import JobNotFound
from shop.tasks import send_welcome


class Command(BaseCommand):
    """Shows on-commit enqueueing with real transactions, then runs the jobs."""

    help = "Enqueue inside a committed and a rolled-back transaction, then run the jobs."

    def handle(self, *args: object, **options: object) -> None:
        """Print what happened to each job."""
        app = get_app()
        with transaction.atomic():
            user = User.objects.create_user("ada", email="ada@example.com")
            kept = send_welcome.enqueue(user.pk)
        try:
            with transaction.atomic():
                user = User.objects.create_user("bob", email="bob@example.com")
                dropped = send_welcome.enqueue(user.pk)
                raise RuntimeError("payment failed")  # rolls back the user and the job
        except RuntimeError:
            pass
        app.worker().run_until_idle()
        job = app.get_job(kept.id)
        self.stdout.write(f"committed: {job.state} {job.result}")
        try:
            app.get_job(dropped.id)
            self.stdout.write("rolled back: stored (unexpected)")
        except JobNotFound:
            self.stdout.write("rolled back: no job")
