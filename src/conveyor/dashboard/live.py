"""Live updates over Server-Sent Events for the htmx SSE extension.

A page connects with ``sse-connect="/live/<page>"``; elements with ``sse-swap="<name>"`` are
replaced by the HTML of each ``event: <name>`` message. The server re-renders the page's
fragments every ``live_interval`` seconds (0.3 s by default) and sends only those whose HTML
changed, so a state change reaches the browser well within a second.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ..errors import ConveyorError, JobNotFound
from ..worker.jobctx import read_progress
from .server import Dashboard, dashboard_of

KEEPALIVE_SECONDS = 15.0
Fragments = Callable[[], dict[str, str]]


def sse_message(event: str, html: str) -> str:
    """One SSE message; each line of the payload gets its own ``data:`` field."""
    lines = html.replace("\r", "").split("\n") or [""]
    return f"event: {event}\n" + "".join(f"data: {line}\n" for line in lines) + "\n"


def overview_fragments(dash: Dashboard, request: Request) -> Fragments:
    """Queues, workers, alerts and totals of the overview page."""
    ctx = dash.context(request)

    def render() -> dict[str, str]:
        data = dash.inspector.overview()
        r = dash.renderer.render
        return {
            "queues": r("_queues.html", data=data, **ctx),
            "workers": r("_workers.html", data=data, **ctx),
            "alerts": r("_alerts.html", alerts=data["alerts"], **ctx),
            "totals": r("_totals.html", data=data, **ctx),
        }

    return render


def queue_fragments(dash: Dashboard, request: Request) -> Fragments:
    """Counts and next jobs of one queue."""
    ctx = dash.context(request)
    name = request.path_params["name"]

    def render() -> dict[str, str]:
        q = dash.inspector.queue(name, 60)
        return {"queue": dash.renderer.render("_queue_live.html", q=q, **ctx)}

    return render


def job_fragments(dash: Dashboard, request: Request) -> Fragments:
    """The state block of one job; its timeline and errors are re-sent when the state moves."""
    ctx = dash.context(request)
    job_id = request.path_params["id"]
    last: dict[str, Any] = {}

    def render() -> dict[str, str]:
        job = dash.app.broker.get(job_id)
        if job is None:
            return {"job-summary": '<p class="muted">This job no longer exists.</p>'}
        key = (str(job.state), job.attempts, job.finished_at, len(job.errors), len(job.history))
        progress = read_progress(dash.app.broker, job_id, dash.app.now())
        summary = dash.renderer.render("_job_summary.html", job=job, progress=progress, **ctx)
        out = {"job-summary": summary}
        if last.get("key") != key:
            last["key"] = key
            try:
                detail = dash.inspector.job(job_id)
            except JobNotFound:
                return out
            out["job-history"] = dash.renderer.render("_job_history.html", job=detail, **ctx)
        return out

    return render


async def stream(
    request: Request, dash: Dashboard, fragments: Fragments, first: dict[str, str]
) -> AsyncIterator[str]:
    """Send changed fragments until the dashboard stops (Starlette ends it on disconnect);
    ``first`` is the render ``live`` made before the stream began."""
    sent: dict[str, str] = {}
    yield "retry: 1000\n\n"
    idle = 0.0
    current: dict[str, str] | None = first
    while not dash.stopping.is_set():
        if current is None:
            current = await run_in_threadpool(_quietly, fragments)
        changed = False
        for name, html in current.items():
            if sent.get(name) != html:
                sent[name] = html
                changed = True
                yield sse_message(name, html)
        idle = 0.0 if changed else idle + dash.config.live_interval
        if idle >= KEEPALIVE_SECONDS:
            idle = 0.0
            yield ": keep-alive\n\n"
        current = None
        await anyio.sleep(dash.config.live_interval)


def _quietly(fragments: Fragments) -> dict[str, str]:
    """One render; while the broker is unreachable (or the queue gone), nothing: the page
    keeps what it shows and the stream stays open, instead of an exception that ends the
    stream with a traceback — one more a second, as the browser reconnects every second."""
    try:
        return fragments()
    except (ConveyorError, LookupError):
        return {}


def live(kind: str) -> Callable[[Request], Response]:
    """The SSE endpoint of one page kind."""
    builders = {"overview": overview_fragments, "queue": queue_fragments, "job": job_fragments}

    def endpoint(request: Request) -> Response:
        dash = dashboard_of(request)
        fragments = builders[kind](dash, request)
        # Rendered before the stream starts, so a bad name (422) or a broker that is down
        # (503) is an error response the browser's EventSource does not retry every second.
        first = fragments()
        return StreamingResponse(
            stream(request, dash, fragments, first),
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )

    return endpoint


def routes() -> list[Route]:
    """The SSE routes."""
    return [
        Route("/live/overview", live("overview")),
        Route("/live/queue/{name:segment}", live("queue")),
        Route("/live/job/{id:segment}", live("job")),
    ]
