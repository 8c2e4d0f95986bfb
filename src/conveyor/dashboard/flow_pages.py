"""The workflow page: ``/workflows/{id}`` lists a workflow's nodes level by level with states."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..monitoring.workflows import workflow_graph
from .server import dashboard_of


def workflow(request: Request) -> Response:
    """One workflow: every node (by level), its state, its parents and a link to the job."""
    dash = dashboard_of(request)
    graph = workflow_graph(dash.app.broker, request.path_params["id"])
    return dash.page(request, "workflow.html", wf=graph, nav="jobs")


def routes() -> list[Route]:
    """The routes of this module."""
    return [Route("/workflows/{id:segment}", workflow)]
