"""ASGI entry point: Django, plus the Conveyor dashboard at /admin/jobs/ for staff only.

    uvicorn mysite.asgi:application --app-dir examples/django_project

Anonymous visitors of /admin/jobs/ are sent to the admin login; logged-in non-staff users get
403. Everything else is Django as usual.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
django_application = get_asgi_application()  # sets Django up (and discovers the tasks)

from conveyor.contrib.django.asgi import with_dashboard  # noqa: E402  (after Django setup)

application = with_dashboard(django_application, "/admin/jobs")
