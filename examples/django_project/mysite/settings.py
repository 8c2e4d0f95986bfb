"""Settings of the example project: a minimal Django site with ``conveyor.contrib.django``.

Paths are absolute (next to this project) unless ``DJANGO_DB`` / ``CONVEYOR_URL`` say otherwise.
"""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret-change-me-in-production")
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "conveyor.contrib.django",  # reads CONVEYOR, imports every app's tasks.py
    "shop",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "mysite.urls"
ASGI_APPLICATION = "mysite.asgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DJANGO_DB") or BASE_DIR / "db.sqlite3",
    }
}
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
LOGIN_URL = "/admin/login/"  # where the dashboard sends anonymous visitors

CONVEYOR = {
    # the broker: redis://... in production; a SQLite file next to the project here
    "URL": os.environ.get("CONVEYOR_URL") or f"sqlite:///{BASE_DIR / 'conveyor.db'}",
    "SETTINGS": {"visibility_timeout": 30.0},  # any conveyor.config.Settings field
    "ON_COMMIT": True,  # inside transaction.atomic(): store the job when it commits (default)
}
