"""FastAPI with Conveyor: async enqueue in endpoints, a worker in the web process, the dashboard.

    pip install 'conveyor-jobs[fastapi]' uvicorn
    CONVEYOR_DASHBOARD_USERNAME=admin CONVEYOR_DASHBOARD_PASSWORD='choose-a-password' \\
        uvicorn fastapi_app:api --app-dir examples
    curl -X POST 'http://127.0.0.1:8000/signup?email=ada@example.com'
    curl http://127.0.0.1:8000/jobs/<id>            # pending, then completed
    open http://127.0.0.1:8000/admin/jobs/           # the dashboard (log in)

``lifespan(...)`` runs one worker thread inside the web process and drains it at shutdown: fine
for a small service. Beyond that, drop it and run ``conveyor worker fastapi_app:conveyor`` as
separate processes (same code, same broker). The jobs live in ``fastapi.db`` next to this file
unless ``CONVEYOR_URL`` says otherwise (``redis://...`` for several machines).
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import FastAPI, HTTPException

from conveyor import Conveyor
from conveyor.contrib import starlette as conveyor_asgi
from conveyor.errors import JobNotFound

DB = Path(__file__).resolve().with_name("fastapi.db")
conveyor = Conveyor(os.environ.get("CONVEYOR_URL") or f"sqlite:///{DB}")


@conveyor.task(max_attempts=5)
def send_welcome(email: str) -> str:
    """The slow part of a sign-up, done after the response was sent."""
    return f"welcome mail sent to {email}"


api = FastAPI(lifespan=conveyor_asgi.lifespan(conveyor, concurrency=4))
# The dashboard under a prefix, with the standalone server's rules: credentials from
# CONVEYOR_DASHBOARD_* (without any, only loopback Host names are accepted), CSRF, rate limits.
conveyor_asgi.mount_dashboard(
    api,
    conveyor,
    "/admin/jobs",
    allowed_hosts=[h for h in os.environ.get("ALLOWED_HOSTS", "").split(",") if h],
)


@api.post("/signup")
async def signup(email: str) -> dict[str, str]:
    """Enqueue without blocking the event loop (the broker call runs off the loop)."""
    job = await conveyor_asgi.enqueue(send_welcome, email)
    return {"job": job.id}


@api.get("/jobs/{job_id}")
async def job_state(job_id: str) -> dict[str, object]:
    """A job's state and result, for polling clients."""
    try:
        job = conveyor.get_job(job_id)
    except JobNotFound as exc:
        raise HTTPException(404, f"no job {job_id}") from exc
    return {"state": job.state, "attempts": job.attempts, "result": job.result}
