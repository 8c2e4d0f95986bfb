"""Optional integrations: Starlette/FastAPI, Django and Flask (docs/integrations.md),
OpenTelemetry and Sentry (docs/observability-integrations.md).

Each submodule is optional and imports its library only when imported itself, so
``import conveyor`` never needs any of them. They are surfaces (like the CLI and the
dashboard): they may use the ``Conveyor`` facade.
"""
