"""The web dashboard: a Starlette app (Jinja2 + vendored htmx, live over SSE) and a JSON API.

``create_app(conveyor_app)`` returns the ASGI app; ``serve(...)`` runs it with uvicorn.
``conveyor dashboard APP`` is the command line entry point. Needs the ``dashboard`` extra.
"""

from .security import DashboardConfig
from .server import create_app, serve

__all__ = ["DashboardConfig", "create_app", "serve"]
