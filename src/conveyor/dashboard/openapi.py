"""The OpenAPI 3.1 document of the JSON API, generated from ``api.OPERATIONS``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core.state import JobState
from ..monitoring.filters import SEARCH_FIELDS

if TYPE_CHECKING:
    from .api import Operation

_STR = {"type": "string"}
_INT = {"type": "integer"}
PARAMETERS: dict[str, dict[str, Any]] = {
    "id": {"schema": _STR, "description": "Job id, or a prefix of it."},
    "state": {"schema": {"type": "string", "enum": [s.value for s in JobState]}},
    "task": {"schema": _STR, "description": "Task name (exact)."},
    "queue": {"schema": _STR, "description": "Queue name (exact)."},
    "since": {
        "schema": _STR,
        "description": "Created at or after: epoch seconds, ISO 8601, or an age like 2h.",
    },
    "until": {"schema": _STR, "description": "Created before: epoch seconds, ISO 8601, or an age."},
    "error": {"schema": _STR, "description": "Substring of the last error (type or message)."},
    "text": {"schema": _STR, "description": "Substring of the encoded arguments."},
    "page": {"schema": {**_INT, "minimum": 1}},
    "page_size": {"schema": {**_INT, "minimum": 1, "maximum": 500}},
    "minutes": {"schema": {**_INT, "minimum": 1, "maximum": 1440}, "description": "Window length."},
    "after": {"schema": _STR, "description": "Cursor returned by the previous call."},
    "limit": {"schema": {**_INT, "minimum": 1, "maximum": 1000}},
    "range": {
        "schema": {"type": "string", "enum": ["1h", "24h", "7d"]},
        "description": "History range (default 1h): per-minute points, per-hour for 7d.",
    },
}
SCHEMAS: dict[str, dict[str, Any]] = {
    "Enqueue": {
        "type": "object",
        "required": ["task"],
        "additionalProperties": False,
        "properties": {
            "task": {"type": "string", "description": "Registered task name."},
            "args": {"type": "array"},
            "kwargs": {"type": "object"},
            "queue": _STR,
            "priority": _INT,
            "delay": {"type": "number", "minimum": 0},
            "run_at": {"type": "number"},
            "max_attempts": {**_INT, "minimum": 1},
            "max_retries": {**_INT, "minimum": 0},
            "timeout": {"type": "number"},
            "idempotency_key": _STR,
            "idempotency_ttl": {"type": "number"},
            "job_id": _STR,
            "metadata": {"type": "object"},
        },
    },
    "Filters": {
        "type": "object",
        "additionalProperties": False,  # a misspelt filter would widen the action to all
        "properties": {k: _STR for k in ("id", "task", "queue", "since", "until", "error", "text")},
    },
    "WorkerCommand": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "scope": {
                "type": "string",
                "enum": ["group", "process"],
                "description": "group (default): every process of the row's conveyor worker; "
                "process: this one only.",
            }
        },
    },
    "Bulk": {
        "type": "object",
        "required": ["action"],
        "additionalProperties": False,
        "properties": {
            "action": {"type": "string", "enum": ["retry", "cancel", "delete", "run_now"]},
            "ids": {"type": "array", "items": _STR, "description": "Either ids ..."},
            "filters": {
                "type": "object",
                "description": "... or a search (the /jobs query fields).",
                "additionalProperties": False,
                "properties": {k: _STR for k in SEARCH_FIELDS},
            },
        },
    },
    "Error": {"type": "object", "properties": {"error": _STR, "field": _STR}},
}
_CONFLICT = {
    "description": "The action does not apply to the job's (or alert's) current state, e.g. "
    'run-now of a running job: `{"ok": false, "error": ...}`.',
    "content": {"application/json": {}},
}
_SEGMENT = "Percent-encoded as ONE path segment: a `/` in an id is sent as `%2F`."
_RESPONSES = {
    "400": {"description": "Host header is not the dashboard's address or an allowed host."},
    "401": {"description": "Authentication required."},
    "403": {"description": "CSRF token missing, cross-site request, or read-only mode."},
    "404": {"description": "Not found."},
    "422": {
        "description": "Invalid input (the body names the field).",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    },
    "413": {"description": "Request body over the API limit (2 MiB by default)."},
    "429": {"description": "Rate limit exceeded (see Retry-After)."},
}


def document(operations: Sequence[Operation], prefix: str) -> dict[str, Any]:
    """The OpenAPI document for ``operations`` mounted under ``prefix``."""
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        params = [
            {"name": n, "in": "path", "required": True, "schema": _STR, "description": _SEGMENT}
            for n in re.findall(r"{(\w+)}", op.path)
        ]
        params += [{"name": n, "in": "query", **PARAMETERS[n]} for n in op.query]
        doc = (op.handler.__doc__ or "").strip()
        entry: dict[str, Any] = {
            "operationId": op.handler.__name__,
            "summary": doc.splitlines()[0] if doc else "",
            "tags": [op.tag],
            "parameters": params,
            "responses": {
                "200": {"description": "OK", "content": {"application/json": {}}},
                **_RESPONSES,
            },
        }
        if op.conflict:
            entry["responses"]["409"] = _CONFLICT
        if op.body:
            entry["requestBody"] = {
                "required": op.body == "Enqueue",
                "content": {
                    "application/json": {"schema": {"$ref": f"#/components/schemas/{op.body}"}}
                },
            }
        if op.write:
            entry["description"] = (
                "State-changing: needs an Authorization header, or a session "
                "cookie plus the X-CSRF-Token header."
            )
        paths.setdefault(prefix + op.path, {})[op.method.lower()] = entry
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Conveyor API",
            "version": "1",
            "description": "Reads and operator actions of the Conveyor dashboard, plus "
            "enqueue by task name for producers in any language.",
        },
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "basic": {"type": "http", "scheme": "basic"},
                "session": {"type": "apiKey", "in": "cookie", "name": "conveyor_session"},
            },
        },
        "security": [{"bearer": []}, {"basic": []}, {"session": []}],
    }
