"""The sign-up view: the user row and the welcome job commit together, or neither does."""

from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from .tasks import send_welcome


@csrf_exempt  # an API endpoint of the example; use CSRF protection for browser forms
@require_POST
def signup(request: HttpRequest) -> JsonResponse:
    """Create the user; the job is stored when the transaction commits (never on rollback)."""
    email = request.POST["email"]
    with transaction.atomic():
        user = User.objects.create_user(username=email, email=email)
        job = send_welcome.enqueue(user.pk)
    return JsonResponse({"user": user.pk, "job": job.id})
