"""Framework integrations: Starlette/FastAPI, Django and Flask (docs/integrations.md).

Each submodule is optional and imports its framework only when imported itself, so
``import conveyor`` never needs FastAPI, Django or Flask. They are surfaces (like the CLI and the
dashboard): they may use the ``Conveyor`` facade.
"""
