"""Bulk actions of the job pages: retry, cancel, delete or run now the jobs selected on a page,
or every job matching the current search.

``POST /jobs/bulk`` first answers a confirmation page that shows how many jobs the action will
touch (and the search or the selection); the confirmation posts the same fields again with
``confirm=yes``, which runs ``Operator.bulk`` (bounded, one audit entry) and returns to the
page the operator came from with a flash message saying how many jobs changed.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import ValidationError
from ..monitoring.actions import BULK_ACTIONS, BULK_LIMIT
from ..monitoring.filters import SEARCH_FIELDS
from .redirects import back, done
from .server import action, dashboard_of

LABELS = {"retry": "Retry", "cancel": "Cancel", "delete": "Delete", "run_now": "Run now"}
#: What each page offers: dead letters can only be retried or deleted.
PAGE_ACTIONS = {
    "jobs": ("retry", "cancel", "run_now", "delete"),
    "dead": ("retry", "delete"),
}
SCOPES = ("selected", "all")


def actions_for(page: str) -> list[tuple[str, str]]:
    """``(action, label)`` pairs of the bulk buttons of ``page`` (``jobs`` or ``dead``)."""
    return [(name, LABELS[name]) for name in PAGE_ACTIONS[page]]


def _choice(data: dict[str, Any]) -> tuple[str, str]:
    """``(scope, action)`` from the pressed button (``bulk=selected:retry``)."""
    scope, _, name = str(data.get("bulk", "")).partition(":")
    if scope not in SCOPES or name not in BULK_ACTIONS:
        raise ValidationError(
            "bulk", f"must be selected:ACTION or all:ACTION with ACTION one of {BULK_ACTIONS}"
        )
    return scope, name


def _ids(data: dict[str, Any]) -> list[str]:
    raw = data.get("ids") or []
    return [raw] if isinstance(raw, str) else [i for i in raw if isinstance(i, str)]


def bulk(request: Request, data: dict[str, Any]) -> Response:
    """Confirm, then apply a bulk action to the selection or to every search result."""
    dash = dashboard_of(request)
    scope, name = _choice(data)
    filters = {k: v for k in SEARCH_FIELDS if isinstance(v := data.get(k), str) and v}
    ids = _ids(data)
    target = back(request, data, "/jobs")
    if scope == "selected" and not ids:
        return done(request, target, "Select at least one job first.")
    if data.get("confirm") != "yes":
        total = len(ids) if scope == "selected" else dash.inspector.search(filters).total
        return dash.page(
            request,
            "bulk_confirm.html",
            nav="dead" if filters.get("state") == "dead_letter" else "jobs",
            action=name,
            label=LABELS[name],
            scope=scope,
            ids=ids,
            filters=filters,
            total=total,
            count=min(total, BULK_LIMIT),
            limit=BULK_LIMIT,
            next=target,
        )
    selection: dict[str, Any] = {"ids": ids} if scope == "selected" else {"filters": filters}
    result = dash.operator(request).bulk(name, **selection)
    message = f"{LABELS[name]}: {result.done} of {result.matched} jobs changed."
    if result.done < result.matched:
        message += " The others were in a state this action does not apply to."
    if result.truncated:
        message += f" Stopped at {BULK_LIMIT}: run it again for the rest."
    return done(request, target, message)


def routes() -> list[Route]:
    """The bulk action route (CSRF-checked, refused in read-only mode)."""
    return [Route("/jobs/bulk", action(bulk), methods=["POST"])]
