"""Flask with Conveyor: the extension with an app factory, and ``flask conveyor worker``.

    pip install 'conveyor-jobs[flask]'
    flask --app examples/flask_app.py run                      # the web app
    flask --app examples/flask_app.py conveyor worker          # the worker (another terminal)
    curl -X POST -d email=ada@example.com http://127.0.0.1:5000/signup

Configuration comes from ``app.config`` (``CONVEYOR_URL``, ``CONVEYOR_SETTINGS``). Tasks are
declared on the extension, before any app exists, and registered with each app the factory
builds. The jobs live in ``flask.db`` next to this file unless ``CONVEYOR_URL`` is set. The
dashboard is an ASGI app: serve it with ``conveyor dashboard flask_app:conveyor_app``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from flask import Flask, request

from conveyor.contrib.flask import FlaskConveyor

DB = Path(__file__).resolve().with_name("flask.db")
conveyor = FlaskConveyor()


@conveyor.task(max_attempts=5)
def send_welcome(email: str) -> str:
    """The slow part of a sign-up, done by the worker."""
    return f"welcome mail sent to {email}"


def create_app(config: dict[str, Any] | None = None) -> Flask:
    """The app factory."""
    app = Flask(__name__)
    app.config["CONVEYOR_URL"] = os.environ.get("CONVEYOR_URL") or f"sqlite:///{DB}"
    app.config.update(config or {})
    conveyor.init_app(app)

    @app.post("/signup")
    def signup() -> dict[str, str]:
        job = send_welcome.enqueue(request.form["email"])
        return {"job": job.id}

    @app.get("/jobs/<job_id>")
    def job_state(job_id: str) -> dict[str, object]:
        job = conveyor.app.get_job(job_id)
        return {"state": job.state, "attempts": job.attempts, "result": job.result}

    return app


app = create_app()  # ``flask --app examples/flask_app.py`` finds this or calls create_app
conveyor_app = app.extensions["conveyor"]  # for ``conveyor worker|dashboard flask_app:...``
