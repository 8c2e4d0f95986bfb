"""The example Django project (settings, URLs, ASGI entry point)."""
